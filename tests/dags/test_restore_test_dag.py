"""The shipped restore-test DAG under dag.test(): a good backup passes, a bad one fails with its reason."""

from __future__ import annotations

from dag_helpers import load_dag_module, run_dag

from helpers import seed_database, unique_name
from xtrabackup_provider.core.catalog.reports import read_report


def _backup_twice(server, db):
    dag = load_dag_module("mysql_backup").mysql_backup_dagtest
    for _ in range(2):
        server.query(f"INSERT INTO `{db}`.audit SELECT MAX(id) + 1, 'tick' FROM `{db}`.audit")
        assert run_dag(dag).state == "success"


def _restore_test(**conf):
    dag = load_dag_module("mysql_restore_test").mysql_restore_test_dagtest
    dagrun = run_dag(dag, run_conf=conf)
    return dagrun, {ti.task_id: ti.state for ti in dagrun.get_task_instances()}


def test_latest_chain_restores_and_verifies(fleet):
    server, catalog = fleet
    db = unique_name("rt")
    seed_database(server, db, rows=500)
    _backup_twice(server, db)
    newest = catalog.backup_ids()[-1]
    dagrun, states = _restore_test(host="db1", level="full")
    assert dagrun.state == "success", states
    assert states["restore_given_backup"] == "skipped"
    report = read_report(catalog, newest)
    assert report and report["verdict"] == "pass", report
    assert report["chain"] == catalog.backup_ids()
    assert report["checks"]["canary"] == "found"
    assert report["checks"]["tables_checked"] == report["checks"]["tables"] > 0
    assert set(report["timings"]) >= {"fetch_extract", "prepare", "copy_back", "start", "verify"}


def test_corrupted_backup_fails_with_the_reason_in_the_report(fleet, capfd):
    server, catalog = fleet
    seed_database(server, unique_name("rt"), rows=200)
    assert run_dag(load_dag_module("mysql_backup").mysql_backup_dagtest).state == "success"
    manifest = catalog.latest()
    data = bytearray(catalog.store.get_bytes(manifest.backup_object.key))
    data[-100] ^= 0xFF
    catalog.store.put_bytes(manifest.backup_object.key, bytes(data))
    dagrun, states = _restore_test(host="db1", backup_id=manifest.backup_id)
    assert dagrun.state == "failed"
    assert states["restore_given_backup"] == "failed"
    report = read_report(catalog, manifest.backup_id)
    assert report["verdict"] == "fail"
    assert any("sha256" in r or "gpg" in r for r in report["reasons"]), report["reasons"]
    assert report["failed_checks"] == ["restore"]
    # The task fails with one line naming the check: the last line of its traceback in the task log.
    out = capfd.readouterr()
    assert (
        f"RestoreTestFailed: restore test of dagtest/db1 {manifest.backup_id} (quick) failed check(s) restore: "
        in out.out + out.err
    )
