"""Deprecated import path (0.1.0): `skip_unless_branch_chose` lives in
`xtrabackup_provider.operators.base` (with the storage lookups, methods of BackupStorageOperator).
The path goes in 0.3.0."""

from ..core.common.moved import moved_names

__getattr__ = moved_names(
    __name__, {"skip_unless_branch_chose": "xtrabackup_provider.operators.base.skip_unless_branch_chose"}
)
