"""BinlogShippedTrigger: wait in the triggerer until the binlogs up to a point are stored."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from airflow.triggers.base import TriggerEvent

from ..arguments import keep_arguments
from .base import ArgsTrigger


class BinlogShippedTrigger(ArgsTrigger):
    """Reads the binlog manifests of one server every `poll_interval` seconds until they cover
    `file:position` (or `gtid`). Only the object store is polled: the point to reach was fixed
    by the sensor, so the triggerer needs no database credentials.

    Storage calls are synchronous, so each poll runs in a worker thread. Fires one event:
    {"status": "shipped" | "timeout" | "failed", "message": ...}.
    """

    def __init__(
        self,
        cluster: str,
        host: str,
        server_uuid: str,
        file: str | None = None,
        position: int | None = None,
        gtid: str | None = None,
        bucket: str | None = None,
        local_path: str | None = None,
        prefix: str = "backups",
        aws_conn_id: str = "aws_default",
        poll_interval: float = 30,
        deadline: float | None = None,  # epoch seconds
    ) -> None:
        super().__init__()
        keep_arguments(self, locals())

    def _check(self) -> bool:
        from ..core.binlog.ship import LagTarget, is_shipped
        from ..hooks.storage import BackupStorageHook

        catalog = BackupStorageHook(self.aws_conn_id, self.bucket, self.local_path).get_catalog(
            self.prefix, self.cluster, self.host
        )
        return is_shipped(catalog, LagTarget(self.server_uuid, self.file, self.position, self.gtid))

    def _point(self) -> str:
        return f"GTID {self.gtid}" if self.gtid else f"{self.file}:{self.position}"

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            while not await asyncio.to_thread(self._check):
                if self.deadline is not None and time.time() >= self.deadline:
                    yield TriggerEvent(
                        {"status": "timeout", "message": f"binlogs up to {self._point()} still not shipped"}
                    )
                    return
                self.log.info("binlogs up to %s not shipped yet", self._point())
                await asyncio.sleep(self.poll_interval)
            yield TriggerEvent({"status": "shipped", "message": f"binlogs up to {self._point()} are stored"})
        except Exception as exc:  # noqa: BLE001 - the task reports it; a trigger must not die silently
            yield TriggerEvent({"status": "failed", "message": f"{type(exc).__name__}: {exc}"})
