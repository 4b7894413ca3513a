"""Shared test harness: real MariaDB servers, a real S3 HTTP endpoint (moto), real GPG keys, real Airflow db.

Helpers that are not fixtures live in ``tests/helpers.py`` (``from helpers import ...``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

# -- Airflow environment: must be set before anything imports airflow -------------------------------
REPO_ROOT = Path(__file__).resolve().parents[1]
_REUSED_AIRFLOW_HOME = os.environ.get("XBP_TEST_AIRFLOW_HOME")
AIRFLOW_HOME = Path(_REUSED_AIRFLOW_HOME or tempfile.mkdtemp(prefix="xbp-airflow-"))
AIRFLOW_HOME.mkdir(parents=True, exist_ok=True)
os.environ["AIRFLOW_HOME"] = str(AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO_ROOT / "dags")
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{AIRFLOW_HOME}/airflow.db"
# The cluster policy that routes mapped backup tasks to their host's queue, installed as a user would.
(AIRFLOW_HOME / "config").mkdir(exist_ok=True)
(AIRFLOW_HOME / "config" / "airflow_local_settings.py").write_text(
    "from xtrabackup_provider.policy import task_instance_mutation_hook  # noqa: F401\n"
)

import itertools  # noqa: E402
import re  # noqa: E402
import secrets  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from helpers import (  # noqa: E402
    GpgKeys,
    S3Server,
    generate_gpg_keys,
    seed_database,
    start_replication,
    unique_name,
    wait_caught_up,
)
from xtrabackup_provider.core.db.sandbox import SandboxServer  # noqa: E402

# No test asserts a duration: hypothesis's 200 ms per-example deadline failed a property test on a
# loaded CI run (FlakyFailure, 343 ms), which says nothing about the code.
settings.register_profile("xbp", deadline=None)
settings.load_profile("xbp")

# sun_path limit is 107 bytes; leave room for "<name>-<id>/mysqld.sock".
_MAX_SANDBOX_ROOT = 70


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _REUSED_AIRFLOW_HOME:
        shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


# -- MariaDB ---------------------------------------------------------------------------------------


class MariaDBFactory:
    """``make(name, **kw)`` -> a started :class:`SandboxServer` with a unique server_id and port.

    ``kw`` goes to :meth:`SandboxServer.create` (``root_password``, ``log_bin``, ``extra_args``...).
    """

    def __init__(self, root: Path, family: str = "mariadb"):
        self.root = root
        self.family = family
        self.servers: list[SandboxServer] = []
        self._ids = itertools.count(101 if family == "mariadb" else 901)

    def __call__(self, name: str, **kw: Any) -> SandboxServer:
        server_id = next(self._ids)
        safe = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:24]
        kw.setdefault("family", self.family)
        server = SandboxServer.create(self.root / f"{safe}-{server_id}", server_id=server_id, **kw)
        self.servers.append(server)
        return server

    def discard(self, server: SandboxServer) -> None:
        server.destroy()
        if server in self.servers:
            self.servers.remove(server)

    def close(self) -> None:
        for server in reversed(self.servers):
            server.destroy()
        self.servers.clear()


@pytest.fixture(scope="session")
def sandbox_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Directory for server basedirs, short enough for unix socket paths."""
    root = tmp_path_factory.mktemp("mdb")
    if len(str(root)) <= _MAX_SANDBOX_ROOT:
        yield root
        return
    short = Path(tempfile.mkdtemp(prefix="xbp"))
    try:
        yield short
    finally:
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture(scope="session")
def mariadb_factory(sandbox_root: Path) -> Iterator[MariaDBFactory]:
    factory = MariaDBFactory(sandbox_root)
    try:
        yield factory
    finally:
        factory.close()


def _programs_of(family: str, program: str) -> None:
    """The suites of another server run with that server's programs first on PATH (make
    test-mysql, make test-mariadb-11.8): refuse to start a MariaDB mysqld in a MySQL test."""
    out = subprocess.run([program, "--version"], capture_output=True, text=True).stdout
    if ("MariaDB" in out) != (family == "mariadb"):
        pytest.fail(
            f"`{program} --version` on PATH says {out.strip()!r}, not {family}'s: run these tests with `make "
            "test-mysql` (it builds the MySQL 9.7 root with scripts/server-roots.sh and puts its bin first on PATH)",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def mysql_factory(sandbox_root: Path) -> Iterator[MariaDBFactory]:
    """MySQL servers (mysqld on PATH must be MySQL's: `make test-mysql`), as mariadb_factory's."""
    _programs_of("mysql", "mysqld")
    factory = MariaDBFactory(sandbox_root, family="mysql")
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="session")
def mysql_source(mysql_factory: MariaDBFactory) -> SandboxServer:
    """Session-wide MySQL source: root password, binlog, GTID mode ON. Use your own schema."""
    return mysql_factory("my-source", root_password=secrets.token_urlsafe(16))


@pytest.fixture(scope="session")
def mariadb_source(mariadb_factory: MariaDBFactory) -> SandboxServer:
    """Session-wide source: root password (``.root_password``), binlog + GTID strict mode.

    Shared by many tests: use your own schema (``helpers.unique_name``), never PURGE/RESET its binlogs.
    """
    return mariadb_factory("source", root_password=secrets.token_urlsafe(16))


@pytest.fixture(scope="session")
def mariadb_replica(mariadb_factory: MariaDBFactory, mariadb_source: SandboxServer) -> SandboxServer:
    """A GTID replica (``master_use_gtid=slave_pos``) of ``mariadb_source``, caught up when returned."""
    replica = mariadb_factory("replica", root_password=secrets.token_urlsafe(16))
    start_replication(mariadb_source, replica)
    wait_caught_up(mariadb_source, replica)
    return replica


@pytest.fixture
def mariadb(mariadb_factory: MariaDBFactory) -> Iterator[SandboxServer]:
    """A fresh server for this test only (root password, binlog + GTID); removed afterwards."""
    server = mariadb_factory("fn", root_password=secrets.token_urlsafe(16))
    try:
        yield server
    finally:
        mariadb_factory.discard(server)


@pytest.fixture
def mysql(mysql_factory: MariaDBFactory) -> Iterator[SandboxServer]:
    """A fresh MySQL server for this test only (root password, binlog, GTID mode ON); removed afterwards."""
    server = mysql_factory("myfn", root_password=secrets.token_urlsafe(16))
    try:
        yield server
    finally:
        mysql_factory.discard(server)


@pytest.fixture(scope="module")
def seeded(mariadb_factory) -> Iterator[tuple[SandboxServer, str]]:
    """One server per test module with a seeded schema; tests use their own bucket or directory."""
    server = mariadb_factory("seeded", root_password=secrets.token_urlsafe(16))
    db = unique_name("f")
    seed_database(server, db, rows=3000)
    try:
        yield server, db
    finally:
        mariadb_factory.discard(server)


# -- S3 --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto S3 over HTTP on 127.0.0.1; sets AWS_* env and ``AIRFLOW_CONN_AWS_TEST`` (conn id ``aws_test``)."""
    server = S3Server()
    server.start()
    with pytest.MonkeyPatch.context() as mp:
        for key, value in server.env().items():
            mp.setenv(key, value)
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    """A fresh, uniquely named bucket (no versioning, no Object Lock)."""
    return s3_server.make_bucket(f"xbp-test-{uuid.uuid4().hex[:16]}")


# -- GPG -------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def gpg_keys() -> GpgKeys:
    """An ed25519/cv25519 key pair with a passphrase (generated in a temporary GNUPGHOME, now removed)."""
    return generate_gpg_keys("XBP Test <xbp-test@example.invalid>", secrets.token_urlsafe(16))


@pytest.fixture(scope="session")
def other_gpg_keys() -> GpgKeys:
    """A second, unrelated key pair for wrong-key tests."""
    return generate_gpg_keys("XBP Other <xbp-other@example.invalid>", secrets.token_urlsafe(16))


# -- Airflow ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    """AIRFLOW_HOME with a migrated sqlite metadata db (``airflow db migrate``, run once)."""
    airflow_bin = Path(sys.executable).with_name("airflow")
    argv = [str(airflow_bin)] if airflow_bin.exists() else [sys.executable, "-m", "airflow"]
    proc = subprocess.run(
        [*argv, "db", "migrate"],
        env=os.environ.copy(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        output = f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        pytest.fail(f"airflow db migrate exited {proc.returncode}:\n{output}")
    return AIRFLOW_HOME
