"""core/report/check.py on directories: each rule's status from catalogs alone (the real backups,
restore tests and binlog gaps are in tests/integration/test_check.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from helpers import stored_backup
from manifest_factory import CLUSTER, HOST, PREFIX
from xtrabackup_provider.core.backup.copies import CopyTarget, copy_backup
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog, BinlogGap
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.reports import REPORT_NAME
from xtrabackup_provider.core.config.schema import CheckConfig
from xtrabackup_provider.core.report.check import check_host, exit_code
from xtrabackup_provider.core.storage.local import LocalStore

FINISHED = datetime(2026, 11, 1, 10, 35, tzinfo=UTC)  # the factory's backups take 5 minutes
SETTINGS = CheckConfig(rpo_hours=26, restore_test_max_age_days=8, copies_max_behind_hours=12)


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return Catalog(LocalStore(tmp_path / "first"), PREFIX, CLUSTER, HOST)


def report(catalog: Catalog, bid: str, verdict: str, finished: datetime) -> None:
    data = {
        "backup_id": bid,
        "verdict": verdict,
        "finished_at": finished.isoformat(),
        "reasons": ["CHECK TABLE failed"],
    }
    catalog.store.put_bytes(catalog.object_key(bid, REPORT_NAME), json.dumps(data).encode())


def run(catalogs, now, binlogs=False):
    return check_host(catalogs, SETTINGS, binlogs, now, CLUSTER)


def test_fresh_backup_and_a_recent_passed_test_are_ok(catalog):
    m = stored_backup(catalog, "20261101T103000Z-full")
    report(catalog, m.backup_id, "pass", FINISHED + timedelta(hours=1))
    result = run([("primary", catalog)], FINISHED + timedelta(hours=2))
    assert result.status == "ok", result.line()
    assert result.backup_age_seconds == 7200
    assert result.line().startswith(
        f"OK {CLUSTER}/{HOST}: newest restorable backup 20261101T103000Z-full is 2 h 00 min old"
    )


def test_newest_backup_older_than_the_rpo_is_critical(catalog):
    stored_backup(catalog, "20261101T103000Z-full")
    result = run([("primary", catalog)], FINISHED + timedelta(hours=27))
    assert result.status == "critical" and exit_code([result]) == 2
    assert "over the RPO of 1 d 2 h" in result.line()


def test_a_backup_whose_object_is_gone_is_not_restorable_and_the_one_before_counts(catalog):
    stored_backup(catalog, "20261101T103000Z-full")
    newer = stored_backup(catalog, "20261102T103000Z-full")
    catalog.store.delete([newer.backup_object.key])
    result = run([("primary", catalog)], FINISHED + timedelta(hours=25))
    assert result.newest_restorable == "20261101T103000Z-full"
    assert "not restorable: 20261102T103000Z-full" in result.line()


def test_failed_last_restore_test_is_a_warning(catalog):
    m = stored_backup(catalog, "20261101T103000Z-full")
    report(catalog, m.backup_id, "fail", FINISHED + timedelta(hours=1))
    result = run([("primary", catalog)], FINISHED + timedelta(hours=2))
    assert result.status == "warning" and exit_code([result]) == 1
    assert "the last restore test (20261101T103000Z-full) failed: CHECK TABLE failed" in result.line()


def test_a_binlog_gap_after_the_newest_backup_is_critical_one_before_it_is_not(catalog):
    m = stored_backup(catalog, "20261101T103000Z-full", binlog_file="mysql-bin.000010", binlog_position=4)
    report(catalog, m.backup_id, "pass", FINISHED)
    bcat = BinlogCatalog(catalog, m.server_uuid)
    old = BinlogGap(
        server_uuid=m.server_uuid,
        first_missing="mysql-bin.000003",
        last_missing="mysql-bin.000004",
        server_oldest="mysql-bin.000005",
        detected_at=FINISHED,
    )
    bcat.write_gap(old)
    assert run([("primary", catalog)], FINISHED, binlogs=False).binlog_gaps == 0
    bcat.write_gap(
        old.model_copy(update={"first_missing": "mysql-bin.000011", "last_missing": "mysql-bin.000012"})
    )
    result = run([("primary", catalog)], FINISHED + timedelta(minutes=1), binlogs=False)
    assert result.status == "critical" and result.binlog_gaps == 1
    assert "binlog gap mysql-bin.000011..mysql-bin.000012" in result.line()


def test_copies_behind_on_another_target_for_longer_than_allowed_are_a_warning(catalog, tmp_path):
    m = stored_backup(catalog, "20261101T103000Z-full")
    report(catalog, m.backup_id, "pass", FINISHED)
    other = Catalog(LocalStore(tmp_path / "offsite"), "copies", CLUSTER, HOST)
    recent = run([("primary", catalog), ("offsite", other)], FINISHED + timedelta(hours=1))
    assert recent.status == "ok" and recent.copies_behind == {"offsite": 1}
    late = run([("primary", catalog), ("offsite", other)], FINISHED + timedelta(hours=13))
    assert late.status == "warning"
    assert "copies on offsite: 1 backup(s) behind, the oldest finished 13 h 00 min ago" in late.line()


def test_no_backup_at_all_is_critical(catalog):
    result = run([("primary", catalog)], FINISHED)
    assert result.status == "critical" and "no restorable backup" in result.line()


def _copied(catalog: Catalog, tmp_path: Path, *ids: str) -> Catalog:
    """`offsite`: a further target holding copies of `ids`."""
    offsite = Catalog(LocalStore(tmp_path / "offsite"), "copies", CLUSTER, HOST)
    target = CopyTarget("offsite", offsite.store, "copies")
    for bid in ids:
        copy_backup(catalog, offsite, catalog.get(bid), target, "primary")
    return offsite


def test_a_chain_only_a_copy_holds_is_restorable_from_it_and_says_so(catalog, tmp_path):
    m = stored_backup(catalog, "20261101T103000Z-full")
    offsite = _copied(catalog, tmp_path, m.backup_id)
    catalog.store.delete([catalog.manifest_key(m.backup_id), m.backup_object.key])  # the primary lost it
    result = run([("primary", catalog), ("offsite", offsite)], FINISHED + timedelta(hours=1))
    assert result.newest_restorable == m.backup_id and result.restorable_from == ["offsite"]
    assert f"newest restorable backup {m.backup_id} is 1 h 00 min old (from offsite)" in result.line()
    assert result.targets == {
        "primary": {"location": catalog.describe(), "backups": 0},
        "offsite": {"location": offsite.describe(), "backups": 1},
    }


def test_an_object_missing_on_the_first_target_is_restorable_with_the_copy_named(catalog, tmp_path):
    full = stored_backup(catalog, "20261101T103000Z-full")
    inc = stored_backup(catalog, "20261101T113000Z-inc", parent=full)
    offsite = _copied(catalog, tmp_path, full.backup_id, inc.backup_id)
    catalog.store.delete([inc.backup_object.key])
    result = run([("primary", catalog), ("offsite", offsite)], FINISHED + timedelta(hours=2))
    assert result.newest_restorable == inc.backup_id and result.restorable_from == ["primary", "offsite"]
    assert "(from primary and offsite)" in result.line()
    offsite.store.delete([offsite.get(inc.backup_id).backup_object.key])  # now on no target
    result = run([("primary", catalog), ("offsite", offsite)], FINISHED + timedelta(hours=2))
    assert result.newest_restorable == full.backup_id
    assert (
        f"not restorable: {inc.backup_id} ({inc.backup_id}: its objects are missing on every target)"
        in result.line()
    )
