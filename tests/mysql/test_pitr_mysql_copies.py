"""MySQL's point-in-time reads (core/pitr/mysql_pipe.py: `restore --to-*`; core/pitr/table_mysql.py:
`restore-table --to-*`) as safe as MariaDB's, on a real MySQL 9.7 with clone backups:

- every copy on every read path: a binlog whose object on the first storage target is missing or
  damaged is read from the copy target (made by the copy verb), and the run says which copy it read
  (the restore test's roll-forward of a clone backup too, core/pitr/mysql_roll_forward.py);
- a read lease over what the run reads: a `retention apply` that runs while the run reads the
  binlogs (the backup is restored by then) keeps the backup and the binlogs, and names the lease.

Before these fixes the MySQL paths read binlogs from the first target only (the restore failed on
the missing object, the roll-forward check failed), and the binlogs were read under no lease
(retention deleted them under the run, which then failed).
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from helpers import RetentionOnBinlogRead, clone_backup, root_target, ship_mysql_binlogs, unique_name
from xtrabackup_provider.core.backup.copies import CopyTarget, copy_host
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.targets import Source
from xtrabackup_provider.core.db.sandbox import SandboxServer, quote_ident
from xtrabackup_provider.core.pitr.mysql_pipe import binlogs_to, mysql_point_in_time_restore
from xtrabackup_provider.core.pitr.plan import PitrTarget
from xtrabackup_provider.core.pitr.recover import PitrRequest
from xtrabackup_provider.core.pitr.roll_forward import ShippedBinlogs
from xtrabackup_provider.core.pitr.table import TableRestoreRequest, restore_tables
from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test
from xtrabackup_provider.core.retention.apply import apply_plan, plan_host
from xtrabackup_provider.core.retention.model import RetentionPolicy
from xtrabackup_provider.core.storage.local import LocalStore

pytestmark = pytest.mark.mysql

KEEP_LAST = RetentionPolicy(keep_last_chains=1, min_age_days=0)
AGO = 7200  # seconds the writes after the first backup are stamped back (retention keeps younger binlogs)


@dataclass
class Host:
    server: SandboxServer
    base: Path  # holds the stores "primary" and "offsite", as the fixture left them
    db: str
    uuid: str
    backup_id: str  # the backup every run starts from
    newer_id: str  # a newer full backup: retention keeping the last chain deletes the first
    at_stop: str  # gtid_executed just before the accident
    checksum: int  # CHECKSUM TABLE t then
    binlogs: list[str]  # the shipped binlogs a run to at_stop reads


def _checksum(server: SandboxServer, table: str) -> int:
    return int(server.query(f"CHECKSUM TABLE {table}")[0][1])


def _catalog(root: Path) -> Catalog:
    return Catalog(LocalStore(root), "backups", "c1", "db1")


@pytest.fixture(scope="module")
def host(mysql_factory, tmp_path_factory) -> Iterator[Host]:
    server = mysql_factory("cpmy", root_password=secrets.token_urlsafe(16))
    server.query("INSTALL PLUGIN clone SONAME 'mysql_clone.so'")
    base = tmp_path_factory.mktemp("cpmy")
    primary = _catalog(base / "primary")
    db = unique_name("cp")
    t = f"{db}.t"
    server.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {t} (id INT PRIMARY KEY, v VARCHAR(40));"
        f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b'), (3, 'c');"
    )
    first = clone_backup(server, primary, base / "s1")
    # Stamped two hours back (the session's clock; the Rotate events too): retention keeps the
    # binlogs of the last hour before its oldest kept backup, so these ones it may delete.
    server.execute_script(
        f"SET SESSION timestamp = UNIX_TIMESTAMP() - {AGO};"
        f"INSERT INTO {t} VALUES (4, 'd'); UPDATE {t} SET v = 'z' WHERE id = 1; FLUSH BINARY LOGS;"
        f"INSERT INTO {t} VALUES (5, 'e'); DELETE FROM {t} WHERE id = 2;"
    )
    at_stop = "".join(str(server.query("SELECT @@global.gtid_executed")[0][0]).split())
    checksum = _checksum(server, t)
    server.execute_script(
        f"SET SESSION timestamp = UNIX_TIMESTAMP() - {AGO}; DELETE FROM {t}; FLUSH BINARY LOGS;"
    )
    newer = clone_backup(server, primary, base / "s2")
    assert ship_mysql_binlogs(primary, server).shipped
    copied = copy_host(primary, CopyTarget("offsite", LocalStore(base / "offsite"), attempts=1))
    assert copied.error is None and not copied.problems, copied.line()
    needed = [m.name for m in binlogs_to(primary, first, PitrTarget.at_gtid(at_stop))]
    assert len(needed) == 2, needed
    # The premise of the lease test: without a lease, retention deletes the first backup and
    # the binlogs a run from it reads.
    verdicts = {i.name: i.action for i in plan_host(primary, KEEP_LAST).items}
    uuid = str(server.query("SELECT @@server_uuid")[0][0])
    assert verdicts[first.backup_id] == "delete" and verdicts[newer.backup_id] == "keep", verdicts
    assert all(verdicts[f"{uuid}/{name}"] == "delete" for name in needed), verdicts
    yield Host(server, base, db, uuid, first.backup_id, newer.backup_id, at_stop, checksum, needed)
    mysql_factory.discard(server)


def _stores(host: Host, tmp_path: Path) -> tuple[Path, Path]:
    """This test's own copies of the two stores (a test damages or prunes its own)."""
    for name in ("primary", "offsite"):
        shutil.copytree(host.base / name, tmp_path / name)
    return tmp_path / "primary", tmp_path / "offsite"


def _binlog_object(catalog: Catalog, host: Host, name: str) -> str:
    [segment] = BinlogCatalog(catalog, host.uuid).read(name).segments
    return segment.object.key


def _pitr(catalog: Catalog, datadir: Path, host: Host, **request: Any):
    return mysql_point_in_time_restore(
        PitrRequest(
            catalog,
            datadir,
            PitrTarget.at_gtid(host.at_stop),
            binlog_binary=shutil.which("mysqlbinlog") or "mysqlbinlog",
            client_binary="mysql",
            replay="pipe",
            **request,
        )
    )


def _copy_checksum(datadir: Path, host: Host) -> tuple[int, str]:
    """CHECKSUM TABLE t and gtid_executed of a server started on the restored copy."""
    sandbox = SandboxServer.on_datadir(
        datadir, datadir.parent / "sb", server_id=997, family="mysql", extra_args=["--skip-replica-start"]
    )
    sandbox.start()
    with sandbox:
        executed = "".join(str(sandbox.query("SELECT @@global.gtid_executed")[0][0]).split())
        return _checksum(sandbox, f"{host.db}.t"), executed


def _table_request(catalog: Catalog, host: Host, tmp_path: Path, new: str, **kw: Any) -> TableRestoreRequest:
    return TableRestoreRequest(
        catalog=catalog,
        live=root_target(host.server),
        tables=[f"{host.db}.t"],
        new_names=[f"{host.db}.{new}"],
        target=PitrTarget.at_gtid(host.at_stop),
        scratch_dir=tmp_path,
        binlog_binary="mysqlbinlog",
        **kw,
    )


def test_a_pitr_reads_a_binlog_missing_on_the_first_target_from_the_copy_and_says_so(host, tmp_path):
    primary_root, offsite_root = _stores(host, tmp_path)
    primary = _catalog(primary_root)
    name = host.binlogs[-1]
    missing = _binlog_object(primary, host, name)
    primary.store.delete([missing])

    report = _pitr(primary, tmp_path / "data", host, fallbacks=[Source("offsite", _catalog(offsite_root))])
    assert report.backup_id == host.backup_id
    assert report.reached_gtid == host.at_stop
    assert (
        f"binlog {name}: fetched from target offsite because primary: {primary.store.location}/{missing} is missing"
        in (report.fallbacks)
    ), report.fallbacks
    assert _copy_checksum(tmp_path / "data", host) == (host.checksum, host.at_stop)


def test_restore_table_reads_a_damaged_binlog_from_the_copy_and_says_so(host, tmp_path):
    primary_root, offsite_root = _stores(host, tmp_path)
    primary = _catalog(primary_root)
    name = host.binlogs[0]
    damaged = primary_root / _binlog_object(primary, host, name)
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit, same size: only the stream can tell
    damaged.write_bytes(bytes(data))

    request = _table_request(
        primary, host, tmp_path, "t_from_copy", fallbacks=[Source("offsite", _catalog(offsite_root))]
    )
    try:
        report = restore_tables(request)
        assert report.reached_gtid == host.at_stop
        assert _checksum(host.server, f"{host.db}.t_from_copy") == host.checksum
    finally:
        host.server.query(f"DROP TABLE IF EXISTS {host.db}.{quote_ident('t_from_copy')}")
    notes = [
        n for n in report.fallbacks if n.startswith(f"binlog {name}: fetched from target offsite because")
    ]
    assert notes and "primary:" in notes[0], report.fallbacks


def test_the_restore_tests_roll_forward_reads_a_missing_binlog_from_the_copy_and_says_so(host, tmp_path):
    primary_root, offsite_root = _stores(host, tmp_path)
    primary = _catalog(primary_root)
    name = host.binlogs[0]
    missing = _binlog_object(primary, host, name)
    primary.store.delete([missing])
    offsite = [Source("offsite", _catalog(offsite_root))]

    report = run_restore_test(
        RestoreTestRequest(
            primary,
            tmp_path / "rt",
            host.backup_id,
            level="full",
            write_report=False,
            roll_forward=ShippedBinlogs(primary, fallbacks=offsite),
        )
    )
    rolled = {r["name"]: r for r in report.results}["roll_forward"]
    assert report.verdict == "pass" and rolled["status"] == "pass", (report.reasons, rolled)
    assert f"binlog {name}: fetched from target offsite because primary:" in rolled["note"], rolled


@pytest.mark.parametrize("verb", ["restore-table", "restore --to-gtid"])
def test_retention_while_a_run_reads_the_binlogs_keeps_what_it_reads(host, tmp_path, verb):
    primary_root, _ = _stores(host, tmp_path)
    store = RetentionOnBinlogRead(primary_root)
    catalog = Catalog(store, "backups", "c1", "db1")
    try:
        if verb == "restore-table":
            restore_tables(_table_request(catalog, host, tmp_path, "t_leased"))
            assert _checksum(host.server, f"{host.db}.t_leased") == host.checksum
        else:
            _pitr(catalog, tmp_path / "data", host)
            assert _copy_checksum(tmp_path / "data", host) == (host.checksum, host.at_stop)
    finally:
        host.server.query(f"DROP TABLE IF EXISTS {host.db}.t_leased")
    assert store.ran is not None, "retention never ran: the run read no binlog"
    plan, applied = store.ran
    reasons = {i.name: (i.action, i.reason) for i in plan.items}
    leased = [host.backup_id, *(f"{host.uuid}/{n}" for n in host.binlogs)]
    for name in leased:
        action, reason = reasons[name]
        assert action == "keep" and "read lease" in reason, (name, reasons[name])
    assert applied.deleted == [], applied.deleted
    # The run's lease is gone with it: the same policy deletes them now.
    after = apply_plan(_catalog(primary_root), plan_host(_catalog(primary_root), KEEP_LAST), confirm=True)
    assert set(leased) <= set(after.deleted), after.deleted
