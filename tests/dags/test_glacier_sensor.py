"""Archived backups in the shipped restore-test DAG: check -> request restore -> GlacierRestoreSensor
(deferred to its trigger, then resumed by itself) -> restore test; and the sensor in poke mode."""

from __future__ import annotations

import threading

import pytest
import yaml
from dag_helpers import load_dag_module, run_dag

from glacier_helpers import finish_restores, restore_header, slow_restores
from helpers import seed_database, unique_name
from xtrabackup_provider.core.catalog.reports import read_report

TRIGGER = "xtrabackup_provider.triggers.glacier.GlacierRestoreTrigger"


@pytest.fixture
def glacier_fleet(fleet, monkeypatch):
    """The one-host fleet with fulls stored in GLACIER and a 1 s restore poll."""
    import os
    from pathlib import Path

    path = Path(os.environ["XTRABACKUP_FLEET_CONFIG"])
    config = yaml.safe_load(path.read_text())
    config["storage"].update(
        storage_class={"full": "GLACIER", "incremental": "STANDARD"},
        glacier_restore_tier="Bulk",
        glacier_poll_seconds=1,
    )
    path.write_text(yaml.safe_dump(config))
    return fleet


class TriggerWatcher(threading.Thread):
    """Waits for the sensor's trigger row in the Airflow db, then lets moto finish the restores:
    the restore cannot complete before the task has deferred."""

    def __init__(self, endpoint_url: str, bucket: str) -> None:
        super().__init__(daemon=True)
        self.endpoint_url, self.bucket = endpoint_url, bucket
        self.before = self._triggers()  # the session's db holds other tests' rows
        self.kwargs: dict | None = None
        self.stop = threading.Event()

    @staticmethod
    def _triggers() -> dict[int, dict]:
        from airflow.models.trigger import Trigger
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            rows = session.scalars(select(Trigger).where(Trigger.classpath == TRIGGER))
            return {row.id: dict(row.kwargs) for row in rows}

    def run(self) -> None:
        while not self.stop.wait(0.2):
            new = [kw for tid, kw in self._triggers().items() if tid not in self.before]
            if mine := [kw for kw in new if kw.get("bucket") == self.bucket]:
                self.kwargs = mine[0]
                finish_restores(self.endpoint_url)
                return


def _return_value(dagrun, task_id: str):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        value = session.scalars(
            select(XComModel.value).where(
                XComModel.dag_id == dagrun.dag_id,
                XComModel.run_id == dagrun.run_id,
                XComModel.task_id == task_id,
                XComModel.key == "return_value",
            )
        ).first()
    return XComModel.deserialize_value(type("X", (), {"value": value})()) if value is not None else None


def test_archived_backup_restore_test_defers_then_resumes(glacier_fleet, s3_server):
    server, catalog = glacier_fleet
    seed_database(server, unique_name("ice"), rows=200)
    assert run_dag(load_dag_module("mysql_backup").mysql_backup_dagtest).state == "success"
    manifest = catalog.latest()
    key = manifest.backup_object.key
    client = s3_server.client()
    assert client.head_object(Bucket=catalog.store.bucket, Key=key)["StorageClass"] == "GLACIER"

    dag = load_dag_module("mysql_restore_test").mysql_restore_test_dagtest
    watcher = TriggerWatcher(s3_server.endpoint_url, catalog.store.bucket)
    with slow_restores(s3_server.endpoint_url, client, catalog.store.bucket, [key], reads=60):
        watcher.start()
        try:
            dagrun = run_dag(dag, run_conf={"host": "db1", "level": "quick"})
        finally:
            watcher.stop.set()
            watcher.join()
    states = {ti.task_id: ti.state for ti in dagrun.get_task_instances()}
    assert dagrun.state == "success", states
    assert states["request_glacier_restore"] == "success"
    assert states["wait_glacier_restore"] == "success"
    assert states["chain_readable"] == "skipped"
    assert states["restore_latest_chain"] == "success"
    assert watcher.kwargs is not None, "the sensor never deferred: no GlacierRestoreTrigger row"
    assert watcher.kwargs["keys"] == [key] and watcher.kwargs["bucket"] == catalog.store.bucket
    resumed = _return_value(dagrun, "wait_glacier_restore")
    assert resumed["deferred"] is True, resumed
    assert [s["state"] for s in resumed["states"]] == ["restored"]
    assert read_report(catalog, manifest.backup_id)["verdict"] == "pass"


def test_poke_mode_waits_until_restored_and_fails_fast_when_nothing_was_requested(s3_server, bucket):
    from xtrabackup_provider.sensors.glacier import GlacierRestoreFailed, GlacierRestoreSensor

    client = s3_server.client()
    key = "backups/c1/db1/backups/20260101T000000Z-full/backup.xbstream.zst.gpg"
    client.put_object(Bucket=bucket, Key=key, Body=b"cold", StorageClass="GLACIER")
    sensor = GlacierRestoreSensor(
        task_id="wait",
        bucket=bucket,
        keys=[key],
        aws_conn_id="aws_test",
        deferrable=False,
        poke_interval=0.05,
    )
    with pytest.raises(GlacierRestoreFailed, match="no restore is running"):
        sensor.execute({})
    with slow_restores(s3_server.endpoint_url, client, bucket, [key], reads=8):
        client.restore_object(
            Bucket=bucket, Key=key, RestoreRequest={"Days": 1, "GlacierJobParameters": {"Tier": "Bulk"}}
        )
        assert restore_header(client, bucket, key) == 'ongoing-request="true"'
        result = sensor.execute({})  # pokes until the restore is done: it could not succeed earlier
    assert result["deferred"] is False
    assert [s["state"] for s in result["states"]] == ["restored"]
