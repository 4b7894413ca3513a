"""One session with a server for the length of a verb: one connection, the server's Dialect and
the facts read once (version, server_id, uuid, datadir, GTID state), passed down to every helper
that reads the server instead of its connection details (issue 36: a full backup opened seven
connections of its own, one per fact). The helpers of server.py, shape.py, heartbeat.py, gate.py,
rowcounts.py, checksum.py, grants.py, backup/clone.py and binlog/replication.py take either: a
MySQLTarget still gets a connection of its own, closed afterwards. The PITR verbs hold one per
server they talk to: the replay server (pitr/replay.py replay_session), promote, restore-table's
live server (one before the restore, one for the import: none idle while the copy is restored).

The connection is opened on first use, so a verb refused before it needs the server never logs
in. A connection that sat idle (a backup streams for hours) is pinged before it is used again, and
opened anew if the server dropped it (wait_timeout, a restart): the facts of the first are kept,
and a verb that must know the server is still the one it checked reads them again (`refresh`).
What the session set goes with a dropped connection (the heartbeat's sql_log_bin=0, the row
counter's snapshot, which then records no counts): a verb writes nothing after its heartbeat.

One thread at a time uses the connection (`use`; MySQLdb refuses a second one rather than wait):
the backup's row counter (rowcounts.py) opens its snapshot from the tool's log thread, which may
read the tool's log late, when the verb's own thread has gone on to read the server again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .dialect import Dialect
from .server import MySQLTarget, ServerFacts, connect, read_facts

IDLE_PING_SECONDS = 30  # a connection idle this long is pinged before it is used again


class Session:
    """A verb's connection to one server; a context manager that closes it."""

    def __init__(self, target: MySQLTarget) -> None:
        self.target = target
        self._conn: Any = None
        self._used = 0.0
        self._facts: ServerFacts | None = None
        self._lock = threading.RLock()  # held while a thread uses the connection

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def address(self) -> str:
        return self.target.address

    @property
    def user(self) -> str:
        return self.target.user

    @contextmanager
    def use(self) -> Iterator[Any]:
        """The open connection (a MySQLdb one, whose errors name this server and the statement),
        this thread's alone until the block ends."""
        with self._lock:
            if self._conn is not None and time.monotonic() - self._used > IDLE_PING_SECONDS:
                try:
                    self._conn.ping()
                except Exception:  # noqa: BLE001 - gone while idle: the next line logs in again
                    self._drop()
            if self._conn is None:
                self._conn = connect(self.target)
            try:
                yield self._conn
            finally:
                self._used = time.monotonic()

    def query(self, sql: str, args: tuple[Any, ...] | None = None) -> list[tuple[Any, ...]]:
        with self.use() as conn:
            cur = conn.cursor()
            cur.execute(sql, args)
            return list(cur.fetchall())

    @property
    def facts(self) -> ServerFacts:
        """The server's facts as first read in this session."""
        if self._facts is None:
            self._facts = self.refresh()
        return self._facts

    def refresh(self) -> ServerFacts:
        """The server's facts read now (its GTID position moved on; the connection may have been
        opened anew): the session keeps the first ones."""
        with self.use() as conn:
            return read_facts(conn.cursor())

    @property
    def dialect(self) -> Dialect:
        return self.facts.dialect

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - closing a connection that already failed
                pass
            self._conn = None
