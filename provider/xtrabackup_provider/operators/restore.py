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

    `standby_dir` restores the prepared standby copy kept there by XtraBackupStandbyOperator
    instead of the chain, after checking it against the catalog (core.restore.standby.
    restore_standby): newer incrementals of its chain are applied first; a standby older than
    the newest backup fails the task unless `allow_older_standby`. `move_standby` moves its
    files instead of copying them (the standby is rebuilt by its next update).
    """

    template_fields: Sequence[str] = storage_template_fields("backup_id", "target_datadir", "standby_dir")

    def __init__(
        self,
        *,
        target_datadir: str,
        backup_id: str | None = None,
        standby_dir: str | None = None,
        allow_older_standby: bool = False,
        move_standby: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def execute(self, context: Any) -> dict[str, Any]:
        from dataclasses import asdict

        from ..core.restore.chain import RestoreRequest, restore

        if self.standby_dir:
            from ..core.restore.standby import restore_standby

            if self.backup_id not in (None, "", "latest"):
                raise ValueError("standby_dir restores the backup the standby holds; leave backup_id unset")
            standby = restore_standby(
                self.catalog(),
                Path(self.standby_dir),
                Path(self.target_datadir),
                **self.restore_args(),
                allow_older=self.allow_older_standby,
                move=self.move_standby,
            )
            return asdict(standby)

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
