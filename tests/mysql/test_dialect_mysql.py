"""The dialect's statements against a real MySQL 9.7 (MySQL 8.4 removed SHOW MASTER STATUS,
CHANGE MASTER, START/SHOW SLAVE): binlog status, a GTID replica set up with auto-position from a
copy's gtid_purged, its status under the product's names, and the version rows."""

from __future__ import annotations

import secrets
import time

import MySQLdb
import pytest

from xtrabackup_provider.core.db.dialect import dialect_for

pytestmark = pytest.mark.mysql


def _dialect(server):
    return dialect_for(server.query("SELECT @@version")[0][0])


def test_binlog_status_and_gtids_on_mysql(mysql_source):
    dialect = _dialect(mysql_source)
    assert dialect.family == "mysql" and dialect.at_least(8, 4)
    mysql_source.execute_script(
        "CREATE DATABASE IF NOT EXISTS dia; CREATE TABLE IF NOT EXISTS dia.t (id INT PRIMARY KEY)"
    )
    mysql_source.query("INSERT INTO dia.t VALUES (%s)", (int(time.time() * 1000) % 2**31,))
    file, position = mysql_source.query(dialect.binlog_status)[0][:2]
    assert file.startswith("mysql-bin.") and int(position) > 0
    executed = mysql_source.query(f"SELECT {dialect.gtid_executed_variable}")[0][0]
    uuid = mysql_source.query("SELECT @@server_uuid")[0][0]
    assert executed.startswith(f"{uuid}:1-")


def test_a_replica_set_up_through_the_dialect_replicates_with_auto_position(mysql_factory, mysql_source):
    dialect = _dialect(mysql_source)
    password = secrets.token_urlsafe(12)
    mysql_source.execute_script(
        f"CREATE USER IF NOT EXISTS repl@'127.0.0.1' IDENTIFIED BY '{password}';"
        "GRANT REPLICATION SLAVE ON *.* TO repl@'127.0.0.1';"
        "CREATE DATABASE IF NOT EXISTS dia2; CREATE TABLE IF NOT EXISTS dia2.t (id INT PRIMARY KEY);"
    )
    replica = mysql_factory("my-replica", root_password=secrets.token_urlsafe(12))
    try:
        conn = replica.connect()
        cur = conn.cursor()
        # A fresh server: its own GTIDs are cleared, then it is told it holds nothing of the source.
        cur.execute("RESET BINARY LOGS AND GTIDS")
        for sql, args in dialect.change_source(
            host="127.0.0.1", port=mysql_source.port, user="repl", password=password, connect_retry=1
        ):
            cur.execute(sql, args)
        cur.execute(dialect.start_replica)
        conn.close()
        mysql_source.query("INSERT INTO dia2.t VALUES (1), (2), (3)")
        deadline = time.monotonic() + 60
        while True:
            conn = replica.connect()
            cur = conn.cursor(MySQLdb.cursors.DictCursor)
            cur.execute(dialect.replica_status)
            status = dialect.status(cur.fetchone())
            conn.close()
            have = replica.query("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'dia2'")
            rows = replica.query("SELECT COUNT(*) FROM dia2.t")[0][0] if have[0][0] else 0
            if rows == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert status["io_running"] == "Yes", status
        assert status["sql_running"] == "Yes" and status["last_sql_errno"] == 0, status
        assert status["auto_position"] == 1 and status["seconds_behind"] is not None
        assert rows == 3
        source_gtids = mysql_source.query("SELECT @@global.gtid_executed")[0][0]
        replica_gtids = replica.query(f"SELECT {dialect.gtid_applied_variable}")[0][0]
        assert replica.query("SELECT GTID_SUBSET(%s, %s)", (source_gtids, replica_gtids))[0][0] == 1
        replica.query(dialect.stop_replica)
        replica.query(dialect.reset_replica_all)
    finally:
        mysql_factory.discard(replica)
