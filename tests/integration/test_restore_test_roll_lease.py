"""The restore test's roll-forward (level full, core/pitr/roll_forward.py) reads the binlogs shipped
after the tested backup under a read lease (core/catalog/lease.py), as every other read path does:
a `retention apply` that runs while it reads them keeps them, naming the lease, and deletes them
on its next run once the restore test is done.

The history (one MariaDB server): B1 full; writes stamped two hours back (SET TIMESTAMP, their
binlogs' Rotate included) over two binlogs; B2 full; the binlogs shipped. Keeping the last chain,
retention deletes B1 and those binlogs. Testing B1 at level full reads them in its roll-forward.

Before the fix the roll-forward held no lease (the chain's ended with the restore): retention
deleted the binlogs under it and the restore test failed on a missing object, a false alarm.
A worker that may not write the lease fails the roll-forward naming it, unless told to go on
(`without_read_lease`), as every other read path does.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from helpers import GpgKeys, RetentionOnBinlogRead, root_target, take_backup, unique_name
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.pitr.roll_forward import ShippedBinlogs
from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test
from xtrabackup_provider.core.retention.apply import apply_plan, plan_host
from xtrabackup_provider.core.retention.model import RetentionPolicy
from xtrabackup_provider.core.storage.base import PutOptions, StorageError
from xtrabackup_provider.core.storage.local import LocalStore

KEEP_LAST = RetentionPolicy(keep_last_chains=1, min_age_days=0)
BACKDATE = timedelta(hours=2)  # further back than retention's slack for the binlogs before a chain


@dataclass
class History:
    store: Path  # the store as the fixture left it (each test copies it)
    b1: Manifest  # the backup tested: retention deletes it and the binlogs after it
    uuid: str
    doomed: list[str]  # `<uuid>/<binlog>`: the shipped binlogs retention deletes, read by B1's roll-forward
    keys: GpgKeys


def _catalog(root: Path) -> Catalog:
    return Catalog(LocalStore(root), "backups", "c1", "db1")


@pytest.fixture(scope="module")
def history(mariadb_factory, gpg_keys, tmp_path_factory) -> Iterator[History]:
    server = mariadb_factory("rflease", root_password=secrets.token_urlsafe(16))
    root = tmp_path_factory.mktemp("rflease") / "store"
    catalog = _catalog(root)
    db = unique_name("rfl")
    try:
        server.query(f"CREATE DATABASE `{db}`")
        server.query(
            f"CREATE TABLE `{db}`.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(40)) ENGINE=InnoDB"
        )
        server.query("INSERT INTO t (v) SELECT 'seed' FROM seq_1_to_100", database=db)
        b1 = take_backup(server, catalog, gpg_keys, "full")
        old = server.connect()  # the session with its clock two hours back
        try:
            cur = old.cursor()
            cur.execute("SET TIMESTAMP = %s", (int((datetime.now(UTC) - BACKDATE).timestamp()),))
            cur.execute(f"USE `{db}`")
            cur.execute("INSERT INTO t (v) SELECT 'old 1' FROM seq_1_to_50")
            cur.execute("FLUSH BINARY LOGS")
            cur.execute(f"UPDATE `{db}`.t SET v = 'old 2' WHERE id % 3 = 0")
            cur.execute("FLUSH BINARY LOGS")
        finally:
            old.close()
        take_backup(server, catalog, gpg_keys, "full")
        server.query(f"INSERT INTO `{db}`.t (v) VALUES ('after B2')")
        ship = ShipRequest(
            catalog=catalog, target=root_target(server), public_keys=[gpg_keys.public_key], flush=True
        )
        assert ship_binlogs(ship).shipped
        # The premise: without a lease, retention deletes B1 and binlogs its roll-forward reads.
        verdicts = {i.name: i.action for i in plan_host(catalog, KEEP_LAST).items}
        assert verdicts[b1.backup_id] == "delete", verdicts
        doomed = [
            n for n, action in verdicts.items() if n.startswith(f"{b1.server_uuid}/") and action == "delete"
        ]
        assert any(n.endswith(b1.binlog_file or "?") for n in doomed), (b1.binlog_file, verdicts)
        yield History(root, b1, b1.server_uuid, doomed, gpg_keys)
    finally:
        mariadb_factory.discard(server)


def test_retention_during_the_roll_forward_keeps_the_binlogs_it_reads(history, tmp_path):
    root = tmp_path / "store"
    shutil.copytree(history.store, root)
    store = RetentionOnBinlogRead(root)
    catalog = Catalog(store, "backups", "c1", "db1")
    key, passphrase = history.keys.private_key, history.keys.passphrase

    report = run_restore_test(
        RestoreTestRequest(
            catalog,
            tmp_path / "rt",
            history.b1.backup_id,
            private_key=key,
            passphrase=passphrase,
            level="full",
            write_report=False,
            roll_forward=ShippedBinlogs(catalog, key, passphrase),
        )
    )

    assert store.ran is not None, "retention never ran: the roll-forward read no binlog"
    plan, applied = store.ran
    reasons = {i.name: (i.action, i.reason) for i in plan.items}
    for name in history.doomed:
        action, reason = reasons[name]
        assert action == "keep" and "read lease" in reason and "restore test" in reason, (name, reasons[name])
    assert not set(history.doomed) & set(applied.deleted), applied.deleted
    rolled = {r["name"]: r for r in report.results}["roll_forward"]
    assert report.verdict == "pass" and rolled["status"] == "pass", (report.reasons, rolled)
    # The roll-forward's lease is gone with it: the same policy deletes them now.
    after = apply_plan(_catalog(root), plan_host(_catalog(root), KEEP_LAST), confirm=True)
    assert set(history.doomed) <= set(after.deleted), after.deleted


class NoLeaseWrites(LocalStore):
    """A directory store where this worker may not write leases (credentials that may only read
    backups and binlogs, as a restore-test worker's may be)."""

    def put_bytes(self, key: str, data: bytes, options: PutOptions | None = None) -> None:
        if "/leases/" in key:
            raise StorageError(f"{self.location}: access denied writing {key!r}")
        super().put_bytes(key, data, options)


def test_a_roll_forward_that_cannot_write_its_lease_fails_naming_it_unless_told_to_go_on(history, tmp_path):
    root = tmp_path / "store"
    shutil.copytree(history.store, root)
    catalog = Catalog(NoLeaseWrites(root), "backups", "c1", "db1")
    key, passphrase = history.keys.private_key, history.keys.passphrase

    def test(work: str, roll_unleased_ok: bool):
        return run_restore_test(
            RestoreTestRequest(
                catalog,
                tmp_path / work,
                history.b1.backup_id,
                private_key=key,
                passphrase=passphrase,
                level="full",
                write_report=False,
                without_read_lease=True,  # the chain restore goes on: the roll-forward's own is tested
                roll_forward=ShippedBinlogs(catalog, key, passphrase, without_read_lease=roll_unleased_ok),
            )
        )

    refused = test("rt1", False)
    rolled = {r["name"]: r for r in refused.results}["roll_forward"]
    assert refused.verdict == "fail" and rolled["status"] == "fail", rolled
    [reason] = rolled["reasons"]
    assert "could not write the read lease" in reason and "--without-read-lease" in reason, reason
    assert "restore test's roll-forward" in reason and history.doomed[0] in reason, reason
    accepted = test("rt2", True)
    rolled = {r["name"]: r for r in accepted.results}["roll_forward"]
    assert accepted.verdict == "pass" and rolled["status"] == "pass", (accepted.reasons, rolled)
