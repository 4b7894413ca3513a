"""RestoreTestOperator: restore a backup into a sandbox, verify it, report, and fail loudly if bad."""

from __future__ import annotations

__all__ = ["RestoreTestOperator"]

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..arguments import keep_arguments
from . import _metrics
from .base import RestoreTestingOperator, read_template_fields, task_origin

if TYPE_CHECKING:
    from ..core.restore.replica_compare import SourceCompare

LEVELS = ("quick", "full", "deep")


class RestoreTestFailed(RuntimeError):
    """The restored backup did not pass verification; the message names the checks that failed."""


class RestoreTestOperator(RestoreTestingOperator):
    """Restore `backup_id` (or the newest) of `cluster/host` into a scratch dir on this worker and
    run the checks of `level` (core/restore/coverage.py says what each can and cannot catch): quick
    (the chain, page checksums of every tablespace, exact row counts taken at the backup's point,
    the source's shape at backup time, canary, position, CHECK TABLE on a sample),
    full (+ CHECK TABLE on every table, the shipped binlogs rolled forward to the newest), deep (+
    the copy attached as a replica of the source `source_conn_id` with the replication account of
    `replication_conn_id`, caught up, pt-table-checksum equal). Writes restore-report.json next to
    the backup and cleans up whatever happens. A failure's message, the task log's last line, names
    the checks that failed.

    `replication`: source_host/source_port (override the replication connection's host/port), ssl,
    max_lag_seconds, catch_up_timeout_minutes, poll_seconds. `checksum`: pt-table-checksum options
    (binary, chunk_time, max_lag_seconds, timeout_minutes, databases, ignore_databases).
    Each outlet Asset gets an event whose extra names the host and backup verified.
    """

    template_fields: Sequence[str] = read_template_fields(
        "backup_id", "level", "workdir_root", "source_conn_id", "replication_conn_id"
    )

    def __init__(
        self,
        *,
        backup_id: str | None = "latest",
        source_conn_id: str | None = None,
        replication_conn_id: str | None = None,
        replication: dict[str, Any] | None = None,
        checksum: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def execute(self, context: Any) -> dict[str, Any]:
        from dataclasses import asdict

        from ..core.pitr.roll_forward import ShippedBinlogs
        from ..core.restore.restore_test import RestoreTestRequest, run_restore_test

        if self.level not in LEVELS:
            raise ValueError(f"level must be one of {', '.join(LEVELS)}, not {self.level!r}")
        read = self.read_args()  # the same targets for the restore and the roll-forward
        args = self.test_args() | {"level": self.level}
        report = run_restore_test(
            RestoreTestRequest(
                **read,
                workdir=self.scratch_dir("rt"),
                backup_id=None if self.backup_id in (None, "", "latest") else self.backup_id,
                roll_forward=ShippedBinlogs(
                    **read, private_key=args["private_key"], passphrase=args["passphrase"]
                ),
                deep=self._deep() if self.level == "deep" else None,
                origin=task_origin(context),
                **args,
            )
        )
        self.log.info("read %s from storage target %s", report.backup_id, report.source)
        self.log.info("phase timings (s): %s", {k: round(v, 2) for k, v in report.timings.items()})
        _metrics.restore_test_done(self.cluster, self.host, report.passed, report.timings)
        if not report.passed:
            for reason in report.reasons:
                self.log.error("%s", reason)
            raise RestoreTestFailed(report.headline())
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = {
                "cluster": self.cluster,
                "host": self.host,
                "backup_id": report.backup_id,
            }
        result = asdict(report)
        result.pop("checks", None)
        result.pop("results", None)
        return result

    def _deep(self) -> SourceCompare:
        from ..core.db.checksum import ChecksumOptions
        from ..core.restore.replica_compare import SourceCompare
        from ..hooks.xtrabackup import XtraBackupHook

        if not self.source_conn_id or not self.replication_conn_id:
            raise ValueError(
                "level deep needs source_conn_id (the source's mysql connection) and replication_conn_id "
                "(the replication account): give the cluster a `replication` section"
            )
        settings = self.replication or {}
        source = XtraBackupHook(self.replication_conn_id).get_replication_source(
            settings.get("source_host"),
            settings.get("source_port"),
            bool(settings.get("ssl", False)),
            label=f"{self.cluster}/{settings.get('source_name', self.source_conn_id)}",
        )
        return SourceCompare(
            source,
            XtraBackupHook(self.source_conn_id).get_target(),
            max_lag_seconds=float(settings.get("max_lag_seconds", 5)),
            catch_up_timeout=float(settings.get("catch_up_timeout_minutes", 240)) * 60,
            poll_seconds=min(float(settings.get("poll_seconds", 5)), 2.0),
            checksum=ChecksumOptions(**(self.checksum or {})),
        )
