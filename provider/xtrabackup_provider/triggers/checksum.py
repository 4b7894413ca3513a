"""ReplicaChecksumTrigger: wait in the triggerer until a blocked replica gate clears (or a deadline)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import timedelta

from airflow.triggers.base import TriggerEvent

from ..arguments import keep_arguments
from .base import ArgsTrigger


class ReplicaChecksumTrigger(ArgsTrigger):
    """Polls the replica's health and checksum table until the gate is no longer blocked.

    Serialized kwargs hold the connection id, never credentials. The blocking MySQL queries
    (and the connection lookup) run in a thread so the triggerer's event loop stays free.
    Emits {"status": "ready"} or, at `deadline` (epoch seconds), {"status": "timeout", "reason"};
    the sensor then checks once more itself and applies the policy.
    """

    def __init__(
        self,
        *,
        mysql_conn_id: str,
        replicate: str,
        max_age_hours: float,
        max_lag_seconds: float,
        deadline: float,
        poll_interval: float = 60,
        label: str = "the replica",
    ) -> None:
        super().__init__()
        keep_arguments(self, locals())

    def _blocked_reason(self) -> str | None:
        from ..core.db.gate import GatePolicy, check_replica
        from ..hooks.xtrabackup import XtraBackupHook

        policy = GatePolicy(
            max_age=timedelta(hours=self.max_age_hours),
            max_lag_seconds=self.max_lag_seconds,
            replicate=self.replicate,
        )
        verdict = check_replica(XtraBackupHook(self.mysql_conn_id).get_target(), policy, self.label)
        return verdict.message() if verdict.outcome == "blocked" else None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        checks = 0
        while True:
            checks += 1
            try:
                reason = await asyncio.to_thread(self._blocked_reason)
            except Exception as exc:  # noqa: BLE001 - an unreachable replica is "still blocked"
                reason = f"{self.label}: {exc}"
            if reason is None:
                yield TriggerEvent({"status": "ready", "checks": checks})
                return
            if time.time() >= self.deadline:
                yield TriggerEvent({"status": "timeout", "reason": reason, "checks": checks})
                return
            self.log.info("still blocked (check %d): %s", checks, reason)
            await asyncio.sleep(min(self.poll_interval, max(0.0, self.deadline - time.time())))
