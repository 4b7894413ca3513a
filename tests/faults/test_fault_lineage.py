"""An incremental belongs to its parent's data history, and a forced incremental never continues a
chain that does not validate.

Real components: MariaDB sandboxes, mariabackup, the product's own restore. A host's datadir is
re-seeded with another server's data (as a replica rebuilt from elsewhere): same path, port and
server_id, so the identity `mariadb-<hostname>-<port>-<server_id>` is unchanged. Two cases:
"lower" (the new data's LSN is below the parent's, the incremental's to_lsn ends below its
from_lsn and the chain fails in prepare) and "higher" (the new data's LSN is far above: the chain
prepares and silently restores the other server's data over the old full).
"""

from __future__ import annotations

import secrets
import shutil

import pytest

from helpers import add_orders, seed_database, unique_name
from xtrabackup_provider.core.backup.run import BackupError, BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.restore.chain import RestoreRequest, restore
from xtrabackup_provider.core.storage.local import LocalStore


def _target(server: SandboxServer, password: str | None = None) -> MySQLTarget:
    return MySQLTarget(socket=str(server.socket), user="root", password=password or server.root_password)


def _request(catalog: Catalog, target: MySQLTarget, kind: str) -> BackupRequest:
    # heartbeat=True is the fleet config's default (policy.heartbeat): the lineage row is planted.
    return BackupRequest(catalog=catalog, target=target, kind=kind, heartbeat=True, allow_unencrypted=True)


@pytest.mark.parametrize("case", ["lower", "higher"])
def test_a_reseeded_datadir_gets_a_full_and_a_forced_incremental_is_refused(case, mariadb_factory, tmp_path):
    big, small = 40_000, 500
    a = mariadb_factory(f"reseed-a-{case}", root_password=secrets.token_urlsafe(12))
    b = mariadb_factory(f"reseed-b-{case}", root_password=secrets.token_urlsafe(12))
    reseeded: SandboxServer | None = None
    try:
        b_db = unique_name("b")
        seed_database(a, unique_name("a"), rows=big if case == "lower" else small)
        seed_database(b, b_db, rows=small if case == "lower" else big)
        store = LocalStore(tmp_path / "store")
        catalog = Catalog(store, "backups", "c1", "a")
        full = run_backup(_request(catalog, _target(a), "full"))
        other = Catalog(store, "backups", "c1", "b")
        run_backup(_request(other, _target(b), "full"))
        b.stop()

        # B's data becomes A's datadir: same path, port and server_id.
        a.stop()
        shutil.rmtree(a.datadir)
        restore(RestoreRequest(catalog=other, target_datadir=a.datadir, scratch_dir=tmp_path / "scratch"))
        reseeded = SandboxServer.on_datadir(
            a.datadir,
            a.basedir,
            server_id=a.server_id,
            port=a.port,
            skip_grant_tables=False,
            root_password=b.root_password,
        )
        reseeded.start()
        now = _target(reseeded, b.root_password)

        with pytest.raises(BackupError) as excinfo:
            run_backup(_request(catalog, now, "incremental"))
        message = str(excinfo.value)
        print(f"{case}: forced incremental: {message}")
        assert f"does not descend from {full.backup_id}" in message, message
        assert f"parent {full.backup_id}: {full.server_uuid}" in message, message
        assert f"last_lsn {full.last_lsn}" in message and "this server:" in message, message
        assert catalog.backup_ids() == [full.backup_id], "a forced incremental was registered"

        auto = run_backup(_request(catalog, now, "auto"))
        print(f"{case}: auto: {auto.kind}: {auto.decision_reason}")
        assert auto.kind == "full", auto.decision_reason
        assert f"does not descend from {full.backup_id}" in auto.decision_reason
        # ... and the next one continues the new history normally.
        add_orders(reseeded, b_db, 100)
        nxt = run_backup(_request(catalog, now, "auto"))
        assert nxt.kind == "incremental" and nxt.parent_id == auto.backup_id, nxt.decision_reason
    finally:
        if reseeded is not None:
            reseeded.stop()


def test_a_forced_incremental_on_a_chain_that_does_not_validate_is_refused(seeded, tmp_path):
    server, db = seeded
    store = LocalStore(tmp_path / "store")
    catalog = Catalog(store, "backups", "c1", "db1")
    full = run_backup(_request(catalog, _target(server), "full"))
    add_orders(server, db, 200)
    inc = run_backup(_request(catalog, _target(server), "incremental"))
    store.delete([catalog.manifest_key(full.backup_id)])  # the chain of `inc` no longer validates
    add_orders(server, db, 200)
    with pytest.raises(BackupError) as excinfo:
        run_backup(_request(catalog, _target(server), "incremental"))
    message = str(excinfo.value)
    print("forced incremental:", message)
    assert "an incremental was requested but the newest chain is not valid" in message, message
    assert full.backup_id in message and "take a full backup" in message, message
    assert catalog.backup_ids() == [inc.backup_id], "a forced incremental was registered on a broken chain"
