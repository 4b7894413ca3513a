"""The shipped DAGs read the copies the way the CLI does (core/catalog/targets.py): the backup DAG
copies a host's backups to the further target `offsite` (its own moto endpoint), then with the
first target's endpoint stopped the restore-test DAG restores and verifies the chain from offsite,
writes its report there and says which target it read. Real MariaDB, mariabackup, gpg, under
dag.test()."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from dag_helpers import load_dag_module, run_dag, task_states

from helpers import S3Server, seed_database, unique_name
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.reports import read_report
from xtrabackup_provider.core.storage.s3 import S3Store


@pytest.fixture
def offsite(monkeypatch) -> Iterator[Catalog]:
    """A second endpoint with the copy target's bucket, reached through the connection aws_offsite."""
    server = S3Server()
    server.start()
    try:
        bucket = server.make_bucket(f"xbp-offsite-{uuid.uuid4().hex[:12]}")
        monkeypatch.setenv("AIRFLOW_CONN_AWS_OFFSITE", server.airflow_connection_json())
        path = Path(os.environ["XTRABACKUP_FLEET_CONFIG"])
        config = yaml.safe_load(path.read_text())
        config["copies"] = [
            {
                "name": "offsite",
                "bucket": bucket,
                "prefix": "far",
                "aws_conn_id": "aws_offsite",
                "copy_attempts": 1,
            }
        ]
        path.write_text(yaml.safe_dump(config))
        yield Catalog(S3Store(server.client(), bucket), "far", "dagtest", "db1")
    finally:
        server.stop()


def _backups_copied(server, catalog: Catalog, offsite: Catalog) -> list[str]:
    db = unique_name("tgt")
    seed_database(server, db, rows=300)
    dag = load_dag_module("mysql_backup").mysql_backup_dagtest
    for kind in ("full", "incremental"):
        server.query(f"INSERT INTO `{db}`.audit SELECT MAX(id) + 1, 'tick' FROM `{db}`.audit")
        dagrun = run_dag(dag, run_conf={"kind": kind})
        assert dagrun.state == "success", task_states(dagrun, dag)
    ids = catalog.backup_ids()
    assert offsite.backup_ids() == ids and len(ids) == 2
    return ids


def test_with_the_first_target_down_the_restore_test_dag_passes_from_the_copy(fleet, offsite, s3_server):
    server, catalog = fleet
    ids = _backups_copied(server, catalog, offsite)
    dag = load_dag_module("mysql_restore_test").mysql_restore_test_dagtest
    s3_server.stop()  # the first target's endpoint: connection refused from now on
    try:
        dagrun = run_dag(dag, run_conf={"host": "db1", "level": "full"})
    finally:
        s3_server.start()
    states = {ti.task_id: ti.state for ti in dagrun.get_task_instances()}
    assert dagrun.state == "success", states
    assert states["chain_readable"] == states["restore_latest_chain"] == "success", states
    ti = next(ti for ti in dagrun.get_task_instances() if ti.task_id == "restore_latest_chain")
    result = ti.xcom_pull(task_ids="restore_latest_chain")
    assert result["source"] == "offsite" and result["chain"] == ids, result
    assert any("storage target primary cannot be read" in n for n in result["fallbacks"]), result
    report = read_report(offsite, ids[-1])
    assert report and report["verdict"] == "pass" and report["source"] == "offsite", report
    assert read_report(catalog, ids[-1]) is None  # nothing was written to the first target


def test_the_restore_test_dag_proves_the_copy_it_is_told_to(fleet, offsite):
    """target_store=offsite with the first target up: the copy alone is read and reported on."""
    server, catalog = fleet
    ids = _backups_copied(server, catalog, offsite)
    dag = load_dag_module("mysql_restore_test").mysql_restore_test_dagtest
    dagrun = run_dag(dag, run_conf={"host": "db1", "target_store": "offsite"})
    states = {ti.task_id: ti.state for ti in dagrun.get_task_instances()}
    assert dagrun.state == "success", states
    ti = next(ti for ti in dagrun.get_task_instances() if ti.task_id == "restore_latest_chain")
    result = ti.xcom_pull(task_ids="restore_latest_chain")
    assert result["source"] == "offsite" and not result["fallbacks"], json.dumps(result)
    assert read_report(offsite, ids[-1])["source"] == "offsite"
    assert read_report(catalog, ids[-1]) is None
