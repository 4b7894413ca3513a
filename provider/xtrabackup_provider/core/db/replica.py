"""A replica's replication threads (SHOW REPLICA / SLAVE STATUS, as its dialect says) and the watcher every wait on a replica
goes through: provision-replica's catch-up and its sensor, the deep restore test's catch-up and
its pt-table-checksum run.

A replica retries a failed connection for ever (MASTER_CONNECT_RETRY, 100,000 tries), so a wrong
password or an address it cannot reach looks like a replica that is slow to catch up, and a
stopped SQL thread leaves pt-table-checksum waiting for it. The watcher tells these apart:

- the SQL thread stopped on an error (it never restarts by itself): fails at once;
- the IO thread gave up (`Slave_IO_Running: No` with an error, or 1236: the source cannot send
  from this position): fails at once;
- an IO error while it keeps reconnecting (1045, 2003, ...), a thread that is not running, or an
  IO thread that has been connecting without an answer: fails once it has lasted `grace`
  seconds, so a source that restarts or a network blip does not fail anything.

The failure is one line naming the replica, its source, the thread, Last_IO_Errno /
Last_SQL_Errno, the server's own message, and what that error usually means.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .dialect import dialect_of

GRACE_SECONDS = 30.0
ER_MASTER_FATAL_READING_BINLOG = 1236  # the source cannot send from the requested position
# What an error usually means, for the one line a failed wait prints.
_ADVICE = {
    1045: "the replication account's password (or the host part of the account) is wrong on the source",
    1130: "the source does not let this host log in as that account (the account's host part)",
    1227: "the replication account lacks REPLICATION SLAVE on the source",
    1597: "the replication account lacks REPLICATION SLAVE on the source (or cannot log in)",
    ER_MASTER_FATAL_READING_BINLOG: "the source cannot send from this position: it purged those binlogs, or "
    "the position is not from its history; use a newer backup of this cluster",
    2002: "the source's address is not reachable from this host (replication.source_host / source_port, a "
    "firewall, or the source is down)",
    2003: "the source's address is not reachable from this host (replication.source_host / source_port, a "
    "firewall, or the source is down)",
    2005: "the source's host name does not resolve on this host",
    2026: "TLS to the source failed (replication.ssl and the source's certificates)",
}


def advice(errno: int) -> str:
    """What a replication error number usually means ("" when nothing useful is known)."""
    return _ADVICE.get(errno, "")


class ReplicaError(RuntimeError):
    """A replica cannot replicate, or did not catch up; the message names it and its source."""


class ReplicaThreadError(ReplicaError):
    """A replication thread's error persisted (or is final); `thread` is "IO" or "SQL"."""

    def __init__(self, message: str, thread: str, errno: int, error: str) -> None:
        super().__init__(message)
        self.thread, self.errno, self.error = thread, errno, error


@dataclass(frozen=True)
class ReplicaState:
    io_running: str
    sql_running: str
    io_errno: int
    io_error: str
    sql_errno: int
    sql_error: str
    lag: int | None  # Seconds_Behind_Source/Master (None while the SQL thread is stopped)
    gtid: str  # what the replica has applied: MariaDB's @@gtid_slave_pos, MySQL's gtid_executed
    configured: bool = True  # the status statement had a row
    family: str = "mariadb"  # whose GTIDs `gtid` holds


def replica_state(conn: Any) -> ReplicaState:
    dialect = dialect_of(conn)
    cur = conn.cursor()
    cur.execute(dialect.replica_status)
    row = cur.fetchone()
    status = dialect.status(
        None if row is None else {c[0]: v for c, v in zip(cur.description, row, strict=True)}
    )
    cur.execute(f"SELECT {dialect.gtid_applied_variable}")
    gtid = str(cur.fetchone()[0] or "")
    lag = status.get("seconds_behind")
    return ReplicaState(
        io_running=str(status.get("io_running") or "No"),
        sql_running=str(status.get("sql_running") or "No"),
        io_errno=int(status.get("last_io_errno") or 0),
        io_error=str(status.get("last_io_error") or ""),
        sql_errno=int(status.get("last_sql_errno") or 0),
        sql_error=str(status.get("last_sql_error") or ""),
        lag=None if lag is None else int(lag),
        gtid=gtid,
        configured=row is not None,
        family=dialect.family,
    )


def read_state(connect: Callable[[], Any]) -> ReplicaState:
    """The state through a new connection (`connect()`), closed afterwards."""
    conn = connect()
    try:
        return replica_state(conn)
    finally:
        conn.close()


@dataclass(frozen=True)
class Problem:
    """A replication thread that is not doing its work."""

    thread: str  # "IO", "SQL" or "replication"
    errno: int
    error: str  # the server's message ("" when it gave none)
    final: bool  # it will not recover by itself

    @property
    def key(self) -> tuple[str, int]:
        return self.thread, self.errno

    def line(self, what: str, source: str, seconds: float) -> str:
        if self.thread == "replication":
            return f"{what} is not a replica of {source} any more ({self.error})"
        said = f"Last_{self.thread}_Errno {self.errno}: {self.error}" if self.errno else self.error
        lasted = "" if self.final or seconds < 1 else f" (for {seconds:.0f}s)"
        hint = advice(self.errno)
        return f"{what}: the {self.thread} thread cannot replicate from {source}: {said}{lasted}" + (
            f"; {hint}" if hint else ""
        )


def thread_problem(state: ReplicaState) -> Problem | None:
    """The reason the replica is not replicating now, or None when both threads run."""
    if not state.configured:
        return Problem("replication", 0, "the replica status is empty (no source configured)", final=True)
    if state.sql_running != "Yes" and state.sql_errno:
        return Problem("SQL", state.sql_errno, state.sql_error, final=True)
    if state.io_running != "Yes" and state.io_errno:
        final = state.io_running == "No" or state.io_errno == ER_MASTER_FATAL_READING_BINLOG
        return Problem("IO", state.io_errno, state.io_error, final)
    if state.sql_running != "Yes":
        return Problem("SQL", 0, "the SQL thread is not running (stopped, no error)", final=False)
    if state.io_running == "No":
        return Problem("IO", 0, "the IO thread is not running (stopped, no error)", final=False)
    if state.io_running != "Yes":
        return Problem("IO", 0, f"the IO thread is still connecting (IO running: {state.io_running})", False)
    return None


class ReplicaWatch:
    """Fed each state a wait reads: raises ReplicaThreadError once a problem is final, or the same
    problem (thread and errno) has lasted `grace` seconds."""

    def __init__(self, what: str, source: str, grace: float = GRACE_SECONDS) -> None:
        self.what, self.source, self.grace = what, source, grace
        self._key: tuple[str, int] | None = None
        self._since = 0.0

    def check(self, state: ReplicaState) -> Problem | None:
        """The problem seen (not yet persistent), or None; raises when it is final or persists."""
        problem = thread_problem(state)
        if problem is None:
            self._key = None
            return None
        now = time.monotonic()
        if problem.key != self._key:
            self._key, self._since = problem.key, now
        lasted = now - self._since
        if problem.final or lasted >= self.grace:
            raise ReplicaThreadError(
                problem.line(self.what, self.source, lasted), problem.thread, problem.errno, problem.error
            )
        return problem


def wait_replica(
    read: Callable[[], ReplicaState],
    done: Callable[[ReplicaState], bool],
    watch: ReplicaWatch,
    *,
    timeout: float,
    poll: float,
) -> tuple[ReplicaState, bool]:
    """Poll `read()` until `done(state)` (True) or `timeout` seconds (False), every state through
    `watch` first; returns the last state and whether it was done."""
    deadline = time.monotonic() + timeout
    while True:
        state = read()
        watch.check(state)
        if done(state):
            return state, True
        if time.monotonic() >= deadline:
            return state, False
        time.sleep(poll)


def running(state: ReplicaState) -> bool:
    return thread_problem(state) is None


def wait_running(read: Callable[[], ReplicaState], watch: ReplicaWatch, poll: float = 1.0) -> ReplicaState:
    """Right after START SLAVE: wait until both threads run (the IO thread connected), failing on
    a thread error as the watch says; bounded by twice the grace."""
    state, ok = wait_replica(read, running, watch, timeout=2 * watch.grace + poll, poll=poll)
    if not ok:  # a problem that kept changing: name the last one
        problem = thread_problem(state)
        assert problem is not None
        raise ReplicaThreadError(
            problem.line(watch.what, watch.source, 2 * watch.grace),
            problem.thread,
            problem.errno,
            problem.error,
        )
    return state


def describe_progress(state: ReplicaState, want: str) -> str:
    io = f"IO thread {state.io_running}" + (f" ({state.io_error})" if state.io_error else "")
    lag = f"lag {state.lag}s" if state.lag is not None else "lag unknown"
    return (
        f"it has applied {state.gtid or '(nothing)'}, the source was at {want or '(nothing)'}, {lag}, {io}, "
        f"SQL thread {state.sql_running}"
    )
