"""Taking backups: the full-or-incremental decision, one backup run end to end (manifest last,
under the host lock), and files uploaded outside the streaming path.
"""

from ..common.moved import moved_names

# The 0.1.0 names of this package, deprecated (core.common.moved).
__getattr__ = moved_names(
    __name__,
    {
        "BackupRequest": "xtrabackup_provider.core.backup.run.BackupRequest",
        "run_backup": "xtrabackup_provider.core.backup.run.run_backup",
    },
)
