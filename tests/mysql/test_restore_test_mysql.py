"""Restore tests (core/restore/restore_test.py) of clone backups on MySQL 9.7: the restored datadir is
started by a mysqld sandbox, innochecksum is MySQL's, CHECK TABLE runs on every table at level full,
and the GTID checks speak MySQL's sets (the restored server's own gtid_executed is the manifest's
set; it lies between the sets executed before and after the backup). Levels quick and full pass on a
good backup, full rolling the copy forward over binlogs shipped after it, and deep attaching it to
the source (auto-position) for pt-table-checksum; bytes damaged before they were stored (a flipped
page, a truncated tablespace) fail naming the check. On main every clone backup failed at
`restore` ("cannot open a MySQL datadir")."""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import subprocess
import uuid
from pathlib import Path

import pytest

from helpers import root_target, unique_name
from replica_helpers import WriteLoad, flip_page
from xtrabackup_provider.core.binlog.replication import ReplicationSource
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.catalog.reports import read_report
from xtrabackup_provider.core.db.checksum import ChecksumOptions
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.engine import clone
from xtrabackup_provider.core.pitr.roll_forward import ShippedBinlogs
from xtrabackup_provider.core.restore.replica_compare import SourceCompare
from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test

pytestmark = pytest.mark.mysql


@pytest.fixture(scope="module")
def source(mysql_factory):
    server = mysql_factory("rt-my", root_password=secrets.token_urlsafe(16))
    server.query("INSTALL PLUGIN clone SONAME 'mysql_clone.so'")
    server.db = unique_name("rt")
    server.execute_script(
        f"SET SESSION cte_max_recursion_depth = 10000; CREATE DATABASE {server.db}; USE {server.db};"
        " CREATE TABLE orders (id INT AUTO_INCREMENT PRIMARY KEY, amount DECIMAL(10,2), note TEXT);"
        " CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(40));"
        " INSERT INTO orders (amount, note) WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL"
        "   SELECT n + 1 FROM s WHERE n < 4000) SELECT n * 1.5, REPEAT('x', n % 300) FROM s;"
        " INSERT INTO customers WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 800)"
        "   SELECT n, CONCAT('customer ', n) FROM s;"
    )
    yield server
    mysql_factory.discard(server)


def _test(catalog: Catalog, manifest: Manifest, workdir: Path, level: str):
    return run_restore_test(RestoreTestRequest(catalog, workdir, manifest.backup_id, level=level))


def _by_name(report) -> dict[str, dict]:
    return {r["name"]: r for r in report.results}


def test_quick_and_full_restore_tests_of_a_clone_backup_pass(backup, tmp_path):
    catalog, manifest = backup
    for level in ("quick", "full"):
        report = _test(catalog, manifest, tmp_path / f"rt-{level}", level)
        assert report.verdict == "pass", report.reasons
        checks = _by_name(report)
        for name in ("chain", "innochecksum", "check_table", "position", "source_shape"):
            assert checks[name]["status"] == "pass", (name, checks[name])
        assert report.checks["gtid_executed"] == manifest.gtid, "the restored server's own GTID set"
        assert report.checks["tables_checked"] == report.checks["tables"] >= 2 or level == "quick"
        assert read_report(catalog, manifest.backup_id)["verdict"] == "pass"
        assert not (tmp_path / f"rt-{level}").exists(), "the scratch datadir is removed"
    assert checks["roll_forward"]["status"] == "skipped", checks["roll_forward"]


def test_level_full_rolls_a_clone_backup_forward_over_the_shipped_binlogs(source, backup, tmp_path):
    catalog, manifest = backup
    load = WriteLoad(source, source.db)
    load.burst(200)
    source.query(f"UPDATE `{source.db}`.orders SET amount = amount + 1 WHERE id % 3 = 0")
    source.query("FLUSH BINARY LOGS")
    load.burst(100)
    shipped = ship_binlogs(
        ShipRequest(catalog, root_target(source), allow_unencrypted=True, accept_new_server=True, flush=True)
    )
    assert shipped.shipped
    executed = "".join(str(source.query("SELECT @@global.gtid_executed")[0][0]).split())
    report = run_restore_test(
        RestoreTestRequest(
            catalog, tmp_path / "rt", manifest.backup_id, level="full", roll_forward=ShippedBinlogs(catalog)
        )
    )
    assert report.verdict == "pass", report.reasons
    rolled = _by_name(report)["roll_forward"]
    assert rolled["status"] == "pass" and rolled["detail"]["gtid"] == executed, rolled


def test_level_deep_attaches_the_copy_to_the_source_and_pt_table_checksum_finds_it_equal(
    source, backup, tmp_path
):
    catalog, manifest = backup
    repl_pw, check_pw = uuid.uuid4().hex, uuid.uuid4().hex
    user = f"rtrepl{secrets.token_hex(3)}"
    source.execute_script(
        f"CREATE USER {user}@'127.0.0.1' IDENTIFIED BY '{repl_pw}'; GRANT REPLICATION SLAVE ON *.* TO {user}@'127.0.0.1';"
        f"CREATE USER IF NOT EXISTS xbp_checksum@'127.0.0.1' IDENTIFIED BY '{check_pw}';"
        f"ALTER USER xbp_checksum@'127.0.0.1' IDENTIFIED BY '{check_pw}';"
        "GRANT SELECT, PROCESS, REPLICATION SLAVE, REPLICATION CLIENT, SUPER ON *.* TO xbp_checksum@'127.0.0.1';"
        "GRANT ALL ON percona.* TO xbp_checksum@'127.0.0.1';"
    )
    WriteLoad(source, source.db).burst(50)  # after the backup: the copy catches up over them
    deep = SourceCompare(
        ReplicationSource("127.0.0.1", source.port, user, repl_pw, connect_retry=1, label="c1/my1"),
        MySQLTarget(host="127.0.0.1", port=source.port, user="xbp_checksum", password=check_pw),
        poll_seconds=0.2,
        catch_up_timeout=300,
        checksum=ChecksumOptions(databases=(source.db,)),
    )
    report = run_restore_test(
        RestoreTestRequest(catalog, tmp_path / "rt", manifest.backup_id, level="deep", deep=deep)
    )
    assert report.verdict == "pass", report.reasons
    compared = _by_name(report)["replica_checksum"]
    assert compared["status"] == "pass" and compared["detail"]["checksum"]["tables"] >= 2, compared


def _rewrite(catalog: Catalog, manifest: Manifest, work: Path, change) -> Manifest:
    """Re-pack the stored clone stream with `change(extracted_dir)` applied, registered with its new
    size and sha256: bytes bad before they were stored, so every stored-object check passes."""
    obj = manifest.backup_object
    raw = subprocess.run(
        ["zstd", "-dc"], input=catalog.store.get_bytes(obj.key), capture_output=True, check=True
    ).stdout
    extracted = work / "x"
    clone.extract(io.BytesIO(raw), extracted)
    change(extracted)
    out = io.BytesIO()
    clone.write_stream(extracted, out)
    data = subprocess.run(["zstd", "-q", "-c"], input=out.getvalue(), capture_output=True, check=True).stdout
    catalog.store.put_bytes(obj.key, data)
    new_obj = obj.model_copy(update={"size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    rewritten = manifest.model_copy(update={"objects": [new_obj], "stored_bytes": len(data)})
    catalog.write(rewritten)
    return rewritten


def test_a_flipped_page_in_the_stored_backup_fails_innochecksum(source, backup, tmp_path):
    catalog, manifest = backup
    bad = _rewrite(
        catalog, manifest, tmp_path / "w", lambda d: flip_page(d / source.db / "orders.ibd", page=5)
    )
    report = _test(catalog, bad, tmp_path / "rt", "quick")
    assert report.verdict == "fail" and "innochecksum" in report.failed_checks, report.reasons
    assert any("orders.ibd" in r for r in report.reasons), report.reasons
    assert "innochecksum" in report.headline() and read_report(catalog, bad.backup_id)["verdict"] == "fail"


def test_a_truncated_tablespace_in_the_stored_backup_fails_naming_the_check(source, backup, tmp_path):
    catalog, manifest = backup

    def truncate(extracted: Path) -> None:
        path = extracted / source.db / "orders.ibd"  # its header and root pages stay; its leaves go
        path.write_bytes(path.read_bytes()[: 6 * 16384])

    bad = _rewrite(catalog, manifest, tmp_path / "w", truncate)
    report = _test(catalog, bad, tmp_path / "rt", "full")
    assert report.verdict == "fail" and report.failed_checks[0] == "check_table", report.reasons
    assert "orders" in report.reasons[0] and "check_table" in report.headline(), report.reasons


def test_a_backup_whose_recorded_gtid_set_is_not_its_datas_fails_the_position_check(backup, tmp_path):
    """The manifest and the copy's own xtrabackup_binlog_info agree on a set the data does not hold
    (one transaction short): only the restored server's gtid_executed shows it."""
    catalog, manifest = backup
    uuid_part, _, last = manifest.gtid.rpartition("-")
    short = f"{uuid_part}-{int(last) - 1}"

    def record_short(extracted: Path) -> None:
        info = extracted / "xtrabackup_binlog_info"
        info.write_text(info.read_text().replace(manifest.gtid, short))

    bad = _rewrite(catalog, manifest, tmp_path / "w", record_short)
    bad = bad.model_copy(update={"gtid": short})
    catalog.write(bad)
    report = _test(catalog, bad, tmp_path / "rt", "quick")
    assert report.verdict == "fail" and "position" in report.failed_checks, report.reasons
    assert any(
        f"gtid_executed {manifest.gtid} is not the manifest's GTID set {short}" in r for r in report.reasons
    )


def _without_mysql_root(monkeypatch) -> None:
    """PATH as on a worker with Debian 12's MariaDB packages only: its `mysqld` is MariaDB's."""
    kept = [d for d in os.environ["PATH"].split(":") if "/roots/mysql-" not in d]
    monkeypatch.setenv("PATH", ":".join(kept))


def test_a_worker_whose_mysqld_is_mariadbs_refuses_the_restore_test_and_the_pitr_before_fetching(
    backup, tmp_path, monkeypatch
):
    catalog, manifest = backup
    _without_mysql_root(monkeypatch)
    report = _test(catalog, manifest, tmp_path / "rt", "quick")

    assert report.verdict == "fail" and report.failed_checks == ["restore"], report.reasons
    (reason,) = report.reasons
    assert "\n" not in reason
    assert (
        "is MariaDB's" in reason and "MySQL 9.7" in reason and "install the mysqld of MySQL 9.7" in reason
    ), reason
    assert "fetch_extract" not in report.timings, "it downloaded the backup before refusing"

    from xtrabackup_provider.core.pitr.mysql_pipe import mysql_point_in_time_restore
    from xtrabackup_provider.core.pitr.plan import PitrError, PitrTarget
    from xtrabackup_provider.core.pitr.recover import PitrRequest

    target = tmp_path / "pitr" / "data"
    with pytest.raises(PitrError) as err:
        mysql_point_in_time_restore(PitrRequest(catalog, target, PitrTarget.at_gtid(manifest.gtid or "")))
    assert "server program" in str(err.value) and "MySQL 9.7" in str(err.value), err.value
    assert not target.exists() or not any(target.iterdir()), "something was restored"
