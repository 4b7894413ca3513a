"""Binlog shipping in the shipped DAGs under dag.test(): the shipping DAG, the backup DAG's
BinlogLagSensor (deferred to its trigger, resumed once the binlogs are stored, failed when they
never are), and the restore-test DAG's point-in-time branch."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from dag_helpers import load_dag_module, run_dag, task_states

from xtrabackup_provider.core.binlog.catalog import BinlogCatalog
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.db.server import MySQLTarget, server_facts
from xtrabackup_provider.core.pitr.pitr_test import PITR_REPORT_NAME

TRIGGER = "xtrabackup_provider.triggers.binlog.BinlogShippedTrigger"


def _set_binlogs(**settings) -> None:
    path = Path(os.environ["XTRABACKUP_FLEET_CONFIG"])
    config = yaml.safe_load(path.read_text())
    config["clusters"][0]["binlogs"] = {"progress_seconds": 0.3, **settings}
    path.write_text(yaml.safe_dump(config))


@pytest.fixture
def binlog_fleet(fleet):
    """The one-host fleet, shipping binlogs in batch mode and gating backups on them."""
    _set_binlogs(lag_timeout_minutes=2)
    return fleet


def _states(dagrun) -> dict[str, str]:
    return task_states(dagrun, dagrun.dag)


def _target(server) -> MySQLTarget:
    return MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)


def _index(server, catalog):
    return BinlogCatalog(catalog, server_facts(_target(server)).server_uuid).index()


def _triggers() -> dict[int, dict]:
    """{id: kwargs} of the binlog sensor's trigger rows in the Airflow db (a deferral each)."""
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return {
            row.id: dict(row.kwargs)
            for row in session.scalars(select(Trigger).where(Trigger.classpath == TRIGGER))
        }


def _deferred(bucket: str, before: dict[int, dict]) -> list[dict]:
    """This test's deferrals: triggers for its own bucket that were not there `before` (the session's
    db holds every other test's rows; no clock decides which are new)."""
    return [kw for tid, kw in _triggers().items() if tid not in before and kw.get("bucket") == bucket]


class ShipWhenDeferred(threading.Thread):
    """Waits until the sensor's trigger row is in the Airflow db, then ships: the binlogs cannot
    be stored before the task has deferred."""

    def __init__(self, server, catalog, gpg_keys) -> None:
        super().__init__(daemon=True)
        self.request = ShipRequest(
            catalog=catalog, target=_target(server), public_keys=[gpg_keys.public_key], flush=True
        )
        self.bucket, self.before = catalog.store.bucket, _triggers()
        self.trigger_kwargs: dict | None = None
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.wait(0.2):
                if deferred := _deferred(self.bucket, self.before):
                    self.trigger_kwargs = deferred[0]
                    ship_binlogs(self.request)
                    return
        except BaseException as exc:  # noqa: BLE001 - asserted by the test
            self.error = exc


def test_shipping_dag_ships_every_binlog_of_the_cluster(binlog_fleet):
    server, catalog = binlog_fleet
    server.query("CREATE DATABASE ship_dag")
    server.query("CREATE TABLE ship_dag.t (id INT PRIMARY KEY) ENGINE=InnoDB")
    server.query("INSERT INTO ship_dag.t VALUES (1)")
    open_before = server.query("SHOW MASTER STATUS")[0][0]
    dag = load_dag_module("mysql_binlog_shipping").mysql_binlog_shipping_dagtest

    dagrun = run_dag(dag)
    assert dagrun.state == "success", _states(dagrun)
    index = _index(server, catalog)
    server_logs = [r[0] for r in server.query("SHOW BINARY LOGS")]
    # FLUSH BINARY LOGS first (batch mode), so the binlog open before the run is shipped too.
    assert open_before in index.complete
    assert sorted(index.complete) == server_logs[:-1]


def test_backup_dag_counts_a_backup_only_once_its_binlogs_are_stored(binlog_fleet, gpg_keys):
    server, catalog = binlog_fleet
    server.query("CREATE DATABASE gate_dag")
    server.query("CREATE TABLE gate_dag.t (id INT PRIMARY KEY, at DATETIME) ENGINE=InnoDB")
    # Nobody ships: the sensor gives up at lag_timeout (3 s here) and the run fails, backup or not.
    _set_binlogs(lag_timeout_minutes=0.05)
    before = _triggers()
    dagrun = run_dag(load_dag_module("mysql_backup").mysql_backup_dagtest)
    states = _states(dagrun)
    assert states["db1.backup"] == "success" and states["db1.binlogs_shipped"] == "failed", states
    assert dagrun.state == "failed"
    # Failed by its own timeout after deferring, not because the task could not start.
    assert _deferred(catalog.store.bucket, before), "the sensor failed without deferring to its trigger"

    _set_binlogs(lag_timeout_minutes=2)
    dag = load_dag_module("mysql_backup").mysql_backup_dagtest
    shipper = ShipWhenDeferred(server, catalog, gpg_keys)
    shipper.start()
    try:
        dagrun = run_dag(dag)
    finally:
        shipper.stop.set()
        shipper.join(60)
    states = _states(dagrun)
    assert shipper.error is None, shipper.error
    assert shipper.trigger_kwargs is not None, "the sensor never deferred to its trigger"
    assert dagrun.state == "success", states
    newest = catalog.manifests()[-1]
    index = _index(server, catalog)
    assert index.covers_position(newest.binlog_file, newest.binlog_position), (
        "the backup's binlogs are stored"
    )

    # The restore-test DAG's point-in-time branch: restore to a time after that backup.
    server.query("INSERT INTO gate_dag.t VALUES (1, NOW())")
    reached = server.query("SELECT @@gtid_binlog_pos")[0][0]
    # The server stamps its binlog events: the target is the next second of its own clock.
    stamped = int(server.query("SELECT UNIX_TIMESTAMP()")[0][0])
    target = datetime.fromtimestamp(stamped + 1, UTC)
    while int(server.query("SELECT UNIX_TIMESTAMP()")[0][0]) <= stamped:
        time.sleep(0.05)
    server.query("INSERT INTO gate_dag.t VALUES (2, NOW())")
    ship_binlogs(
        ShipRequest(catalog=catalog, target=_target(server), public_keys=[gpg_keys.public_key], flush=True)
    )
    restore_test = load_dag_module("mysql_restore_test").mysql_restore_test_dagtest
    dagrun = run_dag(restore_test, run_conf={"host": "db1", "target_time": target.isoformat()})
    states = _states(dagrun)
    assert dagrun.state == "success", states
    assert states["restore_to_time"] == "success" and states["restore_latest_chain"] == "skipped"
    report = yaml.safe_load(catalog.store.get_bytes(catalog.object_key(newest.backup_id, PITR_REPORT_NAME)))
    assert report["verdict"] == "pass" and report["backup_id"] == newest.backup_id, report
    assert report["reached"]["gtid"] == reached, "replayed up to the row before the target, not past it"


def test_binlog_tasks_are_opt_in_per_cluster(tmp_path, monkeypatch):
    config = {
        "storage": {"local_path": str(tmp_path / "store")},
        "clusters": [
            {"name": "plain", "hosts": [{"name": "db1"}]},
            {
                "name": "pitr",
                "hosts": [{"name": "db2"}],
                "binlogs": {"mode": "continuous", "schedule": "@hourly"},
            },
        ],
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("XTRABACKUP_FLEET_CONFIG", str(path))

    shipping = load_dag_module("mysql_binlog_shipping")
    assert not hasattr(shipping, "mysql_binlog_shipping_plain")
    ship = shipping.mysql_binlog_shipping_pitr.get_task("ship_binlogs")
    assert ship.partial_kwargs["continuous_seconds"] == 55 * 60 and not ship.partial_kwargs["flush"]
    backup = load_dag_module("mysql_backup")
    assert "backup.binlogs_shipped" not in backup.mysql_backup_plain.task_ids
    assert "backup.binlogs_shipped" in backup.mysql_backup_pitr.task_ids
    restore_test = load_dag_module("mysql_restore_test")
    assert "restore_to_time" not in restore_test.mysql_restore_test_plain.task_ids
    assert "restore_to_time" in restore_test.mysql_restore_test_pitr.task_ids
