"""The chaos fleet on this machine: 2 clusters of a source and 2 GTID replicas (backups from the
first replica), a stopped reference replica per cluster for the checker, sysbench on every source,
two moto S3 endpoints each behind a fault proxy (tests/chaos/s3chaos.py), and a real Airflow
(tests/deployment/airflow_stack.py: scheduler, dag-processor, triggerer, api-server, Redis, one
Celery worker per database host) running the shipped DAGs on short schedules; the backed-up
replica's host keeps a standby (its `standby_dir`: the backup DAG refreshes it after each backup).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from airflow_stack import BIN, AirflowStack

from helpers import (
    S3_ACCESS_KEY,
    S3_REGION,
    S3_SECRET_KEY,
    generate_gpg_keys,
    start_replication,
    sysbench_argv,
    wait_caught_up,
)
from xtrabackup_provider.core.db.sandbox import SandboxServer, free_port

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SB_DB, SB_TABLES = "sbtest", 4
CHECKED_DBS = [SB_DB, "chaos"]
BACKUP_HOST = "r1"  # the replica each cluster is backed up from


@dataclass
class Cluster:
    name: str
    source: SandboxServer
    replicas: dict[str, SandboxServer]  # "r1" (backed up), "r2"
    reference: SandboxServer  # a replica held stopped: the source's past, for the checker
    sb_password: str = ""
    load: subprocess.Popen[bytes] | None = None

    def servers(self) -> dict[str, SandboxServer]:
        return {"src": self.source, **self.replicas}


@dataclass
class Endpoint:
    name: str
    bucket: str
    moto_port: int
    proxy_port: int
    control: Path
    log: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def direct(self) -> str:
        return f"http://127.0.0.1:{self.moto_port}"

    @property
    def proxied(self) -> str:
        return f"http://127.0.0.1:{self.proxy_port}"

    def control_set(self, **conf: Any) -> None:
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(json.dumps(conf))
        tmp.replace(self.control)

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.direct, region_name=S3_REGION,
                            aws_access_key_id=S3_ACCESS_KEY, aws_secret_access_key=S3_SECRET_KEY)  # fmt: skip


class Fleet:
    def __init__(self, work: Path, minutes: float) -> None:
        self.work = work
        self.minutes = minutes
        self.root = Path(tempfile.mkdtemp(prefix="xbpc-"))  # short: socket paths
        self.clusters: dict[str, Cluster] = {}
        self.endpoints: dict[str, Endpoint] = {}
        self.keys = generate_gpg_keys("Chaos <chaos@example.invalid>", secrets.token_urlsafe(16))
        self.stack: AirflowStack | None = None
        self.config = work / "fleet.yaml"
        self.cli_config = work / "fleet-cli.yaml"  # the checker's: direct to moto, no proxy
        self._ids = iter(range(201, 400))
        self.scratch: dict[str, Path] = {}  # cluster -> its restore tests' scratch (a tmpfs that can fill)
        # The workers' TMPDIR (a tmpfs that can fill): the binlog shipper's spool, credentials files,
        # children's homes (gpg's homes are in /tmp: short socket paths).
        self.worker_tmp = self.root / "wtmp"
        # The proxies' background faults, on all the time.
        self.retention: dict[str, Any] = {"keep_last_chains": 2, "pitr_days": 0.01, "min_age_days": 0,
                                          "debris_grace_days": 1 / 24, "confirm": True}  # fmt: skip
        self.offsite_retention = {**self.retention, "keep_last_chains": 1}
        self.pythonpath = ""  # put first on the fleet's PYTHONPATH (a planted copy: tests/chaos/plant.py)
        self.background: dict[str, Any] = {"latency_ms": [0, 150], "p_error": 0.01, "p_slowdown": 0.01,
                                           "p_reset": 0.005, "p_truncate": 0.005}  # fmt: skip

    # -- servers ------------------------------------------------------------------------------------

    def new_server_id(self) -> int:
        return next(self._ids)

    def server(self, name: str) -> SandboxServer:
        return SandboxServer.create(
            self.root / name, server_id=next(self._ids), root_password=secrets.token_urlsafe(16)
        )

    def start_servers(self) -> None:
        for name in ("c1", "c2"):
            source = self.server(f"{name}-src")
            password = secrets.token_hex(12)
            source.execute_script(
                f"CREATE DATABASE {SB_DB}; CREATE DATABASE chaos; CREATE USER sb@localhost IDENTIFIED BY '{password}';"
                f" GRANT ALL ON {SB_DB}.* TO sb@localhost; CREATE TABLE chaos.ddl (id INT PRIMARY KEY) ENGINE=InnoDB;"
            )
            subprocess.run(
                sysbench_argv(source, password, SB_DB, SB_TABLES, "prepare"), check=True, capture_output=True
            )
            replicas = {r: self.server(f"{name}-{r}") for r in ("r1", "r2")}
            reference = self.server(f"{name}-ref")
            for replica in (*replicas.values(), reference):
                start_replication(source, replica, user=f"repl{replica.server_id}")
                wait_caught_up(source, replica, timeout=300)
            reference.query("STOP SLAVE")
            self.clusters[name] = Cluster(name, source, replicas, reference, password)

    def start_load(self) -> None:
        for c in self.clusters.values():
            self.restart_load(c)

    def restart_load(self, c: Cluster) -> None:
        """sysbench write load on the source (again, after a restart of the source ended it)."""
        if c.load and c.load.poll() is None:
            os.killpg(c.load.pid, 9)
            c.load.wait()
        with open(self.work / f"sysbench-{c.name}.log", "ab") as log:
            c.load = subprocess.Popen(
                sysbench_argv(c.source, c.sb_password, SB_DB, SB_TABLES, "run", "--threads=1", "--rate=10",
                              "--time=0", "--mysql-ignore-errors=all", "--report-interval=60"),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def ddl(self, rng: Any) -> str:
        """Now and then a DDL on a source: a table created, altered or dropped in `chaos`."""
        c = self.clusters[rng.choice(sorted(self.clusters))]
        n = rng.randrange(5)
        statement = rng.choice([
            f"CREATE TABLE IF NOT EXISTS chaos.t{n} (id INT PRIMARY KEY, v VARCHAR(32)) ENGINE=InnoDB",
            f"INSERT IGNORE INTO chaos.t{n} SELECT seq, 'x' FROM seq_1_to_50",
            f"DROP TABLE IF EXISTS chaos.t{n}",
            "ALTER TABLE chaos.ddl FORCE",
            "INSERT INTO chaos.ddl SELECT COALESCE(MAX(id), 0) + 1 FROM chaos.ddl",
        ])  # fmt: skip
        try:
            c.source.query(statement, database="chaos")
        except Exception as exc:  # noqa: BLE001 - e.g. the table is not there (yet): harmless
            return f"{c.name}: {statement}: {exc}"
        return f"{c.name}: {statement}"

    def mount_scratch(self) -> None:
        self.worker_tmp.mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1g,mode=1777", "tmpfs", str(self.worker_tmp)], check=True
        )
        for name in self.clusters:
            path = self.root / f"s-{name}"
            path.mkdir()
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=1200m,mode=0755", "tmpfs", str(path)], check=True
            )
            self.scratch[name] = path

    # -- S3 -----------------------------------------------------------------------------------------

    def start_s3(self) -> None:
        for name in ("primary", "offsite"):
            ep = Endpoint(name, f"chaos-{name}", free_port(), free_port(), self.work / f"proxy-{name}.json",
                          self.work / f"proxy-{name}.log")  # fmt: skip
            ep.control_set(seed=0)  # clean until the fault phase starts
            with open(self.work / f"moto-{name}.log", "ab") as log:
                ep.procs.append(subprocess.Popen(
                    [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(ep.moto_port)],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))  # fmt: skip
            ep.procs.append(self.start_proxy(ep, wait=False))
            self.endpoints[name] = ep
        for ep in self.endpoints.values():
            deadline = time.monotonic() + 120
            while True:
                try:
                    ep.client().create_bucket(Bucket=ep.bucket)
                    break
                except Exception:
                    assert time.monotonic() < deadline, f"moto {ep.name} did not start"
                    time.sleep(1)

    def start_proxy(self, ep: Endpoint, wait: bool = True) -> subprocess.Popen[bytes]:
        """The endpoint's fault proxy (tests/chaos/s3chaos.py) on its port, with its control file;
        `wait`: until it accepts connections (restart_s3 starts it again on a port just closed)."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        with open(self.work / f"moto-{ep.name}.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, str(HERE / "s3chaos.py"), "--upstream", ep.direct, "--port", str(ep.proxy_port),
                 "--control", str(ep.control), "--log", str(ep.log)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 60
        while wait:
            try:
                socket.create_connection(("127.0.0.1", ep.proxy_port), timeout=2).close()
                break
            except OSError:
                assert proc.poll() is None, (
                    f"the {ep.name} proxy exited {proc.returncode} (moto-{ep.name}.log)"
                )
                assert time.monotonic() < deadline, f"the {ep.name} proxy did not listen within 60 s"
                time.sleep(0.5)
        return proc

    # -- the fleet config ---------------------------------------------------------------------------

    def write_configs(self) -> None:
        (self.work / "public.asc").write_text(self.keys.public_key)
        (self.work / "private.asc").write_text(self.keys.private_key)
        for path, direct in ((self.config, False), (self.cli_config, True)):
            path.write_text(yaml.safe_dump(self.fleet_config(direct)))

    def fleet_config(self, direct: bool) -> dict[str, Any]:
        p, o = self.endpoints["primary"], self.endpoints["offsite"]
        retention = self.retention
        return {
            "storage": {
                "bucket": p.bucket,
                "aws_conn_id": "aws_primary",
                "region": S3_REGION,
                "endpoint_url": p.direct if direct else p.proxied,
            },  # fmt: skip
            "copies": [
                {
                    "name": "offsite",
                    "bucket": o.bucket,
                    "aws_conn_id": "aws_offsite",
                    "region": S3_REGION,
                    "endpoint_url": o.direct if direct else o.proxied,
                    "copy_attempts": 2,
                    "copy_retry_seconds": 10,
                    "retention": self.offsite_retention,
                }
            ],  # fmt: skip
            "encryption": {
                "gpg_conn_id": "backup_gpg",
                "private_gpg_conn_id": "backup_gpg_private",
                "public_key_files": [str(self.work / "public.asc")],
                "private_key_file": str(self.work / "private.asc"),
            },
            "policy": {
                "max_chain_length": 3,
                "max_incremental_ratio": 10.0,
                "max_parts": 2,
                "part_min_gib": 0,
            },
            "retention": retention,
            "clusters": [self.cluster_config(c) for c in self.clusters.values()],
        }

    def cluster_config(self, c: Cluster) -> dict[str, Any]:
        r1 = c.replicas[BACKUP_HOST]
        return {
            "name": c.name,
            "schedule": "*/4 * * * *",
            "restore_test_schedule": "*/10 * * * *",
            "restore_workdir": str(self.scratch[c.name]),
            "max_parallel_backups": 1,
            "binlogs": {
                "mode": "continuous",
                "schedule": "*/5 * * * *",
                "continuous_minutes": 4,
                "progress_seconds": 10,
                "gate_backups": True,
                "lag_timeout_minutes": 10,
            },  # fmt: skip
            "check": {
                "schedule": "*/5 * * * *",
                "rpo_hours": 0.25,
                "restore_test_max_age_days": 0.05,
                "binlog_max_lag_minutes": 6,
                "copies_max_behind_hours": 0.25,
            },  # fmt: skip
            "hosts": [
                {
                    "name": BACKUP_HOST,
                    "mysql_conn_id": f"mysql_{c.name}_{BACKUP_HOST}",
                    "queue": f"{c.name}-{BACKUP_HOST}",
                    "socket": str(r1.socket),
                    "defaults_file": str(r1.write_client_defaults(self.work / f"{c.name}-{BACKUP_HOST}.cnf")),
                    "standby_dir": str(self.root / "standby" / c.name),
                    # On the backed-up host's worker (this fleet has no recovery host): the kill_worker
                    # and kill_tool faults reach the standby refresh too.
                    "standby_queue": f"{c.name}-{BACKUP_HOST}",
                }
            ],
        }

    # -- Airflow ------------------------------------------------------------------------------------

    def dags_folder(self) -> Path:
        """The shipped DAG files, linked, as a user copies them."""
        folder = self.work / "dags"
        folder.mkdir(exist_ok=True)
        for dag in (REPO / "dags").glob("mysql_*.py"):
            (folder / dag.name).symlink_to(dag)
        return folder

    def start_airflow(self) -> AirflowStack:
        stack = self.stack = AirflowStack(self.work, dags_folder=self.dags_folder())
        stack.extra_env = {"XTRABACKUP_FLEET_CONFIG": str(self.config)}
        stack.worker_env = {"TMPDIR": str(self.worker_tmp)}
        if self.pythonpath:
            stack.extra_env["PYTHONPATH"] = self.pythonpath
        migrate = subprocess.run(
            [str(BIN / "airflow"), "db", "migrate"], env=stack.env(), capture_output=True, text=True
        )
        assert migrate.returncode == 0, migrate.stderr[-3000:]
        conns: dict[str, Any] = {
            f"aws_{name}": {"conn_type": "aws", "login": S3_ACCESS_KEY, "password": S3_SECRET_KEY,
                            "extra": {"endpoint_url": ep.proxied, "region_name": S3_REGION}}
            for name, ep in self.endpoints.items()
        }  # fmt: skip
        conns["backup_gpg"] = {"conn_type": "gpgkeys", "extra": {"public_keys": [self.keys.public_key]}}
        conns["backup_gpg_private"] = {"conn_type": "gpgkeys", "password": self.keys.passphrase,
                                       "extra": {"private_key": self.keys.private_key}}  # fmt: skip
        for c in self.clusters.values():
            r1 = c.replicas[BACKUP_HOST]
            conns[f"mysql_{c.name}_{BACKUP_HOST}"] = {"conn_type": "mysql", "host": "localhost", "login": "root",
                                                      "password": r1.root_password,
                                                      "extra": {"unix_socket": str(r1.socket)}}  # fmt: skip
        stack.import_connections(conns)
        stack.start_redis()
        stack.start_airflow()
        for c in self.clusters.values():
            for host in c.servers():
                stack.start_worker(f"{c.name}-{host}", queue=f"{c.name}-{host}")
        return stack

    def dag_ids(self) -> list[str]:
        out = []
        for c in self.clusters:
            out += [f"mysql_backup_{c}", f"mysql_binlog_shipping_{c}", f"mysql_restore_test_{c}",
                    f"mysql_backup_check_{c}"]  # fmt: skip
        return out

    # -- teardown -----------------------------------------------------------------------------------

    def close(self) -> None:
        if self.stack:
            self.stack.close()
        for c in self.clusters.values():
            if c.load and c.load.poll() is None:
                os.killpg(c.load.pid, 9)
                c.load.wait()
            for server in (*c.servers().values(), c.reference):
                server.stop(timeout=30)
        for ep in self.endpoints.values():
            for proc in ep.procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, 9)
                    proc.wait()
        for path in [*self.scratch.values(), self.worker_tmp]:
            subprocess.run(["umount", "-l", str(path)], check=False)
        shutil.rmtree(self.root, ignore_errors=True)
