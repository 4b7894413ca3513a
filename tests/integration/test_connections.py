"""How many connections a verb opens to the database server, counted by the server itself
(SHOW GLOBAL STATUS LIKE 'Connections', read before and after on one connection of the test's
own, on a server nothing else uses): a verb talks to a server through one session
(core/db/session.py), plus what a tool it runs opens on its own (mariabackup, the binlog client).
Issue 36: a backup reached the server through 11 connections, one per fact."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from helpers import root_target, seed_database, unique_name
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.gate import GatePolicy, check_replica
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.storage.local import LocalStore

# What a tool the verb runs says first on a connection of its own (the general log's words).
TOOLS = {
    "mariabackup": "SET SESSION wait_timeout=2147483",  # it opens several: main, stages, per copy thread
    "the binlog client": "Binlog Dump",  # mariadb-binlog --read-from-remote-server: one per binlog
}


@dataclass
class Opened:
    count: int = 0  # every connection the server accepted (its own counter)
    tools: dict[str, int] = field(default_factory=dict)  # of which a tool's, by the general log

    @property
    def ours(self) -> int:
        return self.count - sum(self.tools.values())

    def __str__(self) -> str:
        tools = ", ".join(f"{n} by {tool}" for tool, n in self.tools.items() if n)
        return f"{self.count} connection(s) ({self.ours} of the verb's own{'; ' + tools if tools else ''})"


@contextlib.contextmanager
def connections(server: SandboxServer) -> Iterator[Opened]:
    """The connections the server accepted while the block ran (not the counting one), and which
    of them a tool opened (the general log, to a table, says what each connection did)."""
    conn = server.connect()
    opened = Opened()
    try:
        cur = conn.cursor()
        cur.execute("SET GLOBAL log_output = 'TABLE'")
        cur.execute("TRUNCATE TABLE mysql.general_log")
        cur.execute("SHOW GLOBAL STATUS LIKE 'Connections'")
        before = int(cur.fetchone()[1])
        cur.execute("SET GLOBAL general_log = 1")
        yield opened
        cur.execute("SET GLOBAL general_log = 0")
        cur.execute("SHOW GLOBAL STATUS LIKE 'Connections'")
        opened.count = int(cur.fetchone()[1]) - before
        cur.execute("SELECT thread_id, command_type, CONVERT(argument USING utf8mb4) FROM mysql.general_log")
        said: dict[int, list[str]] = {}
        for thread, command, argument in cur.fetchall():
            said.setdefault(int(thread), []).append(f"{command} {argument}")
        for tool, words in TOOLS.items():
            opened.tools[tool] = sum(
                1
                for lines in said.values()
                if any(line.startswith("Connect") for line in lines) and any(words in line for line in lines)
            )
    finally:
        conn.close()


@pytest.fixture
def host(mariadb: SandboxServer, tmp_path) -> tuple[SandboxServer, Catalog]:
    seed_database(mariadb, unique_name("conn"), rows=200)
    return mariadb, Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")


def _backup(server: SandboxServer, catalog: Catalog, kind: str) -> None:
    run_backup(BackupRequest(catalog, root_target(server), kind=kind, allow_unencrypted=True, heartbeat=True))


def test_a_full_backup_talks_to_the_server_through_one_session(host):
    server, catalog = host
    with connections(server) as opened:
        _backup(server, catalog, "full")
    assert opened.tools["mariabackup"] >= 1
    assert opened.ours <= 1, f"a full backup opened {opened}"


def test_an_incremental_talks_to_the_server_through_one_session(host):
    server, catalog = host
    _backup(server, catalog, "full")
    with connections(server) as opened:
        _backup(server, catalog, "incremental")
    assert catalog.manifests()[-1].kind == "incremental"
    assert opened.tools["mariabackup"] >= 1
    assert opened.ours <= 1, f"an incremental opened {opened}"


def test_a_batch_binlog_ship_opens_one_session_and_one_per_binlog_copied(host, gpg_keys):
    server, catalog = host
    for _ in range(2):
        server.query("FLUSH BINARY LOGS")
    with connections(server) as opened:
        report = ship_binlogs(ShipRequest(catalog, root_target(server), [gpg_keys.public_key], flush=True))
    assert len(report.shipped) >= 3
    assert opened.tools["the binlog client"] == len(report.shipped)  # it logs in once for each it copies
    assert opened.ours <= 1, f"binlogs ship opened {opened}"


def test_the_checksum_gate_reads_a_replica_through_one_session(mariadb_replica):
    with connections(mariadb_replica) as opened:
        verdict = check_replica(root_target(mariadb_replica), GatePolicy())
    assert verdict.health.is_replica
    assert opened.ours <= 1, f"the checksum gate opened {opened}"
