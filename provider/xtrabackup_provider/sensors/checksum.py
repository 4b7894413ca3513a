"""ReplicaChecksumSensor: the consistency gate on a replica, before its backup."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.bases.sensor import PokeReturnValue

if TYPE_CHECKING:
    from ..core.config.schema import ChecksumGateConfig, ClusterConfig
    from ..core.db.gate import GateVerdict

log = logging.getLogger(__name__)


class ReplicaChecksumSensor(BaseSensorOperator):
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
        deferrable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.mysql_conn_id = mysql_conn_id
        self.replicate = replicate
        self.on_diff = on_diff
        self.on_blocked = on_blocked
        self.max_age_hours = max_age_hours
        self.max_lag_seconds = max_lag_seconds
        self.cluster = cluster
        self.replica_name = replica_name
        self.deferrable = deferrable

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
            on_diff=self.on_diff,  # type: ignore[arg-type]
            max_age=timedelta(hours=self.max_age_hours),
            max_lag_seconds=self.max_lag_seconds,
            replicate=self.replicate,
        )
        return check_replica(XtraBackupHook(self.mysql_conn_id).get_target(), policy, self._label())

    def _decide(self, verdict: GateVerdict, final: bool) -> PokeReturnValue:
        from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

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
        from ..triggers.checksum import ReplicaChecksumTrigger

        timeout = self.timeout if self.timeout is not None else 7 * 86400
        self.defer(
            trigger=ReplicaChecksumTrigger(
                mysql_conn_id=self.mysql_conn_id,
                replicate=self.replicate,
                max_age_hours=self.max_age_hours,
                max_lag_seconds=self.max_lag_seconds,
                deadline=time.time() + float(timeout),
                poll_interval=float(self.poke_interval),
                label=self._label(),
            ),
            method_name="execute_complete",
            # Past the trigger's own deadline: the trigger reports the reason first.
            timeout=timedelta(seconds=float(timeout) + 300),
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        """Back from the trigger: check once more here and apply the policy (no more waiting)."""
        from ..core.db.gate import ChecksumGateError

        if event.get("status") == "timeout":
            raise ChecksumGateError(f"backup blocked after waiting {self.timeout}s: {event.get('reason')}")
        return self._decide(self._check(), final=True).xcom_value


def checksum_gate(
    cluster: ClusterConfig,
    gate: ChecksumGateConfig | None,
    mysql_conn_id: Any,
    replica_name: Any,
    task_id: str = "checksum_gate",
) -> ReplicaChecksumSensor | None:
    """The gate task for hosts of the fleet config with this `checksum_gate` (None: no task).

    `mysql_conn_id` and `replica_name` may be a mapped task group's arguments."""
    if gate is None:
        return None
    wait = gate.on_blocked == "wait"
    return ReplicaChecksumSensor(
        task_id=task_id,
        mysql_conn_id=mysql_conn_id,
        replicate=cluster.checksum.replicate if cluster.checksum else "percona.checksums",
        on_diff=gate.on_diff,
        on_blocked=gate.on_blocked,
        max_age_hours=gate.max_age_hours,
        max_lag_seconds=gate.max_lag_seconds,
        cluster=cluster.name,
        replica_name=replica_name,
        map_index_template="{{ task.replica_name }}",
        deferrable=gate.deferrable and wait,
        mode="reschedule" if wait and gate.poke_seconds >= 60 else "poke",
        poke_interval=gate.poke_seconds,
        timeout=gate.wait_minutes * 60,  # runs on any worker: it only queries the replica
    )
