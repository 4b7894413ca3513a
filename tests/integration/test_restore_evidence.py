"""Restore tests that prove the data, with real servers: a replica's backup, its binlogs shipped
after more writes on the source, then every level (quick, full, deep) on the good backup, and
backups that are broken in ways the old checks missed: a flipped page CHECK TABLE never reads, a
shipped binlog gone from the catalog, another host's backup passed off as this host's."""

from __future__ import annotations

import json
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import GpgKeys, deep_pair, root_target, seed_database, unique_name, wait_caught_up
from replica_helpers import backup_tablespace, flip_page, rewrite_backup, transplant
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.catalog.reports import read_report
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.pitr.roll_forward import ShippedBinlogs
from xtrabackup_provider.core.restore.replica_compare import SourceCompare
from xtrabackup_provider.core.restore.restore_test import (
    RestoreTestReport,
    RestoreTestRequest,
    run_restore_test,
)
from xtrabackup_provider.core.storage.local import LocalStore

QUICK = ["chain", "innochecksum", "check_table", "canary", "position", "row_counts", "source_shape"]
FULL = [*QUICK, "roll_forward"]
DEEP = [*FULL, "replica_checksum"]


@dataclass
class Cluster:
    source: SandboxServer
    replica: SandboxServer
    root: Path
    db: str
    backup: Manifest
    plain: Manifest  # an unencrypted backup of the same replica (host db2 of cluster c2)
    deep: SourceCompare
    keys: GpgKeys

    def catalog(self, root: Path | None = None, cluster: str = "c1", host: str = "db2") -> Catalog:
        return Catalog(LocalStore((root or self.root) / "store"), "backups", cluster, host)

    def copy(self, dest: Path) -> Path:
        """A copy of the whole store to break without touching the others' tests."""
        shutil.copytree(self.root / "store", dest / "store")
        return dest


@pytest.fixture(scope="module")
def cluster(mariadb_factory, gpg_keys, tmp_path_factory) -> Cluster:
    source, replica, deep = deep_pair(mariadb_factory, "ev", catch_up_timeout=300, poll_seconds=0.2)
    db = unique_name("ev")
    seed_database(source, db, rows=4000)
    wait_caught_up(source, replica)
    # A clean restart checkpoints the tables: the backups' redo then holds no page of them, so a page
    # altered in a stored backup stays altered through prepare (as a bad page copied by the tool would).
    replica.stop()
    replica.start()
    wait_caught_up(source, replica)
    root = tmp_path_factory.mktemp("evidence")
    keys = dict(public_keys=[gpg_keys.public_key])
    catalog = Catalog(LocalStore(root / "store"), "backups", "c1", "db2")
    common = dict(target=root_target(replica), heartbeat=True, heartbeat_target=root_target(source))
    backup = run_backup(BackupRequest(catalog=catalog, **common, **keys))
    plain_catalog = Catalog(LocalStore(root / "store"), "backups", "c2", "db2")
    plain = run_backup(BackupRequest(catalog=plain_catalog, **common, allow_unencrypted=True))
    # After the backups: writes on the source over three of the replica's binlogs, all shipped ...
    for n in range(3):
        source.query(
            f"INSERT INTO `{db}`.orders SELECT id + {100_000 * (n + 1)}, customer_id, amount, note FROM `{db}`.orders WHERE id <= 500"
        )
        source.query(f"UPDATE `{db}`.customers SET email = CONCAT('u{n}-', email) WHERE id % 3 = {n}")
        wait_caught_up(source, replica)
        replica.query("FLUSH BINARY LOGS")
    for c in (catalog, plain_catalog):
        ship_binlogs(
            ShipRequest(
                catalog=c,
                target=root_target(replica),
                allow_unencrypted=c is plain_catalog,
                flush=True,
                **({} if c is plain_catalog else keys),
            )
        )
    # ... and one more the deep level's replica fetches from the source itself.
    source.query(f"DELETE FROM `{db}`.orders WHERE id % 10 = 0")
    return Cluster(source, replica, root, db, backup, plain, deep, gpg_keys)


def _test(
    c: Cluster, catalog: Catalog, backup_id: str, level: str, work: Path, keys: bool = True
) -> RestoreTestReport:
    key, passphrase = (c.keys.private_key, c.keys.passphrase) if keys else (None, None)
    report = run_restore_test(
        RestoreTestRequest(
            catalog,
            work,
            backup_id,
            private_key=key,
            passphrase=passphrase,
            level=level,  # type: ignore[arg-type]
            roll_forward=ShippedBinlogs(catalog, key, passphrase),
            deep=c.deep,
        )
    )
    print(f"--- {level} restore test of {catalog.host} {backup_id}: {report.headline()}")
    for r in report.results:
        print(f"    {r['name']:16} {r['status']:7} {'; '.join(r['reasons']) or r['note']}")
    return report


def _status(report: RestoreTestReport) -> dict[str, str]:
    return {r["name"]: r["status"] for r in report.results}


@pytest.mark.parametrize("level", ["quick", "full", "deep"])
def test_each_level_passes_on_a_good_backup_and_names_what_it_checked(cluster, level, tmp_path):
    catalog = cluster.catalog()
    report = _test(cluster, catalog, cluster.backup.backup_id, level, tmp_path / "rt")
    assert report.passed, report.reasons
    assert [r["name"] for r in report.results] == {"quick": QUICK, "full": FULL, "deep": DEEP}[level]
    assert set(_status(report).values()) == {"pass"}
    stored = read_report(catalog, cluster.backup.backup_id)
    assert stored is not None and stored["failed_checks"] == [] and stored["level"] == level
    assert report.checks["innodb_binlog_position"].startswith("mysql-bin.")
    if level != "quick":
        rolled = next(r for r in report.results if r["name"] == "roll_forward")
        shipped = BinlogCatalog(catalog, cluster.backup.server_uuid).index().shipped()
        newest = [m.gtid_last for m in shipped if m.gtid_last][-1]
        assert rolled["detail"]["gtid"] == newest, "the roll-forward reached the newest shipped GTID"
        assert rolled["detail"]["binlogs"] >= 3
    if level == "deep":
        deep = next(r for r in report.results if r["name"] == "replica_checksum")
        assert deep["detail"]["checksum"]["differing_count"] == 0
        assert deep["detail"]["checksum"]["tables"] >= 3
    print(json.dumps({"level": level, "timings": {k: round(v, 2) for k, v in report.timings.items()}}))


def test_a_flipped_page_that_check_table_never_reads_fails_innochecksum(cluster, tmp_path):
    """Page 1 of a table's tablespace (its change-buffer bitmap) flipped in the stored backup: CHECK
    TABLE still passes (it walks the indexes), the page checksum does not."""
    root = cluster.copy(tmp_path)
    catalog = cluster.catalog(root, "c2")
    rewrite_backup(
        catalog,
        cluster.plain,
        tmp_path,
        lambda d: flip_page(backup_tablespace(d, cluster.db, "orders"), page=1),
    )
    report = _test(cluster, catalog, cluster.plain.backup_id, "quick", tmp_path / "rt", keys=False)
    assert report.failed_checks == ["innochecksum"]
    status = _status(report)
    assert status["check_table"] == "pass", "CHECK TABLE does not see this page"
    assert f"{cluster.db}/orders.ibd" in report.reasons[0] and "page::1" in report.reasons[0]
    stored = read_report(catalog, cluster.plain.backup_id)
    assert stored is not None and stored["failed_checks"] == ["innochecksum"]


def test_a_shipped_binlog_missing_from_the_catalog_fails_the_roll_forward(cluster, tmp_path):
    root = cluster.copy(tmp_path)
    catalog = cluster.catalog(root)
    binlogs = BinlogCatalog(catalog, cluster.backup.server_uuid)
    names = binlogs.index().names()
    after = names[names.index(cluster.backup.binlog_file) + 1 :]
    assert len(after) >= 2
    lost = after[0]  # after the backup's binlog, before the newest
    catalog.store.delete([binlogs.manifest_key(lost)])
    report = _test(cluster, catalog, cluster.backup.backup_id, "full", tmp_path / "rt")
    assert report.failed_checks == ["roll_forward"]
    assert f"{lost} is not shipped although later binlogs are" in report.reasons[0]
    assert f"newest shipped binlog {names[-1]}" in report.reasons[0]


def test_another_hosts_backup_passed_off_as_this_hosts_fails_roll_forward_and_deep(
    cluster, mariadb_factory, tmp_path
):
    other = mariadb_factory("ev-other", root_password=secrets.token_urlsafe(12))
    try:
        seed_database(other, cluster.db, rows=4000)  # the same schema: only its history differs
        theirs = Catalog(LocalStore(tmp_path / "theirs"), "backups", "c9", "other")
        foreign = run_backup(BackupRequest(catalog=theirs, target=root_target(other), allow_unencrypted=True))
    finally:
        mariadb_factory.discard(other)
    root = cluster.copy(tmp_path)
    catalog = cluster.catalog(root)
    transplant(theirs, foreign.backup_id, catalog)
    quick = _test(cluster, catalog, foreign.backup_id, "quick", tmp_path / "q", keys=False)
    assert quick.passed, "its data matches its own manifest: the quick level cannot tell"
    deep = _test(cluster, catalog, foreign.backup_id, "deep", tmp_path / "d", keys=False)
    assert deep.failed_checks == ["roll_forward", "replica_checksum"]
    assert "none of them the backup's server" in deep.reasons[0]
    assert "1236" in deep.reasons[1] or "not in the master's binlog" in deep.reasons[1], deep.reasons
