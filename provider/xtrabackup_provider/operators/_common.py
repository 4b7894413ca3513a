"""Deprecated import path: `skip_unless_branch_chose` lives in `xtrabackup_provider.operators.base`
now (with the storage lookups, which are methods of BackupStorageOperator: `catalog()`,
`private_key()`, `public_keys()`)."""

from .base import skip_unless_branch_chose

__all__ = ["skip_unless_branch_chose"]
