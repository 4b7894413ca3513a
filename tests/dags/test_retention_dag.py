"""The backup DAG's retention branch under dag.test(): real MariaDB, mariabackup, gpg and moto.

Dry run by default (the plan is only logged); with `retention.confirm: true` the next run's
retention deletes what the policy no longer keeps, and what it keeps still restores.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from dag_helpers import load_dag_module, run_dag, task_states

from helpers import restore_with, restored_checksums, seed_database, unique_name
from xtrabackup_provider.core.db.sandbox import table_checksums


def _set_retention(retention: dict) -> None:
    """Add a `retention:` section to the fleet config the `fleet` fixture wrote."""
    path = Path(os.environ["XTRABACKUP_FLEET_CONFIG"])
    config = yaml.safe_load(path.read_text())
    config["retention"] = retention
    path.write_text(yaml.safe_dump(config))


def _run_full(dag) -> dict[str, str]:
    dagrun = run_dag(dag, run_conf={"kind": "full"})
    states = task_states(dagrun, dag)
    assert dagrun.state == "success", states
    return states


def test_retention_branch_is_a_dry_run_until_confirmed(fleet, gpg_keys, tmp_path):
    server, catalog = fleet
    db = unique_name("ret")
    seed_database(server, db, rows=200)
    policy = {"keep_last_chains": 1, "min_age_days": 0}

    _set_retention(policy)
    states = _run_full(load_dag_module("mysql_backup").mysql_backup_dagtest)
    assert states["db1.retention"] == "success"
    states = _run_full(load_dag_module("mysql_backup").mysql_backup_dagtest)
    assert len(catalog.backup_ids()) == 2, "without confirm the plan only logs what it would delete"

    _set_retention(policy | {"confirm": True})
    _run_full(load_dag_module("mysql_backup").mysql_backup_dagtest)
    expected = table_checksums(server, [db])
    ids = catalog.backup_ids()
    assert len(ids) == 1, ids
    assert not [i.key for i in catalog.store.list(f"{catalog.host_prefix}/backups/") if ids[0] not in i.key]

    target = tmp_path / "restored" / "data"
    restore_with(catalog, gpg_keys, target)
    assert restored_checksums(target, tmp_path / "sb", [db], server_id=941) == expected
