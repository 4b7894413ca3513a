"""The shipped backup DAG under dag.test(): real MariaDB, mariabackup, gpg and the moto endpoint."""

from __future__ import annotations

import pytest
import yaml
from dag_helpers import labels, load_dag_module, run_dag, task_states

from helpers import add_orders, restore_with, restored_checksums, seed_database, unique_name
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums


def _run(dag, kind: str = "auto"):
    dagrun = run_dag(dag, run_conf={"kind": kind})
    states = task_states(dagrun, dag)
    return dagrun, states


def test_backup_dag_takes_full_then_incrementals_and_the_backup_restores(fleet, gpg_keys, tmp_path):
    server, catalog = fleet
    db = unique_name("dag")
    seed_database(server, db, rows=2000)
    dag = load_dag_module("mysql_backup").mysql_backup_dagtest

    # One backup task per host: the kind not taken is never a task instance (queued, a pool slot, a
    # worker process), and the UI names the map index after the host and the kind it took.
    assert sorted(dag.task_ids) == ["backup.backup", "backup.retention"]
    kinds = []
    for _ in range(4):
        add_orders(server, db, 500)
        dagrun, states = _run(dag)
        assert dagrun.state == "success", states
        backups = [ti for ti in dagrun.get_task_instances() if ti.task_id == "backup.backup"]
        assert len(backups) == 1, backups
        kind = backups[0].xcom_pull(task_ids="backup.backup", map_indexes=0)["kind"]
        kinds.append(kind)
        assert labels(dagrun) == {
            ("backup.backup", f"db1 ({kind})"): "success",
            ("backup.retention", "db1"): "success",
        }
    # max_chain_length 2: full, inc, inc, then a new full.
    assert kinds == ["full", "incremental", "incremental", "full"]
    manifests = catalog.manifests()
    assert [m.kind for m in manifests] == kinds
    assert manifests[0].backup_object.storage_class == "STANDARD_IA"
    assert manifests[1].backup_object.storage_class == "STANDARD"
    assert "max_chain_length" in manifests[3].decision_reason

    expected = table_checksums(server, [db])
    target = tmp_path / "restore" / "data"
    restore_with(catalog, gpg_keys, target, backup_id=manifests[2].backup_id)
    with SandboxServer.on_datadir(target, tmp_path / "sb", server_id=901) as restored:
        restored.start()
        # The third backup (an incremental) was taken before the last 500 orders.
        rows = restored.query(f"SELECT COUNT(*) FROM `{db}`.orders")[0][0]
        assert rows == 2000 + 3 * 500
    target2 = tmp_path / "restore2" / "data"
    restore_with(catalog, gpg_keys, target2)
    assert restored_checksums(target2, tmp_path / "sb2", [db], server_id=902) == expected


def test_the_run_conf_kind_overrides_the_policy_and_a_bad_one_fails_naming_it(fleet, capfd):
    server, catalog = fleet
    seed_database(server, unique_name("dag"), rows=100)
    dag = load_dag_module("mysql_backup").mysql_backup_dagtest
    for _ in range(2):
        dagrun, _states = _run(dag, kind="full")
        assert labels(dagrun)[("backup.backup", "db1 (full)")] == "success"
    assert [m.kind for m in catalog.manifests()] == ["full", "full"]
    assert "a full backup was requested" in catalog.manifests()[1].decision_reason

    capfd.readouterr()
    bad, states = _run(dag, kind="differential")
    assert bad.state == "failed"
    # It failed before taking a kind: the label names the host alone; retention did not run.
    assert labels(bad)[("backup.backup", "db1")] == "failed"
    assert task_states(bad, dag)["db1.retention"] == "upstream_failed"
    assert "backup of dagtest/db1: kind must be auto, full or incremental, not 'differential'" in "".join(
        capfd.readouterr()
    )
    assert len(catalog.manifests()) == 2


def test_bad_fleet_config_is_an_import_error_naming_field_and_file(tmp_path, monkeypatch):
    path = tmp_path / "fleet.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "storage": {"bucket": "b"},
                "clusters": [{"name": "c", "hosts": [{"name": "h", "flavour": "percona"}]}],
            }
        )
    )
    monkeypatch.setenv("XTRABACKUP_FLEET_CONFIG", str(path))
    with pytest.raises(ValueError) as info:
        load_dag_module("mysql_backup")
    message = str(info.value)
    assert str(path) in message
    assert "clusters.0.hosts.0.flavour" in message
