"""Deprecated import path (0.1.0): the operators that were here have modules named after what they
do: `.lifecycle`, `.glacier`, `.verify` and `.files`. Each name warns, naming its new path; the
path goes in 0.3.0."""

from ..core.common.moved import moved_names

__getattr__ = moved_names(
    __name__,
    {
        "BackupUploadOperator": "xtrabackup_provider.operators.files.BackupUploadOperator",
        "BackupVerifyFailed": "xtrabackup_provider.operators.verify.BackupVerifyFailed",
        "BucketLifecycleOperator": "xtrabackup_provider.operators.lifecycle.BucketLifecycleOperator",
        "GlacierRestoreRequestOperator": "xtrabackup_provider.operators.glacier.GlacierRestoreRequestOperator",
        "GpgEncryptOperator": "xtrabackup_provider.operators.files.GpgEncryptOperator",
        "VerifyBackupOperator": "xtrabackup_provider.operators.verify.VerifyBackupOperator",
    },
)
