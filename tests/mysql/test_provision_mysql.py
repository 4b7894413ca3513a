"""provision-replica on MySQL 9.7 (core/restore/provision.py) from a clone backup: the new server is
started by the host's own start command (mysqld on a my.cnf, like `systemctl start mysql`), holds
the backup's GTID set in its own gtid_executed, replicates with SOURCE_AUTO_POSITION while the source
keeps writing, and catches up with equal CHECKSUM TABLE, equal GTID sets and no errant transaction.
The refusals come before anything is restored: a server already answering at the new server's
address, a datadir that is not empty, a new server's account without MySQL's replica privileges, a
source that purged what the backup needs. On main every clone backup was refused ("cannot configure
a MySQL replica")."""

from __future__ import annotations

import secrets
import time
import uuid

import pytest

from helpers import purge_binlogs_to, root_target, unique_name
from replica_helpers import NewHost, WriteLoad, new_host_dir
from xtrabackup_provider.core.binlog.replication import PurgedBinlogsError, ReplicationSource
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.restore.chain import RestoreError
from xtrabackup_provider.core.restore.provision import ProvisionError, ProvisionRequest, provision_replica

pytestmark = pytest.mark.mysql


@pytest.fixture(scope="module")
def source(mysql_factory):
    """A MySQL source with the clone plugin, a replication account and data."""
    server = mysql_factory("prov-my", root_password=secrets.token_urlsafe(16))
    server.query("INSTALL PLUGIN clone SONAME 'mysql_clone.so'")
    password = uuid.uuid4().hex
    server.execute_script(
        f"CREATE USER repl@'127.0.0.1' IDENTIFIED BY '{password}';"
        "GRANT REPLICATION SLAVE ON *.* TO repl@'127.0.0.1';"
    )
    server.repl = ReplicationSource(
        "127.0.0.1", server.port, "repl", password, connect_retry=1, label="c1/my1"
    )
    server.db = unique_name("prov")
    server.execute_script(
        f"SET SESSION cte_max_recursion_depth = 10000; CREATE DATABASE {server.db};"
        f" CREATE TABLE {server.db}.orders (id INT AUTO_INCREMENT PRIMARY KEY, amount DECIMAL(10,2), note TEXT);"
        f" INSERT INTO {server.db}.orders (amount, note) WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL"
        "   SELECT n + 1 FROM s WHERE n < 3000) SELECT n * 1.5, REPEAT('x', n % 200) FROM s;"
    )
    yield server
    mysql_factory.discard(server)


@pytest.fixture
def host():
    new = NewHost(new_host_dir(), server_id=7401, family="mysql")
    yield new
    new.destroy()


def _request(catalog: Catalog, host: NewHost, source: SandboxServer, **kw) -> ProvisionRequest:
    kw.setdefault("replica", host.target(source.root_password))
    return ProvisionRequest(
        catalog=catalog,
        target_datadir=host.datadir,
        source=source.repl,
        source_admin=root_target(source),
        start_command=host.start_command,
        poll_seconds=0.2,
        catch_up_timeout=600,
        start_timeout=120,
        **kw,
    )


def _executed(server: SandboxServer) -> str:
    return "".join(str(server.query("SELECT @@global.gtid_executed")[0][0]).split())


def _wait_applied(source: SandboxServer, replica: SandboxServer, timeout: float = 120) -> None:
    want = _executed(source)
    deadline = time.monotonic() + timeout
    while not replica.query("SELECT GTID_SUBSET(%s, @@global.gtid_executed)", (want,))[0][0]:
        assert time.monotonic() < deadline, f"the replica did not apply {want}: it holds {_executed(replica)}"
        time.sleep(0.2)


def test_a_mysql_replica_built_from_a_clone_backup_catches_up_while_the_source_writes(source, backup, host):
    catalog, manifest = backup
    db = source.db
    load = WriteLoad(source, db)
    load.burst(300)  # written after the backup, across binlogs
    source.query("FLUSH BINARY LOGS")
    load.burst(300)
    with WriteLoad(source, db) as during:
        report = provision_replica(_request(catalog, host, source))
    assert during.error is None and during.count > 0
    assert report.backup_id == manifest.backup_id and report.gtid_start == manifest.gtid
    assert report.caught_up is not None and report.server_id == 7401
    replica = host.server(source.root_password)
    _wait_applied(source, replica)
    assert table_checksums(replica, [db]) == table_checksums(source, [db])
    assert _executed(replica) == _executed(source), "GTID sets differ"
    errant = source.query("SELECT GTID_SUBSET(%s, @@global.gtid_executed)", (_executed(replica),))[0][0]
    assert errant == 1, "the replica holds a transaction the source does not (errant GTID)"
    status = replica.query("SELECT @@server_id, @@read_only, @@server_uuid")[0]
    assert status[:2] == (7401, 1) and status[2] != manifest.server_uuid
    assert replica.query("SHOW REPLICA STATUS")[0][0], "no replica status: not replicating"


def test_a_server_already_answering_at_the_new_address_is_refused(source, backup, host):
    catalog, _ = backup
    at_source = MySQLTarget(socket=str(source.socket), user="root", password=source.root_password)
    with pytest.raises(ProvisionError, match=r"already answers at .*: the source \(server 9\.") as err:
        provision_replica(_request(catalog, host, source, replica=at_source))
    assert "\n" not in str(err.value) and "Nothing was restored" in str(err.value)
    assert list(host.datadir.iterdir()) == [], "nothing was restored"
    assert source.query("SELECT 1") == [(1,)], "the source still runs"


def test_a_datadir_that_is_not_empty_is_refused(source, backup, host):
    catalog, _ = backup
    (host.datadir / "ibdata1").write_bytes(b"an old server's file")
    with pytest.raises(RestoreError, match="is not an empty directory"):
        provision_replica(_request(catalog, host, source))
    assert sorted(p.name for p in host.datadir.iterdir()) == ["ibdata1"]
    assert (host.datadir / "ibdata1").read_bytes() == b"an old server's file"


def test_a_new_server_account_without_mysqls_replica_privileges_is_refused(source, backup, host):
    catalog, _ = backup
    user, password = f"prov{secrets.token_hex(3)}", secrets.token_urlsafe(12)
    source.query(f"CREATE USER '{user}'@'localhost' IDENTIFIED BY %s", (password,))
    source.query(f"GRANT RELOAD, SELECT ON *.* TO '{user}'@'localhost'")
    weak = MySQLTarget(socket=str(host.socket), user=user, password=password)
    with pytest.raises(ProvisionError) as err:
        provision_replica(_request(catalog, host, source, replica=weak))
    message = str(err.value)
    assert "lacks REPLICATION_SLAVE_ADMIN, REPLICATION CLIENT" in message, message
    assert "CHANGE REPLICATION SOURCE TO, START REPLICA, SHOW REPLICA STATUS" in message, message
    assert "\n" not in message and list(host.datadir.iterdir()) == []


def test_a_source_that_purged_what_the_backup_needs_is_refused_before_anything_is_restored(
    source, backup, host
):
    catalog, manifest = backup
    source.query(f"INSERT INTO `{source.db}`.orders (amount, note) VALUES (1, 'after the backup')")
    source.query("FLUSH BINARY LOGS")
    newest = source.query("SHOW BINARY LOG STATUS")[0][0]
    purge_binlogs_to(source, newest)
    with pytest.raises(PurgedBinlogsError) as err:
        provision_replica(_request(catalog, host, source))
    message = str(err.value)
    assert f"First missing binlog: {manifest.binlog_file}" in message and "newer backup" in message, message
    assert list(host.datadir.iterdir()) == [], "nothing was restored"
