"""PitrRestoreTestOperator: restore a host to a point in time in scratch, verify it, clean up."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from ._common import host_catalog, private_key


class PitrRestoreTestFailed(RuntimeError):
    """The point-in-time restore did not pass verification; the reasons are in the message."""


class PitrRestoreTestOperator(BaseOperator):
    """Restore `cluster/host` to `target_time` (ISO 8601, UTC without an offset): the newest
    backup before it plus the shipped binlogs, in a scratch dir on this worker. Then start a
    socket-only sandbox and run the restore test's checks. Writes pitr-report.json next to the
    base backup. XCom: the report without its per-check details.
    """

    template_fields: Sequence[str] = (
        "cluster",
        "host",
        "target_time",
        "level",
        "workdir_root",
        "prefix",
        "bucket",
    )

    def __init__(
        self,
        *,
        cluster: str,
        host: str,
        target_time: str,
        level: str = "quick",
        workdir_root: str = "/tmp",
        bucket: str | None = None,
        local_path: str | None = None,
        prefix: str = "backups",
        aws_conn_id: str = "aws_default",
        gpg_conn_id: str | None = "backup_gpg_private",
        binary: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.cluster = cluster
        self.host = host
        self.target_time = target_time
        self.level = level
        self.workdir_root = workdir_root
        self.bucket = bucket
        self.local_path = local_path
        self.prefix = prefix
        self.aws_conn_id = aws_conn_id
        self.gpg_conn_id = gpg_conn_id
        self.binary = binary

    def execute(self, context: Any) -> dict[str, Any]:
        import tempfile
        from dataclasses import asdict
        from pathlib import Path

        from ..core.pitr.pitr_test import run_pitr_test
        from ..core.pitr.plan import PitrTarget

        target = PitrTarget.at_time(self.target_time)
        key, passphrase = private_key(self.gpg_conn_id)
        Path(self.workdir_root).mkdir(parents=True, exist_ok=True)
        report = run_pitr_test(
            host_catalog(self),
            Path(tempfile.mkdtemp(prefix="xbp-pitr-", dir=self.workdir_root)),
            target,
            private_key=key,
            passphrase=passphrase,
            level="full" if self.level == "full" else "quick",
            binary=self.binary,
        )
        if not report.passed:
            raise PitrRestoreTestFailed(
                f"point-in-time restore test of {self.cluster}/{self.host} to {report.target} failed: "
                + "; ".join(report.reasons)
            )
        result = asdict(report)
        result.pop("checks", None)
        return result
