"""Exact row counts of a server's InnoDB tables at a backup's own point, smallest tables first,
within a time budget: what a restore test compares with COUNT(*) on the restored copy (check
`row_counts`, core/restore/evidence.py). A table that comes back empty or one row short fails
there, which statistics cannot tell.

To be compared exactly the counts must see the data the backup holds, no more and no less. They
are read in a consistent snapshot opened while mariabackup holds BACKUP STAGE BLOCK_COMMIT (its
log says "Acquired locks for BACKUP STAGE BLOCK_COMMIT"; LockWatch passes each line here): no
transaction can commit then, so the snapshot is the backup's point. The counts are kept only if
the snapshot's binlog position (`binlog_snapshot_file/position`) is the one the backup recorded.
The snapshot is READ ONLY (no transaction, no GTID on a replica). The COUNT(*)s run after the
tool has finished, in ascending order of the server's row estimate, each under
max_statement_time, until `budget_seconds` are spent: the bounded cost on the server being backed
up. Tables left uncounted are compared by statistics (core/restore/evidence.py).

Not counted: other engines (their COUNT(*) is not in the snapshot), servers without a binlog
(nothing to prove the snapshot against) and Percona XtraBackup's servers (no such status).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .sandbox import quote_ident
from .server import MySQLTarget, connect
from .shape import SYSTEM_SCHEMAS

if TYPE_CHECKING:
    from .session import Session

log = logging.getLogger(__name__)

BLOCK_COMMIT = re.compile(r"Acquired locks for BACKUP STAGE BLOCK_COMMIT\b")
MAX_COUNTED = 10_000  # tables counted per backup (about 40 bytes each in the manifest)
ER_STATEMENT_TIMEOUT = 1969

_CANDIDATES_SQL = (
    "SELECT table_schema, table_name FROM information_schema.tables"
    " WHERE table_type = 'BASE TABLE' AND engine = 'InnoDB' AND table_schema NOT IN ({})"
    " ORDER BY table_rows, table_schema, table_name LIMIT {}"
)


@dataclass
class RowCounts:
    """What a backup records: the counts (Manifest.table_rows) and how they were taken
    (Manifest.extra["row_counts"]: the position, counted and left, seconds; or why none)."""

    rows: dict[str, int] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


class SnapshotCounter:
    """Entered before the tool runs (connects, lists the tables), on_line() for each line of its
    log, finish() once it ended. Given the verb's session it counts on that connection, idle while
    the tool streams, and leaves it open (its snapshot ended) for the verb."""

    def __init__(
        self, target: MySQLTarget | Session, budget_seconds: float, flavour: str = "mariabackup"
    ) -> None:
        self.target = target
        self.budget = budget_seconds
        self.flavour = flavour
        self._conn: Any = None  # its own connection, when given a MySQLTarget
        self._ready = False  # connected, the tables listed
        self._tables: list[tuple[str, str]] = []
        self._snapshot: tuple[str, int] | None = None  # its binlog file and position
        self._why = "mariabackup never logged that it holds BACKUP STAGE BLOCK_COMMIT"
        self._lock = threading.Lock()
        self._done = False
        self._in_snapshot = False
        self._snapshot_conn: Any = None  # the connection holding it (a session's may be opened anew)

    def __enter__(self) -> SnapshotCounter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Connect and list the InnoDB tables, smallest estimate first (before the backup starts)."""
        if self.flavour != "mariabackup":
            self._why = f"{self.flavour} has no BACKUP STAGE to take the snapshot under"
            return
        if self.budget <= 0:
            self._why = "impact.row_count_seconds is 0"
            return
        try:
            if isinstance(self.target, MySQLTarget):
                self._conn = connect(self.target)
            with self._using() as conn:
                cur = conn.cursor()
                schemas = ", ".join(f"'{s}'" for s in SYSTEM_SCHEMAS)
                cur.execute(_CANDIDATES_SQL.format(schemas, MAX_COUNTED))
                self._tables = [(str(s), str(t)) for s, t in cur.fetchall()]
            self._ready = True
        except Exception as exc:  # noqa: BLE001 - the backup is good without counts; say why
            self._why = f"cannot list the tables: {exc}"
            self.close()

    def on_line(self, text: str) -> None:
        """LockWatch's listener (its thread): open the snapshot once commits are blocked."""
        if not self._ready or self._snapshot is not None or not BLOCK_COMMIT.search(text):
            return
        with self._lock:
            if self._done:
                return
            try:
                with self._using() as conn:
                    cur = conn.cursor()
                    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
                    self._in_snapshot, self._snapshot_conn = True, conn
                    cur.execute("SHOW SESSION STATUS LIKE 'binlog_snapshot_%'")
                    status = {str(k).lower(): str(v) for k, v in cur.fetchall()}
                self._snapshot = (
                    status.get("binlog_snapshot_file", ""),
                    int(status.get("binlog_snapshot_position") or 0),
                )
            except Exception as exc:  # noqa: BLE001 - no counts, and the reason recorded
                self._why = f"cannot open a consistent snapshot: {exc}"

    def finish(self, binlog_file: str | None, binlog_position: int | None) -> RowCounts:
        """Count within the budget if the snapshot is at the backup's binlog position."""
        with self._lock:
            self._done = True
            try:
                return self._count(binlog_file, binlog_position)
            finally:
                self.close()

    @contextmanager
    def _using(self) -> Iterator[Any]:
        """The connection, this thread's alone while the block runs (a session's is shared)."""
        if isinstance(self.target, MySQLTarget):
            yield self._conn
        else:
            with self.target.use() as conn:
                yield conn

    def close(self) -> None:
        try:
            if self._conn is not None:
                self._conn.close()
            elif self._in_snapshot:  # the session goes on: out of the snapshot, whatever ended it
                with self._using() as conn:
                    conn.cursor().execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - closing a connection that already failed
            pass
        self._conn = None
        self._ready = False
        self._in_snapshot = False

    def _count(self, binlog_file: str | None, binlog_position: int | None) -> RowCounts:
        if not self._ready or self._snapshot is None:
            return _none(self._why)
        at = f"{self._snapshot[0]}:{self._snapshot[1]}"
        if not self._snapshot[0]:
            return _none("the server writes no binlog: no position to prove the snapshot against")
        if (binlog_file, binlog_position) != self._snapshot:
            return _none(
                f"the snapshot is at {at}, the backup at {binlog_file}:{binlog_position} "
                "(opened after the backup lock was released)"
            )
        with self._using() as conn:
            if conn is not self._snapshot_conn:  # lost with the connection: counts would not be at its point
                return _none("the connection holding the snapshot was lost; the session logged in again")
            return self._count_in_snapshot(conn.cursor(), at)

    def _count_in_snapshot(self, cur: Any, at: str) -> RowCounts:
        rows, t0 = {}, time.monotonic()
        deadline = t0 + self.budget
        for schema, table in self._tables:
            left = deadline - time.monotonic()
            if left < 0.001:
                break
            sql = f"SELECT COUNT(*) FROM {quote_ident(schema)}.{quote_ident(table)}"
            try:
                cur.execute(f"SET STATEMENT max_statement_time={left:.3f} FOR {sql}")
                rows[f"{schema}.{table}"] = int(cur.fetchone()[0])
            except Exception as exc:  # noqa: BLE001 - dropped or rebuilt since: not counted
                if getattr(exc, "args", (None,))[0] == ER_STATEMENT_TIMEOUT:
                    break
                log.info("not counting %s.%s: %s", schema, table, exc)
        cur.execute("COMMIT")
        self._in_snapshot = False
        seconds = round(time.monotonic() - t0, 3)
        log.info(
            "counted the rows of %d of %d InnoDB table(s) at %s in %.2fs",
            len(rows),
            len(self._tables),
            at,
            seconds,
        )
        summary = {
            "at": at,
            "counted": len(rows),
            "not_counted": len(self._tables) - len(rows),
            "seconds": seconds,
            "budget_seconds": self.budget,
        }
        return RowCounts(rows, summary)


def _none(why: str) -> RowCounts:
    log.warning("no exact row counts recorded: %s; restore tests compare statistics only", why)
    return RowCounts({}, {"skipped": why})
