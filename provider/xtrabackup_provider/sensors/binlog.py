"""BinlogLagSensor: wait until the binlogs up to the server's current position are shipped."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.bases.sensor import PokeReturnValue

if TYPE_CHECKING:
    from ..core.config.schema import ClusterConfig, FleetConfig


class BinlogLagFailed(RuntimeError):
    """The binlogs did not reach the point in time; the message names it and the host."""


class BinlogLagSensor(BaseSensorOperator):
    """Succeeds once the shipped binlogs of `cluster/host` cover the point fixed at the first
    check: `gtid` if given, else the server's binlog position (SHOW MASTER STATUS) then.

    After a backup this means the backup counts only once the binlogs that make every point
    up to it recoverable are stored. deferrable=True (the default): one check here, then
    BinlogShippedTrigger polls the manifests in the triggerer (no database credentials
    there). deferrable=False: a classic poke sensor (mode="poke" keeps the point fixed; in
    "reschedule" mode each poke takes the server's position afresh).
    XCom: {"server_uuid", "point", "deferred"}.
    """

    template_fields: Sequence[str] = ("cluster", "host", "mysql_conn_id", "gtid", "prefix", "bucket")
    ui_color = "#fdebd0"

    def __init__(
        self,
        *,
        cluster: str,
        host: str,
        mysql_conn_id: str,
        gtid: str | None = None,
        bucket: str | None = None,
        local_path: str | None = None,
        prefix: str = "backups",
        aws_conn_id: str = "aws_default",
        deferrable: bool = True,
        poke_interval: float = 30,
        timeout: float = 3600,
        **kwargs: Any,
    ) -> None:
        super().__init__(poke_interval=poke_interval, timeout=timeout, **kwargs)
        self.cluster = cluster
        self.host = host
        self.mysql_conn_id = mysql_conn_id
        self.gtid = gtid
        self.bucket = bucket
        self.local_path = local_path
        self.prefix = prefix
        self.aws_conn_id = aws_conn_id
        self.deferrable = deferrable
        self._point: Any = None

    def _catalog(self) -> Any:
        from ..hooks.storage import BackupStorageHook

        return BackupStorageHook(self.aws_conn_id, self.bucket, self.local_path).get_catalog(
            self.prefix, self.cluster, self.host
        )

    def _fix_point(self) -> Any:
        if self._point is None:
            from ..core.binlog.ship import lag_target
            from ..hooks.xtrabackup import XtraBackupHook

            self._point = lag_target(XtraBackupHook(self.mysql_conn_id).get_target(), self.gtid or None)
            self.log.info("waiting until the binlogs up to %s are shipped", self._point.describe())
        return self._point

    def _result(self, deferred: bool) -> dict[str, Any]:
        point = self._fix_point()
        return {"server_uuid": point.server_uuid, "point": point.describe(), "deferred": deferred}

    def poke(self, context: Any) -> PokeReturnValue:
        from ..core.binlog.ship import is_shipped

        point = self._fix_point()
        if is_shipped(self._catalog(), point):
            return PokeReturnValue(True, xcom_value=self._result(False))
        return PokeReturnValue(False)

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        from ..core.binlog.ship import is_shipped

        point = self._fix_point()
        if is_shipped(self._catalog(), point):
            return self._result(False)
        from ..triggers.binlog import BinlogShippedTrigger

        self.defer(
            trigger=BinlogShippedTrigger(
                cluster=self.cluster,
                host=self.host,
                server_uuid=point.server_uuid,
                file=point.file,
                position=point.position,
                gtid=point.gtid,
                bucket=self.bucket,
                local_path=self.local_path,
                prefix=self.prefix,
                aws_conn_id=self.aws_conn_id,
                poll_interval=float(self.poke_interval),
                deadline=time.time() + float(self.timeout),
            ),
            method_name="execute_complete",
            kwargs={"point": point.describe(), "server_uuid": point.server_uuid},
            # Past the trigger's own deadline, so the trigger reports the reason first.
            timeout=timedelta(seconds=float(self.timeout) + 300),
        )

    def execute_complete(
        self, context: Any, event: dict[str, Any], point: str = "", server_uuid: str = ""
    ) -> dict[str, Any]:
        if event.get("status") != "shipped":
            raise BinlogLagFailed(
                f"binlogs of {self.cluster}/{self.host} (server {server_uuid}) up to {point}: "
                f"{event.get('message')}; is the binlog shipping DAG running?"
            )
        return {"server_uuid": server_uuid, "point": point, "deferred": True}


def binlog_gate(config: FleetConfig, cluster: ClusterConfig, host: Any, conn_id: Any) -> Any:
    """For the backup DAG: a BinlogLagSensor after the backup, or None unless the cluster ships
    binlogs with `gate_backups`. It fails the run when the binlogs are not stored in time.
    `host` (its name) and `conn_id` may be a mapped task group's arguments."""
    binlogs = cluster.binlogs
    if binlogs is None or not binlogs.gate_backups:
        return None
    storage = config.storage
    return BinlogLagSensor(
        task_id="binlogs_shipped",
        cluster=cluster.name,
        host=host,
        mysql_conn_id=conn_id,
        map_index_template="{{ task.host }}",
        bucket=storage.bucket,
        local_path=storage.local_path,
        prefix=storage.prefix,
        aws_conn_id=storage.aws_conn_id,
        poke_interval=min(30.0, binlogs.progress_seconds * 3),
        timeout=binlogs.lag_timeout_minutes * 60,
        trigger_rule="none_failed_min_one_success",  # after whichever backup branch ran
    )
