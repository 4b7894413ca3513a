"""ReplicaCaughtUpSensor: wait until a replica built from a backup has caught up with its source."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator

from ..arguments import KeptArguments, keep_arguments


class ReplicaCaughtUpSensor(KeptArguments, BaseSensorOperator):
    """Succeeds once the replica `replica_conn_id` has applied `target_gtid` (the source's position
    when its replication started: ProvisionReplicaOperator's XCom `source_gtid`) and its lag is at
    most `max_lag_seconds`. A replication error fails the task at once, without retrying: 1236
    means the source no longer has the binlogs it needs (build it from a newer backup). Use
    mode="reschedule" for long catch-ups: each poke is one short query on the replica.
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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def poke(self, context: Any) -> bool:
        from airflow.providers.common.compat.sdk import AirflowFailException

        from ..core.binlog.replication import (
            ReplicationError,
            ReplicationSource,
            caught_up,
            describe_progress,
            replica_state,
        )
        from ..core.db.server import connect
        from ..hooks.xtrabackup import XtraBackupHook

        conn = connect(XtraBackupHook(self.replica_conn_id).get_target())
        try:
            state = replica_state(conn)
        finally:
            conn.close()
        try:
            done = caught_up(
                state,
                self.target_gtid,
                float(self.max_lag_seconds),
                ReplicationSource("", label=self.source_name or "of the replica"),
                self.replica_name,
            )
        except ReplicationError as exc:
            raise AirflowFailException(str(exc)) from exc
        self.log.info("%s: %s", self.replica_name, describe_progress(state, self.target_gtid))
        return done
