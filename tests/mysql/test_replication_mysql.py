"""Replication set up by the product (core/binlog/replication.py) on real MySQL 9.7 servers: the
login check with MySQL's own binlog client, attach with auto-position, the catch-up wait over MySQL
GTID sets, and a wrong password failing by name within the watcher's grace (on main every statement
of it was MariaDB's: SHOW MASTER STATUS, CHANGE MASTER ... MASTER_USE_GTID, START SLAVE, SHOW SLAVE
STATUS, which MySQL 8.4+ rejects)."""

from __future__ import annotations

import secrets
import uuid

import pytest

from helpers import unique_name
from xtrabackup_provider.core.binlog.replication import (
    ReplicationError,
    ReplicationSource,
    attach,
    check_source_login,
    wait_caught_up,
)
from xtrabackup_provider.core.db.replica import ReplicaThreadError
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.db.server import MySQLTarget

pytestmark = pytest.mark.mysql


def _repl_account(source) -> ReplicationSource:
    password = uuid.uuid4().hex
    user = f"repl_{secrets.token_hex(3)}"
    source.execute_script(
        f"CREATE USER {user}@'127.0.0.1' IDENTIFIED BY '{password}'; GRANT REPLICATION SLAVE ON *.* TO {user}@'127.0.0.1';"
    )
    return ReplicationSource("127.0.0.1", source.port, user, password, connect_retry=1, label="my/src")


def _admin(server) -> MySQLTarget:
    return MySQLTarget(host=None, socket=str(server.socket), user="root", password=server.root_password)


def test_a_mysql_replica_attached_by_the_product_catches_up_and_holds_the_same_data(
    mysql_factory, mysql_source
):
    source = mysql_source
    repl = _repl_account(source)
    db = unique_name("myrep")
    source.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20));"
        f"INSERT INTO {db}.t VALUES (1, 'a'), (2, 'b'), (3, 'c');"
    )
    check_source_login(repl, _admin(source), what="the test replica")  # MySQL's mysqlbinlog reads it
    replica = mysql_factory("my-attached", root_password=secrets.token_urlsafe(12))
    try:
        conn = replica.connect()
        try:
            attach(conn, repl, "")  # a fresh server: everything from the source's first binlog
        finally:
            conn.close()
        source.query(f"INSERT INTO {db}.t VALUES (4, 'd')")
        done = wait_caught_up(
            replica.connect,
            repl,
            _admin(source),
            max_lag_seconds=5,
            timeout=120,
            poll=0.2,
            what="the test replica",
        )
        assert done.source_gtid and done.gtid
        assert table_checksums(replica, [db]) == table_checksums(source, [db])
    finally:
        mysql_factory.discard(replica)


def test_a_wrong_replication_password_on_mysql_fails_by_name(mysql_factory, mysql_source):
    repl = _repl_account(mysql_source)
    wrong = ReplicationSource(repl.host, repl.port, repl.user, uuid.uuid4().hex, connect_retry=1)
    with pytest.raises(ReplicationError, match="1045"):
        check_source_login(wrong, _admin(mysql_source), what="the test replica")
    # MySQL's replica keeps at most 32 characters of it: refused before anything is set up.
    too_long = ReplicationSource(repl.host, repl.port, repl.user, "x" * 33, connect_retry=1)
    with pytest.raises(ReplicationError, match="33 characters .* at most 32"):
        check_source_login(too_long, _admin(mysql_source), what="the test replica")
    replica = mysql_factory("my-wrongpw", root_password=secrets.token_urlsafe(12))
    try:
        conn = replica.connect()
        try:
            attach(conn, wrong, "")
        finally:
            conn.close()
        with pytest.raises(ReplicaThreadError) as err:
            wait_caught_up(
                replica.connect,
                wrong,
                _admin(mysql_source),
                max_lag_seconds=5,
                timeout=120,
                poll=0.2,
                what="the test replica",
                grace=3,
            )
        assert err.value.thread == "IO" and err.value.errno == 1045, str(err.value)
    finally:
        mysql_factory.discard(replica)
