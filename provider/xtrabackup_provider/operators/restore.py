"""XtraBackupRestoreOperator: restore a backup (and its chain) into an empty datadir."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

from ._common import host_catalog, private_key


class XtraBackupRestoreOperator(BaseOperator):
    """Validate the chain from manifests, fetch + verify + extract, prepare, move back.

    `backup_id` None (or "latest") restores the newest backup. The private key comes from a
    `gpg_keys` connection that only restore workers should be able to read.
    """

    template_fields: Sequence[str] = ("cluster", "host", "backup_id", "target_datadir", "prefix", "bucket")

    def __init__(
        self,
        *,
        cluster: str,
        host: str,
        target_datadir: str,
        backup_id: str | None = None,
        bucket: str | None = None,
        local_path: str | None = None,
        prefix: str = "backups",
        aws_conn_id: str = "aws_default",
        gpg_conn_id: str | None = "backup_gpg_private",
        binary: str | None = None,
        use_memory: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.cluster = cluster
        self.host = host
        self.target_datadir = target_datadir
        self.backup_id = backup_id
        self.bucket = bucket
        self.local_path = local_path
        self.prefix = prefix
        self.aws_conn_id = aws_conn_id
        self.gpg_conn_id = gpg_conn_id
        self.binary = binary
        self.use_memory = use_memory

    def execute(self, context: Any) -> dict[str, Any]:
        from dataclasses import asdict

        from ..core.restore.chain import RestoreRequest, restore

        key, passphrase = private_key(self.gpg_conn_id)
        report = restore(
            RestoreRequest(
                catalog=host_catalog(self),
                target_datadir=Path(self.target_datadir),
                backup_id=None if self.backup_id in (None, "", "latest") else self.backup_id,
                private_key=key,
                passphrase=passphrase,
                binary=self.binary,
                use_memory=self.use_memory,
            )
        )
        result = asdict(report)
        result.pop("prepare_argv")
        return result
