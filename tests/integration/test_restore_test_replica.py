"""The deep restore test's replica (core/restore/replica_compare.py) with real servers: it gets the
checks provision-replica makes before anything is restored, and every wait on it is bounded and
fails naming the replica's own error: a wrong replication password is found before the sandbox
is attached; a damaged page that stops the sandbox replica's SQL thread under pt-table-checksum
fails the check naming Last_SQL_Errno instead of leaving pt waiting for the replica."""

from __future__ import annotations

import secrets
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from helpers import root_target, seed_database, unique_name
from replica_helpers import backup_tablespace, flip_page, rewrite_backup
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.replication import ReplicationSource
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.checksum import ChecksumOptions
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.restore.replica_compare import SourceCompare
from xtrabackup_provider.core.restore.restore_test import (
    RestoreTestReport,
    RestoreTestRequest,
    run_restore_test,
)
from xtrabackup_provider.core.storage.local import LocalStore


@dataclass
class Source:
    server: SandboxServer
    db: str
    store: Path
    backup: Manifest
    deep: SourceCompare

    def catalog(self, store: Path | None = None) -> Catalog:
        return Catalog(LocalStore(store or self.store), "backups", "c1", "db1")


@pytest.fixture(scope="module")
def source(mariadb_factory, tmp_path_factory) -> Source:
    server = mariadb_factory("rtr-src", root_password=secrets.token_urlsafe(12))
    repl, check = uuid.uuid4().hex, uuid.uuid4().hex
    server.execute_script(
        f"CREATE USER xrepl@'127.0.0.1' IDENTIFIED BY '{repl}'; GRANT REPLICATION SLAVE ON *.* TO xrepl@'127.0.0.1';"
        f"CREATE USER xbp_checksum@'127.0.0.1' IDENTIFIED BY '{check}';"
        "GRANT SELECT, PROCESS, SUPER, BINLOG ADMIN, SLAVE MONITOR, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO xbp_checksum@'127.0.0.1';"
        "GRANT ALL ON percona.* TO xbp_checksum@'127.0.0.1';"
    )
    db = unique_name("rtr")
    seed_database(server, db, rows=2000)
    server.execute_script(
        f"CREATE TABLE `{db}`.victim (id INT PRIMARY KEY, k INT NOT NULL, v VARCHAR(200), KEY k (k)) ENGINE=InnoDB;"
        f"INSERT INTO `{db}`.victim SELECT seq, seq * 7, REPEAT('v', 150) FROM seq_1_to_3000;",
        database=db,
    )
    # A clean restart checkpoints the tables: the backup's redo then holds no page of them, so a
    # page altered in the stored backup stays altered through prepare.
    server.stop()
    server.start()
    store = tmp_path_factory.mktemp("rtr") / "store"
    catalog = Catalog(LocalStore(store), "backups", "c1", "db1")
    backup = run_backup(BackupRequest(catalog=catalog, target=root_target(server), allow_unencrypted=True))
    deep = SourceCompare(
        ReplicationSource("127.0.0.1", server.port, "xrepl", repl, connect_retry=1, label="c1/db1"),
        MySQLTarget(host="127.0.0.1", port=server.port, user="xbp_checksum", password=check),
        catch_up_timeout=120,
        poll_seconds=0.2,
        checksum=ChecksumOptions(timeout_minutes=3),
    )
    return Source(server, db, store, backup, deep)


def _deep(source: Source, catalog: Catalog, work: Path, deep: SourceCompare) -> RestoreTestReport:
    report = run_restore_test(
        RestoreTestRequest(
            catalog, work, source.backup.backup_id, level="deep", write_report=False, deep=deep
        )
    )
    print(report.headline())
    for r in report.results:
        print(f"    {r['name']:16} {r['status']:7} {'; '.join(r['reasons']) or r['note']}")
    return report


def _result(report: RestoreTestReport, name: str) -> dict:
    return next(r for r in report.results if r["name"] == name)


def test_a_wrong_replication_password_fails_the_deep_check_before_the_sandbox_is_attached(source, tmp_path):
    """On main the sandbox was attached and the check waited the whole catch-up timeout."""
    wrong = replace(source.deep, source=replace(source.deep.source, password="not-the-password"))
    report = _deep(source, source.catalog(), tmp_path / "rt", wrong)
    deep = _result(report, "replica_checksum")
    assert report.failed_checks == ["replica_checksum"], report.reasons
    assert "the replication account xrepl@127.0.0.1" in deep["reasons"][0] and "1045" in deep["reasons"][0]
    assert "caught_up_seconds" not in deep["detail"], "the sandbox never became a replica"


def _update_victim_once_pt_runs(source: Source, stop: threading.Event) -> None:
    """Updates every row of `victim` on the source as soon as pt-table-checksum is connected to it:
    the sandbox replica, caught up before pt started, meets the damaged page only then."""
    running = "SELECT COUNT(*) FROM information_schema.processlist WHERE user = 'xbp_checksum'"
    while not stop.is_set():
        if source.server.query(running)[0][0]:
            source.server.query(f"UPDATE `{source.db}`.victim SET k = k + 1")
            return
        time.sleep(0.02)


def test_a_damaged_page_that_stops_the_sandbox_replica_under_pt_fails_naming_its_sql_error(source, tmp_path):
    """The root page of `victim` flipped in the stored backup; pt-table-checksum leaves `victim` out
    (ignore_tables), and the source updates `victim` while pt runs: the sandbox replica's SQL thread
    stops on the damaged table while pt checksums the others. The check fails naming Last_SQL_Errno
    and the table, rather than pt waiting on a replica that will never catch up (on main: bounded only
    by pt-table-checksum's own timeout, 240 minutes by default), or pt's own REPLICATION_STOPPED, which
    names no error."""
    shutil.copytree(source.store, tmp_path / "store")  # the fixture's backup stays good
    catalog = source.catalog(tmp_path / "store")
    rewrite_backup(
        catalog,
        source.backup,
        tmp_path,
        lambda d: flip_page(backup_tablespace(d, source.db, "victim"), page=3),
    )
    deep = replace(
        source.deep, checksum=replace(source.deep.checksum, ignore_tables=(f"{source.db}.victim",))
    )
    stop = threading.Event()
    writer = threading.Thread(target=_update_victim_once_pt_runs, args=(source, stop), daemon=True)
    writer.start()
    try:
        report = _deep(source, catalog, tmp_path / "rt", deep)
    finally:
        stop.set()
        writer.join(10)
    deep = _result(report, "replica_checksum")
    assert deep["status"] == "fail", deep
    reason = "; ".join(deep["reasons"])
    assert "Last_SQL_Errno" in reason and "victim" in reason, reason
