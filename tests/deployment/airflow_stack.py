"""An Airflow deployment as teams run it, started from this venv on a throwaway AIRFLOW_HOME:
api-server, dag-processor, triggerer, scheduler (CeleryExecutor) and one Celery worker per
database host, with Debian's redis-server as the broker. Each component is its own process group
with its own log file; every wait is bounded and fails as soon as a component exits.

The components get a clean environment (nothing of the test process's AWS_* / AIRFLOW_*), the
same JWT secret and fernet key, and ports of their own (other Airflows may run on this machine).
The DAG files are where a user puts them: `xtrabackup-provider install-dags` writes them into
$AIRFLOW_HOME/dags, next to the fleet config (no $XTRABACKUP_FLEET_CONFIG).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet

from xtrabackup_provider.core.db.sandbox import free_port

BIN = Path(sys.executable).parent
# Airflow asks `[core] hostname_callable` for the name it records on a task instance: here it is
# the worker's own name, as a worker on a database host would report that host's name.
HOSTNAME_MODULE = '''"""The host name a component reports: $XBP_WORKER_HOSTNAME, else the machine's."""
import os
import socket


def hostname() -> str:
    return os.environ.get("XBP_WORKER_HOSTNAME") or socket.getfqdn()
'''


class ComponentExited(AssertionError):
    pass


class AirflowStack:
    def __init__(self, work: Path, dags_folder: Path | None = None) -> None:
        self.work = work
        self.home = work / "airflow"
        # Airflow's default dags folder, where install_dags() puts the files as a user would; a run
        # with its own folder (the chaos fleet) names it.
        self.dags = dags_folder or self.home / "dags"
        self._own_dags_folder = dags_folder is not None
        self.extra_env: dict[str, str] = {}  # every component's, e.g. what a DAG file of the run reads
        self.worker_env: dict[str, str] = {}  # the Celery workers' too (the chaos fleet: their TMPDIR)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.api_port = free_port()
        self.redis_port = free_port()
        self.ui_password = secrets.token_urlsafe(16)
        self._jwt = secrets.token_urlsafe(48)
        self._fernet = Fernet.generate_key().decode()
        self._token: str | None = None
        (self.home / "config").mkdir(parents=True)
        (self.home / "config" / "airflow_local_settings.py").write_text(
            "from xtrabackup_provider.policy import task_instance_mutation_hook  # noqa: F401\n"
        )
        (self.home / "config" / "xbp_worker_host.py").write_text(HOSTNAME_MODULE)
        # The simple auth manager reads its users' passwords from this file.
        (self.home / "passwords.json").write_text(json.dumps({"ops": self.ui_password}))

    @property
    def fleet_config(self) -> Path:
        """The fleet config the components read: $XTRABACKUP_FLEET_CONFIG if the run sets it, else
        fleet.yaml next to the DAG files (install_dags)."""
        return Path(self.extra_env.get("XTRABACKUP_FLEET_CONFIG") or self.dags / "fleet.yaml")

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def env(self, **extra: str) -> dict[str, str]:
        passed = ("HOME", "TMPDIR", "LANG", "LC_ALL", "TZ", "LD_LIBRARY_PATH")
        env = {name: os.environ[name] for name in passed if name in os.environ}
        env.update(
            PATH=f"{BIN}:{os.environ.get('PATH', os.defpath)}",
            AIRFLOW_HOME=str(self.home),
            AIRFLOW__CORE__EXECUTOR="CeleryExecutor",
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__CORE__FERNET_KEY=self._fernet,
            AIRFLOW__CORE__HOSTNAME_CALLABLE="xbp_worker_host.hostname",
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{self.api}/execution/",
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="ops:admin",
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(self.home / "passwords.json"),
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{self.home}/airflow.db",
            AIRFLOW__API__PORT=str(self.api_port),
            AIRFLOW__API__BASE_URL=self.api,
            AIRFLOW__API_AUTH__JWT_SECRET=self._jwt,
            AIRFLOW__API__SECRET_KEY=self._jwt[:32],
            AIRFLOW__CELERY__BROKER_URL=f"redis://127.0.0.1:{self.redis_port}/0",
            AIRFLOW__CELERY__RESULT_BACKEND=f"db+sqlite:///{self.home}/airflow.db",
            AIRFLOW__CELERY__WORKER_CONCURRENCY="2",
            # The defaults (8793, 8794) would clash with another Airflow on this machine.
            AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
            AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()),
            # A task's first call to the execution API can take tens of seconds on a loaded machine
            # with SQLite; the 5 s default would retry it and the retry is refused (the task fails).
            AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT="120",
            AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="2",
            AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="10",
        )
        if self._own_dags_folder:
            env["AIRFLOW__CORE__DAGS_FOLDER"] = str(self.dags)
        env.update(self.extra_env)
        env.update(extra)
        return env

    def install_dags(self, fleet: dict[str, Any], **own_dags: str) -> None:
        """As the docs tell a user: `xtrabackup-provider install-dags` into the dags folder, the
        fleet config next to the files; `own_dags` (file name -> text) are the user's own DAGs."""
        import yaml

        self.dags.mkdir(parents=True, exist_ok=True)
        self._run_bin("xtrabackup-provider", "install-dags")
        (self.dags / "fleet.yaml").write_text(yaml.safe_dump(fleet))
        for name, text in own_dags.items():
            (self.dags / name).write_text(text)

    def provider_location(self) -> Path:
        """Where the components import the provider from."""
        out = self._run_bin("python", "-c", "import xtrabackup_provider; print(xtrabackup_provider.__file__)")
        return Path(out.strip()).parent

    def _run_bin(self, program: str, *args: str) -> str:
        """A program of the components' virtualenv, in their environment (not in the checkout)."""
        done = subprocess.run(
            [str(BIN / program), *args],
            env=self.env(),
            cwd=self.work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{program} {args[0]} exited {done.returncode}: {done.stderr[-3000:]}"
        return done.stdout

    # -- processes -------------------------------------------------------------------------------

    def cli(self, *args: str, timeout: float = 300) -> str:
        proc = subprocess.run(
            [str(BIN / "airflow"), *args],
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        with open(self.work / "cli.log", "a") as log:
            log.write(f"$ airflow {' '.join(args)}\n{proc.stdout}{proc.stderr}\n")
        assert proc.returncode == 0, f"airflow {args[0]} exited {proc.returncode}: {proc.stderr[-3000:]}"
        return proc.stdout

    def import_connections(self, conns: dict[str, Any]) -> None:
        """`airflow connections import` from a 0600 file, removed afterwards: secrets stay off argv
        (`connections add --conn-password` would show them to ps)."""
        path = self.work / "connections.json"
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as fh:
            json.dump(conns, fh)
        try:
            self.cli("connections", "import", str(path))
        finally:
            path.unlink()

    def start(self, name: str, argv: list[str], **extra_env: str) -> None:
        with open(self.work / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                argv,
                env=self.env(**extra_env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start_redis(self) -> None:
        self.start(
            "redis",
            [
                "redis-server",
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.work),
            ],  # fmt: skip
        )

    def start_airflow(self) -> None:
        airflow = str(BIN / "airflow")
        self.start("api-server", [airflow, "api-server", "--port", str(self.api_port), "--host", "127.0.0.1"])
        for component in ("dag-processor", "triggerer", "scheduler"):
            self.start(component, [airflow, component])

    def start_worker(self, host: str, queue: str, default: bool = True, **env: str) -> None:
        """A Celery worker "on" `host`: it takes that host's queue and (`default`) the default one,
        and reports `<host>-worker` as its host name; `env`: more of its environment (the chaos
        fleet's worker_clock fault: libfaketime)."""
        self.start(
            f"worker-{host}",
            [
                str(BIN / "airflow"),
                "celery",
                "worker",
                "--queues",
                f"{queue},default" if default else queue,
                "--celery-hostname",
                f"{host}@%h",
                "--without-mingle",
                "--without-gossip",
            ],  # fmt: skip
            XBP_WORKER_HOSTNAME=f"{host}-worker",
            **{**self.worker_env, **env},
        )

    def stop(self, name: str, grace: float = 60) -> None:
        proc = self.procs.pop(name)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)

    def close(self) -> None:
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in list(self.procs.values()):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
        self.procs.clear()

    def wait(self, what: str, predicate: Callable[[], Any], timeout: float, interval: float = 2.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    tail = (self.work / f"{name}.log").read_text(errors="replace")[-3000:]
                    raise ComponentExited(
                        f"{name} exited {proc.returncode} while waiting for {what}:\n{tail}"
                    )
            assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
            time.sleep(interval)

    # -- the metadata database, read-only ---------------------------------------------------------

    def db(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(f"file:{self.home}/airflow.db?mode=ro", uri=True, timeout=60)
        try:
            return conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []  # not migrated yet
            raise
        finally:
            conn.close()

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        rows = self.db("SELECT state FROM dag_run WHERE dag_id=? AND run_id=?", dag_id, run_id)
        return rows[0][0] if rows else None

    def finished(self, dag_id: str, run_id: str) -> str | None:
        state = self.run_state(dag_id, run_id)
        return state if state in ("success", "failed") else None

    def wait_in_run(
        self, what: str, dag_id: str, run_id: str, predicate: Callable[[], Any], timeout: float
    ) -> Any:
        """wait() for a state of a run that has not finished: a run that ends first fails the wait at
        once, with its failed tasks' log tails."""

        def seen() -> Any:
            if value := predicate():
                return value
            if state := self.finished(dag_id, run_id):
                raise AssertionError(
                    f"{dag_id} {run_id} ended {state} while waiting for {what}\n{self.explain(dag_id, run_id)}"
                )
            return None

        return self.wait(what, seen, timeout)

    def succeeded(self, dag_id: str, run_id: str, what: str, timeout: float) -> None:
        """Wait for the run to finish; a failed run is reported with its failed tasks' log tails."""
        state = self.wait(what, lambda: self.finished(dag_id, run_id), timeout)
        if state != "success":
            raise AssertionError(f"{what}: {dag_id} {run_id} {state}\n{self.explain(dag_id, run_id)}")

    def explain(self, dag_id: str, run_id: str) -> str:
        out = []
        for (task_id, label), ti in sorted(self.task_instances(dag_id, run_id).items()):
            out.append(f"{task_id}[{label}] {ti['state']} on {ti['hostname']}")
            if ti["state"] in ("failed", "upstream_failed"):
                logs = sorted(
                    (self.home / "logs").glob(f"dag_id={dag_id}/run_id={run_id}/task_id={task_id}/**/*.log")
                )
                for log in logs:
                    out += [
                        "    " + _brief(line) for line in log.read_text(errors="replace").splitlines()[-12:]
                    ]
        return "\n".join(out)

    def task_instances(self, dag_id: str, run_id: str) -> dict[tuple[str, str], dict[str, Any]]:
        """{(task_id, map index label or ""): row} of a run."""
        rows = self.db(
            "SELECT task_id, map_index, rendered_map_index, state, hostname, queue, try_number, next_method,"
            " trigger_id FROM task_instance WHERE dag_id=? AND run_id=?",
            dag_id,
            run_id,
        )
        cols = ("task_id", "map_index", "label", "state", "hostname", "queue", "try_number", "next_method",
                "trigger_id")  # fmt: skip
        out = {}
        for row in rows:
            ti = dict(zip(cols, row, strict=True))
            out[(ti["task_id"], ti["label"] or (str(ti["map_index"]) if ti["map_index"] >= 0 else ""))] = ti
        return out

    # -- the REST API ------------------------------------------------------------------------------

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.api}/api/v2/monitor/health", timeout=10) as resp:
                return resp.status == 200
        except OSError:
            return False

    def rest(self, method: str, path: str, body: Any = None) -> Any:
        if self._token is None:
            login = json.dumps({"username": "ops", "password": self.ui_password}).encode()
            req = urllib.request.Request(
                f"{self.api}/auth/token", login, {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=60) as resp:
                self._token = json.load(resp)["access_token"]
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        data = None if body is None else json.dumps(body).encode()
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(f"{self.api}{path}", data, headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{method} {path}: HTTP {exc.code} {exc.read()[:2000]!r}") from None

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        run = self.rest("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})
        return str(run["dag_run_id"])

    def unpause(self, dag_id: str) -> None:
        self.rest("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        got = self.rest(
            "GET",
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}?full_content=true",
        )
        return "\n".join(json.dumps(e) if isinstance(e, dict) else str(e) for e in got["content"])

    def logs(self) -> list[Path]:
        """Every log the deployment wrote: the components' output and Airflow's own log tree."""
        return [p for p in [*self.work.glob("*.log"), *(self.home / "logs").rglob("*")] if p.is_file()]


def _brief(line: str) -> str:
    """A task log line (Airflow writes JSON) as its level, event and exception: the exception comes
    after the context fields, past where a cut of the raw line would end."""
    try:
        entry = json.loads(line)
    except ValueError:
        return line[:800]
    if not isinstance(entry, dict):
        return line[:800]
    errors = [f"{e.get('exc_type')}: {e.get('exc_value')}" for e in entry.get("error_detail") or []]
    return " ".join([str(entry.get("level", "")), str(entry.get("event", ""))[:800], *errors])
