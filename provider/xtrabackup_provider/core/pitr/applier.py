"""Replay shipped binlogs through the restored server's own replication applier.

The fetched binlogs become the restored datadir's relay logs (`relay-bin.NNNNNN`, hard links of
the scratch copies, same numbers, and `relay-bin.index`); a sandbox on that datadir (socket
only, no binlog of its own, `--skip-slave-start`) gets a dummy master that is never contacted
and applies them with its SQL thread: parallel replication (`--slave-parallel-threads`,
optimistic mode) applies row events natively instead of as `BINLOG '<base64>'` statements
through a client, and keeps session state (temporary tables, pseudo thread ids) across files.
No IO thread, no listener, no account, no password anywhere.

    CHANGE MASTER TO MASTER_HOST='replay.invalid', MASTER_USE_GTID=no,
      MASTER_LOG_FILE=<backup binlog>, MASTER_LOG_POS=<backup position>,
      RELAY_LOG_FILE='relay-bin.<same number>', RELAY_LOG_POS=<backup position>;
    START SLAVE SQL_THREAD UNTIL MASTER_LOG_FILE=<f>, MASTER_LOG_POS=<end of the last transaction>;

What was measured on MariaDB 10.11 and shapes this (docs/BENCHMARKS.md, "PITR replay"):
- Without MASTER_LOG_FILE/POS (only RELAY_LOG_*), relay-log.info has no master log name and a
  parallel worker crashed the server (signal 11 in compare_log_name): both pairs are given.
- `UNTIL MASTER_GTID_POS` is refused with MASTER_USE_GTID=no (error 1277), and with slave_pos
  the relay position is discarded; so the stop is a position. `UNTIL` a position inside a
  transaction applies the whole transaction, where the pipe rolls it back: `plan_stop` walks
  the binlogs from the backup's position and stops after the last complete transaction the
  pipe would commit (time: no transaction event stamped at or after T, a file's own events
  aside, events.FILE_EVENTS; GTID: not past the target in its domain; FILE:POS: ends before
  it), and UNTIL names that transaction's end. Only the binlogs up to that end become relay
  logs: past a binlog a crash cut (no Rotate) the thread would read on under the old name.
- The sandbox runs --skip-grant-tables, where a replayed CREATE USER stops the SQL thread
  (error 1290): FLUSH PRIVILEGES first, from the one session such a server allows, which
  then watches the SQL thread until it stops.

Afterwards `gtid_slave_pos` is the GTID reached (checked against the plan), `RESET SLAVE ALL`
removes the dummy master and the relay logs, and the datadir keeps that gtid_slave_pos.

`replay_binlogs()` runs either this ("applier", the default) or the pipe of core/pitr/replay.py
("pipe": one mariadb-binlog into one mariadb client), the fallback.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from ..binlog.events import ROTATE_EVENT, summarize
from ..binlog.listing import complete_groups
from ..common.progress import ProgressLogger
from ..common.tempdirs import private_dir
from ..common.values import GtidPos, binlog_number, format_gtid_pos, parse_gtid_pos
from ..db.sandbox import SandboxError, SandboxServer, stop_orphans
from .plan import PitrPlan
from .replay import REPLAY_SERVER_ID, ReplayError, leave_gtid_slave_pos, replay

log = logging.getLogger(__name__)

ReplayMethod = Literal["applier", "pipe"]
REPLAY_METHODS: tuple[str, ...] = ("applier", "pipe")
DEFAULT_THREADS = 4
RELAY_BASE = "relay-bin"
_DUMMY_MASTER = "replay.invalid"  # .invalid never resolves: the IO thread is never started anyway
# Replication state a datadir restored from a replica's backup may carry: kept aside while
# the applier uses the datadir's relay log, put back afterwards.
_REPLICATION_FILES = ("master.info", "relay-log.info", "multi-master.info")
_STALL_SECONDS = 60.0


@dataclass(frozen=True)
class Stop:
    """Where a replay ends: after the last complete transaction before the target."""

    file: str  # the binlog the last applied transaction ends in (the start file if none)
    position: int  # the end of its last event (UNTIL MASTER_LOG_POS), or the start position
    gtid: str  # the GTID state then (the backup's, updated by every transaction applied)
    transactions: int  # how many are applied
    method: str = ""  # the replay method that applied them

    @property
    def coordinates(self) -> str:
        return f"{self.file}:{self.position}"


def plan_stop(
    files: list[Path],
    start_position: int,
    start_gtid: str | None,
    *,
    stop_time: int | None = None,
    stop_gtid: GtidPos | None = None,
    stop_position: int | None = None,
) -> Stop:
    """The end of the last complete transaction that `mariadb-binlog --start-position=P
    [--stop-datetime | --stop-position] files | mariadb` commits.

    The reader stops at the first transaction event stamped at or after `stop_time` (a file's own
    events aside: events.FILE_EVENTS), at the first GTID past
    `stop_gtid` in its domain, or (in the last file) at the first event at or after
    `stop_position`; a transaction cut there is rolled back by the client, and one the files
    end inside of never committed. So: every complete transaction before the stop.
    """
    state = parse_gtid_pos(start_gtid)
    file, position, applied = files[0].name if files else "", start_position, 0
    groups = complete_groups(
        files, start_position, stop_time=stop_time, stop_gtid=stop_gtid, stop_position=stop_position
    )
    for gtid, end_file, end in groups:
        state[gtid.domain] = gtid
        file, position, applied = end_file, end, applied + 1
    return Stop(file, position, format_gtid_pos(state), applied)


def stop_of(plan: PitrPlan, files: list[Path]) -> Stop:
    """`plan_stop` for a PITR plan's target (the replay starts at the backup's position)."""
    target = plan.target
    return plan_stop(
        files,
        plan.backup.binlog_position or 4,
        plan.backup.gtid,
        stop_time=int(target.time.timestamp()) if target.time else None,
        stop_gtid=target.gtid_pos() if target.kind == "gtid" else None,
        stop_position=target.position if target.kind == "position" else None,
    )


def replay_binlogs(
    method: str,
    plan: PitrPlan,
    files: list[Path],
    datadir: Path,
    *,
    binlog_binary: str = "mariadb-binlog",
    client_binary: str = "mariadb",
    threads: int = DEFAULT_THREADS,
    server_args: list[str] | None = None,
    progress_seconds: float = 10.0,
) -> Stop:
    """Replay `files` (the plan's binlogs, fetched) into the stopped, restored `datadir` by
    `method`; returns where it stopped. Either way the datadir's gtid_slave_pos is the GTID
    reached afterwards, nothing to replay included (the backup's own GTID then), so the copy can
    become a replica or be promoted (core/pitr/promote.py)."""
    if method not in REPLAY_METHODS:
        raise ReplayError(f"replay method {method!r}: use one of {', '.join(REPLAY_METHODS)}")
    stop = stop_of(plan, files)
    if stop.transactions == 0:
        log.info(
            "no complete transaction to replay before %s; gtid_slave_pos is the backup's %s",
            plan.target.describe(),
            stop.gtid or "(empty)",
        )
        leave_gtid_slave_pos(datadir, stop.gtid, server_args)
        return stop
    if method == "applier" and (closed := restarted_in(files, stop)):
        log.info(
            "%s ends without a Rotate event (its server restarted there) and the applier cannot "
            "follow into the next binlog: replaying with the pipe",
            closed,
        )
        method = "pipe"
    stop = replace(stop, method=method)
    if method == "pipe":
        replay(
            datadir,
            pipe_args(plan, stop, files),
            binlog_binary,
            client_binary,
            gtid_slave_pos=stop.gtid or None,
            extra_args=server_args,
        )
        return stop
    start = (plan.backup.binlog_file or files[0].name, plan.backup.binlog_position or 4)
    apply_relay(
        datadir,
        through_stop(files, stop),
        start,
        stop,
        threads=threads,
        server_args=server_args,
        progress_seconds=progress_seconds,
    )
    return stop


def through_stop(files: list[Path], stop: Stop) -> list[Path]:
    """The files up to the stop's: the SQL thread reads on past the end of a binlog a crash cut
    (no Rotate event) into the next relay log under the old name, and overran UNTIL there (the
    chaos run, seed 390202: "the applier stopped at mysql-bin.000001:14858771")."""
    names = [p.name for p in files]
    return files[: names.index(stop.file) + 1] if stop.file in names else files


def pipe_args(plan: PitrPlan, stop: Stop, files: list[Path]) -> list[str]:
    """mariadb-binlog's arguments for the pipe. A time target ends at the planned stop's position
    in the last file given, so the pipe and the applier stop after the same transaction:
    --stop-datetime also stops at a file's own events, e.g. the format event of a replica's
    binlog opened at its restart, stamped after the transactions it then received from its
    source (events.FILE_EVENTS); those were left out silently."""
    if plan.target.kind != "time":
        return [*plan.replay_args(), *map(str, files)]
    start = f"--start-position={plan.backup.binlog_position}"
    return [start, f"--stop-position={stop.position}", *map(str, through_stop(files, stop))]


def restarted_in(files: list[Path], stop: Stop) -> str | None:
    """The first binlog before the stop's that a server restart closed, if any.

    The SQL thread learns the next binlog's name only from the Rotate event that ends a file; one
    a restart closed ends with a Stop event (a shutdown) or with nothing (a crash), and the thread
    read on into the next relay log under the old name: it never reached the planned stop, or
    could have passed a position of the same number in the wrong file (found by the chaos run)."""
    for path in files:
        if path.name == stop.file:
            return None
        if summarize(path).last_type != ROTATE_EVENT:
            return path.name
    return None


def apply_relay(
    datadir: Path,
    files: list[Path],
    start: tuple[str, int],
    stop: Stop,
    *,
    threads: int = DEFAULT_THREADS,
    server_args: list[str] | None = None,
    progress_seconds: float = 10.0,
) -> str:
    """Apply `files` from `start` (FILE, POS) up to `stop` with the SQL thread of a sandbox on
    `datadir`; returns the gtid_slave_pos it reached. The files stay where they are (they are
    hard-linked, or copied across filesystems, into the datadir and removed from it afterwards)."""
    aside = private_dir("replay", "/tmp", on_sweep=stop_orphans)  # 0700; short socket path
    moved = set_aside(datadir, aside / "aside")
    relays = place_relay_logs(datadir, files)
    args = ["--skip-slave-start", "--max-allowed-packet=1G", "--slave-max-allowed-packet=1G"]
    if threads > 0:
        args += [f"--slave-parallel-threads={threads}", "--slave-parallel-mode=optimistic"]
    server = SandboxServer.on_datadir(
        datadir,
        aside / "srv",
        server_id=REPLAY_SERVER_ID,
        log_bin=False,
        extra_args=[*args, *(server_args or [])],
    )
    try:
        server.start()
        reached = _run_sql_thread(server, files, start, stop, progress_seconds)
        server.stop()
    finally:
        server.stop()
        for path in relays + [datadir / f"{RELAY_BASE}.index", *datadir.glob(f"{RELAY_BASE}.[0-9]*")]:
            path.unlink(missing_ok=True)
        for name in _REPLICATION_FILES:
            (datadir / name).unlink(missing_ok=True)
        for path in moved:
            shutil.move(str(aside / "aside" / path.name), str(path))
        shutil.rmtree(aside, ignore_errors=True)
    return reached


def set_aside(datadir: Path, aside: Path) -> list[Path]:
    found = [datadir / n for n in _REPLICATION_FILES if (datadir / n).exists()]
    found += sorted(datadir.glob(f"{RELAY_BASE}.*"))
    if found:
        aside.mkdir(parents=True)
        log.info(
            "keeping the restored replication state aside during the replay: %s",
            ", ".join(p.name for p in found),
        )
        for path in found:
            shutil.move(str(path), str(aside / path.name))
    return found


def place_relay_logs(datadir: Path, files: list[Path], base: str = RELAY_BASE) -> list[Path]:
    """`files` as the relay logs `base`.NNNNNN of `datadir`, listed in `base`.index."""
    placed = []
    for path in files:
        relay = datadir / relay_name(path.name, base)
        try:
            os.link(path, relay)
        except OSError:  # another filesystem (a scratch dir elsewhere): copy
            shutil.copyfile(path, relay)
        placed.append(relay)
    (datadir / f"{base}.index").write_text("".join(f"./{p.name}\n" for p in placed))
    return placed


def relay_name(binlog: str, base: str = RELAY_BASE) -> str:
    """The relay log that holds `binlog`: the same number, so positions mean the same."""
    return f"{base}.{binlog_number(binlog)[1]:06d}"


def _run_sql_thread(
    server: SandboxServer, files: list[Path], start: tuple[str, int], stop: Stop, progress_seconds: float
) -> str:
    file, pos = start
    sizes = {p.name: p.stat().st_size for p in files}
    names = [p.name for p in files]
    total = relay_offset(names, sizes, stop.file, stop.position) - pos
    progress = ProgressLogger(log, "replay (applier)", total, progress_seconds, "the binlogs to apply")
    conn = server.connect()  # --skip-grant-tables: the one session that keeps every privilege
    try:
        cur = conn.cursor()
        cur.execute("FLUSH PRIVILEGES")  # replayed CREATE USER / GRANT need the grant tables
        cur.execute(
            "CHANGE MASTER TO MASTER_HOST=%s, MASTER_PORT=9, MASTER_USER='none', MASTER_USE_GTID=no,"
            " MASTER_LOG_FILE=%s, MASTER_LOG_POS=%s, RELAY_LOG_FILE=%s, RELAY_LOG_POS=%s",
            (_DUMMY_MASTER, file, pos, relay_name(file), pos),
        )
        cur.execute(
            "START SLAVE SQL_THREAD UNTIL MASTER_LOG_FILE=%s, MASTER_LOG_POS=%s", (stop.file, stop.position)
        )
        log.info(
            "applying %d transaction(s) from %s:%d to %s (GTID %s)",
            stop.transactions,
            file,
            pos,
            stop.coordinates,
            stop.gtid or "-",
        )
        status = _wait(server, cur, names, sizes, pos, progress, (stop.file, stop.position))
        if (status.get("Relay_Master_Log_File"), int(status.get("Exec_Master_Log_Pos") or 0)) != (
            stop.file,
            stop.position,
        ):
            raise ReplayError(
                f"the applier stopped at {status.get('Relay_Master_Log_File')}:{status.get('Exec_Master_Log_Pos')}, "
                f"not at the planned end {stop.coordinates} of the last transaction before the target"
            )
        cur.execute("SELECT @@gtid_slave_pos")
        reached = str(cur.fetchone()[0] or "")
        if stop.gtid and parse_gtid_pos(reached) != parse_gtid_pos(stop.gtid):
            raise ReplayError(f"the applier reached GTID {reached or '-'}, the binlogs say {stop.gtid}")
        cur.execute("RESET SLAVE ALL")  # the dummy master and the relay logs go
        return reached
    finally:
        conn.close()


def _wait(
    server: SandboxServer,
    cur: Any,
    names: list[str],
    sizes: dict[str, int],
    pos: int,
    progress: ProgressLogger,
    until: tuple[str, int],
) -> dict[str, Any]:
    """Poll SHOW SLAVE STATUS until the SQL thread stops; its error is the ReplayError."""
    seen, since = (None, -1), time.monotonic()
    while True:
        check_running(server)
        cur.execute("SHOW SLAVE STATUS")
        row = cur.fetchone()
        status = {d[0]: v for d, v in zip(cur.description, row, strict=True)} if row else {}
        if status.get("Last_SQL_Errno"):
            raise ReplayError(
                f"applying the binlogs failed at {status.get('Relay_Master_Log_File')}:"
                f"{status.get('Exec_Master_Log_Pos')} (GTID after {status.get('Gtid_Slave_Pos') or '-'}): "
                f"error {status['Last_SQL_Errno']}: {status.get('Last_SQL_Error')}"
            )
        at = (status.get("Relay_Master_Log_File"), int(status.get("Exec_Master_Log_Pos") or 0))
        idle = "read all relay log" in str(status.get("Slave_SQL_Running_State"))
        if status.get("Slave_SQL_Running") == "No":
            return status
        if idle and at == until:
            # UNTIL is checked as the next event is read: with none after the stop (the last
            # shipped file ends there) the thread waits at the stop instead of stopping.
            cur.execute("STOP SLAVE SQL_THREAD")
            return status
        if at[0] in sizes:
            progress(relay_offset(names, sizes, at[0], at[1]) - pos)
        if at != seen:
            seen, since = at, time.monotonic()
        elif idle and (time.monotonic() - since > _STALL_SECONDS):
            raise ReplayError(
                f"the applier read all relay logs but stands at {at[0]}:{at[1]} since {_STALL_SECONDS:.0f}s, "
                "before the planned end; the binlogs end early"
            )
        time.sleep(0.2)


def check_running(server: SandboxServer) -> None:
    """A ReplayError ending with the server's error log when the replay's server died."""
    if not server.running:
        raise ReplayError(
            str(SandboxError("the server died while applying the binlogs", server.datadir, server.error_log))
        )


def relay_offset(names: list[str], sizes: dict[str, int], file: str, pos: int) -> int:
    """Bytes from the start of the first file to FILE:POS."""
    if file not in sizes:
        return 0
    return sum(sizes[n] for n in names[: names.index(file)]) + pos
