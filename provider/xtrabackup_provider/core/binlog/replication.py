"""Replication of a server this provider sets up (a replica built from a backup, the deep restore
test's sandbox), in the server's own dialect (core/db/dialect.py): where it starts (MariaDB's
gtid_slave_pos, MySQL's gtid_purged, from the backup), CHANGE MASTER TO ... MASTER_USE_GTID or
CHANGE REPLICATION SOURCE TO ... SOURCE_AUTO_POSITION, START REPLICA, catching up, and the checks
made before anything is
restored: the replication account logs in to the source from this host and may read its binlogs
(check_source_login), and the source still holds the binlogs the position needs
(check_binlogs_kept). Waits go through the thread watcher of core/db/replica.py: a wrong
password fails within its grace, not at the end of the catch-up timeout.

The replication password travels only over the client connection: never in an argv, a log
line or the replica's general log (the session runs with sql_log_off). MariaDB keeps it in the
replica's master.info, as for any replica.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..common import children
from ..common.values import GtidSet, format_gtid_pos, gtid_reached, parse_gtid_pos
from ..db.dialect import Dialect, dialect_for, dialect_of
from ..db.replica import (
    ER_MASTER_FATAL_READING_BINLOG,
    GRACE_SECONDS,
    ReplicaError,
    ReplicaState,
    ReplicaThreadError,
    ReplicaWatch,
    advice,
    describe_progress,
    read_state,
    wait_replica,
)
from ..db.server import MySQLTarget, binlog_status, connection, defaults_file, dialect_on, query
from ..db.session import Session

log = logging.getLogger(__name__)


class ReplicationError(ReplicaError):
    """Replication could not be set up or did not catch up; the message names the servers."""


class PurgedBinlogsError(ReplicaThreadError, ReplicationError):
    """The source has purged binlogs a replica needs to start from a backup's position."""

    def __init__(self, message: str, thread: str = "IO", errno: int = 0, error: str = "") -> None:
        super().__init__(message, thread, errno, error)


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

    def client_target(self) -> MySQLTarget:
        """The replication account as a client of the source (what the replica's IO thread is)."""
        return MySQLTarget(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            ssl_mode="REQUIRED" if self.ssl else None,
        )


def change_source_sql(source: ReplicationSource, dialect: Dialect) -> tuple[str, tuple[Any, ...]]:
    """CHANGE MASTER TO ... MASTER_USE_GTID (MariaDB) or CHANGE REPLICATION SOURCE TO ...
    SOURCE_AUTO_POSITION (MySQL) with every value a parameter (the password is escaped by the client
    library and sent over the connection, never formatted into text that is logged)."""
    if not source.host or any(c in source.host for c in "\n\r\0"):
        raise ReplicationError(f"replication source host {source.host!r} is not a host name or address")
    return dialect.change_source(
        host=source.host,
        port=source.port,
        user=source.user,
        password=source.password,
        ssl=source.ssl,
        connect_retry=source.connect_retry,
    )[-1]


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
    import MySQLdb

    dialect = dialect_of(conn)
    cur = conn.cursor()
    _quiet_session(cur)
    sql, args = change_source_sql(source, dialect)
    steps: list[tuple[str, tuple[Any, ...] | None]] = [
        (dialect.stop_replica, None),
        (dialect.reset_replica_all, None),
    ]
    steps += _start_position(cur, dialect, gtid)
    steps += [(sql, args), (dialect.start_replica, None)]
    for statement, params in steps:
        try:
            cur.execute(statement, params)
        except MySQLdb.Error as exc:
            shown = statement.split(" MASTER_HOST")[0].split(" SOURCE_HOST")[0]  # never the password
            raise ReplicationError(f"{shown} failed on the replica: {exc.args[0]} {exc.args[-1]}") from None
    log.info("replicating from %s as %s, from GTID %s", source.describe(), source.user, gtid or "(empty)")


def _start_position(cur: Any, dialect: Dialect, gtid: str) -> list[tuple[str, tuple[Any, ...] | None]]:
    """What tells the replica the GTIDs it holds. MariaDB: gtid_slave_pos. MySQL: a restored copy
    already holds the backup's GTIDs in gtid_executed (its data brings them); an empty one is told
    them through gtid_purged; one holding other GTIDs is refused (it would replicate from the wrong
    place, or hold errant transactions)."""
    if dialect.is_mariadb:
        parse_gtid_pos(gtid, "the replication start position")  # a malformed GTID is refused here
        return [(f"SET GLOBAL {dialect.gtid_start_variable} = %s", (gtid,))]
    cur.execute("SELECT @@global.gtid_executed, GTID_SUBSET(%s, @@global.gtid_executed)", (gtid,))
    executed, contained = cur.fetchone()
    executed = "".join(str(executed or "").split())
    if contained and (not gtid or _same_set(cur, executed, gtid)):
        return []
    if not executed:
        return [(f"SET GLOBAL {dialect.gtid_start_variable} = %s", (gtid,))]
    raise ReplicationError(
        f"the replica's gtid_executed {executed} is not the start position {gtid or '(empty)'}: it holds "
        "transactions of its own; restore it again from the backup"
    )


def _same_set(cur: Any, a: str, b: str) -> bool:
    cur.execute("SELECT GTID_SUBSET(%s, %s) AND GTID_SUBSET(%s, %s)", (a, b, b, a))
    return bool(cur.fetchone()[0])


@dataclass(frozen=True)
class CatchUp:
    seconds: float
    gtid: str  # the replica's position once caught up
    source_gtid: str  # the source's position it had to reach
    lag: int | None


def source_position(source_admin: MySQLTarget | Session) -> str:
    """The GTIDs of the source's binlogs now: what a replica has to apply to be caught up."""
    with connection(source_admin) as conn:
        cur = conn.cursor()
        cur.execute(f"SELECT {dialect_on(source_admin, conn).gtid_binlog_variable}")
        return "".join(str(cur.fetchone()[0] or "").split())


def caught_up(state: ReplicaState, want: str, max_lag_seconds: float) -> bool:
    """Whether a replica in `state` has applied `want` with a lag of at most `max_lag_seconds`
    (its threads' errors are the watch's: core/db/replica.py)."""
    if state.family == "mysql":
        reached = GtidSet.parse(want, "the source's GTIDs") <= GtidSet.parse(
            state.gtid, "the replica's GTIDs"
        )
    else:
        reached = gtid_reached(parse_gtid_pos(state.gtid), parse_gtid_pos(want))
    return reached and state.lag is not None and state.lag <= max_lag_seconds


def watch_for(what: str, source: ReplicationSource, grace: float = GRACE_SECONDS) -> ReplicaWatch:
    return ReplicaWatch(what, source.describe(), grace)


def purged_or_raise(exc: ReplicaThreadError) -> ReplicaThreadError:
    """1236 on the IO thread as PurgedBinlogsError (a newer backup is the fix), else `exc`."""
    if exc.thread == "IO" and exc.errno == ER_MASTER_FATAL_READING_BINLOG:
        return PurgedBinlogsError(str(exc), exc.thread, exc.errno, exc.error)
    return exc


def wait_caught_up(
    replica: Callable[[], Any],
    source: ReplicationSource,
    source_admin: MySQLTarget | Session,
    *,
    max_lag_seconds: float,
    timeout: float,
    poll: float = 1.0,
    what: str = "the replica",
    grace: float = GRACE_SECONDS,
) -> CatchUp:
    """Wait until `replica()` (a new connection each poll) has applied what the source had written
    when the wait began and its lag is at most `max_lag_seconds`. A thread error fails it as soon as
    it is final or has lasted `grace` seconds (ReplicaThreadError; 1236: PurgedBinlogsError)."""
    started = time.monotonic()
    want = source_position(source_admin)
    try:
        state, done = wait_replica(
            lambda: read_state(replica),
            lambda s: caught_up(s, want, max_lag_seconds),
            watch_for(what, source, grace),
            timeout=timeout,
            poll=poll,
        )
    except ReplicaThreadError as exc:
        raise purged_or_raise(exc) from None
    if not done:
        raise ReplicationError(
            f"{what} did not catch up with {source.describe()} within {timeout:.0f}s: "
            + describe_progress(state, want)
        )
    return CatchUp(time.monotonic() - started, state.gtid, want, state.lag)


def _dialect(source_admin: MySQLTarget | Session) -> Dialect:
    """A session knows its server's dialect; connection details ask the server."""
    if isinstance(source_admin, Session):
        return source_admin.dialect
    return dialect_for(str(query(source_admin, "SELECT @@version")[0][0]))


def check_source_login(
    source: ReplicationSource, source_admin: MySQLTarget | Session, *, binary: str | None = None, what: str
) -> None:
    """Log in to the source from this host as the replication account, the way `what` (a replica
    that will run here) will: same account, address and TLS; then read the start of the source's
    newest binlog over the replication protocol, which needs REPLICATION SLAVE. Refused in one line
    naming the account and the source: a replica retries a refused login for ever."""
    import MySQLdb

    account = source.client_target()
    who = f"the replication account {source.user}@{source.address}"
    dialect = _dialect(source_admin)
    if len(source.password or "") > dialect.max_replication_password:
        raise ReplicationError(
            f"{who}: its password has {len(source.password or '')} characters and a {dialect.name} replica accepts "
            f"at most {dialect.max_replication_password} (CHANGE REPLICATION SOURCE fails with 3056): give the "
            "replication account a shorter password"
        )
    try:
        MySQLdb.connect(**account.connect_kwargs()).close()
    except MySQLdb.Error as exc:
        errno = exc.args[0] if exc.args else 0
        said = exc.args[1] if len(exc.args) > 1 else str(exc)
        raise ReplicationError(
            f"{who} cannot log in to {source.describe()} from this host, as {what} would: {errno} {said}"
            + (f"; {advice(errno)}" if advice(errno) else "")
        ) from None
    status = binlog_status(source_admin)
    if not status:
        raise ReplicationError(f"{source.describe()} has binary logging off: a replica has nothing to read")
    newest = str(status[0][0])
    binary = binary or dialect.binlog_client
    with defaults_file(account, dialect.client_family) as creds:
        # Stops after the first event: the format description, which the source sends only to an
        # account with REPLICATION SLAVE.
        argv = [binary, f"--defaults-file={creds}", "--read-from-remote-server", "--stop-position=5", newest]
        try:
            proc = children.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        except FileNotFoundError:
            raise ReplicationError(
                f"{binary} not found on this host; install {'MariaDB' if dialect.is_mariadb else 'MySQL'}'s client tools"
            ) from None
        except subprocess.TimeoutExpired:
            raise ReplicationError(
                f"{who}: reading a binlog of {source.describe()} did not end within 60s"
            ) from None
    if proc.returncode != 0:
        raise ReplicationError(
            f"{who} logs in to {source.describe()} but cannot read its binlogs, as {what} must: "
            f"{children.summarize_stderr(proc.stderr)}. Grant it REPLICATION SLAVE ON *.* on the source"
        )


def oldest_binlog_state(source_admin: MySQLTarget | Session) -> tuple[str, str]:
    """(the source's oldest binlog, the GTID state before it from its Gtid_list event)."""
    with connection(source_admin) as conn:
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


def check_binlogs_kept(
    source_admin: MySQLTarget | Session,
    source: ReplicationSource,
    gtid: str,
    *,
    backup: str,
    first_needed: str | None,
) -> None:
    """Refuse, before anything is restored, a start position the source has purged binlogs for.

    `first_needed`: the binlog of the source that holds the position, when it is known (a backup of
    the source itself records it); it is the first missing binlog when the check fails."""
    if not _dialect(source_admin).is_mariadb:
        return _check_mysql_binlogs_kept(source_admin, source, gtid, backup=backup, first_needed=first_needed)
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


def _check_mysql_binlogs_kept(
    source_admin: MySQLTarget | Session,
    source: ReplicationSource,
    gtid: str,
    *,
    backup: str,
    first_needed: str | None,
) -> None:
    """MySQL: an auto-positioned replica holding `gtid` needs every transaction the source has and
    `gtid` has not; the source has lost those in its gtid_purged (they are in no binlog any more)."""
    rows = query(
        source_admin,
        "SELECT @@global.gtid_purged, GTID_SUBSET(@@global.gtid_purged, %s), GTID_SUBTRACT(@@global.gtid_purged, %s)",
        (gtid, gtid),
    )
    purged, kept, lost = ("".join(str(v or "").split()) for v in rows[0])
    if kept == "1":
        return
    missing = f"First missing binlog: {first_needed}." if first_needed else ""
    raise PurgedBinlogsError(
        f"{source.describe()} has purged binlogs the replica needs: {backup} holds GTID set {gtid or '(empty)'}, "
        f"but the source's gtid_purged {purged} also holds {lost}, which is in no binlog any more. {missing} "
        f"Provision from a newer backup (one holding {purged}), or keep binlogs longer on the source "
        "(binlog_expire_logs_seconds)"
    )
