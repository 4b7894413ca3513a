"""Pure consistency logic: pt-table-checksum exit bits and output, argv, DSNs, the gate verdict."""

from __future__ import annotations

from datetime import timedelta

import pytest

from xtrabackup_provider.core.config.load import parse_config
from xtrabackup_provider.core.config.schema import ConfigError
from xtrabackup_provider.core.db.checksum import (
    ChecksumOptions,
    ConsistencyError,
    checksum_argv,
    decode_exit,
    interpret,
    parse_results,
    replica_dsn,
)
from xtrabackup_provider.core.db.dsn import check_dsn
from xtrabackup_provider.core.db.gate import (
    ChecksumFindings,
    GatePolicy,
    ReplicaHealth,
    TableDiff,
    evaluate_gate,
)
from xtrabackup_provider.core.db.server import MySQLTarget

# Captured from pt-table-checksum 3.2.1 against MariaDB 10.11 after a row changed on the replica.
DIFF_OUTPUT = """Checking if all tables can be checksummed ...
Starting checksum ...
            TS ERRORS  DIFFS     ROWS  DIFF_ROWS  CHUNKS SKIPPED    TIME TABLE
11-30T11:18:52      0      0       30          0       1       0   0.024 shop.audit
11-30T11:18:52      0      1      300          0       1       0   0.030 shop.customers
11-30T11:18:52      0      0     3000          0       1       0   0.042 shop.orders
"""


def test_result_table_is_parsed_per_table():
    rows = {t.table: t for t in parse_results(DIFF_OUTPUT)}
    assert set(rows) == {"shop.audit", "shop.customers", "shop.orders"}
    assert (rows["shop.orders"].rows, rows["shop.orders"].chunks) == (3000, 1)
    assert rows["shop.customers"].diffs == 1
    assert rows["shop.audit"].seconds == pytest.approx(0.024)


def test_exit_bits_decode_to_flag_names():
    assert decode_exit(0) == ()
    assert decode_exit(16) == ("TABLE_DIFF",)
    assert decode_exit(16 | 32) == ("TABLE_DIFF", "SKIP_CHUNK")
    assert decode_exit(8) == ("NO_SLAVES_FOUND",)
    assert decode_exit(128) == ("REPLICATION_STOPPED",)
    assert decode_exit(255) == ()


def test_differences_become_a_structured_run_naming_the_table():
    run = interpret(16, DIFF_OUTPUT, "")
    assert [t.table for t in run.differing] == ["shop.customers"]
    assert not run.ok and run.problems == []
    summary = run.summary()
    assert summary["differing_tables"] == ["shop.customers"]
    assert (summary["tables"], summary["rows"], summary["chunks"]) == (3, 3330, 3)


def test_clean_run_is_ok_and_skipped_chunks_only_warn():
    clean = DIFF_OUTPUT.replace("      1      300", "      0      300")
    assert interpret(0, clean, "").ok
    run = interpret(32, clean, "")
    assert run.ok and run.warnings and "SKIP_CHUNK" in run.warnings[0]


def test_no_replica_and_stopped_replication_make_results_untrustworthy():
    assert (
        "NO_SLAVES_FOUND" in interpret(8, DIFF_OUTPUT.replace(" 1      300", " 0      300"), "").problems[0]
    )
    stopped = interpret(128, "Starting checksum ...\n", "")
    assert not stopped.ok and "replication is stopped" in stopped.problems[0]


@pytest.mark.parametrize(
    ("code", "stdout"),
    [
        (255, ""),  # documented fatal
        (11, "Starting checksum ...\n"),  # a Perl die exits with errno: 11 looks like 1|2|8
        (16, "Starting checksum ...\n"),  # TABLE_DIFF with no table showing a diff
        (1, DIFF_OUTPUT),  # ERROR with no table showing an error
    ],
)
def test_crashes_are_errors_with_the_tools_message(code, stdout):
    with pytest.raises(ConsistencyError, match=f"exit status {code}.*Replica vm has binlog_format ROW"):
        interpret(code, stdout, "Replica vm has binlog_format ROW which could cause ...")


def test_argv_carries_credentials_only_as_a_defaults_file():
    target = MySQLTarget(host="10.0.0.1", port=3307, user="ck", password="s3cret")
    argv = checksum_argv(
        target, "/tmp/xbp-cred-x/client.cnf", ChecksumOptions(databases=("shop",), replica_dsns=("h=r,P=1",))
    )
    assert argv[1:3] == ["--config=/dev/null", "h=10.0.0.1,P=3307,F=/tmp/xbp-cred-x/client.cnf"]
    assert "--recursion-method=dsn=D=percona,t=dsns" in argv
    assert {"--no-check-binlog-format", "--fail-on-stopped-replication", "--databases=shop"} <= set(argv)
    assert "--replicate=percona.checksums" in argv
    assert not any("s3cret" in a or a.startswith("p=") or ",p=" in a for a in argv)


def test_argv_prefers_the_socket_and_rejects_unsafe_values():
    target = MySQLTarget(socket="/run/mysqld/mysqld.sock")
    assert checksum_argv(target, "/c.cnf", ChecksumOptions())[2] == "S=/run/mysqld/mysqld.sock,F=/c.cnf"
    with pytest.raises(ConsistencyError, match="defaults file path"):
        checksum_argv(target, "/tmp/a,b.cnf", ChecksumOptions())
    with pytest.raises(ValueError, match="database name"):
        checksum_argv(target, "/c.cnf", ChecksumOptions(databases=("a,b",)))
    with pytest.raises(ConsistencyError, match="recursion_method"):
        checksum_argv(target, "/c.cnf", ChecksumOptions(recursion_method="cluster"))  # type: ignore[arg-type]


def test_replica_dsns_use_tcp_and_never_hold_a_password():
    assert replica_dsn(MySQLTarget(host="10.0.0.12", port=3306, socket="/s")) == "h=10.0.0.12,P=3306"
    assert check_dsn("h=10.0.0.12,P=3306") == "h=10.0.0.12,P=3306"
    for bad in ("h=x,p=secret", "P=3306", "h=x,P=abc", "hostname"):
        with pytest.raises(ValueError, match="DSN"):
            check_dsn(bad)


# -- the gate verdict --------------------------------------------------------------------------

HEALTHY = ReplicaHealth(is_replica=True, io_running=True, sql_running=True, seconds_behind=0)
FRESH = ChecksumFindings(
    "percona.checksums", exists=True, chunks=40, newest="2026-11-30 10:00:00", age_seconds=600
)
DRIFTED = ChecksumFindings(
    "percona.checksums",
    exists=True,
    chunks=40,
    age_seconds=600,
    differing=(TableDiff("shop.customers", 1, 0),),
)


def test_clean_healthy_replica_passes_and_records_both_gates():
    verdict = evaluate_gate(HEALTHY, FRESH, GatePolicy())
    assert (verdict.outcome, verdict.action) == ("pass", "proceed")
    assert [(g.name, g.status) for g in verdict.gate_results()] == [
        ("replica_health", "pass"),
        ("checksum", "pass"),
    ]


@pytest.mark.parametrize(
    ("on_diff", "action", "status"),
    [("fail", "fail", "fail"), ("skip", "skip", "skipped"), ("mark", "proceed", "marked")],
)
def test_differences_follow_the_on_diff_policy_and_name_the_table(on_diff, action, status):
    verdict = evaluate_gate(HEALTHY, DRIFTED, GatePolicy(on_diff=on_diff), "replica main/db2")
    assert (verdict.outcome, verdict.action) == ("diff", action)
    assert "shop.customers" in verdict.message() and "replica main/db2" in verdict.message()
    checksum = verdict.gate_results()[1]
    assert checksum.status == status
    assert checksum.detail["differing_tables"] == ["shop.customers"]


@pytest.mark.parametrize(
    ("health", "findings", "reason"),
    [
        (ReplicaHealth(True, True, False, None, "", "Duplicate entry"), FRESH, "SQL thread is not running"),
        (ReplicaHealth(True, False, True, None, "connect failed"), FRESH, "IO thread is not running"),
        (ReplicaHealth(True, True, True, 900), FRESH, "lag 900s is over max_lag_seconds 300"),
        (ReplicaHealth(False), FRESH, "not a replica"),
        (HEALTHY, ChecksumFindings("percona.checksums", exists=False), "does not exist"),
        (HEALTHY, ChecksumFindings("percona.checksums", True, 5, "x", 30 * 3600), "over max_age_hours 26"),
    ],
)
def test_health_and_stale_results_block_with_a_clear_reason(health, findings, reason):
    verdict = evaluate_gate(health, findings, GatePolicy(on_diff="mark"))
    assert verdict.outcome == "blocked" and verdict.action == "fail"
    assert reason in verdict.message()


def test_blocked_outranks_differences():
    stopped = ReplicaHealth(True, True, False, None)
    verdict = evaluate_gate(stopped, DRIFTED, GatePolicy(max_age=timedelta(hours=1)))
    assert verdict.outcome == "blocked"


# -- config -------------------------------------------------------------------------------------


def _config(cluster_extra=None, host_extra=None):
    cluster = {"name": "main", "hosts": [{"name": "db2", **(host_extra or {})}], **(cluster_extra or {})}
    return parse_config({"storage": {"local_path": "/tmp/x"}, "clusters": [cluster]}, "fleet.yaml")


def test_gate_is_off_unless_configured():
    config = _config()
    assert config.clusters[0].hosts[0].checksum_gate is None and config.clusters[0].checksum is None
    gate = _config(host_extra={"checksum_gate": {"on_diff": "mark"}}).clusters[0].hosts[0].checksum_gate
    assert gate is not None and (gate.on_diff, gate.on_blocked, gate.max_age_hours) == ("mark", "fail", 26)


@pytest.mark.parametrize(
    ("cluster_extra", "host_extra", "field"),
    [
        ({"checksum": {"source": "db9"}}, None, "checksum.source: cluster 'main' has no host 'db9'"),
        ({"checksum": {"source": "db2", "replicate": "checksums"}}, None, "checksum.replicate"),
        ({"checksum": {"source": "db2", "databases": ["a b"]}}, None, "checksum.databases"),
        (None, {"checksum_gate": {"on_diff": "ignore"}}, "hosts.0.checksum_gate.on_diff"),
        (None, {"checksum_gate": {"dsn": "h=x,p=pw"}}, "hosts.0.checksum_gate.dsn"),
    ],
)
def test_bad_checksum_config_names_the_field_and_file(cluster_extra, host_extra, field):
    with pytest.raises(ConfigError) as info:
        _config(cluster_extra, host_extra)
    assert "fleet.yaml" in str(info.value) and field in str(info.value)
