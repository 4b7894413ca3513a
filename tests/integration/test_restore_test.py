"""Restore tests catch a backup of the wrong data: the canary of a lagging replica is missing."""

from __future__ import annotations

import secrets

from helpers import seed_database, start_replication, unique_name, wait_caught_up
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.reports import read_report
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test
from xtrabackup_provider.core.storage.local import LocalStore


def _target(server) -> MySQLTarget:
    return MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)


def test_backup_of_a_stalled_replica_fails_the_canary_check(mariadb_factory, gpg_keys, tmp_path):
    source = mariadb_factory("canary-src", root_password=secrets.token_urlsafe(12))
    replica = mariadb_factory("canary-rep", root_password=secrets.token_urlsafe(12))
    try:
        seed_database(source, unique_name("canary"), rows=300)
        start_replication(source, replica)
        wait_caught_up(source, replica)
        catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "replica")
        request = dict(
            catalog=catalog,
            target=_target(replica),
            heartbeat=True,
            heartbeat_target=_target(source),
            public_keys=[gpg_keys.public_key],
        )
        keys = dict(private_key=gpg_keys.private_key, passphrase=gpg_keys.passphrase)

        good = run_backup(BackupRequest(**request, kind="full"))
        replica.query("STOP SLAVE SQL_THREAD")
        stale = run_backup(BackupRequest(**request, kind="full", heartbeat_wait=1))

        stale_report = run_restore_test(
            RestoreTestRequest(catalog, tmp_path / "rt1", stale.backup_id, **keys)
        )
        assert stale_report.verdict == "fail"
        assert any(f"canary row for {stale.backup_id} missing" in r for r in stale_report.reasons)
        assert read_report(catalog, stale.backup_id)["verdict"] == "fail"
        assert not (tmp_path / "rt1").exists(), "the scratch datadir must be removed whatever happens"

        good_report = run_restore_test(RestoreTestRequest(catalog, tmp_path / "rt2", good.backup_id, **keys))
        assert good_report.verdict == "pass", good_report.reasons
        assert good_report.checks["canary"] == "found"
    finally:
        mariadb_factory.discard(replica)
        mariadb_factory.discard(source)
