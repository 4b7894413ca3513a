"""Deprecated import path: `choose_backup_kind` builds a DAG branch, so it lives in
`xtrabackup_provider.dag_tasks.backup_kind` now; this name keeps working."""

from ..dag_tasks.backup_kind import choose_backup_kind

__all__ = ["choose_backup_kind"]
