"""ReplicaCaughtUpSensor: wait until a replica built from a backup has caught up with its source."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator

from ..arguments import KeptArguments, keep_arguments


class ReplicaCaughtUpSensor(KeptArguments, BaseSensorOperator):
    """Succeeds once the replica `replica_conn_id` has applied `target_gtid` (the source's position
    when its replication started: ProvisionReplicaOperator's XCom `source_gtid`) and its lag is at
    most `max_lag_seconds`. A replication thread error fails the task without retrying, in one
    line naming Last_IO_Errno / Last_SQL_Errno (core/db/replica.py): at once when it is final (the
    SQL thread stopped; 1236: the source no longer has the binlogs it needs, build it from a newer
    backup), or once it has lasted `grace_seconds` within one poke (a wrong password, a source it
    cannot reach). Use mode="reschedule" for long catch-ups: each poke is one short query on the
    replica, longer only while an error is being watched.
    """

    template_fields: Sequence[str] = ("replica_conn_id", "target_gtid", "max_lag_seconds")
    ui_color = "#d5f5e3"

    def __init__(
        self,
        *,
        replica_conn_id: str,
        target_gtid: str,
        max_lag_seconds: float = 5,
        replica_name: str = "the new replica",
        source_name: str = "",
        grace_seconds: float = 30.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def poke(self, context: Any) -> bool:
        from airflow.providers.common.compat.sdk import AirflowFailException

        from ..core.binlog.replication import caught_up
        from ..core.db.replica import ReplicaError, ReplicaWatch, describe_progress, read_state, wait_running
        from ..core.db.server import connect
        from ..hooks.xtrabackup import XtraBackupHook

        target = XtraBackupHook(self.replica_conn_id).get_target()
        source = f"source {self.source_name}" if self.source_name else "its source"
        watch = ReplicaWatch(self.replica_name, source, float(self.grace_seconds))

        def read() -> Any:
            return read_state(lambda: connect(target))

        try:
            state = read()
            if watch.check(state) is not None:  # watched within this poke: a sensor keeps no state
                state = wait_running(read, watch)
        except ReplicaError as exc:
            raise AirflowFailException(
                f"{exc}. Fix it and provision again: stop the new server and empty its datadir first"
            ) from exc
        self.log.info("%s: %s", self.replica_name, describe_progress(state, self.target_gtid))
        return caught_up(state, self.target_gtid, float(self.max_lag_seconds))
