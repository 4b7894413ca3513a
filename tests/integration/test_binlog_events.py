"""`binlogs events`: find the moment in the shipped, encrypted binlogs, then restore right before it.

A real server writes a DELETE, an ALTER, a TRUNCATE and a DROP TABLE across two binlog files after
a full backup; the binlogs are shipped encrypted. The listing names each with its time, GTID,
position and the `--to-gtid` that stops right before it, and a restore to that GTID gives the
table back exactly as it was before the DROP.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import root_target, take_backup, unique_name
from xtrabackup_provider.cli import main as cli_main
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.pitr.plan import PitrTarget
from xtrabackup_provider.core.pitr.recover import PitrRequest, point_in_time_restore
from xtrabackup_provider.core.storage.local import LocalStore


@dataclass
class Incident:
    server: SandboxServer
    catalog: Catalog
    store_dir: Path
    db: str
    gtids: dict[str, str]  # the statement's own GTID
    before: dict[str, str]  # the server's gtid_binlog_pos right before it
    checksum_before_drop: int


@pytest.fixture(scope="module")
def incident(mariadb_factory, gpg_keys, tmp_path_factory) -> Incident:
    server = mariadb_factory("moments", root_password=secrets.token_urlsafe(16))
    store_dir = tmp_path_factory.mktemp("store")
    catalog = Catalog(LocalStore(str(store_dir)), "backups", "c1", "db1")
    db = unique_name("orders")
    server.execute_script(
        f"""
        CREATE DATABASE `{db}`;
        CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(32)) ENGINE=InnoDB;
        CREATE TABLE `{db}`.other (id INT PRIMARY KEY) ENGINE=InnoDB;
        USE `{db}`;
        INSERT INTO t SELECT seq, CONCAT('row ', seq) FROM seq_1_to_300;
        INSERT INTO other SELECT seq FROM seq_1_to_10;
        """
    )
    take_backup(server, catalog, gpg_keys, "full")
    gtids: dict[str, str] = {}
    before: dict[str, str] = {}

    def step(name: str, sql: str) -> None:
        before[name] = str(server.query("SELECT @@gtid_binlog_pos")[0][0])
        conn = server.connect()
        try:
            cur = conn.cursor()
            cur.execute(sql)
            cur.execute("SELECT @@last_gtid")
            gtids[name] = str(cur.fetchone()[0])
        finally:
            conn.close()

    server.query(f"INSERT INTO `{db}`.t VALUES (1000, 'after the backup')")
    step("delete", f"DELETE FROM `{db}`.t WHERE id % 2 = 0")
    server.query("FLUSH BINARY LOGS")
    step("alter", f"ALTER TABLE `{db}`.other ADD COLUMN note VARCHAR(10)")
    step("truncate", f"TRUNCATE TABLE `{db}`.other")
    checksum = int(server.query(f"CHECKSUM TABLE `{db}`.t")[0][1])
    step("drop", f"DROP TABLE `{db}`.t")
    server.query(f"INSERT INTO `{db}`.other (id) VALUES (1), (2)")
    ship_binlogs(
        ShipRequest(
            catalog=catalog, target=root_target(server), public_keys=[gpg_keys.public_key], flush=True
        )
    )
    return Incident(server, catalog, store_dir, db, gtids, before, checksum)


def _events(
    incident: Incident, gpg_keys, tmp_path: Path, monkeypatch, capsys, *args: str
) -> tuple[int, str, str]:
    key = tmp_path / "private.asc"
    key.write_text(gpg_keys.private_key)
    monkeypatch.setenv("XTRABACKUP_GPG_PASSPHRASE", gpg_keys.passphrase)
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    rc = cli_main(
        [
            *("binlogs", "events", "--cluster", "c1", "--host", "db1"),
            *("--local-path", str(incident.store_dir), "--private-key-file", str(key)),
            *args,
        ]
    )
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_the_drop_is_listed_with_the_gtid_that_stops_right_before_it(
    incident, gpg_keys, tmp_path, monkeypatch, capsys
):
    rc, out, err = _events(incident, gpg_keys, tmp_path, monkeypatch, capsys, "--kind", "DROP")
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) == 1, out
    (line,) = lines
    assert incident.gtids["drop"] in line and "DROP TABLE" in line and incident.db in line
    assert f"--to-gtid={incident.before['drop']}" in line
    assert "--to-position=mysql-bin." in line


def test_filters_by_kind_table_and_time(incident, gpg_keys, tmp_path, monkeypatch, capsys):
    rc, out, _ = _events(
        incident, gpg_keys, tmp_path, monkeypatch, capsys, "--kind", "DELETE,TRUNCATE", "--json"
    )
    assert rc == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["gtid"] for r in rows] == [incident.gtids["delete"], incident.gtids["truncate"]]
    delete = rows[0]
    assert delete["kinds"] == ["DELETE"] and f"{incident.db}.t: delete in 1 row event" in delete["summary"]
    assert "DELETE FROM" in delete["summary"], "the annotated statement behind the row events"
    assert delete["to_gtid"] == incident.before["delete"]

    rc, out, _ = _events(incident, gpg_keys, tmp_path, monkeypatch, capsys, "--table", "other", "--json")
    kinds = [json.loads(line)["kinds"][0] for line in out.splitlines()]
    assert kinds == ["ALTER", "TRUNCATE", "INSERT"]

    rc, out, err = _events(
        incident, gpg_keys, tmp_path, monkeypatch, capsys, "--since", "2999-01-01T00:00:00Z"
    )
    assert rc == 0 and out == "" and "no transaction matches" in err


def test_a_restore_to_the_listed_gtid_gives_the_table_back_as_before_the_drop(
    incident, gpg_keys, tmp_path, monkeypatch, capsys
):
    rc, out, _ = _events(incident, gpg_keys, tmp_path, monkeypatch, capsys, "--kind", "DROP", "--json")
    (row,) = [json.loads(line) for line in out.splitlines()]
    datadir = tmp_path / "restored" / "data"
    report = point_in_time_restore(
        PitrRequest(
            catalog=incident.catalog,
            target_datadir=datadir,
            target=PitrTarget.at_gtid(row["to_gtid"]),
            private_key=gpg_keys.private_key,
            passphrase=gpg_keys.passphrase,
        )
    )
    assert report.reached_gtid == incident.before["drop"]
    with SandboxServer.on_datadir(datadir, tmp_path / "sb", server_id=978) as restored:
        restored.start()
        assert int(restored.query(f"CHECKSUM TABLE `{incident.db}`.t")[0][1]) == incident.checksum_before_drop
        assert restored.query(f"SELECT COUNT(*) FROM `{incident.db}`.other")[0][0] == 0, "after the TRUNCATE"


def test_a_bad_gtid_is_one_line(incident, gpg_keys, tmp_path, monkeypatch, capsys):
    rc, out, err = _events(incident, gpg_keys, tmp_path, monkeypatch, capsys, "--gtid-from", "0-1")
    assert rc == 2 and out == ""
    assert err.startswith("error: --gtid-from '0-1'") and "Traceback" not in err
