"""How many connections the PITR verbs open to the MySQL 9.7 servers they talk to (issue 36 item 1:
one session per server a verb talks to), counted by each server: the replay server of a
point-in-time restore and restore-table's sandbox (their general logs: tests/sandbox_connections.py),
the server promoted and restore-table's live server (tests/connection_count.py).

Before: the pipe's replay opened 5 of its own on the replay server (the throwaway account's
creation, the version, gtid_executed before and after, its DROP USER), restore-table's sandbox 2
with the applier (the account's creation, the export; 5 with the pipe: its replay's 3 besides),
promote 3 (its facts, its state, the change) and restore-table 3 on the live server (its dialect,
the checks, the import). The appliers' servers: 1 each (besides SandboxServer.start's probe)."""

from __future__ import annotations

import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from connection_count import connections
from helpers import clone_backup, root_target, ship_mysql_binlogs, unique_name
from sandbox_connections import sandbox_connections
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.pitr.mysql_pipe import mysql_point_in_time_restore
from xtrabackup_provider.core.pitr.plan import PitrTarget
from xtrabackup_provider.core.pitr.promote import PromoteRequest, promote
from xtrabackup_provider.core.pitr.recover import PitrRequest
from xtrabackup_provider.core.pitr.roll_forward import ShippedBinlogs
from xtrabackup_provider.core.pitr.table import TableRestoreRequest, restore_tables
from xtrabackup_provider.core.restore.chain import RestoreRequest, restore
from xtrabackup_provider.core.storage.local import LocalStore

pytestmark = pytest.mark.mysql


@dataclass
class History:
    server: SandboxServer
    catalog: Catalog
    db: str
    point: str  # gtid_executed after a transaction after the backup, before the last one
    rows: set[int]  # the ids in `db`.t then


def _executed(server: SandboxServer) -> str:
    return str(server.query("SELECT @@global.gtid_executed")[0][0]).replace("\n", "")


@pytest.fixture(scope="module")
def history(mysql_factory, tmp_path_factory) -> History:
    server = mysql_factory("pitrconn", root_password=secrets.token_urlsafe(16))
    base = tmp_path_factory.mktemp("pitrconn")
    db = unique_name("pc")
    server.execute_script(
        f"INSTALL PLUGIN clone SONAME 'mysql_clone.so'; CREATE DATABASE {db};"
        f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20)); INSERT INTO {db}.t VALUES (1, 'a'), (2, 'b');"
    )
    catalog = Catalog(LocalStore(str(base / "store")), "backups", "c1", "db1")
    clone_backup(server, catalog, base / "staging")
    server.execute_script(
        f"INSERT INTO {db}.t VALUES (3, 'c'); FLUSH BINARY LOGS; INSERT INTO {db}.t VALUES (4, 'd');"
    )
    point = _executed(server)
    server.execute_script(f"DELETE FROM {db}.t WHERE id = 1; FLUSH BINARY LOGS;")
    ship_mysql_binlogs(catalog, server)
    return History(server, catalog, db, point, {1, 2, 3, 4})


def _rows(datadir: Path, basedir: Path, db: str) -> set[int]:
    server = SandboxServer.on_datadir(datadir, basedir, server_id=4243, family="mysql", log_bin=False)
    server.start()
    try:
        return {r[0] for r in server.query(f"SELECT id FROM `{db}`.t")}
    finally:
        server.stop()


@pytest.mark.parametrize("replay", ["applier", "pipe"])
def test_a_point_in_time_restore_talks_to_its_replay_server_through_one_session(
    history, tmp_path, monkeypatch, replay
):
    datadir = tmp_path / "data"
    request = PitrRequest(
        history.catalog,
        datadir,
        PitrTarget.at_gtid(history.point),
        binlog_binary=str(shutil.which("mysqlbinlog")),
        client_binary="mysql",
        replay=replay,
    )
    with sandbox_connections(monkeypatch, tmp_path / "logs") as opened:
        report = mysql_point_in_time_restore(request)
    assert report.reached_gtid == history.point
    assert _rows(datadir, tmp_path / "check", history.db) == history.rows
    (replayed,) = opened
    assert replayed.client == (1 if replay == "pipe" else 0), replayed
    assert len(replayed.ours) <= 1, f"the {replay} replay opened {replayed}"


def test_promote_talks_to_the_server_through_one_session(history, mysql_factory):
    copy = mysql_factory("pitrconn-copy", root_password=secrets.token_urlsafe(16))
    try:
        # As a point-in-time restore leaves it: the old primary's transactions, none of its own.
        copy.execute_script(f"RESET BINARY LOGS AND GTIDS; SET GLOBAL gtid_purged = '{history.point}';")
        with connections(copy) as opened:
            report = promote(PromoteRequest(history.catalog, root_target(copy)))
        assert report.timeline.fork_gtid == history.point and not report.already
        assert report.timeline.parent_server_uuid == history.catalog.manifests()[-1].server_uuid
        assert opened.ours <= 1, f"promote opened {opened}"
    finally:
        mysql_factory.discard(copy)


@pytest.mark.parametrize("replay", ["applier", "pipe"])
def test_restore_table_talks_to_the_live_server_and_each_sandbox_through_one_session(
    history, tmp_path, monkeypatch, replay
):
    server, db = history.server, history.db
    new = f"t_{secrets.token_hex(3)}"
    request = TableRestoreRequest(
        history.catalog,
        root_target(server),
        [f"{db}.t"],
        [f"{db}.{new}"],
        target=PitrTarget.at_gtid(history.point),
        scratch_dir=tmp_path,
        binlog_binary="mysqlbinlog",
        replay=replay,
    )
    with connections(server) as live, sandbox_connections(monkeypatch, tmp_path / "logs") as sandboxes:
        report = restore_tables(request)
    assert {r[0] for r in server.query(f"SELECT id FROM `{db}`.`{new}`")} == history.rows
    assert [t.created for t in report.tables] == [f"{db}.{new}"]
    # The applier's server, then the one exported from; the pipe replays into the one exported from.
    assert len(sandboxes) == (2 if replay == "applier" else 1), sandboxes
    assert sandboxes[-1].client == (1 if replay == "pipe" else 0), sandboxes[-1]
    for sandbox in sandboxes:
        assert len(sandbox.ours) <= 1, f"restore-table opened {sandbox}"
    # The checks before the restore and the import after it (none held idle meanwhile).
    assert live.ours <= 2, f"restore-table opened {live} on the live server"


@pytest.mark.parametrize("replay", ["applier", "pipe"])
def test_the_restore_tests_roll_forward_talks_to_its_replay_server_through_one_session(
    history, tmp_path, monkeypatch, replay
):
    """Before: the pipe's roll-forward opened 2 of its own (the throwaway account's creation, the
    replay's session)."""
    backup = history.catalog.manifests()[-1]
    datadir = tmp_path / "data"
    restore(RestoreRequest(catalog=history.catalog, target_datadir=datadir, backup_id=backup.backup_id))
    with sandbox_connections(monkeypatch, tmp_path / "logs") as opened:
        result = ShippedBinlogs(history.catalog, replay=replay)(datadir, backup, tmp_path / "scratch")
    assert result.status == "pass" and result.detail["replay"].startswith(replay), result.reasons
    assert result.detail["gtid"] == _executed(history.server)
    (replayed,) = opened
    assert replayed.client == (1 if replay == "pipe" else 0), replayed
    assert len(replayed.ours) <= 1, f"the {replay} roll-forward opened {replayed}"
