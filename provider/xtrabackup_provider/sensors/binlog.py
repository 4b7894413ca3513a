"""BinlogLagSensor: wait until the binlogs up to the server's current position are shipped."""

from __future__ import annotations

__all__ = ["BinlogLagSensor"]

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import conf
from airflow.sdk.bases.sensor import PokeReturnValue

from ..arguments import keep_arguments
from ..operators.base import BackupStorageSensor, storage_template_fields
from .base import defer_until

if TYPE_CHECKING:
    pass


class BinlogLagFailed(RuntimeError):
    """The binlogs did not reach the point in time; the message names it and the host."""


class BinlogLagSensor(BackupStorageSensor):
    """Succeeds once the shipped binlogs of `cluster/host` cover the point fixed at the first
    check: `gtid` if given, else the server's binlog position (SHOW MASTER STATUS) then.

    After a backup this means the backup counts only once the binlogs that make every point
    up to it recoverable are stored. deferrable=True (the shipped DAGs' choice; the default is
    `[operators] default_deferrable`): one check here, then BinlogShippedTrigger polls the
    manifests in the triggerer (no database credentials
    there). deferrable=False: a classic poke sensor (mode="poke" keeps the point fixed; in
    "reschedule" mode each poke takes the server's position afresh).
    XCom: {"server_uuid", "point", "deferred"}.
    """

    template_fields: Sequence[str] = storage_template_fields("mysql_conn_id", "gtid")
    ui_color = "#fdebd0"

    def __init__(
        self,
        *,
        mysql_conn_id: str,
        gtid: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=True),
        poke_interval: float = 30,
        timeout: float = 3600,
        **kwargs: Any,
    ) -> None:
        super().__init__(poke_interval=poke_interval, timeout=timeout, **kwargs)
        keep_arguments(self, locals(), passed_on=("poke_interval", "timeout"))
        self._point: Any = None

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
        if is_shipped(self.catalog(), point):
            return PokeReturnValue(True, xcom_value=self._result(False))
        return PokeReturnValue(False)

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        from ..core.binlog.ship import is_shipped

        point = self._fix_point()
        if is_shipped(self.catalog(), point):
            return self._result(False)
        from ..triggers.binlog import BinlogShippedTrigger  # not at parse time

        defer_until(
            self,
            lambda deadline: BinlogShippedTrigger(
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
                deadline=deadline,
            ),
            float(self.timeout),
            point=point.describe(),
            server_uuid=point.server_uuid,
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
