"""MySQL's restore-test roll-forward (level full of a clone backup, core/pitr/mysql_roll_forward.py)
reads the binlogs shipped after the tested backup under a read lease, as MariaDB's does
(tests/integration/test_restore_test_roll_lease.py): a `retention apply` that runs while it reads
them keeps them, naming the lease, and deletes them on its next run once the test is done.

Before the fix the roll-forward held no lease: retention deleted the binlogs under it and the
restore test failed on a missing object, a false alarm.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import RetentionOnBinlogRead, clone_backup, ship_mysql_binlogs, unique_name
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.pitr.roll_forward import ShippedBinlogs
from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test
from xtrabackup_provider.core.retention.apply import apply_plan, plan_host
from xtrabackup_provider.core.retention.model import RetentionPolicy
from xtrabackup_provider.core.storage.local import LocalStore

pytestmark = pytest.mark.mysql

KEEP_LAST = RetentionPolicy(keep_last_chains=1, min_age_days=0)
AGO = 7200  # seconds the writes after the first backup are stamped back (retention keeps younger binlogs)


@dataclass
class History:
    store: Path  # the store as the fixture left it (each test copies it)
    b1: Manifest  # the backup tested: retention deletes it and the binlogs after it
    doomed: list[str]  # `<uuid>/<binlog>`: the shipped binlogs retention deletes, read by B1's roll-forward


def _catalog(root: Path) -> Catalog:
    return Catalog(LocalStore(root), "backups", "c1", "db1")


@pytest.fixture(scope="module")
def history(mysql_factory, tmp_path_factory) -> Iterator[History]:
    server = mysql_factory("rflmy", root_password=secrets.token_urlsafe(16))
    base = tmp_path_factory.mktemp("rflmy")
    catalog = _catalog(base / "store")
    t = f"{unique_name('rfl')}.t"
    try:
        server.query("INSTALL PLUGIN clone SONAME 'mysql_clone.so'")
        server.execute_script(
            f"CREATE DATABASE {t.split('.')[0]}; CREATE TABLE {t} (id INT PRIMARY KEY, v VARCHAR(40));"
            f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b'), (3, 'c');"
        )
        b1 = clone_backup(server, catalog, base / "s1")
        # Stamped two hours back (the session's clock; the Rotate events too): retention keeps the
        # binlogs of the last hour before its oldest kept backup, so these ones it may delete.
        server.execute_script(
            f"SET SESSION timestamp = UNIX_TIMESTAMP() - {AGO};"
            f"INSERT INTO {t} VALUES (4, 'd'); UPDATE {t} SET v = 'z' WHERE id = 1; FLUSH BINARY LOGS;"
            f"INSERT INTO {t} VALUES (5, 'e'); DELETE FROM {t} WHERE id = 2; FLUSH BINARY LOGS;"
        )
        clone_backup(server, catalog, base / "s2")
        server.execute_script(f"INSERT INTO {t} VALUES (6, 'f'); FLUSH BINARY LOGS;")
        assert ship_mysql_binlogs(catalog, server).shipped
        # The premise: without a lease, retention deletes B1 and binlogs its roll-forward reads.
        verdicts = {i.name: i.action for i in plan_host(catalog, KEEP_LAST).items}
        assert verdicts[b1.backup_id] == "delete", verdicts
        doomed = [
            n for n, action in verdicts.items() if n.startswith(f"{b1.server_uuid}/") and action == "delete"
        ]
        assert f"{b1.server_uuid}/{b1.binlog_file}" in doomed, (b1.binlog_file, verdicts)
        yield History(base / "store", b1, doomed)
    finally:
        mysql_factory.discard(server)


def test_retention_during_the_roll_forward_keeps_the_binlogs_it_reads(history, tmp_path):
    root = tmp_path / "store"
    shutil.copytree(history.store, root)
    store = RetentionOnBinlogRead(root)
    catalog = Catalog(store, "backups", "c1", "db1")

    report = run_restore_test(
        RestoreTestRequest(
            catalog,
            tmp_path / "rt",
            history.b1.backup_id,
            level="full",
            write_report=False,
            roll_forward=ShippedBinlogs(catalog),
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
