"""RestoreTestOperator: restore a backup into a sandbox, verify it, report, and fail loudly if bad."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from . import _metrics
from ._common import host_catalog, private_key


class RestoreTestFailed(RuntimeError):
    """The restored backup did not pass verification; the reasons are in the message and the report."""


class RestoreTestOperator(BaseOperator):
    """Restore `backup_id` (or the newest) of `cluster/host` into a scratch dir on this worker,
    start a socket-only sandbox, run CHECK TABLE / canary / row count / GTID checks, write
    restore-report.json next to the backup, and clean up whatever happens.

    Each outlet Asset gets an event whose extra names the host and backup verified.
    """

    template_fields: Sequence[str] = (
        "cluster",
        "host",
        "backup_id",
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
        backup_id: str | None = "latest",
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
        self.backup_id = backup_id
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

        from ..core.restore.restore_test import RestoreTestRequest, run_restore_test

        if self.level not in ("quick", "full"):
            raise ValueError(f"level must be quick or full, not {self.level!r}")
        key, passphrase = private_key(self.gpg_conn_id)
        Path(self.workdir_root).mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix="xbp-rt-", dir=self.workdir_root))
        report = run_restore_test(
            RestoreTestRequest(
                catalog=host_catalog(self),
                workdir=workdir,
                backup_id=None if self.backup_id in (None, "", "latest") else self.backup_id,
                private_key=key,
                passphrase=passphrase,
                level="full" if self.level == "full" else "quick",
                binary=self.binary,
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
