"""How many connections the PITR verbs open to the servers they talk to (issue 36 item 1: one
session per server a verb talks to, not a connection per fact), counted by each server: the replay
server a point-in-time restore starts (its general log: tests/sandbox_connections.py), the server
promoted, and restore-table's live server and sandboxes (tests/connection_count.py).

Before: the pipe's replay opened 3 of its own on the replay server (the throwaway account's
creation, gtid_slave_pos, its DROP USER), promote 3 (its facts, its state, the change), and
restore-table 3 on the live server (its dialect, the checks, the import)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import pytest

from connection_count import connections
from helpers import KnownPoint, commit_known, root_target, unique_name
from sandbox_connections import sandbox_connections
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db import session as session_module
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.db.server import ServerError, connect
from xtrabackup_provider.core.pitr.plan import PitrTarget
from xtrabackup_provider.core.pitr.promote import PromoteRequest, promote
from xtrabackup_provider.core.pitr.recover import PitrRequest, point_in_time_restore
from xtrabackup_provider.core.pitr.replay import drop_account, replay_session
from xtrabackup_provider.core.pitr.table import TableRestoreRequest, restore_tables
from xtrabackup_provider.core.storage.local import LocalStore


@dataclass
class History:
    server: SandboxServer
    catalog: Catalog
    db: str
    point: KnownPoint  # a transaction after the backup, before the last one


@pytest.fixture(scope="module")
def history(mariadb_factory, tmp_path_factory) -> History:
    server = mariadb_factory("pitrconn", root_password=secrets.token_urlsafe(16))
    db = unique_name("pc")
    server.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64)) ENGINE=InnoDB;"
        f"INSERT INTO {db}.t (v) VALUES ('a'), ('b');"
    )
    catalog = Catalog(LocalStore(tmp_path_factory.mktemp("store")), "backups", "c1", "db1")
    run_backup(BackupRequest(catalog, root_target(server), allow_unencrypted=True))
    commit_known(server, db, "after 1")
    point = commit_known(server, db, "after 2")
    server.query("FLUSH BINARY LOGS")
    commit_known(server, db, "after 3")
    ship_binlogs(ShipRequest(catalog, root_target(server), allow_unencrypted=True, flush=True))
    return History(server, catalog, db, point)


def _rows(datadir: Path, basedir: Path, db: str) -> set[int]:
    server = SandboxServer.on_datadir(datadir, basedir, server_id=4242, log_bin=False)
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
    request = PitrRequest(history.catalog, datadir, PitrTarget.at_gtid(history.point.gtid), replay=replay)
    with sandbox_connections(monkeypatch, tmp_path / "logs") as opened:
        point_in_time_restore(request)
    assert _rows(datadir, tmp_path / "check", history.db) == set(history.point.rows)
    (replayed,) = opened
    assert replayed.client == (2 if replay == "pipe" else 0), replayed  # the reach check and the replay
    assert len(replayed.ours) <= 1, f"the {replay} replay opened {replayed}"


def test_promote_talks_to_the_server_through_one_session(history, mariadb_factory):
    copy = mariadb_factory("pitrconn-copy", root_password=secrets.token_urlsafe(16))
    try:
        # As a point-in-time restore leaves it: nothing binlogged of its own, at the point reached.
        copy.execute_script(f"RESET MASTER; SET GLOBAL gtid_slave_pos = '{history.point.gtid}';")
        with connections(copy) as opened:
            report = promote(PromoteRequest(history.catalog, root_target(copy)))
        assert report.timeline.fork_gtid == history.point.gtid and not report.already
        assert copy.query("SELECT @@gtid_binlog_state")[0][0] == report.timeline.binlog_state
        assert opened.ours <= 1, f"promote opened {opened}"
    finally:
        mariadb_factory.discard(copy)


def test_restore_table_talks_to_the_live_server_and_each_sandbox_through_one_session(
    history, tmp_path, monkeypatch
):
    server, db = history.server, history.db
    new = f"t_{secrets.token_hex(3)}"
    request = TableRestoreRequest(
        history.catalog,
        root_target(server),
        [f"{db}.t"],
        [f"{db}.{new}"],
        target=PitrTarget.at_gtid(history.point.gtid),
        scratch_dir=tmp_path,
    )
    with connections(server) as live, sandbox_connections(monkeypatch, tmp_path / "logs") as sandboxes:
        report = restore_tables(request)
    assert {r[0] for r in server.query(f"SELECT id FROM `{db}`.`{new}`")} == set(history.point.rows)
    assert [t.created for t in report.tables] == [f"{db}.{new}"]
    assert len(sandboxes) == 2  # the replay's, then the export's
    for sandbox in sandboxes:
        assert len(sandbox.ours) <= 1, f"restore-table opened {sandbox}"
    # One session: for the checks before the restore and the import after it (none held idle on
    # the live server while the copy is restored).
    assert live.ours <= 2, f"restore-table opened {live} on the live server"


def test_nothing_to_replay_sets_gtid_slave_pos_through_one_session(history, tmp_path, monkeypatch):
    """The restore whose target is the backup's own point starts a server only to set gtid_slave_pos."""
    backup = history.catalog.manifests()[-1]
    request = PitrRequest(history.catalog, tmp_path / "pitr", PitrTarget.at_gtid(backup.gtid))
    with sandbox_connections(monkeypatch, tmp_path / "logs") as opened:
        point_in_time_restore(request)
    (replayed,) = opened
    assert len(replayed.ours) <= 1, f"the restore opened {replayed}"


def test_a_replay_session_whose_connection_was_lost_logs_in_again_as_its_account(
    mariadb, tmp_path, monkeypatch
):
    """The replay's session was let in by --skip-grant-tables, which it then turned off: a
    connection the server dropped (a KILL, wait_timeout) is opened anew as the throwaway account."""
    monkeypatch.setattr(session_module, "IDLE_PING_SECONDS", -1)  # every use pings first
    mariadb.stop()
    sandbox = SandboxServer.on_datadir(mariadb.datadir, tmp_path / "sb", server_id=4244, log_bin=False)
    sandbox.start()
    try:
        db, account = replay_session(sandbox)
        with db:
            (first,) = db.query("SELECT CONNECTION_ID()")[0]
            killer = connect(account)
            try:
                killer.cursor().execute(f"KILL {int(first)}")
            finally:
                killer.close()
            assert db.query("SELECT CURRENT_USER()")[0][0] == f"{account.user}@localhost"
            drop_account(db, account)
        with pytest.raises(ServerError, match="Access denied"):  # the account is gone
            connect(account).close()
    finally:
        sandbox.stop()
