"""ReplicaChecksumSensor: the consistency gate on a replica, before its backup."""

from __future__ import annotations

__all__ = ["ReplicaChecksumSensor"]

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import conf
from airflow.sdk import BaseSensorOperator
from airflow.sdk.bases.sensor import PokeReturnValue

from ..arguments import KeptArguments, keep_arguments
from .base import defer_until

if TYPE_CHECKING:
    from ..core.db.gate import GateVerdict

log = logging.getLogger(__name__)


class ReplicaChecksumSensor(KeptArguments, BaseSensorOperator):
    """Replication running (both threads), lag under `max_lag_seconds`, and the replica's newest
    pt-table-checksum results younger than `max_age_hours` and free of differences.

    `on_diff`: fail (naming the tables) | skip (the downstream backup is skipped) | mark (succeed;
    the finding goes to the backup's manifest). `on_blocked`: fail at once with the reason, or
    wait (poke / reschedule, or `deferrable=True` to wait in the triggerer) until `timeout`.
    XCom: the gate results (replica_health, checksum) the backup operator records. Messages name
    the replica "replica <cluster>/<replica_name>" (default name: the connection id).
    """

    template_fields: Sequence[str] = ("mysql_conn_id", "replicate", "on_diff", "cluster", "replica_name")
    ui_color = "#fdebd0"

    def __init__(
        self,
        *,
        mysql_conn_id: str,
        replicate: str = "percona.checksums",
        on_diff: str = "fail",
        on_blocked: str = "fail",
        max_age_hours: float = 26,
        max_lag_seconds: float = 300,
        cluster: str = "",
        replica_name: str = "",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def _label(self) -> str:
        name = self.replica_name or self.mysql_conn_id
        return f"replica {self.cluster}/{name}" if self.cluster else f"replica {name}"

    def _check(self) -> GateVerdict:
        from ..core.db.gate import GatePolicy, check_replica
        from ..hooks.xtrabackup import XtraBackupHook

        if self.on_diff not in ("fail", "skip", "mark") or self.on_blocked not in ("fail", "wait"):
            raise ValueError(
                f"on_diff must be fail, skip or mark (got {self.on_diff!r}); "
                f"on_blocked must be fail or wait (got {self.on_blocked!r})"
            )
        policy = GatePolicy(
            on_diff=self.on_diff,
            max_age=timedelta(hours=self.max_age_hours),
            max_lag_seconds=self.max_lag_seconds,
            replicate=self.replicate,
        )
        return check_replica(XtraBackupHook(self.mysql_conn_id).get_target(), policy, self._label())

    def _decide(self, verdict: GateVerdict, final: bool) -> PokeReturnValue:
        from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException

        from ..core.db.gate import ChecksumGateError

        if verdict.outcome == "blocked":
            if self.on_blocked == "wait" and not final:
                log.info("gate blocked, waiting: %s", verdict.message())
                return PokeReturnValue(False)
            raise ChecksumGateError(f"backup blocked: {verdict.message()}")
        if verdict.action == "fail":
            raise AirflowFailException(f"backup stopped: {verdict.message()}")
        if verdict.action == "skip":
            raise AirflowSkipException(f"backup skipped (on_diff=skip): {verdict.message()}")
        if verdict.outcome == "diff":
            log.warning("taking the backup anyway (on_diff=mark): %s", verdict.message())
        else:
            log.info(verdict.message())
        return PokeReturnValue(True, xcom_value=verdict.xcom())

    def poke(self, context: Any) -> PokeReturnValue:
        return self._decide(self._check(), final=False)

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        result = self._decide(self._check(), final=False)
        if result.is_done:
            return result.xcom_value
        timeout = self.timeout if self.timeout is not None else 7 * 86400
        from ..triggers.checksum import ReplicaChecksumTrigger  # not at parse time

        defer_until(
            self,
            lambda deadline: ReplicaChecksumTrigger(
                mysql_conn_id=self.mysql_conn_id,
                replicate=self.replicate,
                max_age_hours=self.max_age_hours,
                max_lag_seconds=self.max_lag_seconds,
                deadline=deadline,
                poll_interval=float(self.poke_interval),
                label=self._label(),
            ),
            timeout,
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        """Back from the trigger: check once more here and apply the policy (no more waiting)."""
        from ..core.db.gate import ChecksumGateError

        if event.get("status") == "timeout":
            raise ChecksumGateError(f"backup blocked after waiting {self.timeout}s: {event.get('reason')}")
        return self._decide(self._check(), final=True).xcom_value
