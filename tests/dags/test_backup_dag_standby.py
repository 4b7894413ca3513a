"""The shipped backup DAG keeps a host's `standby_dir` current: after each backup its `standby`
task merges the new backup into the prepared standby, which then restores to the data of the
newest backup. Real MariaDB, mariabackup, gpg and the moto endpoint, under dag.test()."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from dag_helpers import labels, load_dag_module, run_dag

from helpers import add_orders, restored_checksums, seed_database, unique_name
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.restore.standby import load_state, restore_standby


def _with_standby(directory: Path) -> None:
    path = Path(os.environ["XTRABACKUP_FLEET_CONFIG"])
    config = yaml.safe_load(path.read_text())
    config["clusters"][0]["hosts"][0]["standby_dir"] = str(directory)
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


def test_a_host_without_standby_dir_has_no_standby_task(fleet):
    dag = load_dag_module("mysql_backup").mysql_backup_dagtest
    assert "backup.standby" not in dag.task_ids
