"""Deprecated import path: the operators that were here have modules named after what they do.

`xtrabackup_provider.operators.s3` keeps working; new code imports from `.lifecycle`
(BucketLifecycleOperator), `.glacier` (GlacierRestoreRequestOperator), `.verify`
(VerifyBackupOperator, BackupVerifyFailed) and `.files` (GpgEncryptOperator, BackupUploadOperator).
"""

from .files import BackupUploadOperator, GpgEncryptOperator
from .glacier import GlacierRestoreRequestOperator
from .lifecycle import BucketLifecycleOperator
from .verify import BackupVerifyFailed, VerifyBackupOperator

__all__ = [
    "BackupUploadOperator",
    "BackupVerifyFailed",
    "BucketLifecycleOperator",
    "GlacierRestoreRequestOperator",
    "GpgEncryptOperator",
    "VerifyBackupOperator",
]
