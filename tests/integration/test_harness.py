"""The harness is real: servers replicate, restart keeps data, S3 speaks HTTP, GPG round-trips, Airflow db."""

from __future__ import annotations

import sqlite3
import stat
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from helpers import (
    GpgKeys,
    S3Server,
    add_orders,
    gpg_home,
    process_argv,
    run_gpg,
    seed_database,
    unique_name,
    wait_caught_up,
)
from xtrabackup_provider.core.db.sandbox import SandboxError, SandboxServer, table_checksums


def test_replica_catches_up_with_same_checksums(mariadb_source, mariadb_replica):
    db = unique_name("harness")
    seed_database(mariadb_source, db, rows=2000)
    add_orders(mariadb_source, db, 500)
    gtid = wait_caught_up(mariadb_source, mariadb_replica)

    assert gtid.startswith(f"0-{mariadb_source.server_id}-")
    source_sums = table_checksums(mariadb_source, [db])
    assert set(source_sums) == {f"{db}.audit", f"{db}.customers", f"{db}.orders"}
    assert table_checksums(mariadb_replica, [db]) == source_sums
    assert mariadb_replica.query(f"SELECT COUNT(*) FROM `{db}`.orders") == [(2500,)]
    assert mariadb_source.query("SELECT @@server_id, @@log_bin, @@gtid_strict_mode") == [
        (mariadb_source.server_id, 1, 1)
    ]
    assert mariadb_replica.server_id != mariadb_source.server_id


def test_restart_keeps_data(mariadb: SandboxServer):
    mariadb.execute_script(
        "CREATE DATABASE r; CREATE TABLE r.t (id INT PRIMARY KEY, v TEXT) ENGINE=InnoDB;"
        " INSERT INTO r.t VALUES (1, 'one'), (2, 'two');"
    )
    before = table_checksums(mariadb, ["r"])
    mariadb.stop()
    mariadb.stop()  # idempotent
    assert not mariadb.running
    mariadb.start()
    assert mariadb.query("SELECT v FROM r.t ORDER BY id") == [("one",), ("two",)]
    assert table_checksums(mariadb, ["r"]) == before


def test_secrets_stay_out_of_argv(mariadb_source: SandboxServer, tmp_path: Path):
    # It only reads: the session's shared server will do (a fresh one costs a server start).
    mariadb = mariadb_source
    assert mariadb.root_password
    argv = process_argv(mariadb.pid or 0)
    assert argv[0].endswith("mariadbd")
    assert not any(mariadb.root_password in arg for arg in argv)

    cnf = mariadb.write_client_defaults(tmp_path / "my.cnf")
    assert stat.S_IMODE(cnf.stat().st_mode) == 0o600
    assert "[client]" in cnf.read_text()

    # the password is required: a connection without it is refused
    anonymous = SandboxServer(mariadb.basedir, mariadb.datadir, mariadb.port, mariadb.server_id)
    with pytest.raises(Exception, match="Access denied"):
        anonymous.connect()


def test_on_datadir_skip_grant_tables(mariadb: SandboxServer):
    mariadb.query("CREATE DATABASE g")
    mariadb.query("CREATE TABLE g.t (id INT PRIMARY KEY) ENGINE=InnoDB")
    mariadb.query("INSERT INTO g.t VALUES (7)")
    mariadb.stop()
    restored = SandboxServer.on_datadir(
        mariadb.datadir, mariadb.basedir.with_name(mariadb.basedir.name + "-r"), server_id=999, log_bin=False
    )
    try:
        restored.start()
        # no password needed, no TCP listener
        assert restored.query("SELECT id FROM g.t") == [(7,)]
        assert restored.query("SELECT @@skip_networking, @@log_bin") == [(1, 0)]
    finally:
        restored.destroy()
    assert mariadb.datadir.is_dir()  # a datadir outside basedir is not removed


def test_start_failure_reports_datadir_and_log(sandbox_root: Path):
    server = SandboxServer.on_datadir(
        sandbox_root / "bad-data", sandbox_root / "bad", server_id=998, extra_args=["--no-such-option"]
    )
    (sandbox_root / "bad-data").mkdir()
    try:
        with pytest.raises(SandboxError) as info:
            server.start(timeout=30)
        message = str(info.value)
        assert str(server.datadir) in message
        assert "no-such-option" in message
    finally:
        server.destroy()


def test_execute_script_error_has_stderr(mariadb_source: SandboxServer):
    with pytest.raises(SandboxError, match="doesnotexist"):  # a read: the shared server
        mariadb_source.execute_script("SELECT 1; SELECT * FROM mysql.doesnotexist;")


def test_s3_endpoint_over_http(s3_server: S3Server, bucket: str):
    client = s3_server.client()
    client.put_object(Bucket=bucket, Key="a/b.txt", Body=b"payload")
    assert client.get_object(Bucket=bucket, Key="a/b.txt")["Body"].read() == b"payload"
    # a plain HTTP request reaches the same listener
    with urllib.request.urlopen(s3_server.endpoint_url + "/", timeout=5) as resp:
        assert resp.status == 200
        assert bucket.encode() in resp.read()

    locked = s3_server.make_bucket(unique_name("lock").replace("_", "-"), object_lock=True)
    assert client.get_bucket_versioning(Bucket=locked)["Status"] == "Enabled"
    assert client.get_object_lock_configuration(Bucket=locked)["ObjectLockConfiguration"]


def test_s3_stop_start(s3_server: S3Server, bucket: str):
    client = s3_server.client()
    client.put_object(Bucket=bucket, Key="k", Body=b"kept")
    s3_server.stop()
    try:
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(s3_server.endpoint_url + "/", timeout=2)
    finally:
        s3_server.start()
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"kept"


def test_airflow_aws_connection_env(s3_server: S3Server):
    import json
    import os

    conn = json.loads(os.environ["AIRFLOW_CONN_AWS_TEST"])
    assert conn["conn_type"] == "aws"
    assert conn["extra"]["endpoint_url"] == s3_server.endpoint_url
    assert os.environ["AWS_ACCESS_KEY_ID"] == "testing"


def test_gpg_round_trip(gpg_keys: GpgKeys, other_gpg_keys: GpgKeys, tmp_path: Path):
    assert gpg_keys.fingerprint != other_gpg_keys.fingerprint
    assert "PRIVATE KEY BLOCK" in gpg_keys.private_key
    payload = tmp_path / "payload.bin"
    payload.write_bytes(b"backup bytes\n" * 1000)
    encrypted = tmp_path / "payload.gpg"

    with gpg_home() as home:
        (tmp_path / "pub.asc").write_text(gpg_keys.public_key)
        run_gpg(home, "--import", str(tmp_path / "pub.asc"))
        run_gpg(
            home, "--trust-model", "always", "--compress-algo", "none", "--recipient", gpg_keys.fingerprint,
            "--output", str(encrypted), "--encrypt", str(payload),
        )  # fmt: skip
    assert encrypted.read_bytes()[:50] != payload.read_bytes()[:50]

    def decrypt(keys: GpgKeys) -> tuple[int, bytes]:
        with gpg_home() as home:
            (tmp_path / "sec.asc").write_text(keys.private_key)
            run_gpg(home, "--import", str(tmp_path / "sec.asc"), passphrase=keys.passphrase)
            out = tmp_path / "out.bin"
            out.unlink(missing_ok=True)
            args = ["--output", str(out), "--decrypt", str(encrypted)]
            proc = run_gpg(home, *args, passphrase=keys.passphrase, check=False)
            return proc.returncode, out.read_bytes() if out.exists() else b""

    assert decrypt(gpg_keys) == (0, payload.read_bytes())
    rc, data = decrypt(other_gpg_keys)
    assert rc != 0 and data == b""


def test_airflow_db_migrated(airflow_home: Path):
    db = airflow_home / "airflow.db"
    assert db.is_file()
    with sqlite3.connect(db) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"dag", "dag_run", "task_instance", "connection", "alembic_version"} <= tables
