"""Point-in-time recovery on MySQL (core/pitr/mysql_pipe.py), on real MySQL 9.7 servers with the
real mysqlbinlog 9.7: binlogs shipped from a source are fetched from the store and piped into a
fresh server holding what a backup would (the source's first transactions), stopped right before a
DROP TABLE by a MySQL GTID set, by a time and by a position; and end to end from a clone backup
restored by the CLI, to the "stop before" GTID set `binlogs events` prints for the DROP. Each time
the table's CHECKSUM TABLE equals the source's at that moment and the server's gtid_executed is the
source's then: nothing past the stop, nothing replayed twice."""

from __future__ import annotations

import json
import secrets
import shutil
import time
from datetime import UTC, datetime

import pytest
import yaml

from helpers import cli, unique_name
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.common.values import GtidSet
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.pitr.mysql_pipe import replay_from_backup, replay_mysql
from xtrabackup_provider.core.pitr.plan import PitrError, PitrTarget
from xtrabackup_provider.core.pitr.recover import PitrRequest, fetch_binlogs
from xtrabackup_provider.core.storage.local import LocalStore

pytestmark = pytest.mark.mysql


def _target(server) -> MySQLTarget:
    return MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)


def _checksum(server, table: str) -> int:
    return int(server.query(f"CHECKSUM TABLE {table}")[0][1])


@pytest.fixture
def pair(mysql_factory):
    source = mysql_factory("pitrsrc", root_password=secrets.token_urlsafe(12))
    replay = mysql_factory("pitrdst", root_password=secrets.token_urlsafe(12))
    try:
        yield source, replay
    finally:
        mysql_factory.discard(source)
        mysql_factory.discard(replay)


def test_mysql_binlogs_replay_to_just_before_a_drop_by_gtid_time_and_position(pair, tmp_path):
    source, replay = pair
    db = unique_name("pt")
    uuid = source.query("SELECT @@server_uuid")[0][0]
    source.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v TEXT); CREATE TABLE {db}.u (id INT);"
        f"INSERT INTO {db}.t VALUES (1, 'a'), (2, 'b'); FLUSH BINARY LOGS;"
        f"INSERT INTO {db}.t VALUES (3, 'c'); UPDATE {db}.t SET v = 'z' WHERE id = 1; DELETE FROM {db}.t WHERE id = 2;"
    )
    expected = _checksum(source, f"{db}.t")
    at_stop = GtidSet.parse(source.query("SELECT @@global.gtid_executed")[0][0])
    assert str(at_stop) == f"{uuid}:1-7"
    time.sleep(1.1)  # binlog times are whole seconds: the DROP is stamped after the stop time
    stop_time = datetime.now(UTC).replace(microsecond=0)
    time.sleep(1.1)
    source.execute_script(f"DROP TABLE {db}.t; INSERT INTO {db}.u VALUES (1); FLUSH BINARY LOGS;")
    names = [r[0] for r in source.query("SHOW BINARY LOGS")][:-1]
    drop_at = None
    for row in source.query(f"SHOW BINLOG EVENTS IN '{names[-1]}'"):
        if row[2] == "Gtid":
            gtid_pos = row[1]
        elif row[2] == "Query" and "DROP TABLE" in str(row[5]):
            drop_at = gtid_pos
    assert drop_at is not None

    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    ship = ShipRequest(
        catalog=catalog, target=_target(source), allow_unencrypted=True, binary=shutil.which("mysqlbinlog")
    )
    assert ship_binlogs(ship).shipped == names
    shipped = BinlogCatalog(catalog, uuid).index().shipped()
    files = fetch_binlogs(
        PitrRequest(catalog, tmp_path / "unused", PitrTarget("time")), shipped, tmp_path / "copies"
    )

    targets = {
        "gtid": PitrTarget.at_gtid(f"{uuid}:1-7"),
        "time": PitrTarget("time", time=stop_time),
        "position": PitrTarget.at_position(f"{names[-1]}:{drop_at}"),
    }
    for how, target in targets.items():
        replay.execute_script(f"DROP DATABASE IF EXISTS {db}; RESET BINARY LOGS AND GTIDS;")
        # What a backup taken after the first three transactions holds (schema and tables).
        held = replay_mysql(_target(replay), files, PitrTarget.at_gtid(f"{uuid}:1-3"))
        assert str(held) == f"{uuid}:1-3", how
        reached = replay_mysql(_target(replay), files, target)
        assert reached == at_stop, how
        assert _checksum(replay, f"{db}.t") == expected, how
        assert replay.query(f"SELECT COUNT(*) FROM {db}.u")[0][0] == 0, how

    with pytest.raises(PitrError, match="MySQL replays to a MySQL GTID set"):
        replay_mysql(_target(replay), files, PitrTarget("gtid", gtid="0-1-5"))


def test_a_clone_backup_restored_by_the_cli_is_taken_to_just_before_a_drop(mysql_factory, tmp_path):
    source = mysql_factory("pitrclone", root_password=secrets.token_urlsafe(12))
    try:
        _from_a_clone_backup(source, tmp_path)
    finally:
        mysql_factory.discard(source)


def _from_a_clone_backup(source, tmp_path) -> None:
    source.query("INSTALL PLUGIN clone SONAME 'mysql_clone.so'")
    db = unique_name("pc")
    source.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v TEXT); CREATE TABLE {db}.u (id INT);"
        f"INSERT INTO {db}.t VALUES (1, 'a'), (2, 'b');"
    )
    config = tmp_path / "fleet.yaml"
    host = {
        "name": "db1",
        "flavour": "clone",
        "binlog_binary": shutil.which("mysqlbinlog"),
        "defaults_file": str(source.write_client_defaults(tmp_path / "client.cnf")),
    }
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(tmp_path / "store")},
                "encryption": {"enabled": False},
                "clusters": [{"name": "c1", "hosts": [host]}],
            }
        )
    )
    common = ["--config", str(config), "--cluster", "c1", "--host", "db1"]
    backup = cli("backup", *common)
    assert backup.returncode == 0, backup.stderr
    # After the backup: more work, then the mistake and what followed it.
    source.execute_script(
        f"INSERT INTO {db}.t VALUES (3, 'c'); UPDATE {db}.t SET v = 'z' WHERE id = 1; FLUSH BINARY LOGS;"
        f"DELETE FROM {db}.t WHERE id = 2;"
    )
    expected = table_checksums(source, [db])
    at_stop = source.query("SELECT @@global.gtid_executed")[0][0]
    source.execute_script(f"DROP TABLE {db}.t; INSERT INTO {db}.u VALUES (1); FLUSH BINARY LOGS;")
    shipped = cli("binlogs", "ship", *common)
    assert shipped.returncode == 0, shipped.stderr
    events = cli("binlogs", "events", *common, "--kind", "DROP", "--json")
    assert events.returncode == 0, events.stderr
    (drop,) = [json.loads(line) for line in events.stdout.splitlines()]
    assert drop["to_gtid"] == at_stop  # "stop before the DROP" is what the source had executed then

    target = tmp_path / "restored" / "data"
    wrong = cli("restore", *common, "--target-datadir", str(target), "--create-parents", "--to-gtid", "0-1-5")
    assert wrong.returncode != 0
    assert [line for line in wrong.stderr.splitlines() if line.startswith("error:")] == [
        "error: --to-gtid '0-1-5' is a MariaDB GTID (domain-server_id-sequence), but host c1/db1 is MySQL: give "
        "a MySQL GTID set (uuid:first-last, e.g. 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5)"
    ], wrong.stderr
    assert not target.exists(), "nothing is restored for a refused target"
    # A set naming a server this host never had (alone, or beside the host's own): refused by name.
    stranger = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    for to in (f"{stranger}:1-5", f"{at_stop},{stranger}:1-3"):
        foreign = cli(
            "restore", *common, "--target-datadir", str(target), "--create-parents", "--to-gtid", to
        )
        errors = [line for line in foreign.stderr.splitlines() if line.startswith("error:")]
        assert foreign.returncode != 0 and len(errors) == 1, foreign.stderr
        assert (
            f"server {stranger}" in errors[0] and "no backup or shipped binlog of host c1/db1" in errors[0]
        ), errors
        assert not target.exists(), "nothing is restored for a refused target"

    restored = cli(
        "restore", *common, "--target-datadir", str(target), "--create-parents", "--to-gtid", drop["to_gtid"]
    )
    assert restored.returncode == 0, restored.stderr
    assert f"reached GTID set {at_stop}" in restored.stdout, restored.stdout
    sandbox = SandboxServer.on_datadir(target, tmp_path / "sb", server_id=992, family="mysql")
    sandbox.start()
    with sandbox:
        assert table_checksums(sandbox, [db]) == expected
        assert sandbox.query("SELECT @@global.gtid_executed")[0][0].replace("\n", "") == at_stop
        assert sandbox.query(f"SELECT COUNT(*) FROM {db}.u")[0][0] == 0

    # The same replay on a copy restored without a target, by the core function the command runs.
    plain = tmp_path / "plain" / "data"
    assert cli("restore", *common, "--target-datadir", str(plain), "--create-parents").returncode == 0
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    (manifest,) = catalog.manifests()
    sandbox = SandboxServer.on_datadir(plain, tmp_path / "sb2", server_id=993, family="mysql")
    sandbox.start()
    with sandbox:
        assert table_checksums(sandbox, [db]) != expected, "the backup is before the later work"
        reached = replay_from_backup(
            catalog,
            manifest,
            MySQLTarget(socket=str(sandbox.socket), user="root"),  # the sandbox skips grants
            PitrTarget.at_gtid(drop["to_gtid"]),
            scratch_dir=tmp_path,
            binlog_binary=shutil.which("mysqlbinlog") or "mysqlbinlog",
        )
        assert str(reached) == at_stop
        assert table_checksums(sandbox, [db]) == expected
