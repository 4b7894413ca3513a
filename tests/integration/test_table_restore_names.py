"""`restore-table` checks both names before anything is fetched, and says which table a failed
rollback left behind (core/pitr/table.py, issues 28.7 and 33.6).

The backup's data objects are removed from a copy of the store ("hollow"): a check that comes
after the fetch cannot pass there, so a refusal that names the table proves nothing was fetched.
"""

from __future__ import annotations

import secrets
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from helpers import root_target
from xtrabackup_provider.cli import main as cli_main
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.pitr.plan import PitrTarget
from xtrabackup_provider.core.pitr.table import TableRestoreError, TableRestoreRequest, restore_tables
from xtrabackup_provider.core.storage.local import LocalStore

LONG = "l" * 60  # its default new name, l..l_restored, is 69 characters: over MariaDB's 64


@dataclass
class Names:
    server: SandboxServer
    store: Path  # the backup
    hollow: Path  # the same manifests, no data objects
    backup: Manifest
    db: str


@pytest.fixture(scope="module")
def names(mariadb_factory, tmp_path_factory) -> Names:
    server = mariadb_factory("tblnames", root_password=secrets.token_urlsafe(12))
    db = f"names_{uuid.uuid4().hex[:8]}"
    server.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB;"
        f"INSERT INTO {db}.t VALUES (1, 1), (2, 2); CREATE TABLE {db}.{LONG} (id INT PRIMARY KEY) ENGINE=InnoDB;"
    )
    root = tmp_path_factory.mktemp("tblnames")
    catalog = Catalog(LocalStore(root / "store"), "backups", "c1", "db1")
    backup = run_backup(BackupRequest(catalog=catalog, target=root_target(server), allow_unencrypted=True))
    shutil.copytree(root / "store", root / "hollow")
    hollow = Catalog(LocalStore(root / "hollow"), "backups", "c1", "db1")
    hollow.store.delete([obj.key for obj in backup.objects])
    # A table created after the backup: in no table list of a backup, named by a shipped binlog.
    server.execute_script(
        f"USE {db}; CREATE TABLE later (id INT PRIMARY KEY) ENGINE=InnoDB; INSERT INTO later VALUES (7);"
    )
    ship_binlogs(ShipRequest(catalog=catalog, target=root_target(server), allow_unencrypted=True, flush=True))
    return Names(server, root / "store", root / "hollow", backup, db)


def _unlogged(server: SandboxServer, *statements: str) -> None:
    """Run `statements` with binary logging off: the live server's own, as restore-table's copies are."""
    conn = server.connect()
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION sql_log_bin = 0")
        for sql in statements:
            cur.execute(sql)
    finally:
        conn.close()


def _request(names: Names, store: Path, tables: list[str], **kw) -> TableRestoreRequest:
    return TableRestoreRequest(
        catalog=Catalog(LocalStore(store), "backups", "c1", "db1"),
        live=kw.pop("live", root_target(names.server)),
        tables=tables,
        scratch_dir=kw.pop("scratch_dir"),
        **kw,
    )


@pytest.mark.parametrize(
    "case",
    ["misspelled", "newline-in-table", "newline-in-new-name", "default-name-too-long", "new-name-too-long"],
)
def test_both_names_are_checked_before_anything_is_fetched(names, tmp_path, case):
    """On main each of these went on to fetch the chain (here: a missing object) first."""
    db = names.db
    tables, new_names, said = {
        "misspelled": ([f"{db}.nope"], [], f"{db}.nope is not in backup {names.backup.backup_id}"),
        "newline-in-table": ([f"{db}.t\n"], [], "table 'names_"),
        "newline-in-new-name": ([f"{db}.t"], [f"{db}.t_restored\n"], "new name 'names_"),
        "default-name-too-long": ([f"{db}.{LONG}"], [], f"{LONG}_restored is 69 characters"),
        "new-name-too-long": ([f"{db}.t"], [f"{db}.{'n' * 65}"], "new name"),
    }[case]
    with pytest.raises(TableRestoreError) as err:
        restore_tables(_request(names, names.hollow, tables, new_names=new_names, scratch_dir=tmp_path))
    message = str(err.value)
    print(message)
    assert said in message
    if "newline" in case:
        assert "\\n" in message, "the value is shown quoted"
    assert not list(tmp_path.glob("xbp-tables-*")), "no scratch restore"
    assert names.server.query(f"SHOW TABLES FROM {db} LIKE 't%restored%'") == []


def test_a_misspelled_table_is_one_cli_line_naming_it_before_any_download(
    names, tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    defaults = names.server.write_client_defaults(tmp_path / "client.cnf")
    config = tmp_path / "fleet.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(names.hollow)},
                "encryption": {"enabled": False},
                "clusters": [{"name": "c1", "hosts": [{"name": "db1", "defaults_file": str(defaults)}]}],
            }
        )
    )
    rc = cli_main(
        [
            "restore-table",
            *("--config", str(config), "--cluster", "c1", "--host", "db1"),
            *("--table", f"{names.db}.T", "--scratch-dir", str(tmp_path)),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert f"{names.db}.T is not in backup" in line and f"{names.db}.t" in line, line  # names the near miss


def test_a_table_created_after_the_backup_is_restored_to_a_later_point(names, tmp_path):
    """Not in the backup's table list, but a shipped binlog after it creates it: not refused."""
    db = names.db
    gtid = PitrTarget.at_gtid(names.server.query("SELECT @@gtid_binlog_pos")[0][0])
    try:
        report = restore_tables(
            _request(names, names.store, [f"{db}.later"], target=gtid, scratch_dir=tmp_path)
        )
        assert [t.created for t in report.tables] == [f"{db}.later_restored"]
        assert names.server.query(f"SELECT id FROM {db}.later_restored") == [(7,)]
    finally:
        _unlogged(names.server, f"DROP TABLE IF EXISTS {db}.later_restored")


def test_a_rollback_that_cannot_drop_the_new_table_names_it(names, tmp_path):
    """An account that may CREATE but neither ALTER (DISCARD TABLESPACE) nor DROP: the import fails
    after the new table was created, and the rollback cannot drop it. On main the message said
    `the tables this run created were dropped again` while the table stayed on the live server."""
    db, password = names.db, uuid.uuid4().hex
    _unlogged(
        names.server,
        f"CREATE USER lim@localhost IDENTIFIED BY '{password}'",
        f"GRANT SELECT, CREATE, INSERT ON {db}.* TO lim@localhost",
        "GRANT BINLOG ADMIN, PROCESS ON *.* TO lim@localhost",
    )
    live = MySQLTarget(socket=str(names.server.socket), user="lim", password=password)
    try:
        with pytest.raises(TableRestoreError) as err:
            restore_tables(_request(names, names.store, [f"{db}.t"], live=live, scratch_dir=tmp_path))
        message = str(err.value)
        print(message)
        assert f"could not drop {db}.t_restored" in message and "DROP command denied" in message
        assert "were dropped again" not in message
        assert names.server.query(f"SHOW TABLES FROM {db} LIKE 't_restored'") == [("t_restored",)]
    finally:
        _unlogged(names.server, f"DROP TABLE IF EXISTS {db}.t_restored", "DROP USER lim@localhost")
