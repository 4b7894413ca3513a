"""`make demo`: a real full + incremental backup and a restore test through Airflow.

Everything runs on this machine: a sandbox MariaDB with sample data, a local S3 endpoint
(moto server over HTTP), a fresh GPG key pair, and a throwaway Airflow home with a migrated
SQLite database. The shipped DAGs run with dag.test(); the DBA CLI lists the catalog and
restores the newest backup into a new datadir, which is started and compared with the source.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORK = Path(tempfile.mkdtemp(prefix="xbp-demo-"))
os.environ.update(
    {
        "AIRFLOW_HOME": str(WORK / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{WORK}/airflow/airflow.db",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "AWS_ACCESS_KEY_ID": "demo",
        "AWS_SECRET_ACCESS_KEY": "demo",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
)

from xtrabackup_provider.core.db.sandbox import SandboxServer, free_port, table_checksums  # noqa: E402
from xtrabackup_provider.core.pipeline.gpg import generate_key_pair  # noqa: E402

BIN = Path(sys.executable).parent


def say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def seed(server: SandboxServer) -> None:
    server.execute_script(
        """
        CREATE DATABASE shop;
        USE shop;
        CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(64), email VARCHAR(128)) ENGINE=InnoDB;
        CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id INT, amount DECIMAL(10,2), note TEXT,
                             KEY (customer_id)) ENGINE=InnoDB;
        INSERT INTO customers SELECT seq, CONCAT('customer ', seq), CONCAT('c', seq, '@example.com')
            FROM seq_1_to_2000;
        INSERT INTO orders SELECT seq, 1 + seq % 2000, (seq % 500) + 0.99, REPEAT('x', seq % 100)
            FROM seq_1_to_20000;
        """
    )


def row_counts(server: SandboxServer) -> dict[str, int]:
    return {t: server.query(f"SELECT COUNT(*) FROM shop.{t}")[0][0] for t in ("customers", "orders")}


def write_config(bucket: str, endpoint: str, pubkey: Path, privkey: Path, server: SandboxServer) -> Path:
    import yaml

    defaults = server.write_client_defaults(WORK / "demo-client.cnf")
    config = {
        "storage": {
            "bucket": bucket,
            "prefix": "backups",
            "aws_conn_id": "aws_demo",
            "endpoint_url": endpoint,
            "region": "us-east-1",
            "storage_class": {"full": "STANDARD_IA", "incremental": "STANDARD"},
        },
        "encryption": {
            "gpg_conn_id": "backup_gpg",
            "private_gpg_conn_id": "backup_gpg_private",
            "public_key_files": [str(pubkey)],
            "private_key_file": str(privkey),
        },
        # The demo database is tiny, so any incremental is a large share of the full.
        "policy": {"max_incremental_ratio": 10.0},
        "clusters": [
            {
                "name": "demo",
                "schedule": None,
                "restore_test_schedule": None,
                "restore_workdir": str(WORK / "restore-tests"),
                "hosts": [{"name": "db1", "mysql_conn_id": "mysql_demo", "defaults_file": str(defaults)}],
            }
        ],
    }
    path = WORK / "fleet.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def airflow_connections(
    server: SandboxServer, endpoint: str, public: str, private: str, passphrase: str
) -> None:
    os.environ["AIRFLOW_CONN_MYSQL_DEMO"] = json.dumps(
        {
            "conn_type": "mysql",
            "login": "root",
            "password": server.root_password,
            "host": "127.0.0.1",
            "port": server.port,
            "extra": {"unix_socket": str(server.socket)},
        }
    )
    os.environ["AIRFLOW_CONN_AWS_DEMO"] = json.dumps(
        {
            "conn_type": "aws",
            "login": "demo",
            "password": "demo",
            "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }
    )
    os.environ["AIRFLOW_CONN_BACKUP_GPG"] = json.dumps(
        {"conn_type": "gpgkeys", "extra": {"public_keys": [public]}}
    )
    os.environ["AIRFLOW_CONN_BACKUP_GPG_PRIVATE"] = json.dumps(
        {"conn_type": "gpgkeys", "password": passphrase, "extra": {"private_key": private}}
    )


def load_dag(module: str, dag_id: str):  # noqa: ANN201 - an Airflow DAG
    import importlib.util

    spec = importlib.util.spec_from_file_location(module, REPO / "dags" / f"{module}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, dag_id)


def run_dag(dag, **conf: str) -> dict[str, str]:  # noqa: ANN001
    dagrun = dag.test(run_conf=conf)
    # A task mapped over hosts shows with its map index's name: backup.backup[db1 (full)].
    states = {
        ti.task_id + (f"[{ti.rendered_map_index or ti.map_index}]" if ti.map_index >= 0 else ""): str(
            ti.state
        )
        for ti in dagrun.get_task_instances()
    }
    print(
        f"    DagRun {dag.dag_id}: {dagrun.state}; tasks: "
        + ", ".join(f"{k}={v}" for k, v in sorted(states.items()))
    )
    if dagrun.state != "success":
        raise SystemExit(f"demo failed: {dag.dag_id} ended {dagrun.state}")
    return states


def cli(*args: str) -> str:
    proc = subprocess.run([str(BIN / "xtrabackup-provider"), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"demo failed: xtrabackup-provider {' '.join(args)}:\n{proc.stderr}")
    return proc.stdout


def print_restore_report(config: Path) -> None:
    from xtrabackup_provider.core.catalog.reports import read_report
    from xtrabackup_provider.core.config.load import load_config
    from xtrabackup_provider.core.config.wiring import make_catalog

    catalog = make_catalog(load_config(config), "demo", "db1")
    newest = catalog.backup_ids()[-1]
    report = read_report(catalog, newest) or {}
    timings = ", ".join(f"{k} {v:.1f}s" for k, v in report.get("timings", {}).items())
    print(
        f"    restore-report.json of {newest}: verdict {report.get('verdict')}, chain {report.get('chain')}"
    )
    print(f"    checks {report.get('checks')}; timings {timings}")


def main() -> int:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request access log

    server = moto = None
    restored = None
    try:
        say(f"work directory {WORK}")
        say("migrating a fresh Airflow metadata database (SQLite)")
        subprocess.run([str(BIN / "airflow"), "db", "migrate"], check=True, capture_output=True)

        say("starting a sandbox MariaDB with binlog + GTID and sample data")
        server = SandboxServer.create(WORK / "db", server_id=1, root_password=secrets.token_urlsafe(16))
        seed(server)
        print(f"    source rows: {row_counts(server)} (socket {server.socket})")

        say("starting a local S3 endpoint (moto server over HTTP)")
        moto = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
        moto.start()
        endpoint = f"http://127.0.0.1:{moto._port}"
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
            Bucket="demo-backups"
        )
        print(f"    {endpoint}, bucket demo-backups")

        say("generating a GPG key pair (backups need only the public key)")
        passphrase = secrets.token_urlsafe(16)
        pair = generate_key_pair("Demo backups <demo@example.invalid>", passphrase)
        (WORK / "public.asc").write_text(pair.public_key)
        (WORK / "private.asc").write_text(pair.private_key)
        (WORK / "private.asc").chmod(0o600)
        print(f"    fingerprint {pair.fingerprint}")

        config = write_config("demo-backups", endpoint, WORK / "public.asc", WORK / "private.asc", server)
        os.environ["XTRABACKUP_FLEET_CONFIG"] = str(config)
        airflow_connections(server, endpoint, pair.public_key, pair.private_key, passphrase)

        backup_dag = load_dag("mysql_backup", "mysql_backup_demo")
        say("Airflow: mysql_backup_demo run 1 (the policy picks a full)")
        run_dag(backup_dag)
        server.query(
            "INSERT INTO shop.orders SELECT seq, 1 + seq % 2000, 9.99, 'after the full'"
            " FROM seq_20001_to_25000",
            database="shop",
        )
        server.query("UPDATE shop.customers SET name = CONCAT(name, ' (vip)') WHERE id % 10 = 0")
        print(f"    changed data: {row_counts(server)}")
        say("Airflow: mysql_backup_demo run 2 (the policy picks an incremental)")
        run_dag(backup_dag)

        say("catalog, read by the DBA CLI (works with Airflow down)")
        print(cli("list", "--config", str(config), "--cluster", "demo", "--host", "db1"))

        say("Airflow: mysql_restore_test_demo (restore the newest chain into a sandbox and verify it)")
        run_dag(load_dag("mysql_restore_test", "mysql_restore_test_demo"), host="db1", level="full")
        print_restore_report(config)

        say("CLI restore of the newest backup into a new datadir, then start it")
        env_pass = {"XTRABACKUP_GPG_PASSPHRASE": passphrase}
        os.environ.update(env_pass)
        target = WORK / "restored" / "data"
        target.parent.mkdir()  # the CLI refuses a missing parent (a typo) unless --create-parents
        print(
            cli(
                "restore",
                "--config",
                str(config),
                "--cluster",
                "demo",
                "--host",
                "db1",
                "--target-datadir",
                str(target),
            ).rstrip()
        )
        restored = SandboxServer.on_datadir(target, WORK / "restored-sb", server_id=2)
        restored.start()
        source_rows, restored_rows = row_counts(server), row_counts(restored)
        same = table_checksums(server, ["shop"]) == table_checksums(restored, ["shop"])
        print(f"    source rows:   {source_rows}\n    restored rows: {restored_rows}")
        print(f"    per-table CHECKSUM TABLE equal: {same}")
        if not same or source_rows != restored_rows:
            raise SystemExit("demo failed: the restored data differs from the source")
        say("demo finished: full + incremental backup, restore test and CLI restore all succeeded")
        return 0
    finally:
        for s in (restored, server):
            if s is not None:
                s.stop()
        if moto is not None:
            moto.stop()
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
