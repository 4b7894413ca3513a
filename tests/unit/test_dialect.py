"""core/db/dialect.py: each server version's statements, variables, status columns and programs.
The MySQL 9.7 statements are run against a real server in tests/mysql/test_dialect_mysql.py."""

from __future__ import annotations

import pytest

from xtrabackup_provider.core.db.dialect import dialect_for, parse_version

MARIADB_1011 = "10.11.19-MariaDB-0+deb12u1-log"
MARIADB_118 = "11.8.9-MariaDB-0+deb13u1"
MYSQL_80_OLD = "8.0.21"
MYSQL_80 = "8.0.36"
MYSQL_84 = "8.4.3"
MYSQL_97 = "9.7.4-2"


@pytest.mark.parametrize(
    "text, version",
    [
        (MARIADB_1011, (10, 11, 19)),
        ("5.5.5-10.6.18-MariaDB", (10, 6, 18)),
        (MYSQL_97, (9, 7, 4)),
        ("8.4.3-3 Percona Server", (8, 4, 3)),
    ],
)
def test_versions_are_read_from_what_each_server_says(text, version):
    assert parse_version(text) == version


def test_a_version_that_is_not_one_is_refused_by_name():
    with pytest.raises(ValueError, match="'banana'"):
        parse_version("banana")


@pytest.mark.parametrize(
    "version, status, start, replica_status",
    [
        (MARIADB_1011, "SHOW MASTER STATUS", "START SLAVE", "SHOW SLAVE STATUS"),
        (MARIADB_118, "SHOW MASTER STATUS", "START SLAVE", "SHOW SLAVE STATUS"),
        (MYSQL_80_OLD, "SHOW MASTER STATUS", "START SLAVE", "SHOW SLAVE STATUS"),
        (MYSQL_80, "SHOW MASTER STATUS", "START REPLICA", "SHOW REPLICA STATUS"),
        (MYSQL_84, "SHOW BINARY LOG STATUS", "START REPLICA", "SHOW REPLICA STATUS"),
        (MYSQL_97, "SHOW BINARY LOG STATUS", "START REPLICA", "SHOW REPLICA STATUS"),
    ],
)
def test_each_version_gets_the_statements_it_accepts(version, status, start, replica_status):
    dialect = dialect_for(version)
    assert (dialect.binlog_status, dialect.start_replica, dialect.replica_status) == (
        status,
        start,
        replica_status,
    )


def test_mysql_replicas_start_from_gtid_purged_with_auto_position_and_the_password_is_an_argument():
    statements = dialect_for(MYSQL_97).change_source(
        host="10.0.0.1", port=3306, user="repl", password="s3cret", gtid_start="u:1-5"
    )
    assert statements[0] == ("SET GLOBAL gtid_purged = %s", ("u:1-5",))
    sql, args = statements[1]
    assert (
        sql.startswith("CHANGE REPLICATION SOURCE TO SOURCE_HOST = %s") and "SOURCE_AUTO_POSITION = 1" in sql
    )
    assert "s3cret" not in sql and args == ("10.0.0.1", 3306, "repl", "s3cret")


def test_mariadb_replicas_start_from_gtid_slave_pos_with_master_use_gtid():
    statements = dialect_for(MARIADB_118).change_source(
        host="h", port=3307, user="repl", password="p", ssl=True, gtid_start="0-1-5"
    )
    assert statements[0] == ("SET GLOBAL gtid_slave_pos = %s", ("0-1-5",))
    assert (
        statements[1][0].startswith("CHANGE MASTER TO MASTER_HOST")
        and "MASTER_USE_GTID = slave_pos" in statements[1][0]
    )
    assert "MASTER_SSL = 1" in statements[1][0]


def test_status_rows_of_both_namings_read_the_same():
    mysql = dialect_for(MYSQL_97).status({"Replica_IO_Running": "Yes", "Seconds_Behind_Source": 3})
    mariadb = dialect_for(MARIADB_1011).status({"Slave_IO_Running": "Yes", "Seconds_Behind_Master": 3})
    assert mysql["io_running"] == mariadb["io_running"] == "Yes"
    assert mysql["seconds_behind"] == mariadb["seconds_behind"] == 3
    assert dialect_for(MYSQL_97).status(None) == {}


def test_tools_and_metadata_names_follow_the_family_and_version():
    assert dialect_for(MYSQL_97).binlog_client == "mysqlbinlog"
    assert dialect_for(MARIADB_1011).binlog_client == "mariadb-binlog"
    assert dialect_for(MARIADB_1011).backup_metadata_prefix == "xtrabackup_"
    assert dialect_for(MARIADB_118).backup_metadata_prefix == "mariadb_backup_"


def test_mysql_applier_stops_at_a_gtid_set_and_mariadb_refuses_that_form():
    sql, args = dialect_for(MYSQL_97).start_sql_thread_until(before_gtids="u:7")
    assert sql == "START REPLICA SQL_THREAD UNTIL SQL_BEFORE_GTIDS = %s" and args == ("u:7",)
    with pytest.raises(ValueError, match="MariaDB"):
        dialect_for(MARIADB_1011).start_sql_thread_until(after_gtids="u:7")
