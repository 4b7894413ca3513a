"""CopyBackupsOperator: bring one further storage target up to date with a host's backups and
binlogs (core/backup/copies.py), after they are registered on the first target."""

from __future__ import annotations

__all__ = ["CopyBackupsOperator"]

import logging
from collections.abc import Sequence
from typing import Any

from ..arguments import keep_arguments
from . import _metrics
from .base import BackupStorageOperator, storage_template_fields

log = logging.getLogger(__name__)


class CopyBackupsOperator(BackupStorageOperator):
    """Stream every backup (`what="backups"`), closed binlog (`"binlogs"`) or both (`"all"`) of
    `cluster/host` that the target `target_name` lacks from the first target (this operator's
    `bucket`/`local_path`) to it, sha256-checked, each with its own manifest written last.

    The target is `target_bucket` (through `target_aws_conn_id`) or `target_local_path`, under
    `target_prefix`, with its own storage classes, SSE and Object Lock. A target that cannot be
    reached is retried `attempts` times, `retry_seconds` apart, then left behind: the task ends
    skipped with one warning line, and so do the target's tasks after it (its retention); the
    backup on the first target is registered already, the run does not fail, and the check DAG and
    the report show the copies behind. An object damaged on the source (its bytes are not what its
    manifest says) fails the task, naming the object and both sha256s. XCom: counts, bytes, what
    is behind.
    """

    template_fields: Sequence[str] = storage_template_fields(
        "target_bucket", "target_local_path", "target_prefix", "target_aws_conn_id"
    )
    ui_color = "#e8f6f3"

    def __init__(
        self,
        *,
        target_name: str,
        target_bucket: str | None = None,
        target_local_path: str | None = None,
        target_prefix: str = "backups",
        target_aws_conn_id: str = "aws_default",
        target_storage_classes: dict[str, str] | None = None,
        target_sse: str | None = None,
        target_kms_key_id: str | None = None,
        target_object_lock_mode: str | None = None,
        target_object_lock_days: int | None = None,
        source_name: str = "primary",
        what: str = "all",
        binlogs: bool = True,
        attempts: int = 3,
        retry_seconds: float = 20,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.providers.common.compat.sdk import AirflowSkipException

        from ..core.backup.copies import CopyError, CopyTarget, copy_host
        from ..hooks.storage import BackupStorageHook

        if self.what not in ("all", "backups", "binlogs"):
            raise ValueError(f"what must be all, backups or binlogs, not {self.what!r}")
        store = BackupStorageHook(
            self.target_aws_conn_id, self.target_bucket, self.target_local_path
        ).get_store()
        target = CopyTarget(
            name=self.target_name,
            store=store,
            prefix=self.target_prefix,
            storage_classes=dict(self.target_storage_classes or {}),
            sse=self.target_sse,
            kms_key_id=self.target_kms_key_id,
            object_lock_mode=self.target_object_lock_mode,
            object_lock_days=self.target_object_lock_days,
            binlogs=self.binlogs,
            attempts=self.attempts,
            retry_seconds=self.retry_seconds,
        )
        report = copy_host(self.catalog(), target, source_name=self.source_name, what=self.what)
        _metrics.copy_done(self.cluster, self.host, report)
        if report.damaged:
            # A backup damaged where it stands is an incident, not a target left behind: fail.
            raise CopyError(f"copy target {self.target_name}: " + "; ".join(report.damaged))
        if report.error:
            # Left behind, not failed: the backup on the first target stands, and the target's own
            # tasks after this one (its retention) cannot work on a store that cannot be reached.
            raise AirflowSkipException(report.line())
        return report.summary()
