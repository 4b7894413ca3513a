"""How many connections a verb opens to the database server, counted by the server itself
(SHOW GLOBAL STATUS LIKE 'Connections', read before and after on one connection of the test's
own, on a server nothing else uses): a verb talks to a server through one session
(core/db/session.py), plus what a tool it runs opens on its own (mariabackup, the binlog client,
pt-table-checksum). Issue 36: a full backup opened 7 connections of its own, one per fact, an
incremental 9, a batch binlog ship 3, the checksum gate 2."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
import yaml

from connection_count import connections
from helpers import root_target, seed_database, unique_name
from replica_helpers import NewHost, new_host_dir
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.replication import ReplicationSource
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.checksum import ChecksumOptions
from xtrabackup_provider.core.db.gate import GatePolicy, check_replica
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.restore.provision import ProvisionRequest, provision_replica
from xtrabackup_provider.core.restore.replica_compare import SourceCompare
from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test
from xtrabackup_provider.core.storage.local import LocalStore

RUN = "import sys; from xtrabackup_provider.cli.main import main; sys.exit(main(sys.argv[1:]))"


@pytest.fixture
def host(mariadb: SandboxServer, tmp_path) -> tuple[SandboxServer, Catalog]:
    seed_database(mariadb, unique_name("conn"), rows=200)
    return mariadb, Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")


def _backup(server: SandboxServer, catalog: Catalog, kind: str) -> Manifest:
    return run_backup(
        BackupRequest(catalog, root_target(server), kind=kind, allow_unencrypted=True, heartbeat=True)
    )


def test_a_full_backup_talks_to_the_server_through_one_session(host):
    server, catalog = host
    with connections(server) as opened:
        manifest = _backup(server, catalog, "full")
    # The row counter counted on the session, in the snapshot it opened from the tool's log thread.
    assert manifest.table_rows and "skipped" not in manifest.extra["row_counts"], manifest.extra["row_counts"]
    assert opened.tools["mariabackup"] >= 1
    assert opened.ours <= 1, f"a full backup opened {opened}"


def test_an_incremental_talks_to_the_server_through_one_session(host):
    server, catalog = host
    _backup(server, catalog, "full")
    with connections(server) as opened:
        _backup(server, catalog, "incremental")
    assert catalog.manifests()[-1].kind == "incremental"
    assert opened.tools["mariabackup"] >= 1
    assert opened.ours <= 1, f"an incremental opened {opened}"


def test_a_batch_binlog_ship_opens_one_session_and_one_per_binlog_copied(host, gpg_keys):
    server, catalog = host
    for _ in range(2):
        server.query("FLUSH BINARY LOGS")
    with connections(server) as opened:
        report = ship_binlogs(ShipRequest(catalog, root_target(server), [gpg_keys.public_key], flush=True))
    assert len(report.shipped) >= 3
    assert opened.tools["the binlog client"] == len(report.shipped)  # it logs in once for each it copies
    assert opened.ours <= 1, f"binlogs ship opened {opened}"


def test_the_checksum_gate_reads_a_replica_through_one_session(mariadb_replica):
    with connections(mariadb_replica) as opened:
        verdict = check_replica(root_target(mariadb_replica), GatePolicy())
    assert verdict.health.is_replica
    assert opened.ours <= 1, f"the checksum gate opened {opened}"


def test_check_reads_the_catalogs_alone(host, tmp_path):
    """`check` reads the catalogs alone, even for a host whose connection the fleet config gives."""
    server, catalog = host
    _backup(server, catalog, "full")
    config = tmp_path / "fleet.yaml"
    defaults = str(server.write_client_defaults(tmp_path / "client.cnf"))
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(tmp_path / "store")},
                "clusters": [{"name": "c1", "hosts": [{"name": "db1", "defaults_file": defaults}]}],
            }
        )
    )
    with connections(server) as opened:
        proc = subprocess.run(
            [sys.executable, "-c", RUN, "check", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert "newest restorable backup" in proc.stdout, proc.stdout + proc.stderr
    assert opened.count == 0, f"check opened {opened}"


@pytest.fixture
def deep_source(mariadb: SandboxServer, tmp_path) -> tuple[SandboxServer, Catalog, SourceCompare, str]:
    """A source with a replication account and pt-table-checksum's, backed up once."""
    repl, check = uuid.uuid4().hex, uuid.uuid4().hex
    mariadb.execute_script(
        f"CREATE USER xrepl@'127.0.0.1' IDENTIFIED BY '{repl}'; GRANT REPLICATION SLAVE ON *.* TO xrepl@'127.0.0.1';"
        f"CREATE USER xbp_checksum@'127.0.0.1' IDENTIFIED BY '{check}';"
        "GRANT SELECT, PROCESS, SUPER, BINLOG ADMIN, SLAVE MONITOR, REPLICATION SLAVE, REPLICATION CLIENT"
        " ON *.* TO xbp_checksum@'127.0.0.1'; GRANT ALL ON percona.* TO xbp_checksum@'127.0.0.1';"
    )
    db = unique_name("deep")
    seed_database(mariadb, db, rows=200)
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    run_backup(BackupRequest(catalog, root_target(mariadb), allow_unencrypted=True))
    deep = SourceCompare(
        ReplicationSource("127.0.0.1", mariadb.port, "xrepl", repl, connect_retry=1, label="c1/db1"),
        MySQLTarget(host="127.0.0.1", port=mariadb.port, user="xbp_checksum", password=check),
        catch_up_timeout=120,
        poll_seconds=0.2,
        checksum=ChecksumOptions(timeout_minutes=3),
    )
    return mariadb, catalog, deep, db


def test_a_deep_restore_test_reads_its_source_through_a_session_before_the_restore_and_one_after(
    deep_source, tmp_path
):
    """The checksum account's session before the restore (the preflight) and after it (catch-up,
    pt's dsn table), none held idle on the source while the restore runs; besides them the
    replication account's login check, the binlog it reads, the restored copy's replica thread,
    and pt-table-checksum's own."""
    server, catalog, deep, _db = deep_source
    with connections(server) as opened:
        report = run_restore_test(RestoreTestRequest(catalog, tmp_path / "rt", level="deep", deep=deep))
    assert report.verdict == "pass", report.reasons
    assert opened.tools["pt-table-checksum"] >= 1 and opened.tools["the binlog client"] >= 2
    assert opened.accounts.get("xrepl") == 1  # its login, checked before anything is restored
    assert opened.accounts.get("xbp_checksum", 0) <= 2, f"the restore test opened {opened}"
    assert set(opened.accounts) <= {"xrepl", "xbp_checksum"}, f"the restore test opened {opened}"


def test_provisioning_a_replica_reads_its_source_through_a_session_before_the_restore_and_one_after(
    deep_source, tmp_path
):
    """As the deep restore test: the checksum account's session before the restore (the login,
    grants and binlog checks) and after it (catch-up, pt's dsn table), besides the replication
    account's login check, the binlog client's and the new replica's threads, and pt's own."""
    server, catalog, deep, db = deep_source
    host = NewHost(new_host_dir(), server_id=7401)
    try:
        request = ProvisionRequest(
            catalog=catalog,
            target_datadir=host.datadir,
            source=deep.source,
            source_admin=deep.source_admin,
            replica=host.target(server.root_password),
            start_command=host.start_command,
            poll_seconds=0.2,
            catch_up_timeout=120,
            checksum=ChecksumOptions(
                replica_dsns=(f"h=127.0.0.1,P={host.port}",),
                databases=(db,),
                dsn_table="percona.xbp_provision_dsns",
                replicate="percona.xbp_provision_checksums",
            ),
        )
        with connections(server) as opened:
            report = provision_replica(request)
    finally:
        host.destroy()
    assert report.checksum is not None and report.checksum["differing_count"] == 0
    assert opened.tools["pt-table-checksum"] >= 1 and opened.tools["the binlog client"] >= 2
    assert opened.accounts.get("xrepl") == 1  # its login, checked before anything is restored
    assert opened.accounts.get("xbp_checksum", 0) <= 2, f"provisioning opened {opened}"
    assert set(opened.accounts) <= {"xrepl", "xbp_checksum"}, f"provisioning opened {opened}"
