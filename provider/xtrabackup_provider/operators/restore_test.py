"""RestoreTestOperator: restore a backup into a sandbox, verify it, report, and fail loudly if bad."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..arguments import keep_arguments
from . import _metrics
from .base import RestoreTestingOperator, storage_template_fields


class RestoreTestFailed(RuntimeError):
    """The restored backup did not pass verification; the reasons are in the message and the report."""


class RestoreTestOperator(RestoreTestingOperator):
    """Restore `backup_id` (or the newest) of `cluster/host` into a scratch dir on this worker,
    start a socket-only sandbox, run CHECK TABLE / canary / row count / GTID checks, write
    restore-report.json next to the backup, and clean up whatever happens.

    Each outlet Asset gets an event whose extra names the host and backup verified.
    """

    template_fields: Sequence[str] = storage_template_fields("backup_id", "level", "workdir_root")

    def __init__(
        self,
        *,
        backup_id: str | None = "latest",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def execute(self, context: Any) -> dict[str, Any]:
        from dataclasses import asdict

        from ..core.restore.restore_test import RestoreTestRequest, run_restore_test

        if self.level not in ("quick", "full"):
            raise ValueError(f"level must be quick or full, not {self.level!r}")
        report = run_restore_test(
            RestoreTestRequest(
                catalog=self.catalog(),
                workdir=self.scratch_dir("rt"),
                backup_id=None if self.backup_id in (None, "", "latest") else self.backup_id,
                **self.test_args(),
            )
        )
        self.log.info("phase timings (s): %s", {k: round(v, 2) for k, v in report.timings.items()})
        _metrics.restore_test_done(self.cluster, self.host, report.passed, report.timings)
        if not report.passed:
            raise RestoreTestFailed(
                f"restore test of {self.cluster}/{self.host} {report.backup_id} failed: "
                + "; ".join(report.reasons)
            )
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = {
                "cluster": self.cluster,
                "host": self.host,
                "backup_id": report.backup_id,
            }
        result = asdict(report)
        result.pop("checks", None)
        return result
