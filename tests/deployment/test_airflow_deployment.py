"""The shipped DAGs on a real Airflow deployment, not dag.test(): Airflow's own api-server,
dag-processor, triggerer and scheduler (CeleryExecutor, Redis broker) and one Celery worker per
database host, each on its host's queue, against two real MariaDB servers and S3 over HTTP.

As a user would: connections made with `airflow connections add` / `import`, the schedule fires
the first backups, the binlog gate defers to the triggerer and is resumed once the shipping DAG
stored the binlogs, an incremental is triggered from the CLI while one host's worker is stopped,
a restore test is triggered through the REST API and its log read back through it; the backups
restore to the rows written, and no log holds a secret. A user's own DAG waits in the triggerer
for a replica to catch up (ReplicaCaughtUpSensor, deferrable).

The DAG files are installed as the docs say (`xtrabackup-provider install-dags`, fleet.yaml next
to them). `make test-wheel` runs this file from the built wheel installed in a virtualenv outside
the checkout ($XBP_FROM_WHEEL=1: the test then checks the components import it from there).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import pytest
from airflow_stack import BIN, AirflowStack
from view_checks import check_backups_view

from helpers import (
    S3Server,
    add_orders,
    generate_gpg_keys,
    restore_with,
    restored_checksums,
    seed_database,
    start_replication,
)
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.common.values import gtid_reached, parse_gtid_pos
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.storage.s3 import S3Store

CLUSTER = "deploy"
HOSTS = ("db1", "db2")
BACKUP, SHIP, RESTORE = (f"mysql_backup_{CLUSTER}", f"mysql_binlog_shipping_{CLUSTER}",
                         f"mysql_restore_test_{CLUSTER}")  # fmt: skip
DB = "shop"
REPLICA_DAG = "replica_caught_up"
# A user's own DAG beside the shipped ones: the replica of db1 must apply the GTID given in the conf.
REPLICA_DAG_FILE = f'''"""A user's DAG (Airflow): wait in the triggerer until db1's replica applied a GTID."""
from datetime import datetime

from airflow.sdk import DAG

from xtrabackup_provider.sensors.replica import ReplicaCaughtUpSensor

with DAG("{REPLICA_DAG}", schedule=None, start_date=datetime(2026, 1, 1), params={{"gtid": ""}}):
    ReplicaCaughtUpSensor(
        task_id="wait",
        replica_conn_id="mysql_replica",
        target_gtid="{{{{ params.gtid }}}}",
        max_lag_seconds=0,
        replica_name="db1's replica",
        deferrable=True,
        poke_interval=2,
        timeout=900,
    )
'''
# Each wait is bounded; generous for a loaded 2-core machine (the whole test: 7-10 min at load 8-15).
STEP = 420


@dataclass
class Deployment:
    stack: AirflowStack
    servers: dict[str, Any]  # host -> its SandboxServer
    replica: Any  # a replica of db1 (for the user's own DAG)
    keys: Any  # the GPG key pair (helpers.GpgKeys)
    catalogs: dict[str, Catalog]  # host -> its backups, read from the store as a user would
    secrets: list[str]  # none of these may appear in any log


@pytest.fixture
def deployment(mariadb_factory, tmp_path):
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is missing: `make setup` installs it (Debian package redis-server)")
    work = tmp_path / "deploy"
    work.mkdir()
    secret = {"aws": secrets.token_urlsafe(24), "gpg": secrets.token_urlsafe(16)}
    restore_root = tempfile.mkdtemp(prefix="xbp-rt-")
    stack = AirflowStack(work)
    # The metadata database is migrated while the servers start (a minute of CPU either way).
    migrate = subprocess.Popen(
        [str(BIN / "airflow"), "db", "migrate"],
        env=stack.env(),
        stdin=subprocess.DEVNULL,
        stdout=open(work / "migrate.log", "wb"),  # noqa: SIM115 - closed with the process
        stderr=subprocess.STDOUT,
    )
    s3 = S3Server()
    servers = {}
    try:
        s3.start()
        for host in HOSTS:
            servers[host] = mariadb_factory(f"deploy-{host}", root_password=secrets.token_urlsafe(16))
            seed_database(servers[host], DB, rows=2000)
        servers["replica"] = mariadb_factory("deploy-replica", root_password=secrets.token_urlsafe(16))
        start_replication(servers["db1"], servers["replica"])
        s3.make_bucket("deploy-backups")
        keys = generate_gpg_keys("Deploy <deploy@example.invalid>", secret["gpg"])
        stack.install_dags(
            {
                "storage": {"bucket": "deploy-backups", "prefix": "backups", "aws_conn_id": "aws_deploy"},
                "encryption": {"gpg_conn_id": "backup_gpg", "private_gpg_conn_id": "backup_gpg_private"},
                "policy": {"max_incremental_ratio": 10.0},
                "clusters": [
                    {
                        "name": CLUSTER,
                        "schedule": "@once",  # the scheduler fires one run when the DAG is unpaused
                        "restore_test_schedule": None,
                        # short: the restored server's socket lives under it (107 bytes at most)
                        "restore_workdir": restore_root,
                        "binlogs": {"schedule": None, "gate_backups": True, "lag_timeout_minutes": 15},
                        "hosts": [{"name": h, "mysql_conn_id": f"mysql_{h}", "queue": h} for h in HOSTS],
                    }
                ],
            },
            **{f"{REPLICA_DAG}.py": REPLICA_DAG_FILE},
        )
        assert migrate.wait(STEP) == 0, (work / "migrate.log").read_text()[-3000:]
        # Nothing secret on a command line: the public key with `connections add`, the rest from a
        # 0600 file with `connections import` (`add --conn-password` would show in ps).
        stack.cli("connections", "add", "backup_gpg", "--conn-type", "gpgkeys",
                  "--conn-extra", json.dumps({"public_keys": [keys.public_key]}))  # fmt: skip
        conns = {
            "aws_deploy": {"conn_type": "aws", "login": "deploy", "password": secret["aws"],
                           "extra": {"endpoint_url": s3.endpoint_url, "region_name": "us-east-1"}},
            "backup_gpg_private": {"conn_type": "gpgkeys", "password": keys.passphrase,
                                   "extra": {"private_key": keys.private_key}},
        } | {
            f"mysql_{h}": {"conn_type": "mysql", "host": "127.0.0.1", "port": s.port, "login": "root",
                           "password": s.root_password}
            for h, s in servers.items()
        }  # fmt: skip
        stack.import_connections(conns)
        stack.start_redis()
        stack.start_airflow()
        for host in HOSTS:
            stack.start_worker(host, queue=host)
        store = S3Store(s3.client(), "deploy-backups")
        yield Deployment(
            stack,
            {h: servers[h] for h in HOSTS},
            servers["replica"],
            keys,
            {h: Catalog(store, "backups", CLUSTER, h) for h in HOSTS},
            [secret["aws"], keys.passphrase, stack.ui_password, keys.private_key.splitlines()[5],
             *(s.root_password for s in servers.values())],
        )  # fmt: skip
    finally:
        if migrate.poll() is None:
            migrate.kill()
        stack.close()
        s3.stop()
        for server in servers.values():
            mariadb_factory.discard(server)
        shutil.rmtree(restore_root, ignore_errors=True)


def _ship_binlogs_then_done(stack: AirflowStack, run_id: str, kind: str) -> dict[tuple[str, str], Any]:
    """Ship the binlogs (the backups' gates wait for them), wait for the backup run, and check
    that each host's backup took `kind` on its own host's worker; the run's task instances."""
    stack.succeeded(SHIP, stack.trigger(SHIP), "the binlog shipping run", STEP)
    stack.succeeded(BACKUP, run_id, f"the backup run {run_id}", STEP)
    tis = stack.task_instances(BACKUP, run_id)
    for host in HOSTS:
        backup = tis[("backup.backup", f"{host} ({kind})")]
        assert (backup["state"], backup["queue"], backup["hostname"]) == ("success", host, f"{host}-worker")
    return tis


def _replica_waits_in_the_triggerer(stack: AirflowStack, source: Any, replica: Any) -> None:
    """The replica's SQL thread is stopped while the source writes: the sensor defers, its trigger
    polls in the triggerer, and once the replica applies the GTID the task resumes by itself."""
    replica.query("STOP SLAVE SQL_THREAD")
    add_orders(source, DB, 50)
    gtid = source.query("SELECT @@gtid_binlog_pos")[0][0]
    stack.unpause(REPLICA_DAG)
    run = stack.trigger(REPLICA_DAG, {"gtid": gtid})
    deferred_sql = (
        "SELECT t.classpath FROM task_instance ti JOIN trigger t ON ti.trigger_id = t.id WHERE ti.dag_id=?"
        " AND ti.run_id=? AND ti.task_id='wait' AND ti.state='deferred' AND t.triggerer_id IS NOT NULL"
    )
    ((classpath,),) = stack.wait("the replica's wait deferred to the triggerer",
                                 lambda: stack.db(deferred_sql, REPLICA_DAG, run), STEP)  # fmt: skip
    assert classpath == "xtrabackup_provider.triggers.replica.ReplicaCaughtUpTrigger"
    assert stack.finished(REPLICA_DAG, run) is None, "it cannot finish before the replica applies the GTID"
    replica.query("START SLAVE SQL_THREAD")
    stack.succeeded(REPLICA_DAG, run, "the replica's wait", STEP)
    wait = stack.task_instances(REPLICA_DAG, run)[("wait", "")]
    # Resumed by its trigger's event: one try, no trigger left, the GTID applied.
    assert (wait["try_number"], wait["trigger_id"], wait["next_method"]) == (1, None, None), wait
    applied = replica.query("SELECT @@gtid_slave_pos")[0][0]
    assert gtid_reached(parse_gtid_pos(applied), parse_gtid_pos(gtid)), (applied, gtid)


def test_the_shipped_dags_on_a_celery_deployment(deployment, tmp_path):
    stack, servers, keys, catalogs = (
        deployment.stack,
        deployment.servers,
        deployment.keys,
        deployment.catalogs,
    )
    t0 = time.monotonic()
    timings: list[str] = []

    def mark(what: str) -> None:
        timings.append(f"{time.monotonic() - t0:6.1f}s {what}")

    if os.environ.get("XBP_FROM_WHEEL"):  # make test-wheel: the installed wheel, not the checkout
        location = stack.provider_location()
        assert location.is_relative_to(BIN.parent) and "site-packages" in location.parts, location
    stack.wait("the api-server", stack.healthy, STEP)
    stack.wait("the dag-processor to serialize the shipped DAGs",
               lambda: {BACKUP, SHIP, RESTORE, REPLICA_DAG} <= {r[0] for r in stack.db("SELECT dag_id FROM serialized_dag")},
               STEP)  # fmt: skip
    assert stack.db("SELECT filename, stacktrace FROM import_error") == []
    mark("api-server up, DAGs parsed")

    # The UI's connection form for the GPG keys comes from the provider info (Airflow 3.2+).
    forms = {f["connection_type"]: f for f in stack.rest("GET", "/ui/connections/hook_meta")}
    for conn_type in ("gpgkeys", "gpg_keys"):
        assert set(forms[conn_type]["extra_fields"]) == {"public_keys", "private_key"}, forms[conn_type]
        assert forms[conn_type]["standard_fields"]["host"]["hidden"] is True

    # 1. The schedule fires the first backups, each host's on its own host's worker.
    stack.unpause(BACKUP)
    first = stack.wait("the scheduled run",
                       lambda: stack.db("SELECT run_id FROM dag_run WHERE dag_id=? AND run_type='scheduled'", BACKUP),
                       STEP)[0][0]  # fmt: skip
    deferred_sql = (
        "SELECT ti.map_index, t.classpath FROM task_instance ti JOIN trigger t ON ti.trigger_id = t.id"
        " WHERE ti.dag_id=? AND ti.run_id=? AND ti.task_id='backup.binlogs_shipped' AND ti.state='deferred'"
        " AND t.triggerer_id IS NOT NULL"
    )
    deferred = stack.wait("both binlog gates deferred to the triggerer",
                          lambda: (rows := stack.db(deferred_sql, BACKUP, first)) and len(rows) == 2 and rows,
                          STEP)  # fmt: skip
    assert {c for _, c in deferred} == {"xtrabackup_provider.triggers.binlog.BinlogShippedTrigger"}
    mark("backups done, binlog gates deferred")
    stack.unpause(SHIP)
    tis = _ship_binlogs_then_done(stack, first, "full")
    mark("scheduled run success")
    for host in HOSTS:
        gate = tis[("backup.binlogs_shipped", host)]
        # Resumed by its trigger's event, not retried or re-run: one try, no trigger left.
        assert (gate["state"], gate["try_number"], gate["trigger_id"], gate["next_method"]) == (
            "success", 1, None, None,
        ), gate  # fmt: skip
        (manifest,) = catalogs[host].manifests()
        assert (manifest.kind, manifest.server_id) == ("full", servers[host].server_id)

    # 2. An incremental from the CLI while db2's worker is down: db1 is backed up, db2 waits on its
    # own queue (no other worker takes it), then runs once its worker is back.
    stack.stop("worker-db2")
    for server in servers.values():
        add_orders(server, DB, 1500)
    expected = {host: table_checksums(server, [DB]) for host, server in servers.items()}
    stack.cli("dags", "trigger", BACKUP)  # its table wraps the run id: read it from the database
    ((second,),) = stack.db("SELECT run_id FROM dag_run WHERE dag_id=? AND run_type='manual'", BACKUP)
    stack.wait("db1's incremental", lambda: stack.task_instances(BACKUP, second).get(
        ("backup.backup", "db1 (incremental)"), {}).get("state") == "success", STEP)  # fmt: skip
    waiting = next(ti for (task, _), ti in stack.task_instances(BACKUP, second).items()
                   if task == "backup.backup" and ti["map_index"] == 1)  # fmt: skip
    assert waiting["state"] in ("scheduled", "queued") and waiting["hostname"] in (None, ""), waiting
    assert [m.kind for m in catalogs["db2"].manifests()] == ["full"]
    mark("db1 incremental with db2's worker down")
    stack.start_worker("db2", queue="db2")
    stack.wait("db2's incremental", lambda: stack.task_instances(BACKUP, second).get(
        ("backup.backup", "db2 (incremental)"), {}).get("state") == "success", STEP)  # fmt: skip
    stack.wait("both binlog gates deferred again",
               lambda: len(stack.db(deferred_sql, BACKUP, second)) == 2 or stack.finished(BACKUP, second),
               STEP)  # fmt: skip
    _ship_binlogs_then_done(stack, second, "incremental")
    mark("CLI-triggered incremental run success")
    for host in HOSTS:
        assert [m.kind for m in catalogs[host].manifests()] == ["full", "incremental"]

    # 3. A restore test by hand, through the REST API, on whichever worker is free.
    stack.unpause(RESTORE)
    run = stack.trigger(RESTORE, {"host": "db2", "level": "full"})
    # Meanwhile, 4. the user's own DAG: the replica's wait runs in the triggerer.
    _replica_waits_in_the_triggerer(stack, servers["db1"], deployment.replica)
    mark("ReplicaCaughtUpSensor resumed by its trigger")
    stack.succeeded(RESTORE, run, "the restore test", STEP)
    mark("REST-triggered restore test success")
    assert stack.rest("GET", f"/api/v2/dags/{RESTORE}/dagRuns/{run}")["state"] == "success"
    log = stack.task_log(RESTORE, run, "restore_latest_chain")
    assert re.search(rf"restore test of {CLUSTER}/db2 \S+-inc \(full\) passed", log), log[-3000:]

    # The Backups view in the UI shows what the DAGs made, linked to their runs (view_checks.py).
    endpoint = catalogs["db1"].store.client.meta.endpoint_url
    check_backups_view(stack, endpoint, BACKUP, {first, second}, (RESTORE, run), deployment.secrets, tmp_path)
    mark("Backups view checked")

    # The chain the deployment stored restores to the rows written.
    for host in HOSTS:
        datadir = tmp_path / f"restored-{host}"
        restore_with(catalogs[host], keys, datadir)
        assert restored_checksums(datadir, tmp_path / f"sb-{host}", [DB], server_id=960) == expected[host]

    stack.close()
    mark("shut down")
    leaks = [
        (path.name, i)
        for path in stack.logs()
        for i, value in enumerate(deployment.secrets)
        if value in path.read_text(errors="replace")
    ]
    assert leaks == [], f"secrets in logs: {leaks}"
    # Airflow warns on every URI of a connection type with "_"; the type the docs give has none.
    assert "shall not contain '_'" not in (stack.work / "api-server.log").read_text()
    print("\n".join(timings))
