"""Deprecated: the 0.1.0 path of core.backup.decide (core.common.moved); it goes in 0.3.0."""

from .common.moved import moved_names

__getattr__ = moved_names(
    __name__,
    {
        "decide": "xtrabackup_provider.core.backup.decide.decide",
    },
)
