"""BinlogShipOperator: ship a host's closed binlogs (or follow it live for a bounded time)."""

from __future__ import annotations

__all__ = ["BinlogShipOperator"]

import logging
from collections.abc import Sequence
from typing import Any

from ..arguments import keep_arguments
from . import _metrics
from .base import PUBLIC_KEYS_CONN, BackupStorageOperator, storage_template_fields

log = logging.getLogger(__name__)


class BinlogShipOperator(BackupStorageOperator):
    """Ship every closed binlog of `cluster/host` that is not yet stored, over the replication
    protocol (no datadir access: any worker), compressed and encrypted like the backups.

    `flush=True` runs FLUSH BINARY LOGS first, so the binlog open until now ships too.
    `continuous_seconds > 0` then follows the server live for that long, storing the open
    binlog's new bytes every `progress_seconds` (schedule it e.g. 55 minutes every hour).
    A binlog purged before it was shipped fails the task after the gap is recorded; PITR
    will not cross it. A server the host's catalog does not know fails the task, naming it
    (core/binlog/identity.py); `accept_new_server=True` takes a rebuilt server as the host's.
    XCom: counts, the last names shipped, gaps, bytes.
    """

    template_fields: Sequence[str] = storage_template_fields("mysql_conn_id")
    ui_color = "#fdebd0"
    gpg_conn_default = PUBLIC_KEYS_CONN

    def __init__(
        self,
        *,
        mysql_conn_id: str,
        flush: bool = False,
        continuous_seconds: float = 0,
        progress_seconds: float = 10,
        binary: str | None = None,
        compression_level: int = 3,
        storage_class: str = "STANDARD",
        sse: str | None = None,
        kms_key_id: str | None = None,
        workdir: str | None = None,
        accept_new_server: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.providers.common.compat.sdk import AirflowFailException

        from ..core.binlog.catalog import BinlogGapError
        from ..core.binlog.follow import ship_continuous
        from ..core.binlog.ship import ShipRequest, ship_binlogs
        from ..hooks.xtrabackup import XtraBackupHook

        request = ShipRequest(
            catalog=self.catalog(),
            target=XtraBackupHook(self.mysql_conn_id).get_target(),
            **self.encryption(),
            binary=self.binary,
            flush=self.flush,
            compression_level=self.compression_level,
            storage_class=self.storage_class,
            sse=self.sse,
            kms_key_id=self.kms_key_id,
            workdir=self.workdir,
            accept_new_server=self.accept_new_server,
        )
        try:
            if self.continuous_seconds > 0:
                report = ship_continuous(request, self.continuous_seconds, self.progress_seconds)
            else:
                report = ship_binlogs(request)
        except BinlogGapError as exc:
            # A retry would find the gap recorded and pass: fail for good so someone sees it.
            raise AirflowFailException(str(exc)) from exc
        summary = report.summary()
        _metrics.binlogs_shipped(self.cluster, self.host, summary, request.catalog)
        log.info(
            "%s/%s: shipped %d binlog(s), %d already stored, open binlog %s",
            self.cluster,
            self.host,
            summary["shipped_count"],
            summary["already_shipped"],
            summary["open_binlog"],
        )
        return summary
