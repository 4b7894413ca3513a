"""A standby copy kept prepared as the chain grows restores with only the last step."""

from __future__ import annotations

from helpers import add_orders, restored_checksums, seed_database, unique_name
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.restore.standby import load_state, restore_standby, update_standby
from xtrabackup_provider.core.storage.local import LocalStore


def test_standby_follows_the_chain_and_restores_the_newest_state(mariadb, gpg_keys, tmp_path):
    db = unique_name("standby")
    seed_database(mariadb, db, rows=1000)
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    target = MySQLTarget(socket=str(mariadb.socket), user="root", password=mariadb.root_password)
    standby = tmp_path / "standby"
    keys = {"private_key": gpg_keys.private_key, "passphrase": gpg_keys.passphrase}

    def backup(kind: str) -> str:
        return run_backup(
            BackupRequest(catalog=catalog, target=target, kind=kind, public_keys=[gpg_keys.public_key])
        ).backup_id

    full = backup("full")
    first = update_standby(catalog, standby, **keys)
    assert first.rebuilt and first.newest == full
    ids = [full]
    for _ in range(3):
        add_orders(mariadb, db, 300)
        mariadb.query(f"UPDATE `{db}`.customers SET name = CONCAT(name, '+') WHERE id % 7 = 0")
        ids.append(backup("incremental"))
        update = update_standby(catalog, standby, **keys)
        assert not update.rebuilt and update.applied_now == [ids[-1]] and update.newest == ids[-1]
    state = load_state(standby)
    assert state is not None and state.applied == ids and state.base_prepared

    expected = table_checksums(mariadb, [db])
    datadir = tmp_path / "restored" / "data"
    assert restore_standby(catalog, standby, datadir).backup_id == ids[-1]
    assert restored_checksums(datadir, tmp_path / "sb", [db], server_id=950) == expected

    # MariaBackup: the standby keeps taking incrementals after a restore from it.
    add_orders(mariadb, db, 100)
    ids.append(backup("incremental"))
    assert update_standby(catalog, standby, **keys).applied_now == [ids[-1]]
    expected = table_checksums(mariadb, [db])
    datadir2 = tmp_path / "restored2" / "data"
    restore_standby(catalog, standby, datadir2)
    assert restored_checksums(datadir2, tmp_path / "sb2", [db], server_id=951) == expected

    # A new full starts a new chain: the standby is rebuilt from it.
    new_full = backup("full")
    rebuilt = update_standby(catalog, standby, **keys)
    assert rebuilt.rebuilt and rebuilt.chain_root == new_full
