"""XtraBackupRestoreOperator: restore a backup (and its chain) into an empty datadir."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..arguments import keep_arguments
from .base import ChainRestoreOperator, storage_template_fields


class XtraBackupRestoreOperator(ChainRestoreOperator):
    """Validate the chain from manifests, fetch + verify + extract, prepare, move back.

    `backup_id` None (or "latest") restores the newest backup. The private key comes from a
    `gpgkeys` connection that only restore workers should be able to read.
    """

    template_fields: Sequence[str] = storage_template_fields("backup_id", "target_datadir")

    def __init__(
        self,
        *,
        target_datadir: str,
        backup_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def execute(self, context: Any) -> dict[str, Any]:
        from dataclasses import asdict

        from ..core.restore.chain import RestoreRequest, restore

        report = restore(
            RestoreRequest(
                catalog=self.catalog(),
                target_datadir=Path(self.target_datadir),
                backup_id=None if self.backup_id in (None, "", "latest") else self.backup_id,
                **self.restore_args(),
            )
        )
        result = asdict(report)
        result.pop("prepare_argv")
        return result
