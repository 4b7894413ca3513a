"""ProvisionReplicaOperator: build a replica from a backup on the worker of the new host."""

from __future__ import annotations

__all__ = ["ProvisionReplicaOperator"]

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..arguments import flag, keep_arguments
from .base import ChainRestoreOperator, read_template_fields


class ProvisionReplicaOperator(ChainRestoreOperator):
    """Restore `backup_id` (or the newest) of `cluster/host` into the empty `target_datadir` of the
    new replica (this task must run on that machine: give it the host's `queue`), start its server
    with `start_command`, set gtid_slave_pos from the backup and CHANGE MASTER TO the source with
    MASTER_USE_GTID (address and account from `replication_conn_id`: host, port, login, password),
    START SLAVE. With `wait`, wait here until it has caught up (lag at most `max_lag_seconds`); in
    a DAG, ReplicaCaughtUpSensor waits instead. Refused before anything is restored: a datadir that
    is not empty, a replication account that cannot log in to the source from this machine or read
    its binlogs, a new server's account (from the source's grant tables) without RELOAD,
    REPLICATION SLAVE ADMIN and SLAVE MONITOR, a source that purged the binlogs the backup needs
    (the first missing one named). Without `wait` too, the task fails when a replication thread
    error lasts `grace_seconds` after START SLAVE (naming Last_IO_Errno / Last_SQL_Errno); on a
    failure after the restore it stops the server it started and, with `clean_on_failure`, empties
    `target_datadir`.

    `replica_conn_id`: the new server once it runs (the restored data brings the source's accounts).
    `source_conn_id`: an account on the source (binlog list, catch-up target). XCom: the summary,
    with `source_gtid` (the source's position when replication started) for the sensor.
    """

    template_fields: Sequence[str] = read_template_fields(
        "backup_id",
        "target_datadir",
        "clean_on_failure",
        "source_conn_id",
        "replication_conn_id",
        "replica_conn_id",
    )
    ui_color = "#d5f5e3"

    def __init__(
        self,
        *,
        target_datadir: str,
        source_conn_id: str,
        replication_conn_id: str,
        replica_conn_id: str,
        start_command: list[str] | None = None,
        backup_id: str | None = "latest",
        owner: str | None = None,
        source_host: str | None = None,
        source_port: int | None = None,
        ssl: bool = False,
        wait: bool = False,
        max_lag_seconds: float = 5,
        catch_up_timeout_minutes: float = 240,
        poll_seconds: float = 5,
        start_timeout_seconds: float = 600,
        grace_seconds: float = 30,
        clean_on_failure: bool | str = False,  # templated: a DAG param
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())
        self.start_command = start_command or ["systemctl", "start", "mariadb"]

    def execute(self, context: Any) -> dict[str, Any]:
        from ..core.binlog.replication import source_position
        from ..core.restore.provision import ProvisionRequest, provision_replica
        from ..hooks.xtrabackup import XtraBackupHook

        source_admin = XtraBackupHook(self.source_conn_id).get_target()
        args = self.restore_args()
        report = provision_replica(
            ProvisionRequest(
                **self.read_args(),
                target_datadir=Path(self.target_datadir),
                source=XtraBackupHook(self.replication_conn_id).get_replication_source(
                    self.source_host,
                    self.source_port,
                    self.ssl,
                    label=f"{self.cluster}/{self.source_conn_id}",
                ),
                source_admin=source_admin,
                replica=XtraBackupHook(self.replica_conn_id).get_target(),
                start_command=list(self.start_command),
                backup_id=None if self.backup_id in (None, "", "latest") else self.backup_id,
                private_key=args["private_key"],
                passphrase=args["passphrase"],
                binary=self.binary,
                owner=self.owner,
                start_timeout=self.start_timeout_seconds,
                wait=self.wait,
                max_lag_seconds=self.max_lag_seconds,
                catch_up_timeout=self.catch_up_timeout_minutes * 60,
                poll_seconds=self.poll_seconds,
                grace_seconds=self.grace_seconds,
                clean_on_failure=flag(self.clean_on_failure),
            )
        )
        summary = report.summary() | {"source_gtid": source_position(source_admin)}
        self.log.info("replica started from %s: %s", report.backup_id, summary)
        return summary
