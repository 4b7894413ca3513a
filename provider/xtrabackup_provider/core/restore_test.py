"""Deprecated: the 0.1.0 path of core.restore.restore_test (core.common.moved); it goes in 0.3.0."""

from .common.moved import moved_names

__getattr__ = moved_names(
    __name__,
    {
        "run_restore_test": "xtrabackup_provider.core.restore.restore_test.run_restore_test",
    },
)
