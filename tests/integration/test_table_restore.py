"""Table-level point-in-time restore into a live server (`restore-table`, core/pitr/table.py).

A live MariaDB (binlog, GTID) holds a table with secondary and unique indexes, a parent/child pair
with a foreign key, a RANGE-partitioned table, a MyISAM table and a bystander. A full backup, more
writes, then the accident (DELETEs, cascading into the child) and an ALTER of the damaged table;
the binlogs are shipped encrypted. The restore brings the tables back as they were just before the
accident under new names, and leaves every existing table, and the live binlog, as they were.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from helpers import root_target, take_backup, unique_name
from xtrabackup_provider.cli import main as cli_main
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.pitr.plan import PitrError, PitrTarget
from xtrabackup_provider.core.pitr.table import TableRestoreError, TableRestoreRequest, restore_tables
from xtrabackup_provider.core.storage.local import LocalStore

TABLES = ("t", "parent", "child", "tp", "tm", "bystander")


@dataclass
class Live:
    server: SandboxServer
    catalog: Catalog
    store: Path
    db: str
    before_gtid: str  # the last GTID before the accident
    snapshot: dict[str, list[tuple]]  # rows of each table at before_gtid


def _rows(server: SandboxServer, db: str, table: str) -> list[tuple]:
    return [tuple(r) for r in server.query(f"SELECT * FROM `{db}`.`{table}` ORDER BY id")]


@pytest.fixture(scope="module")
def live(mariadb_factory, gpg_keys, tmp_path_factory) -> Live:
    server = mariadb_factory("tbl", root_password=secrets.token_urlsafe(16))
    store = tmp_path_factory.mktemp("tables") / "store"
    catalog = Catalog(LocalStore(str(store)), "backups", "c1", "db1")
    db = unique_name("tbl")
    server.execute_script(
        f"""
        CREATE DATABASE `{db}`;
        USE `{db}`;
        CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(40), KEY ka (a), UNIQUE KEY ub (b)) ENGINE=InnoDB;
        INSERT INTO t SELECT seq, seq % 97, CONCAT('b', seq) FROM seq_1_to_3000;
        CREATE TABLE parent (id INT PRIMARY KEY, name VARCHAR(20)) ENGINE=InnoDB;
        INSERT INTO parent SELECT seq, CONCAT('p', seq) FROM seq_1_to_50;
        CREATE TABLE child (id INT PRIMARY KEY, parent_id INT, KEY kp (parent_id),
          CONSTRAINT fk_child_parent FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE) ENGINE=InnoDB;
        INSERT INTO child SELECT seq, 1 + seq % 50 FROM seq_1_to_1000;
        CREATE TABLE tp (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB
          PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (1000), PARTITION p1 VALUES LESS THAN (2000),
                                   PARTITION p2 VALUES LESS THAN MAXVALUE);
        INSERT INTO tp SELECT seq, CONCAT('v', seq) FROM seq_1_to_3000;
        CREATE TABLE tm (id INT PRIMARY KEY, v INT) ENGINE=MyISAM;
        INSERT INTO tm SELECT seq, seq FROM seq_1_to_100;
        CREATE TABLE bystander (id INT PRIMARY KEY, v INT) ENGINE=InnoDB;
        INSERT INTO bystander SELECT seq, seq FROM seq_1_to_100;
        """
    )
    take_backup(server, catalog, gpg_keys, "full")
    # After the backup: changes the restore must replay.
    server.execute_script(
        f"""
        USE `{db}`;
        INSERT INTO t SELECT seq, seq % 97, CONCAT('b', seq) FROM seq_3001_to_3500;
        UPDATE t SET a = a + 1000 WHERE id % 10 = 0;
        INSERT INTO child SELECT seq, 1 + seq % 50 FROM seq_1001_to_1200;
        UPDATE tp SET v = 'after backup' WHERE id % 7 = 0;
        """
    )
    server.query("FLUSH BINARY LOGS")  # the replay crosses a binlog file
    server.query(f"INSERT INTO `{db}`.t VALUES (4000, 1, 'last good')")
    before = server.query("SELECT @@gtid_binlog_pos")[0][0]
    snapshot = {name: _rows(server, db, name) for name in ("t", "child", "tp")}
    # The accident, and what followed it.
    server.execute_script(
        f"""
        USE `{db}`;
        DELETE FROM t WHERE id % 3 = 0;
        DELETE FROM parent WHERE id <= 10;
        DELETE FROM tp WHERE id % 2 = 0;
        ALTER TABLE t ADD COLUMN d INT;
        INSERT INTO t (id, a, b) VALUES (5000, 1, 'after the accident');
        """
    )
    ship_binlogs(
        ShipRequest(
            catalog=catalog, target=root_target(server), public_keys=[gpg_keys.public_key], flush=True
        )
    )
    return Live(server, catalog, store, db, before, snapshot)


def _state(live: Live) -> tuple[dict[str, int], list[str], str]:
    """Checksums of the live tables, the table names, and the live binlog position."""
    names = [r[0] for r in live.server.query(f"SHOW TABLES FROM `{live.db}`")]
    pos = live.server.query("SELECT @@gtid_binlog_pos")[0][0]
    return table_checksums(live.server, [live.db]), sorted(names), pos


def _request(live: Live, gpg_keys, tmp_path: Path, tables: list[str], **kw) -> TableRestoreRequest:
    return TableRestoreRequest(
        catalog=live.catalog,
        live=root_target(live.server),
        tables=[f"{live.db}.{t}" for t in tables],
        private_key=gpg_keys.private_key,
        passphrase=gpg_keys.passphrase,
        scratch_dir=tmp_path,
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
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(live.store)},
                "encryption": {"public_key_files": [str(public)], "private_key_file": str(private)},
                "clusters": [{"name": "c1", "hosts": [{"name": "db1", "defaults_file": str(defaults)}]}],
            }
        )
    )
    return config


def test_tables_come_back_as_before_the_delete_and_nothing_else_changes(
    live, gpg_keys, tmp_path, monkeypatch, capsys
):
    before = _state(live)
    config = _fleet(live, gpg_keys, tmp_path)
    monkeypatch.setenv("XTRABACKUP_GPG_PASSPHRASE", gpg_keys.passphrase)
    rc = cli_main(
        [
            "restore-table",
            *("--config", str(config), "--cluster", "c1", "--host", "db1"),
            *("--table", f"{live.db}.t", "--table", f"{live.db}.child", "--table", f"{live.db}.tp"),
            *(
                "--as",
                f"{live.db}.t_restored",
                "--as",
                f"{live.db}.child_restored",
                "--as",
                f"{live.db}.tp_restored",
            ),
            *("--to-gtid", live.before_gtid, "--scratch-dir", str(tmp_path)),
        ]
    )
    out = capsys.readouterr()
    assert rc == 0, out.err
    for name in ("t", "child", "tp"):
        assert _rows(live.server, live.db, f"{name}_restored") == live.snapshot[name], name
        assert f"{live.db}.{name} -> {live.db}.{name}_restored" in out.out
    checksums, names, binlog_pos = _state(live)
    assert {k: v for k, v in checksums.items() if "_restored" not in k} == before[0], (
        "an existing table changed"
    )
    assert names == sorted([*before[1], "child_restored", "t_restored", "tp_restored"])
    assert binlog_pos == before[2], "the restore wrote into the live binlog (its replicas would get it)"
    child_ddl = live.server.query(f"SHOW CREATE TABLE `{live.db}`.child_restored")[0][1]
    assert "FOREIGN KEY" not in child_ddl and "fk_child_parent" in out.out
    assert live.server.query(f"CHECK TABLE `{live.db}`.t_restored EXTENDED")[-1][-1] == "OK"
    # The secondary and unique indexes of the copy work.
    assert live.server.query(f"SELECT id FROM `{live.db}`.t_restored FORCE INDEX (ub) WHERE b = 'b3'") == [
        (3,)
    ]
    assert [
        r[0]
        for r in live.server.query(
            f"SELECT partition_name FROM information_schema.partitions WHERE table_schema = '{live.db}' "
            "AND table_name = 'tp_restored' ORDER BY partition_ordinal_position"
        )
    ] == ["p0", "p1", "p2"]
    live.server.execute_script(
        f"DROP TABLE `{live.db}`.t_restored, `{live.db}`.child_restored, `{live.db}`.tp_restored"
    )


def test_bad_input_is_one_line_and_nothing_is_created(live, gpg_keys, tmp_path, monkeypatch, capsys):
    before = _state(live)
    gtid = PitrTarget.at_gtid(live.before_gtid)

    with pytest.raises(TableRestoreError, match=f"{live.db}.bystander already exists on .*give another name"):
        restore_tables(
            _request(live, gpg_keys, tmp_path, ["t"], new_names=[f"{live.db}.bystander"], target=gtid)
        )
    with pytest.raises(TableRestoreError, match="new name must differ"):
        restore_tables(_request(live, gpg_keys, tmp_path, ["t"], new_names=[f"{live.db}.t"], target=gtid))
    live.server.query("SET GLOBAL innodb_file_per_table = OFF")
    try:
        with pytest.raises(TableRestoreError, match="innodb_file_per_table=OFF"):
            restore_tables(_request(live, gpg_keys, tmp_path, ["t"], target=gtid))
    finally:
        live.server.query("SET GLOBAL innodb_file_per_table = ON")
    with pytest.raises(PitrError, match="future"):
        restore_tables(
            _request(live, gpg_keys, tmp_path, ["t"], target=PitrTarget.at_time("2099-01-01T00:00:00"))
        )
    with pytest.raises(
        TableRestoreError, match=f"{live.db}.tm is MyISAM: only InnoDB tables move as tablespaces"
    ):
        restore_tables(_request(live, gpg_keys, tmp_path, ["t", "tm"], target=gtid))

    config = _fleet(live, gpg_keys, tmp_path)
    monkeypatch.setenv("XTRABACKUP_GPG_PASSPHRASE", gpg_keys.passphrase)
    rc = cli_main(
        [
            "restore-table",
            *("--config", str(config), "--cluster", "c1", "--host", "db1"),
            *("--table", f"{live.db}.nope", "--to-gtid", live.before_gtid, "--scratch-dir", str(tmp_path)),
        ]
    )
    out = capsys.readouterr()
    assert rc == 2 and out.out == ""
    last = out.err.strip().splitlines()[-1]
    assert last.startswith(f"error: {live.db}.nope is not in backup "), last
    assert "no shipped binlog after it names it" in last, "a table created after the backup would be"
    assert "Traceback" not in out.err
    assert _state(live) == before
    assert not list(tmp_path.glob("xbp-tables-*")), "the scratch restore was left behind"


@pytest.fixture
def small_fs(tmp_path, live) -> Iterator[Path]:
    """A 40 MiB ext4 filesystem, loop-mounted (root only): a sandbox with too little disk. Plus
    10 MiB per undo tablespace (MariaDB 11.0+ makes 3 by default), which the backup holds whole."""
    if os.geteuid() != 0 or not (shutil.which("mkfs.ext4") and shutil.which("mount")):
        pytest.skip("a loop-mounted filesystem needs root, mkfs.ext4 and mount")
    undo = int(live.server.query("SELECT @@innodb_undo_tablespaces")[0][0])
    image, mnt = tmp_path / "small.img", tmp_path / "small"
    with open(image, "wb") as f:
        f.truncate((40 + 10 * undo) * 1024 * 1024)
    mnt.mkdir()
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True, text=True)
    mounted = made.returncode == 0 and (
        subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True).returncode == 0
    )
    if not mounted:
        pytest.skip(f"cannot loop-mount a filesystem here: {made.stderr.strip() or 'mount failed'}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_sandbox_that_runs_out_of_disk_is_one_line_and_nothing_changes(
    live, gpg_keys, tmp_path, small_fs, monkeypatch, capsys
):
    before = _state(live)
    config = _fleet(live, gpg_keys, tmp_path)
    monkeypatch.setenv("XTRABACKUP_GPG_PASSPHRASE", gpg_keys.passphrase)

    def restore_into(scratch: Path):
        rc = cli_main(
            [
                "restore-table",
                *("--config", str(config), "--cluster", "c1", "--host", "db1"),
                *("--table", f"{live.db}.t", "--to-gtid", live.before_gtid, "--scratch-dir", str(scratch)),
            ]
        )
        assert rc == 2
        return capsys.readouterr()

    out = restore_into(small_fs)
    assert out.out == ""
    last = out.err.strip().splitlines()[-1]
    with capsys.disabled():
        print(last)
    assert "Traceback" not in out.err
    assert last.startswith("error: ") and str(small_fs) in last and "--scratch-dir" in last, last
    assert "ran out of disk" in last and "the live server was not touched" in last, last
    assert _state(live) == before, "the live server is as it was: no table created, nothing logged"
    assert list(small_fs.iterdir()) == [small_fs / "lost+found"], "the sandbox was removed"

    # Less room than the backup needs at all: refused before anything is restored.
    filler = small_fs / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, shutil.disk_usage(small_fs).free - 2 * 1024 * 1024))
    out = restore_into(small_fs)
    last = out.err.strip().splitlines()[-1]
    with capsys.disabled():
        print(last)
    assert out.out == "" and "Traceback" not in out.err
    assert str(small_fs) in last and "free" in last and "nothing was restored" in last, last
    filler.unlink()
    assert _state(live) == before
    assert list(small_fs.iterdir()) == [small_fs / "lost+found"]
