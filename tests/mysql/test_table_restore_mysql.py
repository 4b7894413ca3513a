"""`restore-table` on MySQL 9.7 from a clone backup (core/pitr/table.py), with MySQL's own PITR.

A live MySQL (GTID mode, binlog on, the clone plugin) holds, in a schema whose name has a `$`: a
table `t$odd` with secondary and unique indexes, a parent/child pair with a foreign key, a
RANGE-partitioned table whose partition names need quoting (a reserved word, a space, a backtick,
capitals), a MyISAM table and a bystander. A clone backup, more writes (and a table created), then
the accident (DELETEs, cascading into the child; the new table dropped) and an ALTER of the damaged
table; the binlogs are shipped encrypted. The restore brings the tables back as they were just
before the accident (by a MySQL GTID set, by a time, by a binlog position; or as in the backup)
under new names: each copy's CHECKSUM TABLE is the source table's at that moment, and every other
table, the live gtid_executed (nothing reached the binlog) and the table list but for the copies
are as they were. Bad input is refused in one line naming the table. On main the
restore of a clone backup to a point in time was refused ("supports MariaDB backups only").
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from helpers import root_target, unique_name
from xtrabackup_provider.cli import main as cli_main
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer, quote_ident
from xtrabackup_provider.core.pitr.plan import PitrError, PitrTarget
from xtrabackup_provider.core.pitr.table import TableRestoreError, TableRestoreRequest, restore_tables
from xtrabackup_provider.core.storage.local import LocalStore

pytestmark = pytest.mark.mysql

PARTS = ["order", "p 1", "p`2", "Upper"]
RESTORED = ("t$odd", "child", "tp")


@dataclass
class Live:
    server: SandboxServer
    catalog: Catalog
    store: Path
    db: str
    at_stop: str  # gtid_executed just before the accident
    stop_time: datetime  # a time between the last good write and the accident
    checksums: dict[str, int]  # CHECKSUM TABLE of each table in RESTORED, and of `late`, at that moment
    child_rows: list[tuple]  # the child's rows at that moment
    stop_position: str  # FILE:POS where the accident's first transaction starts
    at_backup: dict[str, int]  # CHECKSUM TABLE of each table in RESTORED when the backup was taken


def _checksum(server: SandboxServer, db: str, table: str) -> int:
    return int(server.query(f"CHECKSUM TABLE {quote_ident(db)}.{quote_ident(table)}")[0][1])


def _rows(server: SandboxServer, db: str, table: str) -> list[tuple]:
    return [
        tuple(r) for r in server.query(f"SELECT * FROM {quote_ident(db)}.{quote_ident(table)} ORDER BY id")
    ]


def _seq(n: int, select: str) -> str:
    return f"WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {n}) {select}"


@pytest.fixture(scope="module")
def live(mysql_factory, gpg_keys, tmp_path_factory) -> Live:
    server = mysql_factory("tblmy", root_password=secrets.token_urlsafe(16))
    server.query("INSTALL PLUGIN clone SONAME 'mysql_clone.so'")
    base = tmp_path_factory.mktemp("tblmy")
    store = base / "store"
    catalog = Catalog(LocalStore(str(store)), "backups", "c1", "db1")
    db = unique_name("tm") + "$x"
    q = quote_ident(db)
    partitions = ", ".join(
        f"PARTITION {quote_ident(name)} VALUES LESS THAN ({bound})"
        for name, bound in zip(PARTS, ["1000", "2000", "3000", "MAXVALUE"], strict=True)
    )
    server.execute_script(
        f"""
        SET SESSION cte_max_recursion_depth = 10000;
        CREATE DATABASE {q};
        USE {q};
        CREATE TABLE `t$odd` (id INT PRIMARY KEY, a INT, b VARCHAR(40), KEY ka (a), UNIQUE KEY ub (b));
        INSERT INTO `t$odd` {_seq(3000, "SELECT n, n % 97, CONCAT('b', n) FROM s")};
        CREATE TABLE parent (id INT PRIMARY KEY, name VARCHAR(20));
        INSERT INTO parent {_seq(50, "SELECT n, CONCAT('p', n) FROM s")};
        CREATE TABLE child (id INT PRIMARY KEY, parent_id INT, KEY kp (parent_id),
          CONSTRAINT fk_child_parent FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE);
        INSERT INTO child {_seq(1000, "SELECT n, 1 + n % 50 FROM s")};
        CREATE TABLE tp (id INT PRIMARY KEY, v VARCHAR(20)) PARTITION BY RANGE (id) ({partitions});
        INSERT INTO tp {_seq(4000, "SELECT n, CONCAT('v', n) FROM s")};
        CREATE TABLE tm (id INT PRIMARY KEY, v INT) ENGINE=MyISAM;
        INSERT INTO tm {_seq(100, "SELECT n, n FROM s")};
        CREATE TABLE bystander (id INT PRIMARY KEY, v INT);
        INSERT INTO bystander {_seq(100, "SELECT n, n FROM s")};
        """
    )
    at_backup = {name: _checksum(server, db, name) for name in RESTORED}
    staging = base / "staging"
    staging.mkdir()
    run_backup(
        BackupRequest(
            catalog=catalog,
            target=root_target(server),
            flavour="clone",
            staging_dir=str(staging),
            public_keys=[gpg_keys.public_key],
            accept_new_server=True,
        )
    )
    # After the backup: changes the restore must replay, across a binlog file.
    server.execute_script(
        f"""
        SET SESSION cte_max_recursion_depth = 10000;
        USE {q};
        INSERT INTO `t$odd` {_seq(500, "SELECT 3000 + n, n % 97, CONCAT('b', 3000 + n) FROM s")};
        UPDATE `t$odd` SET a = a + 1000 WHERE id % 10 = 0;
        INSERT INTO child {_seq(200, "SELECT 1000 + n, 1 + n % 50 FROM s")};
        UPDATE tp SET v = 'after backup' WHERE id % 7 = 0;
        CREATE TABLE late (id INT PRIMARY KEY, v VARCHAR(20));
        INSERT INTO late {_seq(300, "SELECT n, CONCAT('late', n) FROM s")};
        FLUSH BINARY LOGS;
        INSERT INTO `t$odd` VALUES (4000, 1, 'last good');
        """
    )
    at_stop = server.query("SELECT @@global.gtid_executed")[0][0].replace("\n", "")
    checksums = {name: _checksum(server, db, name) for name in (*RESTORED, "late")}
    child_rows = _rows(server, db, "child")
    file, position = server.query("SHOW BINARY LOG STATUS")[0][:2]
    time.sleep(1.1)  # binlog times are whole seconds: the accident is stamped after the stop time
    stop_time = datetime.now(UTC).replace(microsecond=0)
    time.sleep(1.1)
    server.execute_script(
        f"""
        USE {q};
        DELETE FROM `t$odd` WHERE id % 3 = 0;
        DELETE FROM parent WHERE id <= 10;
        DELETE FROM tp WHERE id % 2 = 0;
        ALTER TABLE `t$odd` ADD COLUMN d INT;
        INSERT INTO `t$odd` (id, a, b) VALUES (5000, 1, 'after the accident');
        DROP TABLE late;
        """
    )
    assert [_checksum(server, db, name) for name in RESTORED] != [checksums[name] for name in RESTORED]
    ship_binlogs(
        ShipRequest(
            catalog=catalog,
            target=root_target(server),
            public_keys=[gpg_keys.public_key],
            flush=True,
            binary="mysqlbinlog",
        )
    )
    return Live(
        server, catalog, store, db, at_stop, stop_time, checksums, child_rows, f"{file}:{position}", at_backup
    )


def _state(live: Live) -> tuple[dict[str, int], list[str], str]:
    """CHECKSUM TABLE of every live table, the table names, and the live gtid_executed."""
    names = sorted(r[0] for r in live.server.query(f"SHOW TABLES FROM {quote_ident(live.db)}"))
    sums = {n: _checksum(live.server, live.db, n) for n in names}
    gtid = live.server.query("SELECT @@global.gtid_executed")[0][0]
    return sums, names, gtid


def _request(live: Live, gpg_keys, tmp_path: Path, tables: list[str], **kw) -> TableRestoreRequest:
    return TableRestoreRequest(
        catalog=live.catalog,
        live=root_target(live.server),
        tables=[f"{live.db}.{t}" for t in tables],
        private_key=gpg_keys.private_key,
        passphrase=gpg_keys.passphrase,
        scratch_dir=tmp_path,
        binlog_binary="mysqlbinlog",
        **kw,
    )


def _fleet(live: Live, gpg_keys, tmp_path: Path) -> Path:
    private = tmp_path / "private.asc"
    private.write_text(gpg_keys.private_key)
    private.chmod(0o600)
    public = tmp_path / "public.asc"
    public.write_text(gpg_keys.public_key)
    config = tmp_path / "fleet.yaml"
    defaults = live.server.write_client_defaults(tmp_path / "client.cnf")
    host = {"name": "db1", "flavour": "clone", "binlog_binary": "mysqlbinlog", "defaults_file": str(defaults)}
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(live.store)},
                "encryption": {"public_key_files": [str(public)], "private_key_file": str(private)},
                "clusters": [{"name": "c1", "hosts": [host]}],
            }
        )
    )
    return config


def _drop(live: Live, *tables: str) -> None:
    live.server.query(
        "DROP TABLE IF EXISTS " + ", ".join(f"{quote_ident(live.db)}.{quote_ident(t)}" for t in tables)
    )


def test_tables_come_back_as_before_the_accident_by_gtid_and_nothing_else_changes(live, gpg_keys, tmp_path):
    before = _state(live)
    report = restore_tables(
        _request(live, gpg_keys, tmp_path, list(RESTORED), target=PitrTarget.at_gtid(live.at_stop))
    )
    try:
        assert report.reached_gtid == live.at_stop
        assert [(t.source, t.created) for t in report.tables] == [
            (f"{live.db}.{n}", f"{live.db}.{n}_restored") for n in RESTORED
        ]
        # CHECKSUM TABLE: the child's too (INT columns alone: an explicit ROW_FORMAT the live
        # default has anyway made it differ, rows equal).
        for name in RESTORED:
            assert _checksum(live.server, live.db, f"{name}_restored") == live.checksums[name], name
        assert _rows(live.server, live.db, "child_restored") == live.child_rows
        sums, names, gtid = _state(live)
        assert {k: v for k, v in sums.items() if not k.endswith("_restored")} == before[0], "a table changed"
        assert names == sorted([*before[1], *(f"{n}_restored" for n in RESTORED)])
        assert gtid == before[2], "the restore wrote into the live binlog (its replicas would get it)"
        q = quote_ident(live.db)
        assert live.server.query(f"CHECK TABLE {q}.`t$odd_restored` EXTENDED")[-1][-1] == "OK"
        assert live.server.query(f"SELECT id FROM {q}.`t$odd_restored` FORCE INDEX (ub) WHERE b = 'b3'") == [
            (3,)
        ]
        assert "FOREIGN KEY" not in live.server.query(f"SHOW CREATE TABLE {q}.child_restored")[0][1]
        assert report.tables[1].dropped_foreign_keys == ["fk_child_parent"]
        assert report.tables[2].partitions == PARTS
        assert [
            r[0]
            for r in live.server.query(
                "SELECT partition_name FROM information_schema.partitions WHERE table_schema = %s "
                "AND table_name = 'tp_restored' ORDER BY partition_ordinal_position",
                (live.db,),
            )
        ] == PARTS
        assert not list(tmp_path.glob("xbp-tables-*")), "the scratch restore was left behind"
    finally:
        _drop(live, *(f"{n}_restored" for n in RESTORED))


def test_tables_come_back_to_a_binlog_position_and_as_in_the_backup(live, gpg_keys, tmp_path):
    before = _state(live)
    at_position = restore_tables(
        _request(
            live,
            gpg_keys,
            tmp_path,
            ["t$odd"],
            new_names=[f"{live.db}.t_at_pos"],
            target=PitrTarget.at_position(live.stop_position),
        )
    )
    as_backed_up = restore_tables(
        _request(live, gpg_keys, tmp_path, ["tp"], new_names=[f"{live.db}.tp_at_backup"])
    )
    try:
        assert at_position.reached_gtid == live.at_stop
        assert _checksum(live.server, live.db, "t_at_pos") == live.checksums["t$odd"]
        assert as_backed_up.target == f"backup {as_backed_up.backup_id}"
        assert _checksum(live.server, live.db, "tp_at_backup") == live.at_backup["tp"]
        sums, _, gtid = _state(live)
        assert {k: v for k, v in sums.items() if k not in ("t_at_pos", "tp_at_backup")} == before[0]
        assert gtid == before[2]
    finally:
        _drop(live, "t_at_pos", "tp_at_backup")


def test_a_table_created_after_the_backup_and_dropped_comes_back(live, gpg_keys, tmp_path):
    """`late` is in no table list of the backup: a shipped binlog after it names it (core/pitr/moments.py
    reads MySQL's binlogs), so it is restored from the replay."""
    before = _state(live)
    restore_tables(_request(live, gpg_keys, tmp_path, ["late"], target=PitrTarget.at_gtid(live.at_stop)))
    try:
        assert _checksum(live.server, live.db, "late_restored") == live.checksums["late"]
        assert _state(live)[2] == before[2]
    finally:
        _drop(live, "late_restored")


def test_the_cli_restores_a_table_to_a_time(live, gpg_keys, tmp_path, monkeypatch, capsys):
    before = _state(live)
    config = _fleet(live, gpg_keys, tmp_path)
    monkeypatch.setenv("XTRABACKUP_GPG_PASSPHRASE", gpg_keys.passphrase)
    rc = cli_main(
        [
            "restore-table",
            *("--config", str(config), "--cluster", "c1", "--host", "db1"),
            *("--table", f"{live.db}.t$odd", "--as", f"{live.db}.t_at_time"),
            *("--to-time", live.stop_time.strftime("%Y-%m-%dT%H:%M:%SZ"), "--scratch-dir", str(tmp_path)),
        ]
    )
    out = capsys.readouterr()
    try:
        assert rc == 0, out.err
        assert f"{live.db}.t$odd -> {live.db}.t_at_time" in out.out
        assert f"GTID {live.at_stop}" in out.out
        assert _checksum(live.server, live.db, "t_at_time") == live.checksums["t$odd"]
        sums, names, gtid = _state(live)
        assert {k: v for k, v in sums.items() if k != "t_at_time"} == before[0]
        assert gtid == before[2]
    finally:
        _drop(live, "t_at_time")


def test_bad_input_is_one_line_naming_the_table_and_nothing_is_created(
    live, gpg_keys, tmp_path, monkeypatch, capsys
):
    before = _state(live)
    gtid = PitrTarget.at_gtid(live.at_stop)
    with pytest.raises(
        TableRestoreError, match=rf"{re.escape(live.db)}.bystander already exists on .*give another name"
    ):
        restore_tables(
            _request(live, gpg_keys, tmp_path, ["t$odd"], new_names=[f"{live.db}.bystander"], target=gtid)
        )
    with pytest.raises(PitrError, match="is a MariaDB GTID .* give a MySQL GTID set"):
        restore_tables(_request(live, gpg_keys, tmp_path, ["t$odd"], target=PitrTarget.at_gtid("0-1-5")))
    with pytest.raises(TableRestoreError, match=rf"{re.escape(live.db)}.tm is MyISAM: .*mysqldump"):
        restore_tables(_request(live, gpg_keys, tmp_path, ["t$odd", "tm"], target=gtid))

    config = _fleet(live, gpg_keys, tmp_path)
    monkeypatch.setenv("XTRABACKUP_GPG_PASSPHRASE", gpg_keys.passphrase)
    rc = cli_main(
        [
            "restore-table",
            *("--config", str(config), "--cluster", "c1", "--host", "db1"),
            *("--table", f"{live.db}.nope", "--to-gtid", live.at_stop, "--scratch-dir", str(tmp_path)),
        ]
    )
    out = capsys.readouterr()
    assert rc == 2 and out.out == ""
    lines = out.err.strip().splitlines()
    assert lines[-1].startswith(f"error: {live.db}.nope is not in backup "), lines
    assert "Traceback" not in out.err
    assert _state(live) == before
    assert not list(tmp_path.glob("xbp-tables-*")), "the scratch restore was left behind"


def test_tables_of_a_mysql_backup_are_refused_into_a_mariadb_server(
    live, mariadb_factory, gpg_keys, tmp_path
):
    other = mariadb_factory("tblmaria", root_password=secrets.token_urlsafe(12))
    try:
        other.query(f"CREATE DATABASE {quote_ident(live.db)}")
        request = _request(live, gpg_keys, tmp_path, ["t$odd"])
        request.live = root_target(other)
        with pytest.raises(TableRestoreError) as refused:
            restore_tables(request)
        message = str(refused.value)
        assert "\n" not in message
        assert re.match(
            r"backup \S+ is of MySQL 9\.7\.\d+ and .* runs MariaDB .*: tables move only into a server",
            message,
        )
        assert other.query(f"SHOW TABLES FROM {quote_ident(live.db)}") == []
        assert not list(tmp_path.glob("xbp-tables-*")), "nothing was restored"
    finally:
        mariadb_factory.discard(other)
