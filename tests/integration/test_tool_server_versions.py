"""A backup tool older than the server it would copy is refused before anything starts, in one line
naming both versions and what to install (issue 36): e.g. the host's mariabackup 10.11 against a
MariaDB 11.8 server (`make test-mariadb-11.8` runs the servers of 11.8; the host's tool stays 10.11).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from helpers import seed_database, take_backup, unique_name
from xtrabackup_provider.core.backup.run import BackupError, BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.dialect import parse_version
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.engine.tools import EngineError, parse_tool_version
from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test
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


def _older_server_program(server_version: tuple[int, int, int]) -> tuple[str, str] | None:
    """The host's own mariadbd (Debian 12: 10.11), when it is of an older series than the server."""
    if not shutil.which("/usr/sbin/mariadbd"):
        return None
    out = subprocess.run(["/usr/sbin/mariadbd", "--no-defaults", "--version"], capture_output=True, text=True)
    found = re.search(r"Ver (\d+)\.(\d+)", out.stdout)
    if not found or (int(found[1]), int(found[2])) >= server_version[:2]:
        return None
    return "/usr/sbin/mariadbd", out.stdout.strip()


def test_a_restore_test_on_a_worker_whose_mariadbd_is_older_than_the_backups_server_is_refused_by_name(
    mariadb: SandboxServer, tmp_path, gpg_keys, monkeypatch
):
    """mariadbd 10.11 starts on a datadir of 11.8 (MariaDB does not refuse a downgrade): a restore
    test there would prove the backup on a server it was not taken from. Refused before the fetch."""
    version_text = mariadb.query("SELECT @@version")[0][0]
    server = parse_version(version_text)
    older = _older_server_program(server)
    if older is None:
        pytest.skip(
            f"no mariadbd older than the server ({version_text}) here: run with `make test-mariadb-11.8`"
        )
    tool = shutil.which("mariadb-backup") or shutil.which("mariabackup")
    assert tool, "no mariadb-backup on PATH"
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    seed_database(mariadb, unique_name("old"), rows=100)
    manifest = take_backup(mariadb, catalog, gpg_keys, "full")
    # A worker whose packages are Debian 12's server, with the backup tool of the server's series.
    monkeypatch.setenv("PATH", f"/usr/sbin:/usr/bin:{os.environ['PATH']}")

    report = run_restore_test(
        RestoreTestRequest(
            catalog,
            tmp_path / "rt",
            manifest.backup_id,
            level="quick",
            private_key=gpg_keys.private_key,
            passphrase=gpg_keys.passphrase,
            binary=tool,
        )
    )

    assert report.verdict == "fail" and report.failed_checks == ["restore"], report.reasons
    (reason,) = report.reasons
    assert "older than the backup's server" in reason and older[1].split()[2] in reason, reason
    assert f"MariaDB {server[0]}.{server[1]}" in reason and "\n" not in reason, reason
    assert "fetch_extract" not in report.timings, "it downloaded the backup before refusing"

    from xtrabackup_provider.core.pitr.plan import PitrError, PitrTarget
    from xtrabackup_provider.core.pitr.recover import PitrRequest, point_in_time_restore

    target = tmp_path / "pitr" / "data"
    with pytest.raises(PitrError) as err:
        point_in_time_restore(
            PitrRequest(
                catalog,
                target,
                PitrTarget.at_gtid(manifest.gtid or ""),
                private_key=gpg_keys.private_key,
                passphrase=gpg_keys.passphrase,
                binary=tool,
            )
        )
    assert "older than the backup's server" in str(err.value) and "nothing was restored" in str(err.value), (
        err.value
    )
    assert not target.exists() or not any(target.iterdir()), "something was restored"
