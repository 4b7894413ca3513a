"""GlacierRestoreTrigger: wait in the triggerer until archived objects are readable again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import TriggerEvent

from ..arguments import keep_arguments
from .base import ArgsTrigger


class GlacierRestoreTrigger(ArgsTrigger):
    """Polls HEAD of each key through the `aws` connection until every restore has finished.

    boto3 is synchronous, so each poll runs in a worker thread (asyncio.to_thread) and the
    triggerer's event loop never blocks. Fires one event: {"status": "restored" | "failed" |
    "timeout", "states": [...], "message": ...}.
    """

    def __init__(
        self,
        bucket: str,
        keys: list[str],
        aws_conn_id: str = "aws_default",
        poll_interval: float = 600,
        deadline: float | None = None,  # epoch seconds
    ) -> None:
        super().__init__()
        keep_arguments(self, locals())
        self.keys = list(keys)

    def _store(self) -> Any:
        from ..hooks.storage import BackupStorageHook

        return BackupStorageHook(self.aws_conn_id, bucket=self.bucket).get_store()

    def _poll(self, store: Any) -> list[dict[str, Any]]:
        from ..core.storage.glacier import key_states

        return [s.row() for s in key_states(store, self.keys)]

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            store = await asyncio.to_thread(self._store)
            while True:
                rows = await asyncio.to_thread(self._poll, store)
                if event := self._verdict(rows):
                    yield TriggerEvent(event)
                    return
                self.log.info(
                    "%d of %d objects still being restored",
                    sum(r["state"] != "restored" for r in rows),
                    len(rows),
                )
                await asyncio.sleep(self.poll_interval)
        except Exception as exc:  # noqa: BLE001 - the task reports it; a trigger must not die silently
            yield TriggerEvent({"status": "failed", "message": f"{type(exc).__name__}: {exc}", "states": []})

    def _verdict(self, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
        lost = [r["key"] for r in rows if r["state"] in ("archived", "missing")]
        if lost:
            return {
                "status": "failed",
                "message": f"no restore is running for {lost} (never requested, or the restored copy expired)",
                "states": rows,
            }
        if not any(r["state"] == "restoring" for r in rows):
            return {"status": "restored", "message": "every object is readable", "states": rows}
        if self.deadline is not None and time.time() >= self.deadline:
            return {"status": "timeout", "message": "restores still running at the deadline", "states": rows}
        return None
