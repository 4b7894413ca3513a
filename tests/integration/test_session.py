"""A verb's session with a real server (core/db/session.py): a connection the server dropped while
the verb waited (a backup streams for hours; wait_timeout, a restart, a KILL) is opened anew on
next use, keeping the facts first read; and the row counter, counting on the session, records no
counts when the connection holding its snapshot was lost, rather than counts read outside it."""

from __future__ import annotations

import pytest

from helpers import root_target, unique_name
from xtrabackup_provider.core.db import session as session_module
from xtrabackup_provider.core.db.rowcounts import SnapshotCounter
from xtrabackup_provider.core.db.session import Session

LOCKED = "[00] 2026-12-03 08:00:00 Acquired locks for BACKUP STAGE BLOCK_COMMIT"


@pytest.fixture
def no_idle_grace(monkeypatch):
    """Every use counts as after a long idle: the session pings before each."""
    monkeypatch.setattr(session_module, "IDLE_PING_SECONDS", -1)


def _kill(server, db: Session) -> None:
    (thread,) = db.query("SELECT CONNECTION_ID()")[0]
    server.query(f"KILL {int(thread)}")


def test_a_connection_dropped_while_idle_is_opened_anew_with_the_facts_kept(mariadb, no_idle_grace):
    with Session(root_target(mariadb)) as db:
        facts = db.facts
        first = db.query("SELECT CONNECTION_ID()")[0][0]
        _kill(mariadb, db)
        assert db.query("SELECT 1") == [(1,)]
        assert db.query("SELECT CONNECTION_ID()")[0][0] != first
        assert db.facts is facts and db.refresh().server_uuid == facts.server_uuid


def test_counts_are_not_kept_when_the_snapshots_connection_was_lost(mariadb, no_idle_grace):
    table = f"{unique_name('rs')}.t"
    mariadb.execute_script(
        f"CREATE DATABASE {table.split('.')[0]}; CREATE TABLE {table} (id INT PRIMARY KEY) ENGINE=InnoDB;"
        f"INSERT INTO {table} VALUES (1), (2), (3);"
    )
    with Session(root_target(mariadb)) as db, SnapshotCounter(db, budget_seconds=5) as counter:
        counter.on_line(LOCKED)
        file, position = mariadb.query("SHOW MASTER STATUS")[0][:2]
        mariadb.query(f"INSERT INTO {table} VALUES (4)")  # after the backup's point
        _kill(mariadb, db)  # the snapshot goes with its connection
        counts = counter.finish(str(file), int(position))
        assert db.query("SELECT @@in_transaction") == [(0,)]  # the session goes on, out of any snapshot
    assert table not in counts.rows, f"counted outside the backup's snapshot: {counts.rows}"
    assert "the connection holding the snapshot was lost" in counts.summary["skipped"]
