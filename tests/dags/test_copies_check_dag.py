"""The shipped DAGs with further storage targets and the check DAG, under dag.test() on real
components: the backup DAG copies to every target and a target that is down does not fail the run;
the check DAG fails (so Airflow's alerting fires) when a host is critical and passes on a warning."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml
from dag_helpers import load_dag_module, run_dag, task_states

from helpers import root_target, seed_database, unique_name
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import free_port
from xtrabackup_provider.core.storage.local import LocalStore


def test_backup_dag_copies_to_every_target_and_one_that_is_down_does_not_fail_the_run(
    fleet, tmp_path, monkeypatch
):
    server, catalog = fleet
    seed_database(server, unique_name("dagcopies"), rows=200)
    config = yaml.safe_load(Path(os.environ["XTRABACKUP_FLEET_CONFIG"]).read_text())  # the fixture's
    config["clusters"][0]["name"] = "dagcopies"
    config["copies"] = [
        {"name": "vault", "local_path": str(tmp_path / "vault"), "retention": {"keep_last_chains": 5}},
        {"name": "down", "bucket": "nowhere", "aws_conn_id": "aws_down", "copy_attempts": 1},
    ]
    path = tmp_path / "fleet-copies.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("XTRABACKUP_FLEET_CONFIG", str(path))
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: connection refused
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_DOWN",
        json.dumps(
            {"conn_type": "aws", "login": "testing", "password": "testing", "extra": {"endpoint_url": dead}}
        ),
    )
    dag = load_dag_module("mysql_backup").mysql_backup_dagcopies
    dagrun = run_dag(dag, run_conf={"kind": "full"})
    states = task_states(dagrun, dag)
    assert dagrun.state == "success", states
    assert states["db1.backup"] == "success"
    assert states["db1.copy_vault"] == states["db1.retention_vault"] == "success"
    # Left behind, not failed: the unreachable target's copy and its retention show as skipped.
    assert states["db1.copy_down"] == states["db1.retention_down"] == "skipped"
    (bid,) = Catalog(catalog.store, "backups", "dagcopies", "db1").backup_ids()
    vault = Catalog(LocalStore(tmp_path / "vault"), "backups", "dagcopies", "db1")
    assert vault.backup_ids() == [bid] and vault.get(bid).copy_of is not None


def _check_config(tmp_path: Path, rpo_hours: float) -> Path:
    path = tmp_path / f"check-{rpo_hours}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(tmp_path / "store")},
                "clusters": [
                    {"name": "dagcheck", "check": {"rpo_hours": rpo_hours}, "hosts": [{"name": "db1"}]}
                ],
            }
        )
    )
    return path


def test_check_dag_fails_when_a_host_is_critical_and_passes_on_a_warning(
    mariadb, gpg_keys, tmp_path, monkeypatch, airflow_home
):
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "dagcheck", "db1")
    run_backup(BackupRequest(catalog, root_target(mariadb), public_keys=[gpg_keys.public_key]))

    # A generous RPO: the only finding is that no restore test has passed yet, a warning.
    monkeypatch.setenv("XTRABACKUP_FLEET_CONFIG", str(_check_config(tmp_path, 26)))
    dag = load_dag_module("mysql_backup_check").mysql_backup_check_dagcheck
    dagrun = run_dag(dag)
    assert dagrun.state == "success", task_states(dagrun, dag)
    (ti,) = dagrun.get_task_instances()
    (host,) = ti.xcom_pull(task_ids="check")
    assert host["status"] == "warning" and host["newest_restorable"] == catalog.backup_ids()[0]

    # An RPO of a thousandth of a second: the same backup is now too old, so the run fails.
    monkeypatch.setenv("XTRABACKUP_FLEET_CONFIG", str(_check_config(tmp_path, 1 / 3_600_000)))
    dag = load_dag_module("mysql_backup_check").mysql_backup_check_dagcheck
    dagrun = run_dag(dag)
    assert dagrun.state == "failed"
    assert task_states(dagrun, dag) == {"check": "failed"}
