"""Replicas built from backups (core/restore/provision.py) with real servers: a backup taken many
writes ago, a source that keeps writing while the replica is built, its binlogs rotated; a source
that purged the binlogs the backup needs; a datadir that is not empty."""

from __future__ import annotations

import os
import re
import secrets
import threading
import time
import uuid
from dataclasses import replace

import pytest

from helpers import add_orders, purge_binlogs_to, root_target, seed_database, unique_name, wait_caught_up
from replica_helpers import NewHost, WriteLoad, new_host_dir
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.replication import (
    PurgedBinlogsError,
    ReplicationError,
    ReplicationSource,
)
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.checksum import ChecksumOptions
from xtrabackup_provider.core.db.replica import ReplicaError
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.restore.chain import RestoreError
from xtrabackup_provider.core.restore.provision import ProvisionError, ProvisionRequest, provision_replica
from xtrabackup_provider.core.storage.local import LocalStore


def _accounts(source) -> tuple[ReplicationSource, MySQLTarget]:
    """A replication account and a pt-table-checksum account, created on the source with binary
    logging on (so backups and replicas have them too)."""
    repl, check = uuid.uuid4().hex, uuid.uuid4().hex
    source.execute_script(
        f"CREATE USER repl@'127.0.0.1' IDENTIFIED BY '{repl}';"
        "GRANT REPLICATION SLAVE ON *.* TO repl@'127.0.0.1';"
        f"CREATE USER xbp_checksum@'127.0.0.1' IDENTIFIED BY '{check}';"
        "GRANT SELECT, PROCESS, SUPER, BINLOG ADMIN, SLAVE MONITOR, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO xbp_checksum@'127.0.0.1';"
        "GRANT ALL ON percona.* TO xbp_checksum@'127.0.0.1';"
    )
    return (
        ReplicationSource("127.0.0.1", source.port, "repl", repl, connect_retry=1, label="c1/db1"),
        MySQLTarget(host="127.0.0.1", port=source.port, user="xbp_checksum", password=check),
    )


def _request(catalog, host: NewHost, source, replication, admin, **kw) -> ProvisionRequest:
    return ProvisionRequest(
        catalog=catalog,
        target_datadir=host.datadir,
        source=replication,
        source_admin=admin,
        replica=host.target(source.root_password),
        start_command=host.start_command,
        poll_seconds=0.2,
        catch_up_timeout=600,
        **kw,
    )


def test_a_replica_built_from_an_old_backup_catches_up_and_checksums_equal(mariadb_factory, tmp_path):
    source = mariadb_factory("prov-src", root_password=secrets.token_urlsafe(12))
    replication, admin = _accounts(source)
    db = unique_name("prov")
    seed_database(source, db, rows=5000)
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    backup = run_backup(BackupRequest(catalog=catalog, target=root_target(source), allow_unencrypted=True))
    host = NewHost(new_host_dir(), server_id=7301)
    try:
        # Many writes after the backup, across several binlogs, and still writing while it is built.
        load = WriteLoad(source, db)
        for _ in range(3):
            load.burst(1000)
            add_orders(source, db, 3000)
            source.query(f"UPDATE `{db}`.orders SET amount = amount + 1 WHERE id % 7 = 0")
            source.query("FLUSH BINARY LOGS")
        behind = source.query("SELECT @@gtid_binlog_pos")[0][0]
        with WriteLoad(source, db) as during:
            report = provision_replica(
                _request(
                    catalog,
                    host,
                    source,
                    replication,
                    admin,
                    checksum=ChecksumOptions(
                        replica_dsns=(f"h=127.0.0.1,P={host.port}",),
                        databases=(db,),
                        dsn_table="percona.xbp_provision_dsns",
                        replicate="percona.xbp_provision_checksums",
                    ),
                )
            )
        assert during.error is None and during.count > 0
        print("provisioned:", report.summary(), "source was at", behind, "when it started")
        assert report.backup_id == backup.backup_id
        assert report.gtid_start == backup.gtid
        assert report.caught_up is not None and report.caught_up.lag is not None
        assert report.checksum is not None and report.checksum["differing_count"] == 0
        replica = host.server(source.root_password)
        wait_caught_up(source, replica, timeout=120)
        assert table_checksums(replica, [db]) == table_checksums(source, [db])
        status = replica.query("SELECT @@gtid_slave_pos, @@server_id, @@read_only")[0]
        assert status[1] == 7301 and status[2] == 1
    finally:
        host.destroy()
        mariadb_factory.discard(source)


def test_a_source_that_purged_the_needed_binlogs_is_refused_before_anything_is_restored(
    mariadb_factory, tmp_path
):
    source = mariadb_factory("prov-purged", root_password=secrets.token_urlsafe(12))
    replication, admin = _accounts(source)
    db = unique_name("purged")
    seed_database(source, db, rows=500)
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    backup = run_backup(BackupRequest(catalog=catalog, target=root_target(source), allow_unencrypted=True))
    for n in range(3):
        source.query(f"INSERT INTO `{db}`.audit VALUES ({10_000 + n}, 'after the backup')")
        source.query("FLUSH BINARY LOGS")
    newest = source.query("SHOW MASTER STATUS")[0][0]
    purge_binlogs_to(source, newest)
    host = NewHost(new_host_dir(), server_id=7302)
    try:
        with pytest.raises(PurgedBinlogsError) as err:
            provision_replica(_request(catalog, host, source, replication, admin))
        message = str(err.value)
        print(message)
        assert f"First missing binlog: {backup.binlog_file}" in message
        assert "newer backup" in message
        assert list(host.datadir.iterdir()) == [], "nothing was restored"
    finally:
        host.destroy()
        mariadb_factory.discard(source)


def test_a_datadir_that_is_not_empty_is_refused(mariadb_source, tmp_path):
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    host = NewHost(new_host_dir(), server_id=7303)
    try:
        (host.datadir / "ibdata1").write_bytes(b"the old server's data")
        request = _request(
            catalog,
            host,
            mariadb_source,
            ReplicationSource("127.0.0.1", mariadb_source.port, "repl", "x"),
            root_target(mariadb_source),
        )
        with pytest.raises(RestoreError, match=f"target datadir {host.datadir} is not an empty directory"):
            provision_replica(request)
        assert (host.datadir / "ibdata1").read_bytes() == b"the old server's data"
        assert not host.pid_file.exists(), "no server was started"
    finally:
        host.destroy()


def _backed_up_source(mariadb_factory, tmp_path, name: str):
    source = mariadb_factory(name, root_password=secrets.token_urlsafe(12))
    replication, admin = _accounts(source)
    db = unique_name("fast")
    seed_database(source, db, rows=500)
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    run_backup(BackupRequest(catalog=catalog, target=root_target(source), allow_unencrypted=True))
    return source, replication, admin, catalog


@pytest.mark.parametrize(
    "wrong, errno",
    [("password", "1045"), ("port", "200[23]")],
    ids=["wrong-password", "unreachable-source"],
)
def test_a_replication_account_that_cannot_log_in_is_refused_before_anything_is_restored(
    mariadb_factory, tmp_path, wrong, errno
):
    """The replication account logs in to the source from where the new server will (this host),
    as the replica will: a wrong password or an address it cannot reach is one line naming the
    account and the source, before the chain is fetched (on main: restored, started, then the
    whole catch-up timeout waited)."""
    source, replication, admin, catalog = _backed_up_source(mariadb_factory, tmp_path, f"prov-{wrong}")
    if wrong == "password":
        replication = replace(replication, password="not-" + (replication.password or ""))
    else:
        replication = replace(replication, port=1)
    host = NewHost(new_host_dir(), server_id=7304)
    try:
        with pytest.raises(ReplicationError) as err:
            provision_replica(
                replace(_request(catalog, host, source, replication, admin), catch_up_timeout=120)
            )
        message = str(err.value)
        print(message)
        assert f"repl@{replication.address}" in message and re.search(errno, message)
        assert list(host.datadir.iterdir()) == [], "nothing was restored"
        assert not host.pid_file.exists(), "no server was started"
    finally:
        host.destroy()
        mariadb_factory.discard(source)


def test_a_new_server_account_without_the_privileges_provisioning_needs_is_refused_before_restoring(
    mariadb_factory, tmp_path
):
    """The new server's account comes with the restored data (the source's accounts): without
    REPLICATION SLAVE ADMIN / SUPER and RELOAD there, CHANGE MASTER and RESET SLAVE fail after the
    whole restore (on main: 1227 after restoring, with the server left running)."""
    source, replication, admin, catalog = _backed_up_source(mariadb_factory, tmp_path, "prov-acct")
    password = uuid.uuid4().hex
    source.execute_script(
        f"CREATE USER prov@localhost IDENTIFIED BY '{password}'; GRANT SELECT, PROCESS ON *.* TO prov@localhost;"
    )
    run_backup(BackupRequest(catalog=catalog, target=root_target(source), allow_unencrypted=True))
    host = NewHost(new_host_dir(), server_id=7305)
    try:
        request = replace(
            _request(catalog, host, source, replication, admin),
            replica=MySQLTarget(socket=str(host.socket), user="prov", password=password),
        )
        with pytest.raises(ProvisionError) as err:
            provision_replica(request)
        message = str(err.value)
        print(message)
        assert "prov@localhost" in message and "REPLICATION SLAVE ADMIN" in message and "RELOAD" in message
        assert list(host.datadir.iterdir()) == [], "nothing was restored"
        assert not host.pid_file.exists(), "no server was started"
    finally:
        host.destroy()
        mariadb_factory.discard(source)


def _alive(pid_file) -> bool:
    try:
        os.kill(int(pid_file.read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


@pytest.mark.parametrize("clean", [False, True], ids=["keep-datadir", "clean-on-failure"])
def test_an_io_error_that_persists_during_catch_up_fails_naming_it_and_stops_the_new_server(
    mariadb_factory, tmp_path, clean
):
    """The replication password changes on the source once the login check has passed (the restore
    is running): the IO thread then gets 1045 on every retry. The wait fails naming Last_IO_Errno
    and the server's message, stops the server it started and says how to clean up, or empties the
    datadir with clean_on_failure (on main: the whole catch-up timeout, `lag unknowns`, the server
    left running)."""
    source, replication, admin, catalog = _backed_up_source(mariadb_factory, tmp_path, "prov-io")
    host = NewHost(new_host_dir(), server_id=7306)

    def rotate_password_once_restoring() -> None:
        while not any(host.datadir.iterdir()):
            time.sleep(0.05)
        source.query("ALTER USER repl@'127.0.0.1' IDENTIFIED BY %s", (uuid.uuid4().hex,))

    rotate = threading.Thread(target=rotate_password_once_restoring, daemon=True)
    rotate.start()
    try:
        request = replace(
            _request(catalog, host, source, replication, admin), catch_up_timeout=180, clean_on_failure=clean
        )
        with pytest.raises(ReplicaError) as err:
            provision_replica(request)
        message = str(err.value)
        print(message)
        assert "Last_IO_Errno 1045" in message and "Access denied for user 'repl'" in message
        assert "stopped the new server" in message
        assert not _alive(host.pid_file), "the server it started is stopped"
        if clean:
            assert list(host.datadir.iterdir()) == [] and "emptied" in message
        else:
            assert any(host.datadir.iterdir()) and f"empty {host.datadir}" in message
    finally:
        rotate.join(5)
        host.destroy()
        mariadb_factory.discard(source)


def _serves(server) -> bool:
    """The server still answers (SHUTDOWN was not sent to it)."""
    try:
        return server.query("SELECT 1")[0][0] == 1
    except Exception:  # noqa: BLE001 - any error: it no longer serves
        return False


@pytest.mark.parametrize("occupant", ["source", "old-replica"])
def test_a_replica_connection_that_reaches_a_running_server_is_refused_and_that_server_is_never_stopped(
    mariadb_factory, tmp_path, occupant
):
    """The new host's connection reaches a server that is already running: the source itself (a
    socket copied from its config by mistake) or the old replica still running on the host while
    the replica is rebuilt into a new datadir. Refused before the restore in one line naming it,
    and nothing is stopped (on main: the backup restored and started, then `clean_up` sent
    SHUTDOWN to whatever answered at the replica's address: the source, or the old replica)."""
    source, replication, admin, catalog = _backed_up_source(mariadb_factory, tmp_path, f"prov-{occupant}")
    old = source if occupant == "source" else mariadb_factory("prov-old", root_password=source.root_password)
    host = NewHost(new_host_dir(), server_id=7307)
    try:
        request = replace(
            _request(catalog, host, source, replication, admin),
            replica=MySQLTarget(socket=str(old.socket), user="root", password=source.root_password),
            start_timeout=30,
        )
        with pytest.raises(ProvisionError) as err:
            provision_replica(request)
        message = str(err.value)
        print(message)
        assert _serves(old), f"the {occupant} still runs"
        assert _serves(source), "the source still runs"
        assert str(old.socket) in message and "Nothing was restored" in message
        if occupant == "source":
            assert "the source" in message
        assert list(host.datadir.iterdir()) == [], "nothing was restored"
        assert not host.pid_file.exists(), "no server was started"
    finally:
        host.destroy()
        if old is not source:
            mariadb_factory.discard(old)
        mariadb_factory.discard(source)


def test_a_server_the_start_command_started_elsewhere_is_not_stopped_and_the_message_says_what_is_left(
    mariadb_factory, tmp_path
):
    """The start command starts a server, but on another datadir (the host's old one), at the new
    server's address: this run did not prove it is the restored server, so it stops nothing and
    says what runs where (on main: SHUTDOWN sent to it, `It stopped the new server`)."""
    source, replication, admin, catalog = _backed_up_source(mariadb_factory, tmp_path, "prov-elsewhere")
    host = NewHost(new_host_dir(), server_id=7308)
    old = mariadb_factory("prov-old-dir", root_password=source.root_password)
    old.stop()
    try:
        # The host's start command starts the old server (its own datadir) on the new host's socket.
        other_cnf = host.basedir / "old.cnf"
        other_cnf.write_text(
            host.cnf.read_text().replace(f"datadir={host.datadir}", f"datadir={old.datadir}")
        )
        request = replace(
            _request(catalog, host, source, replication, admin),
            start_command=[
                "sh",
                "-c",
                f"setsid mariadbd --defaults-file={other_cnf} </dev/null >/dev/null 2>&1 &",
            ],
            start_timeout=60,
        )
        with pytest.raises(ProvisionError) as err:
            provision_replica(request)
        message = str(err.value)
        print(message)
        assert _alive(host.pid_file), "the server it did not prove its own still runs"
        assert f"runs on {old.datadir}" in message and "stopped no server" in message
        assert any(host.datadir.iterdir()) and str(host.datadir) in message
    finally:
        host.destroy()
        mariadb_factory.discard(old)
        mariadb_factory.discard(source)
