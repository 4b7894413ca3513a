"""Deprecated: the 0.1.0 path of core.binlog.catalog (core.common.moved); it goes in 0.3.0."""

from .common.moved import moved_names

__getattr__ = moved_names(
    __name__,
    {
        "binlogs_needed": "xtrabackup_provider.core.binlog.catalog.binlogs_needed",
    },
)
