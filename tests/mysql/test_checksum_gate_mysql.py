"""The consistency gate on a real MySQL 9.7 replica: pt-table-checksum 3.7.1 (Debian sid's, the one
on PATH in `make test-mysql`) from the source, the replica's health and its results read by the gate
(SHOW REPLICA STATUS, Replica_* columns), a row drifted on the replica alone found and gated, and the
heartbeat row written on the replica without an errant GTID."""

from __future__ import annotations

import secrets
import uuid

import pytest

from helpers import unique_name
from xtrabackup_provider.core.binlog.replication import ReplicationSource, attach, wait_caught_up
from xtrabackup_provider.core.db.checksum import ChecksumOptions, replica_dsn, run_checksum
from xtrabackup_provider.core.db.gate import GatePolicy, check_replica
from xtrabackup_provider.core.db.heartbeat import plant
from xtrabackup_provider.core.db.server import MySQLTarget

pytestmark = pytest.mark.mysql


@pytest.fixture(scope="module")
def my_pair(mysql_factory):
    source = mysql_factory("myck-src", root_password=secrets.token_urlsafe(12))
    replica = mysql_factory("myck-rep", root_password=secrets.token_urlsafe(12))
    repl_pw, check_pw = uuid.uuid4().hex, uuid.uuid4().hex
    source.execute_script(
        f"CREATE USER repl@'127.0.0.1' IDENTIFIED BY '{repl_pw}'; GRANT REPLICATION SLAVE ON *.* TO repl@'127.0.0.1';"
        f"CREATE USER xbp_checksum@'127.0.0.1' IDENTIFIED BY '{check_pw}';"
        "GRANT SELECT, PROCESS, REPLICATION SLAVE, REPLICATION CLIENT, SUPER ON *.* TO xbp_checksum@'127.0.0.1';"
        "GRANT ALL ON percona.* TO xbp_checksum@'127.0.0.1';"
    )
    source_link = ReplicationSource("127.0.0.1", source.port, "repl", repl_pw, connect_retry=1)
    conn = replica.connect()
    try:
        attach(conn, source_link, "")
    finally:
        conn.close()
    admin = MySQLTarget(host=None, socket=str(source.socket), user="root", password=source.root_password)
    wait_caught_up(replica.connect, source_link, admin, max_lag_seconds=5, timeout=120, poll=0.2)
    yield {
        "source": source,
        "replica": replica,
        "link": source_link,
        "admin": admin,
        "checker": MySQLTarget(host="127.0.0.1", port=source.port, user="xbp_checksum", password=check_pw),
        "replica_root": MySQLTarget(
            host=None, socket=str(replica.socket), user="root", password=replica.root_password
        ),
    }
    mysql_factory.discard(replica)
    mysql_factory.discard(source)


def _caught_up(pair) -> None:
    wait_caught_up(
        pair["replica"].connect, pair["link"], pair["admin"], max_lag_seconds=5, timeout=120, poll=0.2
    )


def test_pt_table_checksum_and_the_gate_on_mysql_find_a_drifted_row(my_pair):
    db = unique_name("myck")
    my_pair["source"].execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.customers (id INT PRIMARY KEY, name VARCHAR(64));"
        + "".join(f"INSERT INTO {db}.customers VALUES ({i}, 'customer {i}');" for i in range(1, 301))
    )
    _caught_up(my_pair)
    options = ChecksumOptions(
        replica_dsns=(replica_dsn(MySQLTarget(host="127.0.0.1", port=my_pair["replica"].port)),),
        databases=(db,),
    )
    run = run_checksum(my_pair["checker"], options)
    assert run.ok and run.exit_code == 0, run
    assert [t.table for t in run.tables] == [f"{db}.customers"] and run.tables[0].rows == 300
    _caught_up(my_pair)
    verdict = check_replica(my_pair["replica_root"], GatePolicy())
    assert verdict.outcome == "pass", verdict.message()
    gates = {g.name: g for g in verdict.gate_results()}
    assert gates["replica_health"].detail["sql_running"] and gates["replica_health"].status == "pass"

    conn = my_pair["replica"].connect()
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"UPDATE {db}.customers SET name = 'drifted' WHERE id = 7")
    finally:
        conn.close()
    run = run_checksum(my_pair["checker"], options)
    assert run.exit_code & 16 and [t.table for t in run.differing] == [f"{db}.customers"], run
    _caught_up(my_pair)
    verdict = check_replica(my_pair["replica_root"], GatePolicy(on_diff="fail"))
    assert verdict.outcome == "diff" and verdict.differing_tables == [f"{db}.customers"]


def test_the_heartbeat_row_on_a_mysql_replica_is_not_an_errant_transaction(my_pair):
    replica = my_pair["replica"]
    before = replica.query("SELECT @@global.gtid_executed")[0][0]
    planted = plant(my_pair["replica_root"], "20261205T000000Z-full")
    assert planted.table and planted.token, planted.skipped
    after = replica.query("SELECT @@global.gtid_executed")[0][0]
    source_gtids = my_pair["source"].query("SELECT @@global.gtid_executed")[0][0]
    assert replica.query("SELECT GTID_SUBSET(%s, %s)", (after, source_gtids))[0][0] == 1, (before, after)
