"""The shipped backup DAG keeps a host's `standby_dir` current: after each backup its `standby`
task merges the new backup into the prepared standby, which then restores to the data of the
newest backup. The task runs on the host's `standby_queue` (the worker where the directory lives,
which reads the private key), never on the database host's queue unless the config names it.
Real MariaDB, mariabackup, gpg and the moto endpoint, under dag.test()."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml
from dag_helpers import labels, load_dag_module, run_dag, task_states

from helpers import add_orders, restored_checksums, seed_database, unique_name
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.config.schema import ConfigError
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.restore.standby import load_state, restore_standby
from xtrabackup_provider.core.restore.standby_lock import standby_lock
from xtrabackup_provider.policy import STANDBY_QUEUE


def _with_standby(directory: Path) -> None:
    path = Path(os.environ["XTRABACKUP_FLEET_CONFIG"])
    config = yaml.safe_load(path.read_text())
    config["clusters"][0]["hosts"][0]["standby_dir"] = str(directory)
    config["clusters"][0]["hosts"][0]["standby_queue"] = "recovery"
    path.write_text(yaml.safe_dump(config))


def test_the_backup_dag_refreshes_the_hosts_standby_after_each_backup(fleet, tmp_path):
    server, catalog = fleet
    db = unique_name("sby")
    seed_database(server, db, rows=1000)
    standby = tmp_path / "standby"
    _with_standby(standby)
    dag = load_dag_module("mysql_backup").mysql_backup_dagtest
    assert "backup.standby" in dag.task_ids
    for kind in ("full", "incremental"):
        add_orders(server, db, 300)
        dagrun = run_dag(dag, run_conf={"kind": kind})
        assert labels(dagrun)[("backup.standby", "db1")] == "success", labels(dagrun)
    newest = catalog.manifests()[-1]
    state = load_state(standby)
    assert state is not None and state.newest == newest.backup_id, state
    expected = table_checksums(server, [db])
    target = tmp_path / "restored" / "data"
    assert restore_standby(catalog, standby, target).backup_id == newest.backup_id
    assert restored_checksums(target, tmp_path / "sb", [db], server_id=961) == expected


def test_a_standby_held_by_another_run_is_skipped_not_retried_and_the_run_succeeds(fleet, tmp_path):
    """A restore from the standby (or a CLI refresh) holds it: the backup run's refresh is skipped,
    naming the holder, and the run ends; the next run refreshes it. A retry would hold the run (one
    at a time) and so the host's next backups (chaos seed 120516: a standby task's 15-minute retry
    held c1's backups for 20 minutes)."""
    server, catalog = fleet
    db = unique_name("sbb")
    seed_database(server, db, rows=200)
    standby = tmp_path / "standby"
    standby.mkdir()
    _with_standby(standby)
    dag = load_dag_module("mysql_backup").mysql_backup_dagtest
    with standby_lock(standby, "restore from the standby"):
        dagrun = run_dag(dag, run_conf={"kind": "full"})
    assert labels(dagrun)[("backup.standby", "db1")] == "skipped", labels(dagrun)
    assert task_states(dagrun, dag)["db1.backup"] == "success", task_states(dagrun, dag)
    assert dagrun.state == "success", dagrun.state
    assert load_state(standby) is None, "the held standby was written"
    assert len(catalog.manifests()) == 1


def test_a_host_without_standby_dir_has_no_standby_task(fleet):
    dag = load_dag_module("mysql_backup").mysql_backup_dagtest
    assert "backup.standby" not in dag.task_ids


def _two_hosts(
    tmp_path: Path, queues: tuple[str, str], standby_queues: tuple[str | None, str | None], **cluster
) -> None:
    """Hosts db1 and db2 (the same server under two names), each with a standby directory."""
    path = Path(os.environ["XTRABACKUP_FLEET_CONFIG"])
    config = yaml.safe_load(path.read_text())
    config["clusters"][0].update(cluster)
    config["clusters"][0]["hosts"] = [
        {
            "name": name,
            "mysql_conn_id": "mysql_dagtest",
            "queue": queue,
            "standby_dir": str(tmp_path / f"sb-{name}"),
        }
        | ({"standby_queue": standby} if standby else {})
        for name, queue, standby in zip(("db1", "db2"), queues, standby_queues, strict=True)
    ]
    path.write_text(yaml.safe_dump(config))


def test_each_standby_task_runs_on_its_hosts_standby_queue_not_the_database_hosts(fleet, tmp_path):
    server, catalog = fleet
    seed_database(server, unique_name("sbq"), rows=200)
    _two_hosts(tmp_path, ("backup_db1", "backup_db2"), ("recovery_a", "recovery_b"))
    dag = load_dag_module("mysql_backup").mysql_backup_dagtest
    assert dag.get_task("backup.standby").queue == STANDBY_QUEUE  # routed per host by the policy
    dagrun = run_dag(dag, run_conf={"kind": "full"})
    assert dagrun.state == "success", task_states(dagrun, dag)
    tis = {(ti.task_id, ti.map_index): ti for ti in dagrun.get_task_instances()}
    for index, (host, standby) in enumerate((("db1", "recovery_a"), ("db2", "recovery_b"))):
        assert tis[("backup.backup", index)].queue == f"backup_{host}"
        assert tis[("backup.standby", index)].state == "success"
        assert tis[("backup.standby", index)].queue == standby, "the private key stays off the database host"
        state = load_state(tmp_path / f"sb-{host}")
        newest = Catalog(catalog.store, "backups", "dagtest", host).backup_ids()[-1]
        assert state is not None and state.newest == newest


def test_one_standby_worker_for_the_cluster_needs_no_policy(fleet, tmp_path, monkeypatch):
    _two_hosts(tmp_path, ("backups", "backups"), (None, None), standby_queue="recovery")
    monkeypatch.delitem(sys.modules, "airflow_local_settings")
    dag = load_dag_module("mysql_backup").mysql_backup_dagtest
    assert dag.get_task("backup.backup").queue == "backups"
    assert dag.get_task("backup.standby").queue == "recovery"


def test_standbys_on_different_workers_need_the_routing_policy(fleet, tmp_path, monkeypatch):
    _two_hosts(tmp_path, ("backups", "backups"), ("recovery_a", "recovery_b"))
    monkeypatch.delitem(sys.modules, "airflow_local_settings")
    with pytest.raises(
        ConfigError, match=r"different standby_queues \['recovery_a', 'recovery_b'\].*airflow_local_settings"
    ):
        load_dag_module("mysql_backup")


def test_a_standby_without_a_standby_queue_is_an_import_error_naming_the_host(fleet, tmp_path):
    _two_hosts(tmp_path, ("backup_db1", "backup_db2"), ("recovery", None))
    with pytest.raises(ConfigError, match=r"host 'db2' needs a standby_queue.*standby_queue: backup_db2"):
        load_dag_module("mysql_backup")
