"""PitrRestoreTestOperator: restore a host to a point in time in scratch, verify it, clean up."""

from __future__ import annotations

__all__ = ["PitrRestoreTestOperator"]

from collections.abc import Sequence
from typing import Any

from ..arguments import keep_arguments
from .base import RestoreTestingOperator, read_template_fields


class PitrRestoreTestFailed(RuntimeError):
    """The point-in-time restore did not pass verification; the reasons are in the message."""


class PitrRestoreTestOperator(RestoreTestingOperator):
    """Restore `cluster/host` to `target_time` (ISO 8601, UTC without an offset): the newest
    backup before it plus the shipped binlogs, in a scratch dir on this worker. Then start a
    socket-only sandbox and run the restore test's checks. Writes pitr-report.json next to the
    base backup. XCom: the report without its per-check details.
    """

    template_fields: Sequence[str] = read_template_fields("target_time", "level", "workdir_root")

    def __init__(
        self,
        *,
        target_time: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def execute(self, context: Any) -> dict[str, Any]:
        from dataclasses import asdict

        from ..core.pitr.pitr_test import run_pitr_test
        from ..core.pitr.plan import PitrTarget

        target = PitrTarget.at_time(self.target_time)
        report = run_pitr_test(
            workdir=self.scratch_dir("pitrtest"),
            target=target,
            **self.read_args(),
            **self.test_args(),
        )
        if not report.passed:
            raise PitrRestoreTestFailed(
                f"point-in-time restore test of {self.cluster}/{self.host} to {report.target} failed: "
                + "; ".join(report.reasons)
            )
        result = asdict(report)
        result.pop("checks", None)
        return result
