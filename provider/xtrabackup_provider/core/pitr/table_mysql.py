"""restore-table's MySQL half (core/pitr/table.py): the plan from MySQL's point-in-time recovery
(the newest MySQL backup before the target, the shipped binlogs from it to the target, the binlog
client checked before anything is fetched), and the sandbox the tables are exported from: the
backup restored into the scratch datadir (a clone is fetched and extracted: no prepare), a
socket-only mysqld started on it with its own binlog off, and the binlogs replayed into it up to
the target (the start is the GTID set the copy holds, the stop a GTID set, a time or a position):
by default ("applier") first, on the stopped copy, by the SQL thread of a sandbox whose relay logs
they are (core/pitr/mysql_applier.py; a GTID set with a hole goes to the pipe, as PITR's does),
with "pipe" by MySQL's own mysqlbinlog | mysql into the started sandbox (core/pitr/mysql_pipe.py).

Why tablespaces (FLUSH TABLES ... FOR EXPORT, then DISCARD / IMPORT TABLESPACE on the live
server), as on MariaDB, rather than a logical copy (mysqldump of the sandbox into the live
server): the import moves pages, not rows, so a large table comes back in the time of a file copy
with its indexes built; the live server runs one unlogged CREATE and one IMPORT per table instead
of every row re-inserted (each statement of which would have to be kept out of the binlog); and
the `.cfg` written by FOR EXPORT lets IMPORT refuse a copy whose definition differs. MySQL keeps
table definitions in its data dictionary (no `.frm` to copy): the sandbox's SHOW CREATE TABLE is
the copy's definition, and MySQL 5.7+ discards and imports a partitioned table's files whole.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..binlog.catalog import BinlogError, BinlogManifest
from ..binlog.ship import check_binlog_client
from ..catalog.manifest import Manifest
from ..catalog.targets import Targets
from ..common.tempdirs import private_dir
from ..common.values import GtidSet
from ..db.sandbox import SandboxServer
from ..db.session import Session
from ..restore.server_program import backup_dialect
from .applier import REPLAY_METHODS
from .mysql_applier import apply_relay_mysql
from .mysql_pipe import (
    REPLAY_SERVER_ID,
    fetch_shipped,
    files_to,
    mysql_read_lease,
    read_mysql_plan,
    replay_mysql,
)
from .plan import PitrError, PitrTarget
from .replay import replay_session

log = logging.getLogger(__name__)


@dataclass
class MysqlTablePlan:
    backup: Manifest
    target: PitrTarget
    binlogs: list[BinlogManifest]  # from the backup's binlog to the first reaching the target
    binlog_binary: str  # MySQL's mysqlbinlog, checked against the backup's server version
    replay: str = "applier"  # or "pipe"
    replay_threads: int = 4  # the applier's parallel workers


def plan_mysql(
    targets: Targets,
    target: PitrTarget,
    backup_id: str | None,
    binlog_binary: str,
    replay: str = "applier",
    replay_threads: int = 4,
) -> MysqlTablePlan:
    """From manifests alone: what a MySQL table restore to `target` starts from and replays.
    PitrError (a MariaDB GTID, no backup before the target, binlogs shipped short of it or written
    without GTIDs, a binlog client of the other family, an unknown replay) before anything is fetched.
    Read from the first storage target whose manifests reach the target (it becomes the first)."""
    if replay not in REPLAY_METHODS:
        raise PitrError(f"--replay {replay!r}: use one of {', '.join(REPLAY_METHODS)}")
    backup, binlogs = read_mysql_plan(targets, target, backup_id)
    tool = binlog_binary if binlog_binary != "mariadb-binlog" else "mysqlbinlog"  # the request's default
    try:
        tool = check_binlog_client(
            tool, backup.server_version or "8.4.0", f"backup {backup.backup_id}", "nothing was restored"
        )
    except BinlogError as exc:
        raise PitrError(str(exc)) from None
    return MysqlTablePlan(backup, target, binlogs, tool, replay, replay_threads)


def table_lease(
    targets: Targets, backup: Manifest, plan: MysqlTablePlan | None
) -> AbstractContextManager[None]:
    """The read lease of a MySQL table restore, held from before the restore to the end of the
    replay: `backup`'s chain and the planned binlogs (MariaDB's restore-table holds PITR's)."""
    return mysql_read_lease(targets, "table restore", backup, plan.binlogs if plan else [])


@contextmanager
def mysql_sandbox(
    targets: Targets,
    backup: Manifest,
    datadir: Path,
    basedir: Path,
    plan: MysqlTablePlan | None,
    *,
    scratch_dir: Path,
    private_key: str | None = None,
    passphrase: str | None = None,
) -> Iterator[tuple[Session, str, str]]:
    """A socket-only mysqld on the restored `datadir` of `backup`, taken to the plan's target
    (None: left at the backup): yields a session on it with every privilege (core/pitr/replay.py:
    replay_session), the GTID set it holds and how the binlogs were applied ("" for none). The grant
    tables are on (a replayed GRANT / CREATE
    USER needs them), so the account is a throwaway one with a random password; the server is
    stopped afterwards. The binlogs come from the first of `targets` holding each intact."""
    dialect = backup_dialect(backup)
    reached, how = GtidSet.parse(backup.gtid or ""), ""
    work = private_dir("mysqlpitr", str(scratch_dir))
    try:
        files: list[Path] = []
        if plan is not None:
            files = files_to(
                plan.target,
                fetch_shipped(targets, backup, plan.target, work, private_key, passphrase, plan.binlogs),
            )
            if plan.replay == "applier":
                reached, how = _apply(datadir, files, plan)
        server = SandboxServer.on_datadir(
            datadir,
            basedir,
            server_id=REPLAY_SERVER_ID,
            family="mysql",
            log_bin=False,  # nothing the replay or the export runs gets a GTID of the sandbox's own
            extra_args=[dialect.skip_replica_start_option],
        )
        server.start()
        try:
            db, _ = replay_session(server, "xbp")  # one session for the replay's reads and the export
            with db:
                if plan is not None and not how:
                    reached = replay_mysql(
                        db,
                        files,
                        plan.target,
                        binlog_binary=plan.binlog_binary,
                        client_binary=dialect.client,
                    )
                    how = "pipe: mysqlbinlog | mysql"
                yield db, str(reached), how
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _apply(datadir: Path, files: list[Path], plan: MysqlTablePlan) -> tuple[GtidSet, str]:
    """The applier on the stopped copy (core/pitr/mysql_applier.py): the GTID set reached and how;
    how is "" when the target is a GTID set with a hole (nothing applied: the pipe replays it)."""
    reached, stop = apply_relay_mysql(datadir, files, plan.target, threads=plan.replay_threads)
    if stop.hole:
        log.info("%s, and the applier applies in binlog order: replaying with the pipe", stop.hole)
        return reached, ""
    return reached, f"applier: {max(plan.replay_threads, 1)} worker(s), {stop.transactions} transaction(s)"
