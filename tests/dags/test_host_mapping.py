"""The backup DAG maps one task group over a cluster's hosts: each map index is a host (shown as
the map index's name, with the kind its backup took), each backup task instance lands on its host's
queue (the cluster policy in xtrabackup_provider.policy), and each host's backup decides its own
kind: one host can take an incremental while another takes a full, in one run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml
from dag_helpers import labels, load_dag_module, run_dag, task_states

from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.config.schema import ConfigError
from xtrabackup_provider.policy import HOST_QUEUE


def _two_hosts(queues: tuple[str, str]) -> None:
    """Rewrite the `fleet` fixture's config: hosts db1 and db2 (the same server under two names)."""
    path = Path(os.environ["XTRABACKUP_FLEET_CONFIG"])
    config = yaml.safe_load(path.read_text())
    config["clusters"][0]["hosts"] = [
        {"name": name, "mysql_conn_id": "mysql_dagtest", "queue": queue}
        for name, queue in zip(("db1", "db2"), queues, strict=True)
    ]
    path.write_text(yaml.safe_dump(config))


def test_each_host_is_a_map_index_and_its_backup_runs_on_its_queue(fleet):
    _server, catalog = fleet
    _two_hosts(("backup_db1", "backup_db2"))
    dag = load_dag_module("mysql_backup").mysql_backup_dagtest
    assert dag.get_task("backup.backup").queue == HOST_QUEUE

    full = run_dag(dag)
    states = task_states(full, dag)
    assert full.state == "success", states
    tis = {(ti.task_id, ti.map_index): ti for ti in full.get_task_instances()}
    for index, host in enumerate(("db1", "db2")):
        backup = tis[("backup.backup", index)]
        assert backup.state == "success" and backup.rendered_map_index == f"{host} (full)"
        assert backup.queue == f"backup_{host}", "a backup must run on its own host's worker"
        # Only the backups are routed: retention runs anywhere.
        assert tis[("backup.retention", index)].queue == "default"
        assert tis[("backup.retention", index)].rendered_map_index == host
        manifests = Catalog(catalog.store, "backups", "dagtest", host).manifests()
        assert [m.kind for m in manifests] == ["full"]

    # db2 loses its backups: next run, db1 takes an incremental and db2 a new full, in one run.
    catalog.store.delete([info.key for info in catalog.store.list("backups/dagtest/db2/")])
    again = run_dag(dag)
    states = task_states(again, dag)
    assert again.state == "success", states
    assert labels(again) == {
        ("backup.backup", "db1 (incremental)"): "success",
        ("backup.backup", "db2 (full)"): "success",
        ("backup.retention", "db1"): "success",
        ("backup.retention", "db2"): "success",
    }


def test_hosts_on_different_queues_need_the_routing_policy(fleet, monkeypatch):
    _two_hosts(("backup_db1", "backup_db2"))
    monkeypatch.delitem(sys.modules, "airflow_local_settings")
    with pytest.raises(ConfigError, match=r"different queues.*airflow_local_settings\.py"):
        load_dag_module("mysql_backup")


def test_hosts_sharing_a_queue_need_no_policy(fleet, monkeypatch):
    _two_hosts(("backups", "backups"))
    monkeypatch.delitem(sys.modules, "airflow_local_settings")
    dag = load_dag_module("mysql_backup").mysql_backup_dagtest
    assert dag.get_task("backup.backup").queue == "backups"


def test_a_failed_host_keeps_its_backups_and_the_others_go_on(fleet):
    """db2's connection does not exist: its backup fails before it starts, so its retention does not
    run (a failed backup never costs an older one), while db1 is backed up and its retention runs."""
    path = Path(os.environ["XTRABACKUP_FLEET_CONFIG"])
    config = yaml.safe_load(path.read_text())
    config["clusters"][0]["hosts"] = [
        {"name": "db1", "mysql_conn_id": "mysql_dagtest"},
        {"name": "db2", "mysql_conn_id": "mysql_not_configured"},
    ]
    path.write_text(yaml.safe_dump(config))
    dag = load_dag_module("mysql_backup").mysql_backup_dagtest
    run = run_dag(dag)
    states = task_states(run, dag)
    assert run.state == "failed"
    assert states["db1.backup"] == states["db1.retention"] == "success", states
    assert states["db2.backup"] == "failed" and states["db2.retention"] == "upstream_failed", states


def test_a_task_whose_host_cannot_be_resolved_keeps_the_placeholder_queue(fleet):
    """No worker listens on the placeholder: an unresolvable task waits (and times out) rather
    than running a backup on some other host's worker."""
    from types import SimpleNamespace

    from xtrabackup_provider.policy import route_backup_task

    _two_hosts(("backup_db1", "backup_db2"))
    dag = load_dag_module("mysql_backup").mysql_backup_dagtest
    backup, retention = dag.get_task("backup.backup"), dag.get_task("backup.retention")
    routed = [
        SimpleNamespace(task=backup, map_index=i, queue=HOST_QUEUE, task_id=backup.task_id) for i in (1, 2)
    ]
    untouched = SimpleNamespace(task=retention, map_index=1, queue="default", task_id=retention.task_id)
    for ti in (*routed, untouched):
        route_backup_task(ti)
    assert [ti.queue for ti in routed] == ["backup_db2", HOST_QUEUE]  # index 2: only 2 hosts
    assert untouched.queue == "default"
