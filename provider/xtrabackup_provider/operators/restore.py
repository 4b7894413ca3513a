"""XtraBackupRestoreOperator: restore a backup (and its chain) into an empty datadir."""

from __future__ import annotations

__all__ = ["XtraBackupRestoreOperator", "XtraBackupTableRestoreOperator"]

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..arguments import keep_arguments
from .base import ChainRestoreOperator, read_template_fields


class XtraBackupRestoreOperator(ChainRestoreOperator):
    """Validate the chain from manifests, fetch + verify + extract, prepare, move back.

    `backup_id` None (or "latest") restores the newest backup. The private key comes from a
    `gpgkeys` connection that only restore workers should be able to read.

    `standby_dir` restores the prepared standby copy kept there by XtraBackupStandbyOperator
    instead of the chain, after checking it against the catalog (core.restore.standby.
    restore_standby): newer incrementals of its chain are applied first; a standby older than
    the newest backup fails the task unless `allow_older_standby`. `move_standby` moves its
    files instead of copying them (the standby is rebuilt by its next update).
    """

    template_fields: Sequence[str] = read_template_fields("backup_id", "target_datadir", "standby_dir")

    def __init__(
        self,
        *,
        target_datadir: str,
        backup_id: str | None = None,
        standby_dir: str | None = None,
        allow_older_standby: bool = False,
        move_standby: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def execute(self, context: Any) -> dict[str, Any]:
        from dataclasses import asdict

        from ..core.restore.chain import RestoreRequest, restore

        if self.standby_dir:
            from ..core.restore.standby import restore_standby

            if self.backup_id not in (None, "", "latest"):
                raise ValueError("standby_dir restores the backup the standby holds; leave backup_id unset")
            standby = restore_standby(
                directory=Path(self.standby_dir),
                target_datadir=Path(self.target_datadir),
                **self.read_args(),
                **self.restore_args(),
                allow_older=self.allow_older_standby,
                move=self.move_standby,
            )
            return asdict(standby)

        report = restore(
            RestoreRequest(
                **self.read_args(),
                target_datadir=Path(self.target_datadir),
                backup_id=None if self.backup_id in (None, "", "latest") else self.backup_id,
                **self.restore_args(),
            )
        )
        result = asdict(report)
        result.pop("prepare_argv")
        return result


class XtraBackupTableRestoreOperator(ChainRestoreOperator):
    """Put `tables` back as they were at a point in time (`to_time`, `to_gtid` or `to_position`;
    none: as in `backup_id`, default the newest) into the live server of `mysql_conn_id` under
    new names, through transportable tablespaces (core.pitr.table.restore_tables). Runs on the
    database host's worker: the whole backup is restored and replayed in `scratch_dir` (default:
    the temp dir) and the tablespaces are copied into that server's datadir.

    `tables` and `new_names` are lists or comma-separated `schema.table` strings (templated);
    `new_names` defaults to `<table>_restored` and must not exist. Existing tables are never
    written to, and nothing reaches the binlog (the account needs BINLOG ADMIN for
    sql_log_bin=0). XCom: the report (backup, point reached, per table its new name and row
    digest, foreign keys not copied).
    """

    template_fields: Sequence[str] = read_template_fields(
        "mysql_conn_id",
        "tables",
        "new_names",
        "to_time",
        "to_gtid",
        "to_position",
        "backup_id",
        "scratch_dir",
    )

    def __init__(
        self,
        *,
        mysql_conn_id: str,
        tables: str | list[str],
        new_names: str | list[str] | None = None,
        to_time: str | None = None,
        to_gtid: str | None = None,
        to_position: str | None = None,
        backup_id: str | None = None,
        scratch_dir: str | None = None,
        replay: str = "applier",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def execute(self, context: Any) -> dict[str, Any]:
        from dataclasses import asdict

        from ..core.pitr.plan import PitrTarget
        from ..core.pitr.table import TableRestoreRequest, restore_tables
        from ..hooks.xtrabackup import XtraBackupHook

        targets = [t for t in (self.to_time, self.to_gtid, self.to_position) if t]
        if len(targets) > 1:
            raise ValueError("give one of to_time, to_gtid, to_position (or none: the backup itself)")
        target = None
        if self.to_time:
            target = PitrTarget.at_time(self.to_time)
        elif self.to_gtid:
            target = PitrTarget.at_gtid(self.to_gtid)
        elif self.to_position:
            target = PitrTarget.at_position(self.to_position)
        args = self.restore_args()
        args.pop("use_memory")
        report = restore_tables(
            TableRestoreRequest(
                **self.read_args(),
                live=XtraBackupHook(self.mysql_conn_id).get_target(),
                tables=_names(self.tables),
                new_names=_names(self.new_names),
                target=target,
                backup_id=None if self.backup_id in (None, "", "latest") else self.backup_id,
                scratch_dir=Path(self.scratch_dir) if self.scratch_dir else None,
                replay=self.replay,
                **args,
            )
        )
        return asdict(report)


def _names(value: str | list[str] | None) -> list[str]:
    if not value:
        return []
    items = value.split(",") if isinstance(value, str) else value
    return [n.strip() for n in items if n.strip()]
