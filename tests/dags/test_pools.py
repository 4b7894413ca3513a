"""Pools from the fleet config: the backup DAG's tasks take them, and `xtrabackup-provider pools`
prints the `airflow pools set` commands that create them in a real Airflow db."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dag_helpers import load_dag_module

from helpers import unique_name
from xtrabackup_provider.cli import main


def _fleet(tmp_path: Path, monkeypatch, storage_pool=None, **cluster_a) -> Path:
    storage = {"local_path": str(tmp_path / "store")} | ({"pool": storage_pool} if storage_pool else {})
    config = {
        "storage": storage,
        "clusters": [
            {"name": "a", "hosts": [{"name": "db1"}, {"name": "db2.example"}], **cluster_a},
            {"name": "b", "hosts": [{"name": "db3"}]},
        ],
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("XTRABACKUP_FLEET_CONFIG", str(path))
    return path


def _pools(dag) -> dict[str, str]:
    return {t.task_id: t.pool for t in dag.tasks}


def test_without_pools_every_task_stays_in_default_pool(tmp_path, monkeypatch):
    _fleet(tmp_path, monkeypatch)
    module = load_dag_module("mysql_backup")
    for dag in (module.mysql_backup_a, module.mysql_backup_b):
        assert set(_pools(dag).values()) == {"default_pool"}


def test_backups_take_the_cluster_pool_else_the_storage_pool(tmp_path, monkeypatch):
    _fleet(tmp_path, monkeypatch, {"name": "s3_uploads", "slots": 5}, backup_pool="backups_a")
    module = load_dag_module("mysql_backup")
    a, b = _pools(module.mysql_backup_a), _pools(module.mysql_backup_b)
    assert a["backup.backup"] == "backups_a"
    assert b["backup.backup"] == "s3_uploads"
    assert a["backup.retention"] == b["backup.retention"] == "s3_uploads"


def test_pools_command_creates_the_pools_in_airflow(tmp_path, monkeypatch, capsys, airflow_home):
    cluster_pool, storage_pool = unique_name("bk"), unique_name("s3")
    config = _fleet(
        tmp_path,
        monkeypatch,
        {"name": storage_pool, "slots": 5},
        backup_pool=cluster_pool,
        max_parallel_backups=3,
    )
    assert main(["pools", "--config", str(config)]) == 0
    script = capsys.readouterr().out
    assert len(script.splitlines()) == 2, script
    venv_bin = Path(sys.executable).parent  # where `airflow` is installed
    env = os.environ | {"PATH": f"{venv_bin}:{os.environ['PATH']}"}
    proc = subprocess.run(["sh", "-e"], input=script, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]

    from airflow.models.pool import Pool
    from airflow.utils.session import create_session

    with create_session() as session:
        found = {p.pool: (p.slots, p.description) for p in session.query(Pool).all()}
    assert found[cluster_pool] == (3, "xtrabackup-provider: backups of cluster(s) a")
    assert found[storage_pool] == (5, "xtrabackup-provider: backups of cluster(s) b; retention")


@pytest.mark.parametrize(
    ("storage_pool", "cluster", "message"),
    [
        (
            {"name": "p1", "slots": 9},
            {"backup_pool": "p1"},
            "pool 'p1' has 2 slots in clusters[a].backup_pool but 9",
        ),
        (None, {"backup_pool": "default_pool"}, "default_pool is Airflow's shared pool"),
        (None, {"backup_pool": {"name": "x", "slots": 0}}, "clusters.0.backup_pool.slots"),
    ],
)
def test_bad_pool_settings_name_the_field(tmp_path, monkeypatch, capsys, storage_pool, cluster, message):
    config = _fleet(tmp_path, monkeypatch, storage_pool, **cluster)
    assert main(["pools", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(config) in err
