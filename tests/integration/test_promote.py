"""Promoting a point-in-time restored server to be the new primary (issue 18, item 5).

The old primary writes, a table is dropped by mistake, more writes follow, binlogs are shipped.
The host is restored to just before the DROP, put in the old server's place, promoted with a
server_id of its own, written to; its binlogs are shipped (`check` warns that the new timeline has
no backup yet) and a full backup is taken on the new timeline; a PITR on the new timeline and one
on the old timeline are both exact.

Before promotion existed, the same steps with the old server_id gave (kept in the report): the
first write reused the old timeline's GTID, shipping refused ("... was already shipped closed"),
the new full backup did not cure it, and the PITR replayed the OLD timeline's binlog from the new
backup's position (error 1594, relay log read failure).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from helpers import commit_known, root_target, start_replication, unique_name, wait_caught_up
from xtrabackup_provider.cli import main as cli_main
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.ship import ShipRequest, list_binlogs, ship_binlogs
from xtrabackup_provider.core.binlog.timeline import timelines
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.config.schema import CheckConfig
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.pitr.plan import PitrError, PitrTarget, make_plan
from xtrabackup_provider.core.pitr.recover import PitrReport, PitrRequest, point_in_time_restore
from xtrabackup_provider.core.report.check import Finding, check_host
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client


@dataclass
class Old:
    """The old primary's history: a full backup, writes, a DROP TABLE, more writes, all shipped."""

    server: SandboxServer
    catalog: Catalog
    db: str
    before_drop: str  # the GTID just before the DROP
    rows_before_drop: set[int]
    old_gtids: set[str]  # every GTID the old timeline wrote


def _gtids(server: SandboxServer) -> set[str]:
    out: set[str] = set()
    for name, _size in server.query("SHOW BINARY LOGS"):
        for e in server.query(f"SHOW BINLOG EVENTS IN '{name}'"):
            if e[2] == "Gtid":
                out.add(str(e[5]).split()[-1] if "GTID" in str(e[5]) else str(e[5]))
    return out


@pytest.fixture(scope="module")
def old(mariadb_factory, s3_server, gpg_keys) -> Old:
    server = mariadb_factory("promote-old", root_password=secrets.token_urlsafe(16))
    bucket = s3_server.make_bucket(f"xbp-promote-{secrets.token_hex(6)}")
    catalog = Catalog(
        S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket), "backups", "c1", "db1"
    )
    db = unique_name("promote")
    server.query(f"CREATE DATABASE `{db}`")
    server.query(f"CREATE TABLE `{db}`.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64)) ENGINE=InnoDB")
    server.query(f"CREATE TABLE `{db}`.victim (id INT PRIMARY KEY) ENGINE=InnoDB")
    server.query(f"INSERT INTO `{db}`.victim SELECT seq FROM seq_1_to_50", database=db)
    server.query(f"INSERT INTO `{db}`.t (v) SELECT 'before' FROM seq_1_to_100", database=db)
    run_backup(
        BackupRequest(
            kind="full", catalog=catalog, target=root_target(server), public_keys=[gpg_keys.public_key]
        )
    )
    commit_known(server, db, "A")
    server.query("FLUSH BINARY LOGS")
    point = commit_known(server, db, "B")
    server.query(f"DROP TABLE `{db}`.victim")
    for label in ("after 1", "after 2", "after 3"):
        commit_known(server, db, label)
    ship_binlogs(
        ShipRequest(
            catalog=catalog, target=root_target(server), public_keys=[gpg_keys.public_key], flush=True
        )
    )
    return Old(server, catalog, db, point.gtid, set(point.rows), _gtids(server))


def _pitr(old: Old, gpg_keys, datadir: Path, gtid: str | None = None) -> PitrReport:
    """Point-in-time restore of the host to `gtid` (default: just before the DROP)."""
    return point_in_time_restore(
        PitrRequest(
            catalog=old.catalog,
            target_datadir=datadir,
            target=PitrTarget.at_gtid(gtid or old.before_drop),
            private_key=gpg_keys.private_key,
            passphrase=gpg_keys.passphrase,
        )
    )


def _promote_cli(
    old: Old, server_socket: Path, password: str, tmp_path: Path, *more: str, user: str = "root"
) -> tuple[int, str, str]:
    store = old.catalog.store
    assert isinstance(store, S3Store)
    creds = tmp_path / f"client-{secrets.token_hex(3)}.cnf"
    creds.write_text(f"[client]\nuser={user}\npassword={password}\nsocket={server_socket}\n")
    creds.chmod(0o600)
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli_main(
            [
                "promote",
                *("--cluster", "c1", "--host", "db1", "--bucket", store.bucket),
                *("--endpoint-url", store.client.meta.endpoint_url, "--defaults-file", str(creds)),
                *more,
            ]
        )
    return rc, out.getvalue(), err.getvalue()


def _timeline_findings(catalog: Catalog) -> list[Finding]:
    result = check_host([("primary", catalog)], CheckConfig(), True, datetime.now(UTC), "c1")
    return [f for f in result.findings if "new timeline" in f.text]


def _one_line_error(rc: int, err: str) -> str:
    assert rc == 2
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _write(server: SandboxServer, db: str, value: str) -> str:
    conn = server.connect()
    try:
        cur = conn.cursor()
        cur.execute(f"INSERT INTO `{db}`.t (v) VALUES (%s)", (value,))
        cur.execute("SELECT @@last_gtid")
        return str(cur.fetchone()[0])
    finally:
        conn.close()


def _account(server: SandboxServer, user: str, grants: str) -> None:
    """`user`@localhost (password `<user>-pw`) with `grants`, unlogged: not a write of the server's own."""
    conn = server.connect()
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"CREATE USER {user}@localhost IDENTIFIED BY '{user}-pw'")
        cur.execute(f"GRANT {grants} ON *.* TO {user}@localhost")
    finally:
        conn.close()


def _ids(server: SandboxServer, db: str) -> set[int]:
    return {r[0] for r in server.query(f"SELECT id FROM `{db}`.t")}


def test_bad_input_is_one_line_and_changes_nothing(old, tmp_path, monkeypatch):
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    password = old.server.root_password
    # A server that answers nobody.
    rc, _, err = _promote_cli(old, tmp_path / "no-such.sock", password, tmp_path)
    line = _one_line_error(rc, err)
    assert "cannot connect" in line and ".cnf" in line, line  # names where the server was looked for
    # The old primary itself: it has written transactions of its own.
    state = old.server.query("SELECT @@gtid_binlog_state")[0][0]
    rc, _, err = _promote_cli(old, old.server.socket, password, tmp_path)
    line = _one_line_error(rc, err)
    assert "has binlogged transactions of its own" in line, line
    assert old.server.query("SELECT @@gtid_binlog_state")[0][0] == state
    assert timelines(old.catalog) == []


def test_a_server_that_still_replicates_is_refused_and_keeps_replicating(
    old, mariadb_factory, tmp_path, monkeypatch
):
    """A replica of the old primary (say, the one meant to be the new primary, not yet detached).
    Runs before the test below, which stops the old primary."""
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    replica = mariadb_factory("promote-replica", root_password=secrets.token_urlsafe(16))
    try:
        start_replication(old.server, replica)
        wait_caught_up(old.server, replica)
        before = replica.query("SELECT @@gtid_binlog_state, @@gtid_slave_pos")[0]
        rc, _, err = _promote_cli(old, replica.socket, replica.root_password, tmp_path)
        line = _one_line_error(rc, err)
        assert "replicates from" in line and "STOP ALL SLAVES" in line, line
        assert replica.query("SELECT @@gtid_binlog_state, @@gtid_slave_pos")[0] == before
        assert timelines(old.catalog) == []
        status = replica.query("SELECT @@gtid_slave_pos")[0][0]
        running = {r[0]: r[1] for r in replica.query("SHOW STATUS LIKE 'Slave_running'")}
        assert running == {"Slave_running": "ON"} and status == before[1]  # still following its source
    finally:
        mariadb_factory.discard(replica)


def test_promoted_server_gets_a_new_timeline_that_ships_backs_up_and_restores(
    old, gpg_keys, tmp_path, monkeypatch
):
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    datadir = tmp_path / "restored" / "data"
    _pitr(old, gpg_keys, datadir)
    old.server.stop()  # the old primary is gone; the restored copy takes its place
    password = old.server.root_password

    def start(server_id: int, *args: str) -> SandboxServer:
        s = SandboxServer.on_datadir(
            datadir,
            tmp_path / "sb",
            server_id=server_id,
            port=old.server.port,
            skip_grant_tables=False,
            root_password=password,
            extra_args=list(args),
        )
        s.start()
        return s

    # Same host, port and server_id as the old primary: refused, nothing changed.
    same = start(old.server.server_id)
    try:
        rc, _, err = _promote_cli(old, same.socket, password, tmp_path)
        line = _one_line_error(rc, err)
        assert f"server_id {old.server.server_id} is the old timeline's" in line, line
        assert "--server-id=" in line
        assert same.query("SELECT @@gtid_binlog_state, @@gtid_slave_pos")[0] == ("", old.before_drop)
    finally:
        same.stop()
    new_id = old.server.server_id + 500
    # Without networking its port reads 0: the identity would change in service. Refused.
    closed = start(new_id, "--skip-networking")
    try:
        rc, _, err = _promote_cli(old, closed.socket, password, tmp_path)
        assert "runs without networking (port 0)" in _one_line_error(rc, err)
    finally:
        closed.stop()
    assert timelines(old.catalog) == []

    new = start(new_id)
    try:
        # An account that may read the state but not RESET MASTER: refused, the server and the
        # catalog as they were (the timeline record written first is taken back).
        _account(new, "weak", "SLAVE MONITOR")
        rc, _, err = _promote_cli(old, new.socket, "weak-pw", tmp_path, user="weak")
        line = _one_line_error(rc, err)
        assert "RESET MASTER failed" in line and "nothing was changed" in line, line
        assert new.query("SELECT @@gtid_binlog_state, @@gtid_slave_pos")[0] == ("", old.before_drop)
        assert timelines(old.catalog) == []

        # An account that may RESET MASTER but not set the GTID state: stopped halfway, said so,
        # the record kept; the run below repeats every step.
        _account(new, "half", "RELOAD, SLAVE MONITOR")
        rc, _, err = _promote_cli(old, new.socket, "half-pw", tmp_path, user="half")
        line = _one_line_error(rc, err)
        assert "is HALF-PROMOTED: done RESET MASTER, then" in line and "run promote again" in line, line
        assert [t.server_id for t in timelines(old.catalog)] == [new_id]

        rc, out, err = _promote_cli(old, new.socket, password, tmp_path)
        assert rc == 0, err
        print(out)
        [timeline] = timelines(old.catalog)
        assert timeline.server_id == new_id and timeline.fork_gtid == old.before_drop
        assert timeline.parent_server_uuid.endswith(f"-{old.server.server_id}")
        assert f"gtid_slave_pos='{timeline.start_gtid}'" in out
        # Again: reported as done, nothing changed.
        rc, out2, _ = _promote_cli(old, new.socket, password, tmp_path)
        assert rc == 0 and out2.startswith("already promoted"), out2

        # The new timeline's writes never reuse a GTID of the old one.
        first = _write(new, old.db, "new 1")
        assert first not in old.old_gtids
        assert first == f"0-{new_id}-{int(timeline.start_gtid.split('-')[2]) + 1}"
        keys = dict(catalog=old.catalog, target=root_target(new), public_keys=[gpg_keys.public_key])
        shipped = ship_binlogs(ShipRequest(**keys, flush=True))
        assert shipped.server_uuid == timeline.server_uuid
        with pytest.raises(PitrError, match="starts from its first full backup"):
            make_plan(old.catalog, PitrTarget.at_gtid(first))  # the old backups cannot reach it
        time.sleep(1.1)  # binlog times are whole seconds: a target second after the promotion's
        with pytest.raises(PitrError, match=r"was replaced by .*take a full backup of the new primary"):
            make_plan(old.catalog, PitrTarget.at_time(datetime.now(UTC).isoformat(timespec="seconds")))
        # check (and the Backups view's row) says the new timeline has no backup yet, naming it.
        before = _timeline_findings(old.catalog)
        assert [f.status for f in before] == ["warning"] and timeline.server_uuid in before[0].text, before
        backup = run_backup(BackupRequest(kind="full", **keys))
        assert backup.server_uuid == timeline.server_uuid
        assert _timeline_findings(old.catalog) == []
        _write(new, old.db, "new 2")
        last = commit_known(new, old.db, "new 3")
        ship_binlogs(ShipRequest(**keys, flush=True))
        listed = {s["server_uuid"]: s["timeline"] for s in list_binlogs(old.catalog)["servers"]}
        assert listed[timeline.server_uuid]["parent_server_uuid"] == timeline.parent_server_uuid
        assert listed[timeline.parent_server_uuid] is None
        new_gtids = _gtids(new)
        assert not new_gtids & old.old_gtids
        rows_new = _ids(new, old.db)

        # A replica of the new primary: another copy restored to the fork, started where promote said.
        rdir = tmp_path / "replica" / "data"
        _pitr(old, gpg_keys, rdir)
        replica = SandboxServer.on_datadir(
            rdir, tmp_path / "rsb", server_id=new_id + 1, skip_grant_tables=False, root_password=password
        )
        replica.start()
        try:
            replica.query("SET GLOBAL gtid_slave_pos = %s", (timeline.start_gtid,))
            start_replication(new, replica)
            wait_caught_up(new, replica)
            assert _ids(replica, old.db) == rows_new
        finally:
            replica.stop()
    finally:
        new.stop()

    # PITR on the new timeline, to its last write.
    r1 = tmp_path / "r1" / "data"
    report = _pitr(old, gpg_keys, r1, last.gtid)
    assert report.backup_id == backup.backup_id
    assert report.reached_gtid == last.gtid
    with SandboxServer.on_datadir(r1, tmp_path / "r1sb", server_id=977) as s:
        s.start()
        assert _ids(s, old.db) == rows_new == set(last.rows)
        assert s.query(f"SHOW TABLES FROM `{old.db}` LIKE 'victim'") != []

    # PITR on the old timeline, before the DROP, from the old backups and binlogs: still exact.
    r2 = tmp_path / "r2" / "data"
    report = _pitr(old, gpg_keys, r2)
    assert report.backup_id != backup.backup_id
    with SandboxServer.on_datadir(r2, tmp_path / "r2sb", server_id=978) as s:
        s.start()
        assert _ids(s, old.db) == old.rows_before_drop
        assert s.query(f"SELECT COUNT(*) FROM `{old.db}`.victim")[0][0] == 50

    # Binlog names restart on the new timeline: a FILE:POS alone is ambiguous and refused.
    with pytest.raises(PitrError, match="more than one server timeline"):
        make_plan(old.catalog, PitrTarget.at_position("mysql-bin.000009:4"))
