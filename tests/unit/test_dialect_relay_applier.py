"""The dialect rows of the MySQL relay log applier (core/pitr/mysql_applier.py): the CHANGE statement
that points it at relay logs placed by hand, and the server options of its sandbox, per version."""

from __future__ import annotations

import pytest

from xtrabackup_provider.core.db.dialect import dialect_for


def test_the_relay_log_source_turns_off_what_a_copy_of_a_replica_keeps():
    sql, args = dialect_for("9.7.4-2").relay_log_source(
        host="replay.invalid", relay_file="relay-bin.000007", relay_pos=4
    )
    assert sql.startswith("CHANGE REPLICATION SOURCE TO SOURCE_HOST = %s,")
    for option in (
        "SOURCE_AUTO_POSITION = 0",
        "SOURCE_DELAY = 0",
        "PRIVILEGE_CHECKS_USER = NULL",
        "GTID_ONLY = 0",
    ):
        assert option in sql, option
    assert args == ("replay.invalid", "relay-bin.000007", 4)
    assert "PASSWORD" not in sql
    # 8.0.22 has neither CHANGE REPLICATION SOURCE nor GTID_ONLY.
    old, _ = dialect_for("8.0.22").relay_log_source(host="h", relay_file="relay-bin.000001", relay_pos=4)
    assert old.startswith("CHANGE MASTER TO MASTER_HOST") and "MASTER_AUTO_POSITION = 0" in old
    assert "GTID_ONLY" not in old and "PRIVILEGE_CHECKS_USER = NULL" in old
    with pytest.raises(ValueError, match="MariaDB"):
        dialect_for("11.8.9-MariaDB").relay_log_source(host="h", relay_file="relay-bin.000001", relay_pos=4)


def test_the_applier_sandbox_options_by_version():
    assert dialect_for("9.7.4").parallel_applier_options(4) == [
        "--skip-replica-start",
        "--relay-log-purge=OFF",
        "--replica-parallel-workers=4",
        "--replica-preserve-commit-order=ON",
    ]
    assert dialect_for("8.0.25").parallel_applier_options(0) == [
        "--skip-slave-start",
        "--relay-log-purge=OFF",
        "--slave-parallel-workers=0",
    ]
    assert dialect_for("10.11.6-MariaDB").parallel_applier_options(2) == [
        "--skip-slave-start",
        "--slave-parallel-threads=2",
        "--slave-parallel-mode=optimistic",
    ]


def test_the_replica_status_names_the_relay_log_position():
    row = {"Relay_Log_File": "relay-bin.000003", "Relay_Log_Pos": 829, "Replica_SQL_Running": "No"}
    status = dialect_for("9.7.4").status(row)
    assert (status["relay_log_file"], status["relay_log_pos"], status["sql_running"]) == (
        "relay-bin.000003",
        829,
        "No",
    )


def test_a_statement_for_a_named_channel():
    mysql = dialect_for("9.7.4")
    assert mysql.on_channel("SHOW REPLICA STATUS", "xbp_replay") == (
        "SHOW REPLICA STATUS FOR CHANNEL %s",
        ("xbp_replay",),
    )
    until = mysql.start_sql_thread_until(before_gtids="u:audit:3")
    assert mysql.on_channel(until, "c") == (
        "START REPLICA SQL_THREAD UNTIL SQL_BEFORE_GTIDS = %s FOR CHANNEL %s",
        ("u:audit:3", "c"),
    )
    with pytest.raises(ValueError, match="MariaDB"):
        dialect_for("11.8.9-MariaDB").on_channel("SHOW SLAVE STATUS", "c")
