"""Pure rules of the restore evidence and replica set-up: the source-shape tolerances, the GTID
window, InnoDB's own binlog record, the doublewrite pages innochecksum must skip, CHANGE MASTER's
text (the password is a parameter, never text), pt's argv, the manifest's new field, the report's
"last verified restore" and failed checks, and the config's replication/provision sections."""

from __future__ import annotations

import json
import struct
from datetime import UTC, datetime
from pathlib import Path

import pytest

from manifest_factory import make_manifest
from xtrabackup_provider.core.binlog.replication import ReplicationError, ReplicationSource, change_source_sql
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import parse_manifest
from xtrabackup_provider.core.catalog.reports import REPORT_NAME
from xtrabackup_provider.core.catalog.shape import SourceShape, TableShape
from xtrabackup_provider.core.config.load import parse_config
from xtrabackup_provider.core.config.schema import ConfigError
from xtrabackup_provider.core.db.checksum import ChecksumOptions, checksum_argv
from xtrabackup_provider.core.db.dialect import dialect_for
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.report.html import render_html
from xtrabackup_provider.core.report.model import ClusterReport, host_report
from xtrabackup_provider.core.restore.evidence import (
    _ranges,
    compare_shape,
    doublewrite_pages,
    gtid_window,
    innodb_position_problems,
    rows_close,
)
from xtrabackup_provider.core.storage.local import LocalStore


def _t(name: str, engine: str = "InnoDB", rows: int = 10_000, size: int = 1 << 20) -> TableShape:
    schema, table = name.split(".")
    return TableShape(
        schema_name=schema, table=table, engine=engine, rows=rows, data_bytes=size, index_bytes=0
    )


def _shape(
    *tables: TableShape,
    changed: list[str] | None = None,
    before: str = "",
    after: str = "",
    stale: list[str] | None = None,
) -> SourceShape:
    return SourceShape(
        captured_at=datetime.now(UTC),
        tables=list(tables),
        changed_during_backup=changed or [],
        gtid_before=before,
        gtid_after=after,
        stale_statistics=[] if stale is None else stale,
    )


def test_the_shape_tolerates_statistics_but_not_lost_tables_engines_or_rows():
    shape = _shape(
        _t("a.big", rows=100_000, size=64 << 20), _t("a.small", rows=10), _t("a.log", "Aria", rows=5)
    )
    # Sizes are not compared (InnoDB recomputes them only with its statistics); estimates within 25 %.
    fine = [_t("a.big", rows=80_000, size=16384), _t("a.small", rows=12), _t("a.log", "Aria", rows=5)]
    assert compare_shape(shape, fine) == []
    problems = compare_shape(
        shape, [_t("a.big", rows=10, size=16384), _t("a.log", "InnoDB", rows=5), _t("a.extra")]
    )
    assert problems == [
        "1 table(s) the source had are missing: a.small",
        "1 table(s) the source did not have: a.extra",
        "engines differ: a.log is InnoDB, the source's was Aria",
        "row estimates differ by more than 25% in 1 table(s) not counted exactly: "
        "a.big: about 10 rows, the source reported 100000",
    ]


def test_row_estimates_have_no_absolute_slack_and_exact_counts_are_left_to_row_counts():
    assert not rows_close(1000, 0) and not rows_close(2000, 1000) and not rows_close(100, 0)
    assert rows_close(0, 0) and rows_close(100_000, 80_000) and rows_close(80_000, 100_000)
    assert rows_close(0, 3), "an estimate reloaded from disk may lag by InnoDB's recount threshold (16 rows)"
    shape = _shape(_t("a.counted", rows=3), _t("a.estimated", rows=1000))  # a.counted: 3 exact rows
    restored = [_t("a.counted", rows=0), _t("a.estimated", rows=0)]
    (problem,) = compare_shape(shape, restored, exact={"a.counted"})
    assert "a.estimated: about 0 rows, the source reported 1000" in problem and "a.counted" not in problem


def test_estimates_from_before_the_sources_last_start_are_not_compared():
    """A restart reloads the persisted estimate, which may predate a bulk load or a mass DELETE."""
    shape = _shape(_t("a.reloaded", rows=60_000), _t("a.fresh", rows=60_000), stale=["a.reloaded"])
    (problem,) = compare_shape(shape, [_t("a.reloaded", rows=0), _t("a.fresh", rows=0)])
    assert "a.fresh" in problem and "a.reloaded" not in problem
    unknown = shape.model_copy(update={"stale_statistics": None})  # older manifests: not recorded
    assert compare_shape(unknown, [_t("a.reloaded", rows=0), _t("a.fresh", rows=0)]) == []
    aria = _shape(_t("a.log", "Aria", rows=50)).model_copy(update={"stale_statistics": None})
    assert compare_shape(aria, [_t("a.log", "Aria", rows=0)]) != [], "Aria's counts are exact: still compared"


def test_tables_created_or_dropped_during_the_backup_may_be_either_way():
    shape = _shape(_t("a.kept"), _t("a.new"), changed=["a.new", "a.dropped"])
    assert compare_shape(shape, [_t("a.kept"), _t("a.dropped")]) == []


def test_an_empty_shape_with_tables_restored_hints_at_the_backup_accounts_privileges():
    (problem,) = compare_shape(_shape(), [_t("a.t")])
    assert "the backup account may lack SELECT" in problem


def test_the_restored_gtid_lies_between_what_the_server_reported_around_the_backup():
    shape = _shape(before="0-1-100,1-2-5", after="0-1-120,1-2-5")
    assert gtid_window(shape, "0-1-110,1-2-5") == []
    assert gtid_window(shape, "0-1-99,1-2-5") == [
        "domain 0: the restored copy is at 0-1-99, before what the server reported when the backup started (0-1-100)"
    ]
    (late, missing) = gtid_window(shape, "0-1-121")
    assert "after what the server reported when the backup ended (0-1-120)" in late
    assert (
        missing == "domain 1: the server was at 1-2-5 before the backup, the restored copy has no GTID there"
    )


def test_a_mysql_restored_gtid_set_lies_between_the_sets_executed_around_the_backup():
    u, v = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "4e11fa47-71ca-11e1-9e33-c80aa9429562"
    shape = _shape(before=f"{u}:1-100", after=f"{u}:1-120,{v}:1-3")
    assert gtid_window(shape, f"{u}:1-110,{v}:1-2") == []
    (early,) = gtid_window(shape, f"{u}:1-99")
    assert early.startswith(f"the restored copy lacks {u}:100, which the server had executed before")
    (late,) = gtid_window(shape, f"{u}:1-121")
    assert late.startswith(f"the restored copy holds {u}:121, which the server had not executed")


def test_innodbs_own_binlog_record_must_not_be_past_the_manifests(tmp_path):
    manifest = make_manifest("20261201T000000Z-full", binlog_file="mysql-bin.000003", binlog_position=5000)
    checks: dict = {}
    (tmp_path / "xtrabackup_binlog_pos_innodb").write_text("./mysql-bin.000003\t4200\n")
    assert innodb_position_problems(tmp_path, manifest, checks) == []  # Aria writes may follow InnoDB's last
    assert checks["innodb_binlog_position"] == "mysql-bin.000003:4200"
    (tmp_path / "xtrabackup_binlog_pos_innodb").write_text("./mysql-bin.000004\t120\n")
    (problem,) = innodb_position_problems(tmp_path, manifest, checks)
    assert "after the manifest's mysql-bin.000003:5000: the manifest does not describe this data" in problem


def test_the_doublewrite_buffer_is_found_in_the_trx_sys_page_and_left_out(tmp_path):
    size = 16384
    data = bytearray(size * 200)
    struct.pack_into(">III", data, 5 * size + size - 200 + 10, 536853855, 64, 128)
    (tmp_path / "ibdata1").write_bytes(bytes(data))
    page_size, skip = doublewrite_pages(tmp_path / "ibdata1")
    assert page_size == size and skip == set(range(64, 192))
    assert _ranges(skip, 200) == [(0, 63), (192, 199)]
    (tmp_path / "plain").write_bytes(bytes(size * 8))
    assert doublewrite_pages(tmp_path / "plain") == (16384, set())


def test_change_master_sends_every_value_as_a_parameter():
    secret = "pa'ss\"word\\1"
    mariadb, mysql = dialect_for("10.11.6-MariaDB"), dialect_for("9.7.4")
    sql, args = change_source_sql(ReplicationSource("10.0.0.1", 3307, "repl", secret, ssl=True), mariadb)
    assert secret not in sql and args == ("10.0.0.1", 3307, "repl", secret, 5)
    assert sql == (
        "CHANGE MASTER TO MASTER_HOST = %s, MASTER_PORT = %s, MASTER_USER = %s, MASTER_PASSWORD = %s,"
        " MASTER_CONNECT_RETRY = %s, MASTER_SSL = 1, MASTER_USE_GTID = slave_pos"
    )
    sql, args = change_source_sql(ReplicationSource("10.0.0.1", 3307, "repl", secret), mysql)
    assert secret not in sql and args == ("10.0.0.1", 3307, "repl", secret, 5)
    assert (
        sql.startswith("CHANGE REPLICATION SOURCE TO SOURCE_HOST = %s") and "SOURCE_AUTO_POSITION = 1" in sql
    )
    assert "secret" not in repr(ReplicationSource("h", password="secret"))
    with pytest.raises(ReplicationError, match="is not a host name"):
        change_source_sql(ReplicationSource("db1\nMASTER_HOST=evil"), mariadb)


def test_pt_table_checksum_can_leave_tables_out():
    argv = checksum_argv(
        MySQLTarget(host="db1"), "/p/c.cnf", ChecksumOptions(ignore_tables=("mysql.gtid_slave_pos", "a.b"))
    )
    assert "--ignore-tables=mysql.gtid_slave_pos,a.b" in argv
    with pytest.raises(ValueError, match="database.table"):
        checksum_argv(MySQLTarget(host="db1"), "/p/c.cnf", ChecksumOptions(ignore_tables=("a.b,c",)))


def test_manifests_without_a_source_shape_stay_readable_and_new_ones_round_trip():
    old = make_manifest("20261201T000000Z-full")
    data = json.loads(old.to_json())
    data.pop("source_shape")
    assert parse_manifest(json.dumps(data).encode(), "old").source_shape is None
    new = old.model_copy(update={"source_shape": _shape(_t("a.t"), before="0-1-1", after="0-1-2")})
    assert parse_manifest(new.to_json(), "new").source_shape == new.source_shape


def _report(catalog: Catalog, backup_id: str, verdict: str, finished: str, failed: list[str]) -> None:
    body = {
        "backup_id": backup_id,
        "verdict": verdict,
        "level": "full",
        "chain": [backup_id],
        "reasons": [f"{c}: broken" for c in failed],
        "failed_checks": failed,
        "timings": {"fetch_extract": 1, "prepare": 1, "copy_back": 1},
        "started_at": finished,
        "finished_at": finished,
    }
    catalog.store.put_bytes(catalog.object_key(backup_id, REPORT_NAME), json.dumps(body).encode())


def test_the_report_names_the_newest_verified_backup_and_the_checks_that_failed(tmp_path):
    catalog = Catalog(LocalStore(tmp_path), "backups", "c1", "db1")
    old, new, newest = "20261101T000000Z-full", "20261108T000000Z-full", "20261115T000000Z-full"
    _report(catalog, new, "pass", "2026-11-09T00:00:00+00:00", [])
    _report(catalog, old, "pass", "2026-11-10T00:00:00+00:00", [])  # an older backup tested later
    _report(catalog, newest, "fail", "2026-11-16T00:00:00+00:00", ["innochecksum", "roll_forward"])
    host = host_report(catalog, datetime(2026, 11, 20, tzinfo=UTC))
    assert host.last_verified is not None and host.last_verified.backup_id == new
    assert host.last_test is not None and host.last_test.failed_checks == ["innochecksum", "roll_forward"]
    page = render_html(ClusterReport("c1", "mem", datetime(2026, 11, 20, tzinfo=UTC), 6, [host]))
    assert f"PASS</span> {new}" in page
    assert "newest test FAILED: innochecksum, roll_forward" in page
    assert '<span class="small" data-failed-checks>innochecksum, roll_forward</span>' in page
    # What a green result does not rule out, per check, ends the page (core/restore/coverage.py).
    checks = page[page.index('id="restore-checks"') :]
    assert "<code>row_counts</code>" in checks and "tables the budget left uncounted" in checks


def _config(**cluster: object) -> dict:
    return {
        "storage": {"local_path": "/srv/b"},
        "clusters": [
            {
                "name": "main",
                "hosts": [
                    {"name": "db1", "host": "10.0.0.1"},
                    {"name": "db3", "datadir": "/var/lib/mysql", "provision": {"from_host": "db9"}},
                ],
                **cluster,
            }
        ],
    }


def test_the_config_names_a_replication_source_or_provision_host_it_does_not_have():
    with pytest.raises(ConfigError, match="provision.from_host: cluster 'main' has no host 'db9'"):
        parse_config(_config(replication={"source": "db1"}), "fleet.yaml")
    config = _config(replication={"source": "db7"})
    config["clusters"][0]["hosts"][1]["provision"] = {}
    with pytest.raises(ConfigError, match="replication.source: cluster 'main' has no host 'db7'"):
        parse_config(config, "fleet.yaml")
    config["clusters"][0]["replication"] = {"source": "db1"}
    parsed = parse_config(config, "fleet.yaml").cluster("main")
    assert parsed.replication_source() is not None and parsed.replication_source().name == "db1"
    assert parsed.hosts[1].provision.start_command == ["systemctl", "start", "mariadb"]


def test_restore_test_reports_written_before_checks_were_named_still_read(tmp_path: Path):
    catalog = Catalog(LocalStore(tmp_path), "backups", "c1", "db1")
    body = {"backup_id": "20261101T000000Z-full", "verdict": "fail", "reasons": ["old reason"]}
    catalog.store.put_bytes(
        catalog.object_key("20261101T000000Z-full", REPORT_NAME), json.dumps(body).encode()
    )
    host = host_report(catalog, datetime(2026, 11, 20, tzinfo=UTC))
    assert host.restore_tests[0].failed_checks == [] and host.restore_tests[0].reasons == ["old reason"]
