"""A server error met during a statement is one line from the CLI (issue 38.9): the verb, the
server, the statement, what the server said and what to do; exit code 2, never a traceback.

The CLI runs as a user runs it (its console script, a real server, a fleet config):
- `binlogs ship --flush` with an account that may list binlogs but lacks RELOAD (FLUSH BINARY LOGS);
- `backup` whose heartbeat write waits for a row another session holds past innodb_lock_wait_timeout;
- `backup` whose session the server kills while that write waits (the connection is lost mid-query).
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from helpers import wait_for
from xtrabackup_provider.core.db.sandbox import SandboxServer

CLI = str(Path(sys.executable).parent / "xtrabackup-provider")
HEARTBEAT = "xtrabackup_provider_local.heartbeat"


@dataclass
class Setup:
    server: SandboxServer
    root: Path
    public_key: Path


@pytest.fixture(scope="module")
def setup(mariadb_factory, gpg_keys, tmp_path_factory) -> Setup:
    server = mariadb_factory("srverr", root_password=secrets.token_urlsafe(12))
    root = tmp_path_factory.mktemp("srverr")
    public = root / "public.asc"
    public.write_text(gpg_keys.public_key)
    return Setup(server, root, public)


def _fleet(setup: Setup, name: str, defaults: Path) -> Path:
    config = setup.root / f"{name}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(setup.root / f"store-{name}")},
                "encryption": {"public_key_files": [str(setup.public_key)]},
                "clusters": [{"name": "c1", "hosts": [{"name": "db1", "defaults_file": str(defaults)}]}],
            }
        )
    )
    return config


def _account(setup: Setup, user: str, grants: str) -> Path:
    """A new account with `grants` on *.*, and a 0600 client option file for it."""
    password = secrets.token_urlsafe(12)
    setup.server.execute_script(
        f"CREATE USER {user}@localhost IDENTIFIED BY '{password}'; GRANT {grants} ON *.* TO {user}@localhost;"
    )
    defaults = setup.root / f"{user}.cnf"
    defaults.write_text(f"[client]\nuser={user}\npassword={password}\nsocket={setup.server.socket}\n")
    defaults.chmod(0o600)
    return defaults


def _error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The run's one error line; asserts it failed without a traceback and said one thing."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    print(errors[0])
    return errors[0]


def _run(config: Path, *argv: str) -> list[str]:
    return [CLI, *argv, "--config", str(config), "--cluster", "c1", "--host", "db1"]


def test_a_missing_privilege_is_one_line_naming_the_statement_and_the_privilege(setup):
    """On main: a traceback ending in MySQLdb.OperationalError (1227, ... RELOAD ...), exit 1."""
    defaults = _account(setup, "xbp_lister", "SELECT, BINLOG MONITOR, REPLICATION SLAVE")
    config = _fleet(setup, "lister", defaults)
    proc = subprocess.run(
        _run(config, "binlogs", "ship", "--flush"), capture_output=True, text=True, timeout=300
    )
    line = _error_line(proc)
    assert "binlogs ship" in line and "c1/db1" in line
    assert str(defaults) in line, "the server, as the config names it"
    assert "FLUSH BINARY LOGS (closing the open binlog so that it is shipped)" in line
    assert "grant the account RELOAD" in line


@pytest.fixture
def held_heartbeat(setup) -> Iterator[SandboxServer]:
    """Another session holds the backup's heartbeat table (every row and the gap after them)."""
    server = setup.server
    server.execute_script(
        "CREATE DATABASE IF NOT EXISTS xtrabackup_provider_local; CREATE TABLE IF NOT EXISTS "
        f"{HEARTBEAT} (backup_id VARCHAR(64) PRIMARY KEY, lineage_token CHAR(32) NULL, "
        "created_at DATETIME(6) NOT NULL) ENGINE=InnoDB;"
    )
    holder = server.connect()
    try:
        cur = holder.cursor()
        cur.execute("SET SESSION autocommit = 0")
        cur.execute(f"SELECT * FROM {HEARTBEAT} FOR UPDATE")
        yield server
    finally:
        holder.rollback()
        holder.close()
        server.query("SET GLOBAL innodb_lock_wait_timeout = DEFAULT")


def test_a_lock_wait_is_one_line_naming_the_statement_and_what_to_do(setup, held_heartbeat):
    """On main: a traceback ending in MySQLdb.OperationalError (1205, 'Lock wait timeout exceeded')."""
    held_heartbeat.query("SET GLOBAL innodb_lock_wait_timeout = 1")
    config = _fleet(setup, "lockwait", setup.server.write_client_defaults(setup.root / "root-lock.cnf"))
    proc = subprocess.run(_run(config, "backup"), capture_output=True, text=True, timeout=300)
    line = _error_line(proc)
    assert "backup" in line and "c1/db1" in line and "REPLACE INTO" in line
    assert "(the backup's heartbeat row)" in line
    assert "1205" in line and "another session holds a lock" in line


def test_a_connection_lost_during_a_statement_is_one_line(setup, held_heartbeat):
    """The server kills the backup's session while its heartbeat write waits. On main: a traceback
    ending in MySQLdb.OperationalError (2013, 'Lost connection to server during query')."""
    server = held_heartbeat
    server.query("SET GLOBAL innodb_lock_wait_timeout = 120")
    config = _fleet(setup, "killed", setup.server.write_client_defaults(setup.root / "root-kill.cnf"))
    with subprocess.Popen(
        _run(config, "backup"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        waiting = wait_for(
            lambda: server.query(
                "SELECT id FROM information_schema.processlist WHERE info LIKE 'REPLACE INTO%heartbeat%'"
            ),
            timeout=120,
            what="the backup's heartbeat write waiting for the held row",
        )
        server.query(f"KILL CONNECTION {waiting[0][0]}")
        stdout, stderr = proc.communicate(timeout=300)
    line = _error_line(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    assert "backup" in line and "REPLACE INTO" in line
    assert "the server closed the connection" in line
