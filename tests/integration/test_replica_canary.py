"""Backing up a GTID replica never creates a transaction of its own (no errant GTID).

Real components: a source and a GTID replica (gtid_strict_mode=ON, read_only=ON, log_slave_updates)
started by the tests, mariabackup, the restore test's sandbox, and the CLI as a DBA runs it. A
replica whose gtid_binlog_pos gains a GTID with its own server_id breaks replication as soon as the
source writes again (error 1950, out-of-order sequence number) and breaks any later failover.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from helpers import (
    add_orders,
    cli,
    seed_database,
    slave_status,
    start_replication,
    unique_name,
    wait_caught_up,
)
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test
from xtrabackup_provider.core.storage.local import LocalStore

# The grants docs/configuration.md documents for the backup account.
BACKUP_GRANTS = "RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR, BINLOG ADMIN, READ_ONLY ADMIN"


@pytest.fixture(scope="module")
def pair(mariadb_factory) -> Iterator[tuple[SandboxServer, SandboxServer, str]]:
    source = mariadb_factory("errant-src", root_password=secrets.token_urlsafe(12))
    replica = mariadb_factory(
        "errant-rep", root_password=secrets.token_urlsafe(12), extra_args=["--read-only=1"]
    )
    db = unique_name("errant")
    try:
        start_replication(source, replica)
        seed_database(source, db, rows=600)
        wait_caught_up(source, replica)
        yield source, replica, db
    finally:
        mariadb_factory.discard(replica)
        mariadb_factory.discard(source)


def _server_ids(position: str) -> set[int]:
    return {int(part.split("-")[1]) for part in position.split(",") if part.strip()}


def _assert_no_gtid_of_its_own(replica: SandboxServer, source: SandboxServer, when: str) -> None:
    binlog_pos, current_pos, state = replica.query(
        "SELECT @@gtid_binlog_pos, @@gtid_current_pos, @@gtid_binlog_state"
    )[0]
    for name, pos in (("gtid_binlog_pos", binlog_pos), ("gtid_current_pos", current_pos), ("state", state)):
        assert replica.server_id not in _server_ids(pos), (
            f"{when}: the replica's {name} {pos!r} holds a GTID with its own server_id {replica.server_id}"
        )
        assert _server_ids(pos) <= {source.server_id}, f"{when}: {name} {pos!r}"


def _assert_replicates(source: SandboxServer, replica: SandboxServer, db: str) -> None:
    add_orders(source, db, 50)
    wait_caught_up(source, replica)  # raises with Last_SQL_Error if the SQL thread stopped (1950)
    status = slave_status(replica)
    assert status["Slave_SQL_Running"] == "Yes" and status["Slave_IO_Running"] == "Yes", status
    assert not status["Last_SQL_Errno"], status["Last_SQL_Error"]


def test_backups_of_a_read_only_gtid_replica_add_no_gtid_and_the_restore_test_finds_the_canary(
    pair, gpg_keys, tmp_path
):
    source, replica, db = pair
    assert replica.query("SELECT @@read_only, @@gtid_strict_mode, @@log_slave_updates")[0] == (1, 1, 1)
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "replica")
    target = MySQLTarget(socket=str(replica.socket), user="root", password=replica.root_password)
    request = dict(catalog=catalog, target=target, heartbeat=True, public_keys=[gpg_keys.public_key])

    full = run_backup(BackupRequest(**request, kind="full"))
    _assert_no_gtid_of_its_own(replica, source, "after the full")
    _assert_replicates(source, replica, db)
    inc = run_backup(BackupRequest(**request, kind="incremental"))
    assert inc.parent_id == full.backup_id
    _assert_no_gtid_of_its_own(replica, source, "after the incremental")
    _assert_replicates(source, replica, db)
    _assert_no_gtid_of_its_own(replica, source, "after the source wrote again")
    # Nothing the product wrote replicated either way.
    assert source.query("SHOW DATABASES LIKE 'xtrabackup_provider%'") == []

    report = run_restore_test(
        RestoreTestRequest(
            catalog, tmp_path / "rt", inc.backup_id, gpg_keys.private_key, gpg_keys.passphrase, level="full"
        )
    )
    assert report.verdict == "pass", report.reasons
    assert report.checks["canary"] == "found"


def _backup_account(source: SandboxServer, replica: SandboxServer, grants: str) -> tuple[str, str]:
    """An account created on the source (it replicates), with `grants` on *.* and its schema."""
    user, password = unique_name("bk"), secrets.token_urlsafe(12)
    source.query("CREATE USER %s@'localhost' IDENTIFIED BY %s", (user, password))
    source.query(f"GRANT {grants} ON *.* TO %s@'localhost'", (user,))
    source.query("GRANT ALL ON xtrabackup_provider_local.* TO %s@'localhost'", (user,))
    wait_caught_up(source, replica)
    return user, password


def _cli_config(tmp_path: Path, replica: SandboxServer, user: str, password: str) -> list[str]:
    defaults = tmp_path / "backup-account.cnf"
    defaults.write_text(f'[client]\nuser={user}\npassword="{password}"\nsocket={replica.socket}\n')
    defaults.chmod(0o600)
    config = tmp_path / "fleet.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(tmp_path / "cli-store")},
                "encryption": {"enabled": False},
                "policy": {"max_incremental_ratio": 10.0},  # the default `heartbeat: true` stays
                "clusters": [{"name": "c1", "hosts": [{"name": "replica", "defaults_file": str(defaults)}]}],
            }
        )
    )
    return ["--config", str(config), "--cluster", "c1", "--host", "replica"]


def test_cli_backups_of_the_replica_with_the_documented_grants_add_no_gtid(pair, tmp_path):
    source, replica, db = pair
    user, password = _backup_account(source, replica, BACKUP_GRANTS)
    common = _cli_config(tmp_path, replica, user, password)
    for kind in ("full", "incremental"):
        proc = cli("backup", *common, "--kind", kind)
        assert proc.returncode == 0, proc.stderr
        assert f"\t{kind}\t" in proc.stdout, proc.stdout
        _assert_no_gtid_of_its_own(replica, source, f"after the CLI {kind}")
        _assert_replicates(source, replica, db)
    catalog = Catalog(LocalStore(tmp_path / "cli-store"), "backups", "c1", "replica")
    assert [m.extra["heartbeat"] for m in catalog.manifests()] == [True, True]


def test_an_account_that_cannot_turn_the_binlog_off_backs_up_without_a_canary_and_says_so(pair, tmp_path):
    source, replica, db = pair
    user, password = _backup_account(source, replica, "RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR")
    common = _cli_config(tmp_path, replica, user, password)
    proc = cli("backup", *common, "--kind", "full")
    assert proc.returncode == 0, proc.stderr
    assert "without a canary" in proc.stderr and "BINLOG ADMIN" in proc.stderr, proc.stderr
    _assert_no_gtid_of_its_own(replica, source, "after a backup by an account without BINLOG ADMIN")
    _assert_replicates(source, replica, db)
    (manifest,) = Catalog(LocalStore(tmp_path / "cli-store"), "backups", "c1", "replica").manifests()
    assert manifest.extra["heartbeat"] is False and "BINLOG ADMIN" in manifest.extra["heartbeat_skipped"]
