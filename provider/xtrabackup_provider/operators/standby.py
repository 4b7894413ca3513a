"""XtraBackupStandbyOperator: keep a prepared standby copy of a host's newest chain."""

from __future__ import annotations

__all__ = ["XtraBackupStandbyOperator"]

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..arguments import keep_arguments
from .base import ChainRestoreOperator, read_template_fields


class XtraBackupStandbyOperator(ChainRestoreOperator):
    """After each backup, merge the new incrementals into a standby directory on this worker,
    so that a restore from it needs only the final step (see core/restore/standby.py for the rules).
    One run at a time holds the directory; another waits a minute, then is skipped naming the
    holder (the next backup run refreshes it).
    No `standby_dir` (a host of a mapped group without one): skipped. Give it the `queue` of the
    worker where the directory lives (the fleet config's `standby_queue`): it reads the private
    key, which a database host that only takes backups does not need."""

    template_fields: Sequence[str] = read_template_fields("standby_dir", "binary")

    def __init__(
        self,
        *,
        standby_dir: str | None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.providers.common.compat.sdk import AirflowSkipException

        from ..core.restore.standby import update_standby
        from ..core.restore.standby_lock import StandbyBusy

        if not self.standby_dir:  # the backup DAG maps this task over hosts, some without a standby
            raise AirflowSkipException(f"host {self.cluster}/{self.host} has no standby_dir")
        try:
            update = update_standby(
                directory=Path(self.standby_dir),
                **self.read_args(),
                **self.restore_args(),
            )
        except StandbyBusy as exc:
            # A restore from the standby or a CLI refresh holds it: the next backup run refreshes it.
            # Retrying here would hold this run, and with it (one at a time) the host's next backups.
            raise AirflowSkipException(f"{exc}; the next backup run refreshes it") from exc
        return {
            "standby_dir": self.standby_dir,
            "chain_root": update.chain_root,
            "newest": update.newest,
            "rebuilt": update.rebuilt,
            "applied_now": update.applied_now,
            "source": update.source,
        }
