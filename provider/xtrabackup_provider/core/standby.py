"""Deprecated: the 0.1.0 path of core.restore.standby (core.common.moved); it goes in 0.3.0."""

from .common.moved import moved_names

__getattr__ = moved_names(
    __name__,
    {
        "update_standby": "xtrabackup_provider.core.restore.standby.update_standby",
    },
)
