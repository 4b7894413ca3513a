"""MariaDB replication of a server this provider sets up (a replica built from a backup, the deep
restore test's sandbox): where it starts (gtid_slave_pos from the backup), CHANGE MASTER TO the
source with MASTER_USE_GTID, START SLAVE, catching up, and whether the source still holds the
binlogs that position needs.

The replication password travels only over the client connection: never in an argv, a log
line or the replica's general log (the session runs with sql_log_off). MariaDB keeps it in the
replica's master.info, as for any replica.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..common.values import format_gtid_pos, gtid_reached, parse_gtid_pos
from ..db.server import MySQLTarget, connect

log = logging.getLogger(__name__)

ER_MASTER_FATAL_READING_BINLOG = 1236  # the source cannot send from the requested position


class ReplicationError(RuntimeError):
    """Replication could not be set up or did not catch up; the message names the servers."""


class PurgedBinlogsError(ReplicationError):
    """The source has purged binlogs a replica needs to start from a backup's position."""


@dataclass(frozen=True)
class ReplicationSource:
    """The source as its replicas reach it (TCP) and the replication account."""

    host: str
    port: int = 3306
    user: str = "repl"
    password: str | None = field(default=None, repr=False)
    ssl: bool = False
    connect_retry: int = 5
    label: str = ""  # e.g. "main/db1" in messages

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def describe(self) -> str:
        if self.label and self.host:
            return f"source {self.label} ({self.address})"
        return f"source {self.label or self.address}"


def change_master_sql(source: ReplicationSource) -> tuple[str, tuple[Any, ...]]:
    """CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos with every value a parameter (the password
    is escaped by the client library and sent over the connection, never formatted into text
    that is logged)."""
    if not source.host or any(c in source.host for c in "\n\r\0"):
        raise ReplicationError(f"replication source host {source.host!r} is not a host name or address")
    parts = ["MASTER_HOST=%s", "MASTER_PORT=%s", "MASTER_USER=%s", "MASTER_PASSWORD=%s"]
    args: list[Any] = [source.host, int(source.port), source.user, source.password or ""]
    parts += ["MASTER_USE_GTID=slave_pos", "MASTER_CONNECT_RETRY=%s"]
    args.append(int(source.connect_retry))
    if source.ssl:
        parts.append("MASTER_SSL=1")
    return "CHANGE MASTER TO " + ", ".join(parts), tuple(args)


def _quiet_session(cur: Any) -> None:
    """Keep this session's statements (CHANGE MASTER carries the password) out of the general log."""
    try:
        cur.execute("SET SESSION sql_log_off = 1")
    except Exception as exc:  # noqa: BLE001 - refused without SUPER; fine unless the log is on
        cur.execute("SELECT @@global.general_log")
        if int(cur.fetchone()[0] or 0):
            raise ReplicationError(
                "the replica's general log is on and this account cannot switch it off for its session "
                f"({exc}); CHANGE MASTER would write the replication password into it. Use an account "
                "with SUPER, or turn the general log off"
            ) from exc


def attach(conn: Any, source: ReplicationSource, gtid: str) -> None:
    """Make the server behind `conn` a replica of `source` from GTID position `gtid`, and start it."""
    parse_gtid_pos(gtid, "the replication start position")  # a malformed GTID is refused here
    cur = conn.cursor()
    _quiet_session(cur)
    cur.execute("STOP SLAVE")
    cur.execute("RESET SLAVE ALL")
    cur.execute("SET GLOBAL gtid_slave_pos = %s", (gtid,))
    sql, args = change_master_sql(source)
    cur.execute(sql, args)
    cur.execute("START SLAVE")
    log.info("replicating from %s as %s, from GTID %s", source.describe(), source.user, gtid or "(empty)")


@dataclass(frozen=True)
class ReplicaState:
    io_running: str
    sql_running: str
    io_errno: int
    io_error: str
    sql_errno: int
    sql_error: str
    lag: int | None  # Seconds_Behind_Master (None while the SQL thread is stopped)
    gtid: str  # @@gtid_slave_pos: what the replica has applied


def replica_state(conn: Any) -> ReplicaState:
    cur = conn.cursor()
    cur.execute("SHOW SLAVE STATUS")
    row = cur.fetchone()
    status = {} if row is None else {c[0]: v for c, v in zip(cur.description, row, strict=True)}
    cur.execute("SELECT @@gtid_slave_pos")
    gtid = str(cur.fetchone()[0] or "")
    lag = status.get("Seconds_Behind_Master")
    return ReplicaState(
        io_running=str(status.get("Slave_IO_Running") or "No"),
        sql_running=str(status.get("Slave_SQL_Running") or "No"),
        io_errno=int(status.get("Last_IO_Errno") or 0),
        io_error=str(status.get("Last_IO_Error") or ""),
        sql_errno=int(status.get("Last_SQL_Errno") or 0),
        sql_error=str(status.get("Last_SQL_Error") or ""),
        lag=None if lag is None else int(lag),
        gtid=gtid,
    )


@dataclass(frozen=True)
class CatchUp:
    seconds: float
    gtid: str  # the replica's position once caught up
    source_gtid: str  # the source's position it had to reach
    lag: int | None


def source_position(source_admin: MySQLTarget) -> str:
    conn = connect(source_admin)
    try:
        cur = conn.cursor()
        cur.execute("SELECT @@gtid_binlog_pos")
        return str(cur.fetchone()[0] or "")
    finally:
        conn.close()


def caught_up(
    state: ReplicaState, want: str, max_lag_seconds: float, source: ReplicationSource, what: str
) -> bool:
    """Whether a replica in `state` has applied `want` with a lag of at most `max_lag_seconds`;
    a replication error raises: 1236 (the source no longer has the binlogs) as PurgedBinlogsError."""
    if state.io_errno == ER_MASTER_FATAL_READING_BINLOG:
        raise PurgedBinlogsError(
            f"{what} cannot replicate from {source.describe()}: {state.io_error} (the source cannot send from "
            "this position: it purged those binlogs, or the position is not from its history; use a newer "
            "backup of this cluster)"
        )
    if state.sql_errno:
        raise ReplicationError(
            f"{what} stopped applying changes from {source.describe()}: error {state.sql_errno}: {state.sql_error}"
        )
    reached = gtid_reached(parse_gtid_pos(state.gtid), parse_gtid_pos(want))
    return reached and state.lag is not None and state.lag <= max_lag_seconds


def describe_progress(state: ReplicaState, want: str) -> str:
    io = f"IO thread {state.io_running}" + (f" ({state.io_error})" if state.io_error else "")
    return (
        f"it has applied {state.gtid or '(nothing)'}, the source was at {want or '(nothing)'}, lag "
        f"{state.lag if state.lag is not None else 'unknown'}s, {io}, SQL thread {state.sql_running}"
    )


def wait_caught_up(
    replica: Callable[[], Any],
    source: ReplicationSource,
    source_admin: MySQLTarget,
    *,
    max_lag_seconds: float,
    timeout: float,
    poll: float = 1.0,
    what: str = "the replica",
) -> CatchUp:
    """Wait until `replica()` (a new connection each poll) has applied what the source had written
    when the wait began and its lag is at most `max_lag_seconds` (see caught_up)."""
    started = time.monotonic()
    want = source_position(source_admin)
    deadline = started + timeout
    while True:
        conn = replica()
        try:
            state = replica_state(conn)
        finally:
            conn.close()
        if caught_up(state, want, max_lag_seconds, source, what):
            return CatchUp(time.monotonic() - started, state.gtid, want, state.lag)
        if time.monotonic() >= deadline:
            raise ReplicationError(
                f"{what} did not catch up with {source.describe()} within {timeout:.0f}s: "
                + describe_progress(state, want)
            )
        time.sleep(poll)


def oldest_binlog_state(source_admin: MySQLTarget) -> tuple[str, str]:
    """(the source's oldest binlog, the GTID state before it from its Gtid_list event)."""
    conn = connect(source_admin)
    try:
        cur = conn.cursor()
        cur.execute("SHOW BINARY LOGS")
        names = [str(row[0]) for row in cur.fetchall()]
        if not names:
            raise ReplicationError(f"{source_admin.address} has no binary logs: is log_bin on?")
        cur.execute(f"SHOW BINLOG EVENTS IN '{names[0]}' LIMIT 4")  # names come from the server
        state = ""
        for row in cur.fetchall():
            if str(row[2]) == "Gtid_list":
                state = "".join(str(row[5]).strip("[] ").split())
                break
        return names[0], state
    finally:
        conn.close()


def check_binlogs_kept(
    source_admin: MySQLTarget,
    source: ReplicationSource,
    gtid: str,
    *,
    backup: str,
    first_needed: str | None,
) -> None:
    """Refuse, before anything is restored, a start position the source has purged binlogs for.

    `first_needed`: the binlog of the source that holds the position, when it is known (a backup of
    the source itself records it); it is the first missing binlog when the check fails."""
    oldest, state = oldest_binlog_state(source_admin)
    have, want = parse_gtid_pos(state), parse_gtid_pos(gtid)
    behind = {d: g for d, g in want.items() if d in have and g.seq < have[d].seq}
    if not want and have:
        behind = dict(have)
    if not behind:
        return
    missing = (
        f"First missing binlog: {first_needed}." if first_needed else f"The binlogs before {oldest} are gone."
    )
    raise PurgedBinlogsError(
        f"{source.describe()} has purged binlogs the replica needs: {backup} is at GTID {gtid or '(empty)'}, "
        f"but the source's oldest binlog {oldest} starts after {format_gtid_pos(have)}. {missing} "
        f"Provision from a newer backup (one taken after GTID {format_gtid_pos(have)}), or keep binlogs "
        "longer on the source (binlog_expire_logs_seconds)"
    )
