"""Deprecated: the 0.1.0 path of core.db.server (core.common.moved); it goes in 0.3.0."""

from .common.moved import moved_names

__getattr__ = moved_names(
    __name__,
    {
        "MySQLTarget": "xtrabackup_provider.core.db.server.MySQLTarget",
    },
)
