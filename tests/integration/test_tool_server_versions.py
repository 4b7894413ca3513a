"""A backup tool older than the server it would copy is refused before anything starts, in one line
naming both versions and what to install (issue 36): e.g. the host's mariabackup 10.11 against a
MariaDB 11.8 server (`make test-mariadb-11.8` runs the servers of 11.8; the host's tool stays 10.11).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from xtrabackup_provider.core.backup.run import BackupError, BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.dialect import parse_version
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.engine.tools import EngineError, parse_tool_version
from xtrabackup_provider.core.storage.local import LocalStore

# The host's own tool (Debian 12: 10.11), whatever the PATH puts first.
HOST_TOOLS = ("/usr/bin/mariadb-backup", "/usr/bin/mariabackup")


def _older_tool(server_version: tuple[int, int, int]) -> tuple[str, str] | None:
    for path in HOST_TOOLS:
        if not shutil.which(path):
            continue
        out = subprocess.run([path, "--no-defaults", "--version"], capture_output=True, text=True)
        tool = parse_tool_version(out.stdout + out.stderr)
        if tool.version[:2] < server_version[:2]:
            return path, tool.text
    return None


def test_a_mariabackup_older_than_the_server_is_refused_before_anything_is_stored(
    mariadb: SandboxServer, tmp_path, gpg_keys
):
    version_text = mariadb.query("SELECT @@version")[0][0]
    server = parse_version(version_text)
    older = _older_tool(server)
    if older is None:
        pytest.skip(
            f"no mariabackup older than the server ({version_text}) here: run with `make test-mariadb-11.8`"
        )
    binary, tool_text = older
    store = LocalStore(tmp_path / "store")
    catalog = Catalog(store, "backups", "c1", "db1")
    target = MySQLTarget(socket=str(mariadb.socket), user="root", password=mariadb.root_password)

    with pytest.raises((BackupError, EngineError)) as err:
        run_backup(
            BackupRequest(catalog=catalog, target=target, public_keys=[gpg_keys.public_key], binary=binary)
        )

    message = str(err.value)
    assert "\n" not in message
    assert tool_text in message and f"{server[0]}.{server[1]}" in message, message
    assert (
        "install mariadb-backup 11.8" in message
        or f"install mariadb-backup {server[0]}.{server[1]}" in message
    )
    assert catalog.backup_ids() == [] and not list(store.root.rglob("*.gpg")), "something was stored"
    assert mariadb.query("SELECT 1")[0][0] == 1, "the server is not running"
