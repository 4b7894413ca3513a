"""ReplicaCaughtUpSensor: wait until a replica built from a backup has caught up with its source."""

from __future__ import annotations

__all__ = ["ReplicaCaughtUpSensor"]

from collections.abc import Sequence
from typing import Any

from airflow.providers.common.compat.sdk import conf
from airflow.sdk import BaseSensorOperator

from ..arguments import KeptArguments, keep_arguments
from ..core.db.replica import GRACE_SECONDS
from .base import defer_until


class ReplicaNotCaughtUp(RuntimeError):
    """The replica did not apply the source's position in time; the message says how far it got."""


FIX = "Fix it and provision again: stop the new server and empty its datadir first"


class ReplicaCaughtUpSensor(KeptArguments, BaseSensorOperator):
    """Succeeds once the replica `replica_conn_id` has applied `target_gtid` (the source's position
    when its replication started: ProvisionReplicaOperator's XCom `source_gtid`) and its lag is at
    most `max_lag_seconds`. A replication thread error fails the task without retrying, in one
    line naming Last_IO_Errno / Last_SQL_Errno (core/db/replica.py): at once when it is final (the
    SQL thread stopped; 1236: the source no longer has the binlogs it needs, build it from a newer
    backup), or once it has lasted `grace_seconds` within one check (a wrong password, a source it
    cannot reach).

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
        grace_seconds: float = GRACE_SECONDS,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def _check(self) -> bool:
        from airflow.providers.common.compat.sdk import AirflowFailException

        from ..core.db.replica import ReplicaError
        from ..triggers.replica import check_caught_up

        try:
            done, progress = check_caught_up(
                self.replica_conn_id,
                self.target_gtid,
                float(self.max_lag_seconds),
                self.replica_name,
                self.source_name,
                float(self.grace_seconds),
            )
        except ReplicaError as exc:
            raise AirflowFailException(f"{exc}. {FIX}") from exc
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
                grace_seconds=float(self.grace_seconds),
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
            raise AirflowFailException(f"{event.get('message')}. {FIX}")
        raise ReplicaNotCaughtUp(
            f"{self.replica_name} has not caught up with {self.source_name or 'its source'} after "
            f"{self.timeout} s: {event.get('message')}"
        )
