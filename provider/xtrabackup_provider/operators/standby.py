"""XtraBackupStandbyOperator: keep a prepared standby copy of a host's newest chain."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

from ._common import host_catalog, private_key


class XtraBackupStandbyOperator(BaseOperator):
    """After each backup, merge the new incrementals into a standby directory on this worker,
    so that a restore from it needs only the final step (see core/restore/standby.py for the rules)."""

    template_fields: Sequence[str] = ("cluster", "host", "standby_dir", "prefix", "bucket")

    def __init__(
        self,
        *,
        cluster: str,
        host: str,
        standby_dir: str,
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
        self.standby_dir = standby_dir
        self.bucket = bucket
        self.local_path = local_path
        self.prefix = prefix
        self.aws_conn_id = aws_conn_id
        self.gpg_conn_id = gpg_conn_id
        self.binary = binary
        self.use_memory = use_memory

    def execute(self, context: Any) -> dict[str, Any]:
        from ..core.restore.standby import update_standby

        key, passphrase = private_key(self.gpg_conn_id)
        catalog = host_catalog(self)
        update = update_standby(
            catalog,
            Path(self.standby_dir),
            private_key=key,
            passphrase=passphrase,
            binary=self.binary,
            use_memory=self.use_memory,
        )
        return {
            "standby_dir": self.standby_dir,
            "chain_root": update.chain_root,
            "newest": update.newest,
            "rebuilt": update.rebuilt,
            "applied_now": update.applied_now,
        }
