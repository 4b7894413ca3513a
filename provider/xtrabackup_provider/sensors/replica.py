"""ReplicaCaughtUpSensor: wait until a replica built from a backup has caught up with its source."""

from __future__ import annotations

__all__ = ["ReplicaCaughtUpSensor"]

from collections.abc import Sequence
from typing import Any

from airflow.providers.common.compat.sdk import conf
from airflow.sdk import BaseSensorOperator

from ..arguments import KeptArguments, keep_arguments
from .base import defer_until


class ReplicaNotCaughtUp(RuntimeError):
    """The replica did not apply the source's position in time; the message says how far it got."""


class ReplicaCaughtUpSensor(KeptArguments, BaseSensorOperator):
    """Succeeds once the replica `replica_conn_id` has applied `target_gtid` (the source's position
    when its replication started: ProvisionReplicaOperator's XCom `source_gtid`) and its lag is at
    most `max_lag_seconds`. A replication error fails the task at once, without retrying: 1236
    means the source no longer has the binlogs it needs (build it from a newer backup).

    deferrable=True: one check here, then ReplicaCaughtUpTrigger polls the replica in the
    triggerer every `poke_interval` until `timeout` (no worker slot held for a catch-up of hours).
    Without it, a poke sensor: use mode="reschedule" for long catch-ups.
    """

    template_fields: Sequence[str] = ("replica_conn_id", "target_gtid", "max_lag_seconds")
    ui_color = "#d5f5e3"

    def __init__(
        self,
        *,
        replica_conn_id: str,
        target_gtid: str,
        max_lag_seconds: float | str = 5,  # templated: a DAG param
        replica_name: str = "the new replica",
        source_name: str = "",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def _check(self) -> bool:
        from airflow.providers.common.compat.sdk import AirflowFailException

        from ..core.binlog.replication import ReplicationError
        from ..triggers.replica import check_caught_up

        try:
            done, progress = check_caught_up(
                self.replica_conn_id,
                self.target_gtid,
                float(self.max_lag_seconds),
                self.replica_name,
                self.source_name,
            )
        except ReplicationError as exc:
            raise AirflowFailException(str(exc)) from exc
        self.log.info("%s: %s", self.replica_name, progress)
        return done

    def poke(self, context: Any) -> bool:
        return self._check()

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self._check():
            return None
        from ..triggers.replica import ReplicaCaughtUpTrigger  # not at parse time

        timeout = self.timeout if self.timeout is not None else 7 * 86400
        defer_until(
            self,
            lambda deadline: ReplicaCaughtUpTrigger(
                replica_conn_id=self.replica_conn_id,
                target_gtid=self.target_gtid,
                max_lag_seconds=float(self.max_lag_seconds),
                deadline=deadline,
                poll_interval=float(self.poke_interval),
                replica_name=self.replica_name,
                source_name=self.source_name,
            ),
            timeout,
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> None:
        from airflow.providers.common.compat.sdk import AirflowFailException

        status = event.get("status")
        if status == "caught_up":
            self.log.info("%s caught up: %s", self.replica_name, event.get("progress"))
            return
        if status == "error":
            raise AirflowFailException(event.get("message"))
        raise ReplicaNotCaughtUp(
            f"{self.replica_name} has not caught up with {self.source_name or 'its source'} after "
            f"{self.timeout} s: {event.get('message')}"
        )
