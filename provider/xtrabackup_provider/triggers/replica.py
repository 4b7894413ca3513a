"""ReplicaCaughtUpTrigger: wait in the triggerer until a replica has applied a GTID (or a deadline)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import TriggerEvent

from ..arguments import keep_arguments
from ..core.db.replica import GRACE_SECONDS
from .base import ArgsTrigger


def check_caught_up(
    replica_conn_id: str,
    target_gtid: str,
    max_lag_seconds: float,
    replica_name: str,
    source_name: str,
    grace_seconds: float = GRACE_SECONDS,
) -> tuple[bool, str]:
    """(caught up?, its progress in words) of the replica of the `mysql` connection. A thread error
    is watched for up to `grace_seconds` (a check keeps no state between calls) and raises
    core.db.replica.ReplicaError when it is final or persists (core/db/replica.py)."""
    from ..core.binlog.replication import caught_up
    from ..core.db.replica import ReplicaWatch, describe_progress, read_state, wait_running
    from ..core.db.server import connect
    from ..hooks.xtrabackup import XtraBackupHook

    target = XtraBackupHook(replica_conn_id).get_target()

    def read() -> Any:
        return read_state(lambda: connect(target))

    watch = ReplicaWatch(
        replica_name, f"source {source_name}" if source_name else "its source", grace_seconds
    )
    state = read()
    if watch.check(state) is not None:
        state = wait_running(read, watch)
    return caught_up(state, target_gtid, float(max_lag_seconds)), describe_progress(state, target_gtid)


class ReplicaCaughtUpTrigger(ArgsTrigger):
    """Polls the replica (one short query per `poll_interval`, in a thread: the triggerer's loop
    stays free) until it has applied `target_gtid` with a lag of at most `max_lag_seconds`.

    Serialized kwargs hold the connection id, never credentials. Emits {"status": "caught_up",
    "progress"}, {"status": "error", "message"} on a replication error (it will not heal by
    waiting), or {"status": "timeout", "message"} at `deadline` (epoch seconds). An unreachable
    replica counts as not caught up yet (it may be restarting).
    """

    def __init__(
        self,
        *,
        replica_conn_id: str,
        target_gtid: str,
        max_lag_seconds: float,
        deadline: float,
        poll_interval: float = 30,
        replica_name: str = "the new replica",
        source_name: str = "",
        grace_seconds: float = GRACE_SECONDS,
    ) -> None:
        super().__init__()
        keep_arguments(self, locals())

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from ..core.db.replica import ReplicaError

        args = (
            self.replica_conn_id,
            self.target_gtid,
            self.max_lag_seconds,
            self.replica_name,
            self.source_name,
            self.grace_seconds,
        )
        while True:
            try:
                done, progress = await asyncio.to_thread(check_caught_up, *args)
            except ReplicaError as exc:
                yield TriggerEvent({"status": "error", "message": str(exc)})
                return
            except Exception as exc:  # noqa: BLE001 - unreachable for now: not caught up yet
                done, progress = False, f"cannot query it: {exc}"
            if done:
                yield TriggerEvent({"status": "caught_up", "progress": progress})
                return
            if time.time() >= self.deadline:
                yield TriggerEvent({"status": "timeout", "message": progress})
                return
            self.log.info("%s: %s", self.replica_name, progress)
            await asyncio.sleep(min(self.poll_interval, max(0.0, self.deadline - time.time())))
