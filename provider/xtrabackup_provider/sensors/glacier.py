"""GlacierRestoreSensor: wait until a backup chain's archived objects are readable again."""

from __future__ import annotations

__all__ = ["GlacierRestoreSensor"]

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import conf
from airflow.sdk import BaseSensorOperator
from airflow.sdk.bases.sensor import PokeReturnValue

from ..arguments import KeptArguments, keep_arguments
from .base import defer_until

if TYPE_CHECKING:
    pass


class GlacierRestoreFailed(RuntimeError):
    """A restore was never requested, expired, or did not finish in time; the message names the objects."""


class GlacierRestoreSensor(KeptArguments, BaseSensorOperator):
    """Succeeds when every object the restore of `backup_id` needs (its whole chain) is readable.

    Request the restores first (GlacierRestoreRequestOperator or `xtrabackup-provider
    glacier-restore`): an archived object that nobody is restoring fails the sensor at once
    instead of waiting forever. `keys` may be given instead of cluster/host/backup_id.

    deferrable=True (the shipped DAG's choice; the default is `[operators] default_deferrable`):
    one check here, then the wait moves to the triggerer
    (GlacierRestoreTrigger polls HEAD every `poke_interval` seconds) and the task resumes by
    itself when the restores are done. deferrable=False: a classic poke/reschedule sensor.
    XCom: {"keys", "states", "deferred"}.
    """

    template_fields: Sequence[str] = ("cluster", "host", "backup_id", "bucket", "prefix", "aws_conn_id")
    ui_color = "#d1f2eb"

    def __init__(
        self,
        *,
        bucket: str,
        cluster: str | None = None,
        host: str | None = None,
        backup_id: str | None = "latest",
        keys: list[str] | None = None,
        prefix: str = "backups",
        aws_conn_id: str = "aws_default",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=True),
        poke_interval: float = 600,
        timeout: float = 3 * 86400,  # Bulk restores of DEEP_ARCHIVE take up to 48 hours
        **kwargs: Any,
    ) -> None:
        super().__init__(poke_interval=poke_interval, timeout=timeout, **kwargs)
        if keys is None and not (cluster and host):
            raise ValueError("GlacierRestoreSensor needs cluster and host (or an explicit list of keys)")
        keep_arguments(self, locals(), passed_on=("poke_interval", "timeout"))

    def _store(self) -> Any:
        from ..hooks.storage import BackupStorageHook

        return BackupStorageHook(self.aws_conn_id, bucket=self.bucket).get_store()

    def _keys(self, store: Any) -> list[str]:
        if self.keys is not None:
            return list(self.keys)
        from ..core.catalog.backups import Catalog
        from ..core.restore.archived import chain_keys

        catalog = Catalog(store, self.prefix, self.cluster or "", self.host or "")
        backup_id = None if self.backup_id in (None, "", "latest") else self.backup_id
        chain = catalog.chain(backup_id) if backup_id else catalog.latest_chain()
        return chain_keys(chain)

    def _check(self) -> tuple[list[str], list[dict[str, Any]]]:
        """(keys still being restored, state rows); raises when waiting would never end."""
        from ..core.storage.glacier import key_states, lost_restores, waiting

        store = self._store()
        states = key_states(store, self._keys(store))
        if lost := lost_restores(states):
            raise GlacierRestoreFailed(
                f"no restore is running for {lost} in s3://{self.bucket}; request it (GlacierRestoreRequestOperator "
                "or `xtrabackup-provider glacier-restore`) before waiting"
            )
        return [s.key for s in waiting(states)], [s.row() for s in states]

    def poke(self, context: Any) -> PokeReturnValue:
        pending, rows = self._check()
        if pending:
            self.log.info("%d of %d objects still being restored", len(pending), len(rows))
            return PokeReturnValue(False)
        return PokeReturnValue(
            True, xcom_value={"keys": [r["key"] for r in rows], "states": rows, "deferred": False}
        )

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        pending, rows = self._check()
        if not pending:
            return {"keys": [r["key"] for r in rows], "states": rows, "deferred": False}
        self.log.info("deferring: %d of %d objects still being restored", len(pending), len(rows))
        from ..triggers.glacier import GlacierRestoreTrigger  # not at parse time

        defer_until(
            self,
            lambda deadline: GlacierRestoreTrigger(
                bucket=self.bucket,
                keys=pending,
                aws_conn_id=self.aws_conn_id,
                poll_interval=float(self.poke_interval),
                deadline=deadline,
            ),
            float(self.timeout),
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") != "restored":
            raise GlacierRestoreFailed(f"Glacier restore of s3://{self.bucket}: {event.get('message')}")
        pending, rows = self._check()  # the trigger saw it; confirm from here before going on
        if pending:
            raise GlacierRestoreFailed(
                f"the trigger reported the restore done but {pending} are still restoring"
            )
        self.log.info("every object is readable again: %s", [r["key"] for r in rows])
        return {"keys": [r["key"] for r in rows], "states": rows, "deferred": True}
