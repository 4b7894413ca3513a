"""The names of the metadata files each backup tool writes (imports nothing: the stream checker,
which runs as its own process, and the parsers both read them)."""

from __future__ import annotations

# XtraBackup and mariabackup before 11.1 write xtrabackup_*; mariadb-backup 11.1+ (MDEV-18931)
# writes mariadb_backup_* (Capabilities.metadata_prefix says which a tool writes).
PREFIXES = ("xtrabackup_", "mariadb_backup_")
CHECKPOINT_FILES = tuple(f"{p}checkpoints" for p in PREFIXES)
INFO_FILES = tuple(f"{p}info" for p in PREFIXES)
BINLOG_INFO_FILES = tuple(f"{p}binlog_info" for p in PREFIXES)
GALERA_INFO_FILES = tuple(f"{p}galera_info" for p in PREFIXES)
SLAVE_INFO_FILES = tuple(f"{p}slave_info" for p in PREFIXES)
