"""The checksum DAG and the backup DAG's checksum gate under dag.test(), on a real source + replica."""

from __future__ import annotations

import json
import threading

import pytest
import yaml
from dag_helpers import load_dag_module, run_dag, task_states

from helpers import (
    checksum_pair,
    execute_unlogged,
    seed_database,
    unique_name,
    wait_caught_up,
    wait_for,
)
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.storage.local import LocalStore


@pytest.fixture(scope="module")
def pair(mariadb_factory):
    source, replica, password = checksum_pair(mariadb_factory, "gate")
    yield source, replica, password
    mariadb_factory.discard(replica)
    mariadb_factory.discard(source)


@pytest.fixture
def gate_fleet(pair, gpg_keys, tmp_path, monkeypatch, airflow_home):
    """write(gate) -> Catalog: a fleet whose one host is the replica, gated; its source is inline."""
    source, replica, password = pair
    db = unique_name("gate")
    seed_database(source, db, rows=500)
    wait_caught_up(source, replica)
    conns = {
        # The checksum account on the source over TCP (pt reaches the replica with it too).
        "MYSQL_GATE_SRC": {
            "host": "127.0.0.1",
            "port": source.port,
            "login": "xbp_checksum",
            "password": password,
        },
        # The replica as the backup sees it: root, over its socket (the dsn table gets host/port).
        "MYSQL_GATE_R1": {
            "host": "127.0.0.1",
            "port": replica.port,
            "login": "root",
            "password": replica.root_password,
            "extra": {"unix_socket": str(replica.socket)},
        },
    }
    for name, conn in conns.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_{name}", json.dumps({"conn_type": "mysql", **conn}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_BACKUP_GPG_TEST",
        json.dumps({"conn_type": "gpgkeys", "extra": {"public_keys": [gpg_keys.public_key]}}),
    )
    path = tmp_path / "fleet.yaml"
    monkeypatch.setenv("XTRABACKUP_FLEET_CONFIG", str(path))

    def write(**gate):
        config = {
            "storage": {"local_path": str(tmp_path / "store")},
            "encryption": {"gpg_conn_id": "backup_gpg_test"},
            "policy": {"heartbeat": False},
            "clusters": [
                {
                    "name": "gate",
                    "schedule": None,
                    "checksum": {
                        "source": {"name": "src", "mysql_conn_id": "mysql_gate_src"},
                        "schedule": None,
                        "databases": [db],
                    },
                    "hosts": [
                        {
                            "name": "r1",
                            "mysql_conn_id": "mysql_gate_r1",
                            "checksum_gate": {"poke_seconds": 1, **gate},
                        }
                    ],
                }
            ],
        }
        path.write_text(yaml.safe_dump(config))
        return Catalog(LocalStore(tmp_path / "store"), "backups", "gate", "r1")

    yield source, replica, db, write
    source.query(f"DROP DATABASE `{db}`")
    source.query("DELETE FROM percona.checksums WHERE db = %s", (db,))
    wait_caught_up(source, replica)


def _run(module: str, dag_id: str):
    dag = getattr(load_dag_module(module), dag_id)
    dagrun = run_dag(dag)
    return dagrun.state, task_states(dagrun, dag)


def _checksum(source, replica):
    state, _ = _run("mysql_table_checksum", "mysql_table_checksum_gate")
    wait_caught_up(source, replica)
    return state


def _backup():
    return _run("mysql_backup", "mysql_backup_gate")


def _drift(replica, db):
    execute_unlogged(replica, f"UPDATE `{db}`.customers SET name = 'drifted' WHERE id = 3")


def test_clean_pair_is_backed_up_and_the_manifest_records_the_gate(gate_fleet):
    source, replica, _db, write = gate_fleet
    catalog = write(on_diff="fail")
    assert _checksum(source, replica) == "success"
    state, states = _backup()
    assert state == "success", states
    assert states["r1.checksum_gate"] == "success" and states["r1.backup"] == "success"
    (manifest,) = catalog.manifests()
    gates = {g.name: g for g in manifest.gates}
    assert gates["replica_health"].status == "pass"
    assert gates["checksum"].status == "pass" and gates["checksum"].detail["differing_tables"] == []


@pytest.mark.parametrize("on_diff", ["fail", "skip", "mark"])
def test_drift_on_the_replica_fails_skips_or_marks_the_backup(gate_fleet, on_diff, capfd):
    source, replica, db, write = gate_fleet
    catalog = write(on_diff=on_diff)
    _drift(replica, db)
    # The checksum DAG itself fails on differences, so drift alerts before any backup.
    assert _checksum(source, replica) == "failed"
    state, states = _backup()
    if on_diff == "fail":
        assert state == "failed" and states["r1.checksum_gate"] == "failed", states
        assert states["r1.backup"] == "upstream_failed"
        assert catalog.manifests() == []
        assert (
            f"backup stopped: replica gate/r1: pt-table-checksum found differences from the source in 1 table(s): {db}.customers"
            in capfd.readouterr().out
        )
    elif on_diff == "skip":
        assert state == "success" and states["r1.checksum_gate"] == "skipped", states
        assert states["r1.backup"] == "skipped"
        assert catalog.manifests() == []
    else:
        assert state == "success" and states["r1.backup"] == "success", states
        (manifest,) = catalog.manifests()
        checksum = next(g for g in manifest.gates if g.name == "checksum")
        assert checksum.status == "marked"
        assert checksum.detail["differing_tables"] == [f"{db}.customers"]


def test_stopped_sql_thread_blocks_the_backup(gate_fleet, capfd):
    source, replica, _db, write = gate_fleet
    catalog = write(on_diff="mark")
    assert _checksum(source, replica) == "success"
    replica.query("STOP SLAVE SQL_THREAD")
    try:
        state, states = _backup()
        assert state == "failed" and states["r1.checksum_gate"] == "failed", states
        assert catalog.manifests() == []
        assert (
            "backup blocked: replica gate/r1: the replication SQL thread is not running"
            in capfd.readouterr().out
        )
        # pt-table-checksum does not wait forever on the stopped replica either.
        assert _run("mysql_table_checksum", "mysql_table_checksum_gate")[0] == "failed"
    finally:
        replica.query("START SLAVE SQL_THREAD")


def test_deferrable_gate_waits_in_the_trigger_until_replication_resumes(gate_fleet):
    source, replica, _db, write = gate_fleet
    catalog = write(on_blocked="wait", deferrable=True, wait_minutes=5)
    assert _checksum(source, replica) == "success"

    def status_checks() -> int:
        return int(replica.query("SHOW GLOBAL STATUS LIKE 'Com_show_slave_status'")[0][1])

    replica.query("STOP SLAVE SQL_THREAD")
    baseline = status_checks()

    def resume_after_the_trigger_polled() -> None:
        # One check from the sensor before it defers, then at least one from the trigger.
        wait_for(lambda: status_checks() >= baseline + 2, timeout=240, interval=0.2, what="trigger polls")
        replica.query("START SLAVE SQL_THREAD")

    resumer = threading.Thread(target=resume_after_the_trigger_polled, daemon=True)
    resumer.start()
    try:
        state, states = _backup()
    finally:
        resumer.join(5)
        replica.query("START SLAVE SQL_THREAD")
    assert state == "success", states
    (manifest,) = catalog.manifests()
    assert {g.name: g.status for g in manifest.gates} == {"replica_health": "pass", "checksum": "pass"}


def test_deferrable_gate_fails_with_the_reason_when_the_wait_runs_out(gate_fleet, capfd):
    source, replica, _db, write = gate_fleet
    catalog = write(on_blocked="wait", deferrable=True, wait_minutes=0.05)
    assert _checksum(source, replica) == "success"
    replica.query("STOP SLAVE SQL_THREAD")
    try:
        state, states = _backup()
    finally:
        replica.query("START SLAVE SQL_THREAD")
    assert state == "failed" and states["r1.checksum_gate"] == "failed", states
    assert catalog.manifests() == []
    reason = "backup blocked after waiting 3.0s: replica gate/r1: the replication SQL thread is not running"
    assert reason in capfd.readouterr().out
