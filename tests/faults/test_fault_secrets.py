"""Secrets stay secret: while real backups, restores and restore tests run, no password, passphrase
or private key is in any process's argv (or in the environment of the processes we start), in
logs or in XCom; credential files are 0600 in a 0700 directory and gone afterwards; sandboxes
listen on loopback or only on a unix socket.

A background thread samples /proc every few milliseconds during the runs; each test also checks
that it saw the processes it was watching, so it cannot pass by sampling nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import yaml
from faultkit import (
    ProcScanner,
    is_loopback,
    listening_addresses,
    mode,
    private_key_fragments,
    s3_catalog,
    target,
    wait_next_second,
)

from helpers import add_orders, cli, commit_known, is_cli, seed_database, unique_name
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test


def _secrets(password: str, keys) -> dict[str, str]:
    return {
        "root password": password,
        "gpg passphrase": keys.passphrase,
        **private_key_fragments(keys.private_key),
    }


@contextlib.contextmanager
def _all_logs() -> Iterator[list[str]]:
    """Every log record of every logger, formatted with its traceback (works with pytest's logging off)."""
    lines: list[str] = []
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(formatter.format(record))

    root, handler = logging.getLogger(), _Collect(logging.DEBUG)
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


class _Watch:
    """What the scanner saw of the processes that matter, while they were alive."""

    def __init__(self) -> None:
        self.credential_files: dict[str, tuple[int, int]] = {}  # path -> (file mode, dir mode)
        self.restore_sandbox_tcp: list[str] = []
        self.restore_sandbox_sockets: set[str] = set()
        self.restore_sandbox_samples = 0
        self._followed: set[int] = set()
        self._threads: list[threading.Thread] = []

    def __call__(self, pid: int, argv: list[str]) -> None:
        for arg in argv:
            if arg.startswith("--defaults-file=") and arg not in self.credential_files:
                path = arg.split("=", 1)[1]
                with contextlib.suppress(OSError):
                    self.credential_files[path] = (mode(path), mode(os.path.dirname(path)))
        if argv and argv[0].endswith("mariadbd") and "--skip-grant-tables" in argv:
            self.restore_sandbox_samples += 1
            sock = next((a.split("=", 1)[1] for a in argv if a.startswith("--socket=")), "")
            self._look(pid, sock)
            if pid not in self._followed:
                # The scan of all of /proc can come round too rarely on a loaded machine to see a
                # short-lived sandbox up: one thread follows this process alone until it ends.
                self._followed.add(pid)
                follow = threading.Thread(target=self._follow_sandbox, args=(pid, sock), daemon=True)
                follow.start()
                self._threads.append(follow)

    def sandbox_up(self, server: SandboxServer) -> None:
        """Called the moment a sandbox answers: the /proc scan alone can miss a short-lived one
        on a loaded machine, this look cannot."""
        if server.skip_grant_tables and server.pid:
            self.restore_sandbox_samples += 1
            self._look(server.pid, str(server.socket))

    def _look(self, pid: int, sock: str) -> None:
        if sock and os.path.exists(sock):
            self.restore_sandbox_sockets.add(sock)
        with contextlib.suppress(Exception):  # noqa: BLE001 - it may end between two reads
            self.restore_sandbox_tcp += listening_addresses(pid)

    def _follow_sandbox(self, pid: int, sock: str) -> None:
        while os.path.exists(f"/proc/{pid}"):
            self._look(pid, sock)
            time.sleep(0.002)

    def finish(self, timeout: float = 60) -> None:
        for follow in self._threads:
            follow.join(timeout)


def _own_private_dirs() -> list[Path]:
    import tempfile

    pid = os.getpid()
    return [*Path(tempfile.gettempdir()).glob(f"xbp-cred-{pid}-*"), *Path("/tmp").glob(f"xbp-gpg-{pid}-*")]


def _assert_no_secret(label: str, text: str, secrets: dict[str, str]) -> None:
    found = [name for name, value in secrets.items() if value and value in text]
    assert not found, f"{', '.join(found)} found in {label}"


def test_backups_and_a_restore_test_keep_every_secret_out_of_argv_env_and_logs(
    seeded, s3_server, bucket, gpg_keys, tmp_path, monkeypatch
):
    server, db = seeded
    secrets = _secrets(server.root_password, gpg_keys)
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    watch = _Watch()
    start = SandboxServer.start

    def start_and_look(sandbox: SandboxServer, *args, **kwargs) -> None:
        start(sandbox, *args, **kwargs)
        watch.sandbox_up(sandbox)

    monkeypatch.setattr(SandboxServer, "start", start_and_look)
    keys = dict(private_key=gpg_keys.private_key, passphrase=gpg_keys.passphrase)
    with _all_logs() as logs, ProcScanner(secrets, watch=watch) as scan:
        full = run_backup(
            BackupRequest(catalog=catalog, target=target(server), public_keys=[gpg_keys.public_key])
        )
        add_orders(server, db, 300)
        wait_next_second(full.started_at)
        inc = run_backup(
            BackupRequest(catalog=catalog, target=target(server), public_keys=[gpg_keys.public_key])
        )
        report = run_restore_test(
            RestoreTestRequest(catalog, tmp_path / "rt", inc.backup_id, level="full", **keys)
        )
    assert report.passed, report.reasons
    assert scan.errors == [] and scan.samples > 50

    # It watched the processes that handle secrets, while they ran.
    def saw(*words: str) -> bool:
        return bool(scan.processes(lambda argv: all(any(w in a for a in argv) for w in words)))

    assert saw("mariabackup", "--backup") and saw("gpg", "--encrypt") and saw("gpg", "--decrypt")
    assert (
        saw("mbstream", "-x") and saw("mariabackup", "--prepare") and saw("mariadbd", "--skip-grant-tables")
    )
    assert [s for s in scan.sightings] == [], f"secrets seen in /proc: {scan.sightings}"

    # Credentials reached mariabackup only as a private file, removed afterwards.
    assert watch.credential_files, "no --defaults-file was seen; the scan missed the backups"
    for path, (file_mode, dir_mode) in watch.credential_files.items():
        assert (file_mode, dir_mode) == (0o600, 0o700), f"{path}: {oct(file_mode)} in {oct(dir_mode)}"
        assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path)), f"{path} left behind"
    assert _own_private_dirs() == [], "credential or GPG directories left behind"
    assert not (tmp_path / "rt").exists(), "the restore test's workdir (a datadir copy) was left behind"

    # The restore sandbox answered on its unix socket only.
    watch.finish()
    assert watch.restore_sandbox_samples > 0 and watch.restore_sandbox_sockets, (
        "the sandbox was never seen up"
    )
    assert watch.restore_sandbox_tcp == [], (
        f"the restore sandbox listened on TCP: {watch.restore_sandbox_tcp}"
    )

    assert logs, "no log line was captured; the check proved nothing"
    _assert_no_secret("the logs", "\n".join(logs), secrets)
    stored = b"".join(
        catalog.store.get_bytes(k.key) for k in catalog.store.list("backups/") if k.key.endswith(".json")
    )
    _assert_no_secret("manifests and reports", stored.decode(errors="replace"), secrets)


def test_test_and_demo_sandboxes_listen_on_loopback_only(seeded):
    server, _db = seeded
    addresses = listening_addresses(server.pid)
    assert addresses, "the sandbox listens on nothing; is the check reading the right process?"
    assert all(is_loopback(a) for a in addresses), f"the sandbox listens beyond loopback: {addresses}"


# -- the shipped DAGs: task logs and XCom ------------------------------------------------------------------


def _xcom_values(dag_ids: list[str]) -> list[str]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter(XComModel.dag_id.in_(dag_ids)).all()
        return [f"{r.task_id}/{r.key}={json.dumps(r.value, default=str)}" for r in rows]


def _airflow_log_files(home: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in (home / "logs").rglob("*") if p.is_file())


def test_dag_runs_keep_secrets_out_of_task_logs_xcom_and_argv(
    fleet, gpg_keys, airflow_home, capfd, load_dag, run_dag
):
    server, catalog = fleet
    seed_database(server, unique_name("sec"), rows=300)
    secrets = _secrets(server.root_password, gpg_keys)
    backup_dag = load_dag("mysql_backup").mysql_backup_dagtest
    restore_test_dag = load_dag("mysql_restore_test").mysql_restore_test_dagtest
    # The fleet fixture passes connections as AIRFLOW_CONN_* variables, which every child of this
    # process inherits: the environment scan would only find the harness's own variables.
    with _all_logs() as logs, ProcScanner(secrets, environ=False) as scan:
        states = [run_dag(backup_dag).state, run_dag(restore_test_dag, run_conf={"host": "db1"}).state]
    assert states == ["success", "success"], states
    assert len(catalog.backup_ids()) == 1
    # dag.test() runs the tasks in this process: their log records are the task logs.
    for task_line in (
        "xtrabackup_provider.core.backup.run INFO registered",
        "xtrabackup_provider.core.restore.restore_test",
    ):
        assert any(line.startswith(task_line) for line in logs), f"no task log line {task_line!r} captured"
    assert scan.errors == [] and scan.processes(lambda argv: "--backup" in argv)
    assert scan.sightings == [], f"secrets seen in /proc: {scan.sightings}"

    out, err = capfd.readouterr()
    xcoms = _xcom_values([backup_dag.dag_id, restore_test_dag.dag_id])
    assert any("backup_id" in x for x in xcoms), f"no backup XCom found; the check proved nothing: {xcoms}"
    _assert_no_secret("XCom", "\n".join(xcoms), secrets)
    _assert_no_secret("task logs", "\n".join(logs), secrets)
    _assert_no_secret("stdout/stderr", out + err, secrets)
    _assert_no_secret("Airflow's log files", _airflow_log_files(airflow_home), secrets)


# -- the CLI: secrets in its own environment, none in its children's ---------------------------------------


def test_cli_children_get_no_secret_in_their_environment(mariadb, s3_server, tmp_path):
    """The CLI reads the passphrase and the S3 credentials from its environment. Every process it
    starts (mariabackup, gpg and the gpg-agent daemon, zstd, mbstream, the xbstream checker,
    mariadb-binlog, dd, the PITR sandbox and its mariadb client) must start without them."""
    db = unique_name("env")
    seed_database(mariadb, db, rows=500)
    env = {
        "XTRABACKUP_GPG_PASSPHRASE": secrets.token_urlsafe(16),
        "AWS_ACCESS_KEY_ID": "AKIA" + secrets.token_hex(8).upper(),
        "AWS_SECRET_ACCESS_KEY": secrets.token_urlsafe(30),
    }
    bucket = s3_server.make_bucket(unique_name("xbp-env").replace("_", "-"))
    keys = tmp_path / "keys"
    config = tmp_path / "fleet.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"bucket": bucket, "endpoint_url": s3_server.endpoint_url, "region": "us-east-1"},
                "encryption": {
                    "public_key_files": [str(keys / "public.asc")],
                    "private_key_file": str(keys / "private.asc"),
                },
                "policy": {"max_incremental_ratio": 10.0},
                "clusters": [
                    {
                        "name": "c1",
                        "binlogs": {"mode": "batch"},
                        "hosts": [
                            {
                                "name": "db1",
                                "defaults_file": str(mariadb.write_client_defaults(tmp_path / "c.cnf")),
                            }
                        ],
                    }
                ],
            }
        )
    )
    common = ["--config", str(config), "--cluster", "c1", "--host", "db1"]
    with ProcScanner(env, environ_skip=is_cli) as scan:

        def run(*args: str) -> None:
            proc = cli(*args, env=env)
            assert proc.returncode == 0, f"{args[0]}: {proc.stderr}"

        run("keygen", "--uid", "Env test <env@example.invalid>", "--out-dir", str(keys))
        run("backup", *common)
        add_orders(mariadb, db, 300)
        run("backup", *common)
        mariadb.query(f"CREATE TABLE `{db}`.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20))")
        # Some MiB of binlog, so the download's mariadb-binlog lives long enough to be scanned.
        mariadb.query(f"INSERT INTO `{db}`.t (v) SELECT REPEAT('x', 20) FROM `{db}`.seq_1_to_200000")
        point = commit_known(mariadb, db, "after")
        run("binlogs", "ship", *common, "--flush")
        run("verify", *common, "--backup-id", "latest", "--deep")
        run("restore", *common, "--target-datadir", str(tmp_path / "restored"))
        run("restore", *common, "--target-datadir", str(tmp_path / "pitr"), "--to-gtid", point.gtid)
    assert scan.errors == [] and scan.samples > 50

    def saw(*words: str) -> bool:
        return bool(scan.processes(lambda argv: all(any(w in a for a in argv) for w in words)))

    for words in (
        ("mariabackup", "--backup"),
        ("mariabackup", "--prepare"),
        ("gpg", "--decrypt"),
        ("gpg-agent", "--daemon"),
        ("zstd", "-d"),
        ("mbstream", "-x"),
        ("xtrabackup_provider.core.engine.xbstream",),
        ("mariadb-binlog", "--read-from-remote-server"),
        ("dd", "of="),
        ("mariadbd", "--skip-grant-tables"),
    ):
        assert saw(*words), f"the scan never saw {' '.join(words)}; it proved nothing about it"
    leaks: dict[str, set[str]] = {}
    for s in scan.sightings:
        leaks.setdefault(
            f"{os.path.basename(s.argv[0])} {s.argv[1][:30] if len(s.argv) > 1 else ''}", set()
        ).add(f"{s.secret} ({s.where})")
    assert leaks == {}, f"secrets seen in /proc of {len(leaks)} kinds of process: {leaks}"


def test_a_child_a_library_starts_from_the_cli_gets_no_secret(tmp_path):
    """A library may start a process of its own with the CLI's environment: loading a config
    imports croniter (the schedules), whose import runs `file -b` (platform.architecture()). A
    `file` first on PATH records the environment it got: no passphrase, S3 key or password named by
    the config may be in it. The CLI itself still finds them (it lists an empty store, exit 0)."""
    shim = tmp_path / "bin"
    shim.mkdir()
    seen = tmp_path / "file-environments"
    (shim / "file").write_text(f"#!/bin/sh\nenv >> {seen}\necho '---' >> {seen}\necho 'ELF 64-bit LSB'\n")
    (shim / "file").chmod(0o755)
    env = {
        "XTRABACKUP_GPG_PASSPHRASE": secrets.token_urlsafe(16),
        "AWS_ACCESS_KEY_ID": "AKIA" + secrets.token_hex(8).upper(),
        "AWS_SECRET_ACCESS_KEY": secrets.token_urlsafe(30),
        "DB1_LOGIN": secrets.token_urlsafe(12),  # a password variable whose name says nothing
        "PATH": f"{shim}:{os.environ['PATH']}",
    }
    config = tmp_path / "fleet.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(tmp_path / "store")},
                "encryption": {"enabled": False},
                "clusters": [
                    {
                        "name": "c1",
                        "hosts": [{"name": "db1", "host": "127.0.0.1", "password_env": "DB1_LOGIN"}],
                    }
                ],
            }
        )
    )
    proc = cli("list", "--config", str(config), "--cluster", "c1", "--host", "db1", env=env)
    assert proc.returncode == 0, proc.stderr
    assert seen.exists(), "croniter no longer runs `file`: this test proves nothing now, find another child"
    environments = seen.read_text()
    leaked = [name for name, value in env.items() if name != "PATH" and value in environments]
    assert leaked == [], f"`file -b` started by a library got {leaked} in its environment"
