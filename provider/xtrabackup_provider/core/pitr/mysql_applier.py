"""Point-in-time replay on MySQL through the restored server's own replication applier.

The fetched binlogs become the restored datadir's relay logs of a channel of its own (`xbp_replay`:
`relay-bin-xbp_replay.NNNNNN`, the binlog's number, hard links of the scratch copies, and their
index); a socket-only sandbox on that
datadir (no binlog of its own, replication threads stopped at startup, relay logs kept, parallel
workers committing in order) is pointed at them through a source that is never contacted, and its
SQL thread applies them:

    CHANGE REPLICATION SOURCE TO SOURCE_HOST='replay.invalid', ..., RELAY_LOG_FILE=<first>,
      RELAY_LOG_POS=4 FOR CHANNEL 'xbp_replay';
    START REPLICA SQL_THREAD UNTIL SQL_BEFORE_GTIDS = '<first GTID not to apply>'   (a GTID set)
                                 | SQL_AFTER_GTIDS = '<the GTID set to reach>'        (a GTID set, a time)
                                 | RELAY_LOG_FILE = .., RELAY_LOG_POS = <end>         (a position)

No receiver thread, no listener, no account, no password. The applier skips every transaction the
restored copy holds (its gtid_executed), as the pipe's `--exclude-gtids` does, so it starts at the
first binlog's beginning. Where it stops is planned from the binlogs (core/binlog/listing.py), with
the pipe's semantics (core/pitr/mysql_pipe.py):
- a GTID set S (`--to-gtid`, the "stop before" set `binlogs events` prints): the transactions of S,
  in binlog order; the first transaction outside S (and not held) is where SQL_BEFORE_GTIDS stops
  (SQL_AFTER_GTIDS = the set reached when none follows). A set that leaves one out and holds a later
  one (a hole) cannot be applied in order: the pipe replays it (`--include-gtids` skips the hole);
- a time T: every complete transaction before the first transaction event stamped at or after T
  (a file's own events aside, events.FILE_EVENTS: a replica's binlog opened at its restart stamps
  them after the source's earlier transactions it then receives);
- a position FILE:POS: every complete transaction before the first event at or after POS in FILE.
The GTID set reached is checked against the plan afterwards; a transaction cut by the stop (or by
the files' end) is not applied, as the pipe's client rolls it back. A replayed CREATE USER needs the
grant tables: FLUSH PRIVILEGES first, from the one session a --skip-grant-tables server allows.
A copy of a replica keeps its own channels as they were (its default channel, auto-positioned,
refused relay log coordinates: error 1776); afterwards RESET REPLICA ALL FOR CHANNEL 'xbp_replay'
removes the applier's channel and its relay logs.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..binlog.events import at_stop_time
from ..binlog.listing import BodyEvent, Transaction, transactions
from ..common import children
from ..common.progress import ProgressLogger
from ..common.tempdirs import private_dir
from ..common.values import GtidSet, MysqlGtid
from ..db.dialect import Dialect, dialect_for
from ..db.sandbox import SandboxServer, stop_orphans
from .applier import RELAY_BASE, check_running, place_relay_logs, relay_name, relay_offset
from .plan import PitrError, PitrTarget
from .replay import ReplayError

log = logging.getLogger(__name__)

CHANNEL = "xbp_replay"  # a channel of its own: a copy of a replica keeps its channels as they were
RELAY = f"{RELAY_BASE}-{CHANNEL}"  # MySQL names a channel's relay logs <relay_log>-<channel>.NNNNNN
_DUMMY_SOURCE = "replay.invalid"  # .invalid never resolves: the receiver thread is never started anyway
_STALL_SECONDS = 60.0
REPLAY_SERVER_ID = 4_100_000_002  # the restored copy's server_id while it applies (no replica sees it)


@dataclass(frozen=True)
class MysqlStop:
    """Where the applier stops, planned from the binlogs."""

    reached: GtidSet  # gtid_executed afterwards: what the copy held and every transaction applied
    transactions: int  # how many are applied
    until: str  # SQL_BEFORE_GTIDS, SQL_AFTER_GTIDS or RELAY_LOG_POS
    value: str | tuple[str, int]  # its GTID set, or (relay log, position)
    hole: str = ""  # why the applier cannot stop there (a GTID set with a hole): the pipe replays
    end: tuple[str, int] | None = None  # (binlog, end) of the last transaction applied: the pipe's time stop


def plan_mysql_stop(files: list[Path], target: PitrTarget, holds: GtidSet) -> MysqlStop:
    """The transactions `mysqlbinlog --exclude-gtids=<holds> <stop> files | mysql` commits, and the
    UNTIL that makes the applier commit the same."""
    wanted = _wanted(target)
    if target.kind == "position" and (not files or files[-1].name != target.file):
        raise PitrError(
            f"--to-position {target.file}:{target.position}: the last binlog replayed must be {target.file}"
        )
    stop_ts = int(target.time.timestamp()) if target.kind == "time" and target.time else None
    applied, count = GtidSet(), 0
    end: tuple[str, int] | None = None
    outside: MysqlGtid | None = None  # the first transaction not in a GTID target
    for item in transactions(files, 4, events=True):
        if isinstance(item, BodyEvent):
            if at_stop_time(item.type, item.timestamp, stop_ts):
                break
            if (
                target.kind == "position"
                and item.file == target.file
                and item.offset >= (target.position or 0)
            ):
                break
            continue
        assert isinstance(item, Transaction)
        gtid = item.gtid
        if not isinstance(gtid, MysqlGtid):
            raise PitrError(
                f"{item.file}: GTID {gtid} at offset {item.offset} is no MySQL GTID; MySQL replays MySQL binlogs"
            )
        if not item.complete or gtid in holds or gtid in applied:
            continue  # cut by the files' end (the pipe's client rolls it back), or held already
        if wanted is not None and gtid not in wanted:
            outside = outside or gtid
            continue
        if outside is not None:
            return MysqlStop(
                holds | applied,
                count,
                "",
                "",
                hole=f"{target.describe()} leaves out {outside} but holds the later {gtid}",
            )
        applied, count, end = applied.with_gtid(gtid), count + 1, (item.end_file, item.end)
    reached = holds | applied
    if target.kind == "gtid" and outside is not None:
        return MysqlStop(reached, count, "SQL_BEFORE_GTIDS", str(outside), end=end)
    if target.kind == "position" and end is not None:
        return MysqlStop(reached, count, "RELAY_LOG_POS", (relay_name(end[0], RELAY), end[1]), end=end)
    return MysqlStop(reached, count, "SQL_AFTER_GTIDS", str(reached), end=end)


def _wanted(target: PitrTarget) -> GtidSet | None:
    if target.kind != "gtid":
        return None
    try:
        return GtidSet.parse(target.gtid, "--to-gtid")
    except ValueError as exc:
        raise PitrError(f"{exc}; MySQL replays to a MySQL GTID set") from None


def apply_relay_mysql(
    datadir: Path,
    files: list[Path],
    target: PitrTarget,
    *,
    threads: int = 4,
    server_args: list[str] | None = None,
    progress_seconds: float = 10.0,
) -> tuple[GtidSet, MysqlStop]:
    """Apply `files` (consecutive binlog copies, oldest first) to the stopped, restored MySQL
    `datadir` up to `target` with the SQL thread of a sandbox on it; returns its gtid_executed after
    and the plan. A plan with a hole is returned unapplied (stop.hole says why): the caller pipes."""
    aside = private_dir("replay", "/tmp", on_sweep=stop_orphans)  # 0700; a short socket path
    relays = place_relay_logs(datadir, files, RELAY)
    dialect = program_dialect()
    server = SandboxServer.on_datadir(
        datadir,
        aside / "srv",
        server_id=REPLAY_SERVER_ID,
        log_bin=False,
        family="mysql",
        extra_args=[*dialect.parallel_applier_options(threads), *(server_args or [])],
    )
    try:
        server.start()
        conn = server.connect()  # --skip-grant-tables: the one session that keeps every privilege
        try:
            cur = conn.cursor()
            cur.execute("SELECT @@global.gtid_executed")
            stop = plan_mysql_stop(files, target, GtidSet.parse(str(cur.fetchone()[0] or "")))
            if stop.hole or not stop.transactions:
                return stop.reached, stop
            return _run_sql_thread(cur, server, dialect, files, stop, progress_seconds), stop
        finally:
            conn.close()
    finally:
        server.stop()
        for path in [*relays, datadir / f"{RELAY}.index", *datadir.glob(f"{RELAY}.[0-9]*")]:
            path.unlink(missing_ok=True)
        shutil.rmtree(aside, ignore_errors=True)


def program_dialect() -> Dialect:
    """The dialect of the mysqld on PATH (its options name the replica's threads), from its --version."""
    proc = children.run(["mysqld", "--no-defaults", "--version"], capture_output=True, text=True, timeout=60)
    found = re.search(r"\bVer (\d+\.\d+\.\d+)", proc.stdout + proc.stderr)
    if not found:
        raise ReplayError(
            f"mysqld --version said {(proc.stdout + proc.stderr).strip()[:120]!r}: no MySQL version"
        )
    return dialect_for(found.group(1))


def _run_sql_thread(
    cur: Any,
    server: SandboxServer,
    dialect: Dialect,
    files: list[Path],
    stop: MysqlStop,
    progress_seconds: float,
) -> GtidSet:
    cur.execute("FLUSH PRIVILEGES")  # a replayed CREATE USER / GRANT needs the grant tables
    first = relay_name(files[0].name, RELAY)
    cur.execute(
        *dialect.on_channel(
            dialect.relay_log_source(host=_DUMMY_SOURCE, relay_file=first, relay_pos=4), CHANNEL
        )
    )
    if stop.until == "RELAY_LOG_POS":
        assert isinstance(stop.value, tuple)
        until = dialect.start_sql_thread_until(file=stop.value[0], position=stop.value[1])
    elif stop.until == "SQL_BEFORE_GTIDS":
        until = dialect.start_sql_thread_until(before_gtids=str(stop.value))
    else:
        until = dialect.start_sql_thread_until(after_gtids=str(stop.value))
    cur.execute(*dialect.on_channel(until, CHANNEL))
    log.info(
        "applying %d transaction(s) of %d binlog(s) until %s %s, to GTID set %s",
        stop.transactions,
        len(files),
        stop.until,
        stop.value,
        stop.reached,
    )
    _wait(cur, server, dialect, files, stop, progress_seconds)
    cur.execute("SELECT @@global.gtid_executed")
    reached = GtidSet.parse(str(cur.fetchone()[0] or ""))
    if reached != stop.reached:
        raise ReplayError(f"the applier reached GTID set {reached or '-'}, the binlogs say {stop.reached}")
    cur.execute(*dialect.on_channel(dialect.reset_replica_all, CHANNEL))  # the channel and its relay logs go
    return reached


def _wait(
    cur: Any,
    server: SandboxServer,
    dialect: Dialect,
    files: list[Path],
    stop: MysqlStop,
    progress_seconds: float,
) -> None:
    """Poll the replica status until the SQL thread stops; its error is the ReplayError."""
    sizes = {relay_name(p.name, RELAY): p.stat().st_size for p in files}
    names = list(sizes)
    progress = ProgressLogger(
        log, "replay (applier)", sum(sizes.values()), progress_seconds, "the binlogs to apply"
    )
    seen, since = (None, -1), time.monotonic()
    while True:
        check_running(server)
        cur.execute(*dialect.on_channel(dialect.replica_status, CHANNEL))
        row = cur.fetchone()
        status = dialect.status({d[0]: v for d, v in zip(cur.description, row, strict=True)} if row else {})
        at = (status.get("relay_log_file"), int(status.get("relay_log_pos") or 0))
        if status.get("last_sql_errno"):
            raise ReplayError(
                f"applying the binlogs failed at {status.get('relay_source_log_file')}:{status.get('exec_source_log_pos')} "
                f"(relay log {at[0]}:{at[1]}): error {status['last_sql_errno']}: {status.get('last_sql_error')}"
            )
        if status.get("sql_running") == "No":
            return
        idle = "read all relay log" in str(status.get("sql_running_state"))
        if idle and GtidSet.parse(str(status.get("executed_gtid_set") or "")) == stop.reached:
            # The stop is the files' end (the transaction after it is cut there): nothing will come.
            cur.execute(*dialect.on_channel(f"{dialect.stop_replica} SQL_THREAD", CHANNEL))
            return
        if at[0] in sizes:
            progress(relay_offset(names, sizes, at[0], at[1]))
        if at != seen:
            seen, since = at, time.monotonic()
        elif idle and time.monotonic() - since > _STALL_SECONDS:
            raise ReplayError(
                f"the applier read all relay logs but stands at {at[0]}:{at[1]} since {_STALL_SECONDS:.0f}s, "
                f"before GTID set {stop.reached}; the binlogs end early"
            )
        time.sleep(0.2)
