"""The shipped provisioning DAG and the restore-test DAG's refusals, from the fleet config."""

from __future__ import annotations

import json
import secrets
import uuid

import pytest
import yaml
from dag_helpers import load_dag_module, run_dag

from helpers import parse_gtid_pos, root_target, seed_database, unique_name, wait_caught_up
from replica_helpers import NewHost, WriteLoad, new_host_dir
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.config.schema import ConfigError
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.storage.local import LocalStore


def _write(tmp_path, monkeypatch, config: dict) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("XTRABACKUP_FLEET_CONFIG", str(path))


def _conn(name: str, monkeypatch, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{name.upper()}", json.dumps({"conn_type": "mysql", **fields}))


def test_the_restore_test_dag_refuses_an_xtrabackup_host_and_leaves_out_opted_out_hosts(
    tmp_path, monkeypatch
):
    hosts = [{"name": "db1"}, {"name": "pxc1", "flavour": "xtrabackup"}]
    config = {"storage": {"local_path": str(tmp_path)}, "clusters": [{"name": "mix", "hosts": hosts}]}
    _write(tmp_path, monkeypatch, config)
    with pytest.raises(ConfigError) as err:
        load_dag_module("mysql_restore_test")
    assert "host 'pxc1' is backed up with xtrabackup" in str(err.value)
    assert "mysqld" in str(err.value) and "restore_test: false" in str(err.value)
    hosts[1]["restore_test"] = False
    _write(tmp_path, monkeypatch, config)
    dag = load_dag_module("mysql_restore_test").mysql_restore_test_mix
    assert dag.params.get_param("host").schema["enum"] == ["random", "db1"]
    assert dag.params.get_param("level").schema["enum"] == ["quick", "full"], (
        "no deep level without replication settings"
    )
    config["clusters"][0]["hosts"] = [hosts[1]]
    _write(tmp_path, monkeypatch, config)
    assert not hasattr(load_dag_module("mysql_restore_test"), "mysql_restore_test_mix"), "nothing to schedule"


def _provision_fleet(tmp_path, monkeypatch, source, host: NewHost, store, repl_password: str) -> None:
    """The fleet config of cluster `prov` (source db1, db3 to be built on `host`) and its connections."""
    _write(
        tmp_path,
        monkeypatch,
        {
            "storage": {"local_path": str(store)},
            "encryption": {"enabled": False},
            "clusters": [
                {
                    "name": "prov",
                    "schedule": None,
                    "restore_test_schedule": None,
                    "replication": {"source": "db1", "conn_id": "mysql_prov_repl", "poll_seconds": 1},
                    "hosts": [
                        {"name": "db1", "mysql_conn_id": "mysql_prov_db1"},
                        {
                            "name": "db3",
                            "mysql_conn_id": "mysql_prov_db3",
                            "datadir": str(host.datadir),
                            "queue": "db3",
                            "provision": {"start_command": host.start_command},
                        },
                    ],
                }
            ],
        },
    )
    admin = dict(host="127.0.0.1", port=source.port, login="root", password=source.root_password)
    _conn("mysql_prov_db1", monkeypatch, **admin, extra={"unix_socket": str(source.socket)})
    _conn(
        "mysql_prov_repl",
        monkeypatch,
        host="127.0.0.1",
        port=source.port,
        login="repl",
        password=repl_password,
    )
    # The restored data brings the source's accounts: root over the new host's socket and port.
    _conn(
        "mysql_prov_db3",
        monkeypatch,
        host="127.0.0.1",
        port=host.port,
        login="root",
        password=source.root_password,
        extra={"unix_socket": str(host.socket)},
    )


def test_a_replica_is_built_from_a_backup_through_the_dag(
    mariadb_factory, gpg_keys, tmp_path, monkeypatch, airflow_home
):
    source = mariadb_factory("dagprov", root_password=secrets.token_urlsafe(12))
    repl = uuid.uuid4().hex
    source.execute_script(
        f"CREATE USER repl@'127.0.0.1' IDENTIFIED BY '{repl}'; GRANT REPLICATION SLAVE ON *.* TO repl@'127.0.0.1';"
    )
    db = unique_name("dagprov")
    seed_database(source, db, rows=2000)
    store = tmp_path / "store"
    catalog = Catalog(LocalStore(store), "backups", "prov", "db1")
    backup = run_backup(BackupRequest(catalog=catalog, target=root_target(source), allow_unencrypted=True))
    WriteLoad(source, db).burst(500)
    host = NewHost(new_host_dir(), server_id=7401)
    try:
        _provision_fleet(tmp_path, monkeypatch, source, host, store, repl)
        module = load_dag_module("mysql_provision_replica")
        dag = module.mysql_provision_replica_prov_db3
        assert dag.task_dict["provision"].queue == "db3", "it writes the new host's datadir"
        assert dag.params.get_param("from_host").schema["enum"] == ["db1"]
        with WriteLoad(source, db) as during:
            dagrun = run_dag(dag, run_conf={"max_lag_seconds": 1})
        states = {ti.task_id: ti.state for ti in dagrun.get_task_instances()}
        assert dagrun.state == "success", states
        assert states == {
            "provision": "success",
            "wait_caught_up": "success",
            "checksum_requested": "success",
            "pt_table_checksum": "success",
        }
        assert during.count > 0 and during.error is None
        replica = host.server(source.root_password)
        wait_caught_up(source, replica, timeout=120)
        assert table_checksums(replica, [db]) == table_checksums(source, [db])
        applied = parse_gtid_pos(replica.query("SELECT @@gtid_slave_pos")[0][0])
        assert applied[0] > parse_gtid_pos(backup.gtid)[0], (
            "it applied what the source wrote after the backup"
        )
    finally:
        host.destroy()
        mariadb_factory.discard(source)


def test_a_wrong_replication_password_fails_the_provision_task_before_it_restores(
    mariadb_factory, tmp_path, monkeypatch, airflow_home
):
    """On main the task restored, started the server and returned; the sensor then waited the whole
    catch-up timeout (240 minutes)."""
    source = mariadb_factory("dagprovpw", root_password=secrets.token_urlsafe(12))
    source.execute_script(f"CREATE USER repl@'127.0.0.1' IDENTIFIED BY '{uuid.uuid4().hex}';")
    source.query("GRANT REPLICATION SLAVE ON *.* TO repl@'127.0.0.1'")
    seed_database(source, unique_name("dagprovpw"), rows=100)
    store = tmp_path / "store"
    run_backup(
        BackupRequest(
            catalog=Catalog(LocalStore(store), "backups", "prov", "db1"),
            target=root_target(source),
            allow_unencrypted=True,
        )
    )
    host = NewHost(new_host_dir(), server_id=7402)
    try:
        _provision_fleet(tmp_path, monkeypatch, source, host, store, "not-the-password")
        dag = load_dag_module("mysql_provision_replica").mysql_provision_replica_prov_db3
        dagrun = run_dag(dag)
        states = {ti.task_id: ti.state for ti in dagrun.get_task_instances()}
        assert dagrun.state == "failed" and states["provision"] == "failed", states
        assert list(host.datadir.iterdir()) == [], "nothing was restored"
        assert not host.pid_file.exists(), "no server was started"
    finally:
        host.destroy()
        mariadb_factory.discard(source)


def test_the_catch_up_sensor_fails_on_a_replication_error_that_persists(mariadb_factory, monkeypatch):
    """A replica whose IO thread is refused (1045) on every retry: the poke fails the task naming
    Last_IO_Errno once the error has lasted grace_seconds. On main it returned False at every poke."""
    from airflow.providers.common.compat.sdk import AirflowFailException

    from xtrabackup_provider.core.binlog.replication import ReplicationSource, attach
    from xtrabackup_provider.sensors.replica import ReplicaCaughtUpSensor

    source = mariadb_factory("sensor-src", root_password=secrets.token_urlsafe(12))
    replica = mariadb_factory("sensor-rep", root_password=secrets.token_urlsafe(12))
    source.execute_script(f"CREATE USER repl@'127.0.0.1' IDENTIFIED BY '{uuid.uuid4().hex}';")
    source.query("GRANT REPLICATION SLAVE ON *.* TO repl@'127.0.0.1'")
    conn = replica.connect()
    try:
        attach(conn, ReplicationSource("127.0.0.1", source.port, "repl", "wrong", connect_retry=1), "")
    finally:
        conn.close()
    _conn(
        "mysql_sensor_rep",
        monkeypatch,
        login="root",
        password=replica.root_password,
        extra={"unix_socket": str(replica.socket)},
    )
    sensor = ReplicaCaughtUpSensor(
        task_id="wait_caught_up",
        replica_conn_id="mysql_sensor_rep",
        target_gtid=source.query("SELECT @@gtid_binlog_pos")[0][0],
        source_name="prov/db1",
        grace_seconds=3,
    )
    with pytest.raises(AirflowFailException) as err:
        sensor.poke({})
    message = str(err.value)
    print(message)
    assert "Last_IO_Errno 1045" in message and "source prov/db1" in message
