"""pt-table-checksum and the replica gate on a real source + replica (own pair, not the session one)."""

from __future__ import annotations

import json
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import yaml

from helpers import (
    checksum_pair,
    execute_unlogged,
    process_argv,
    seed_database,
    slave_status,
    unique_name,
    wait_caught_up,
    wait_for,
)
from xtrabackup_provider import cli
from xtrabackup_provider.core.db.checksum import ChecksumOptions, replica_dsn, run_checksum
from xtrabackup_provider.core.db.gate import GatePolicy, check_replica
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.db.server import MySQLTarget


@dataclass
class Pair:
    source: SandboxServer
    replica: SandboxServer
    checksum_user: MySQLTarget  # on the source, over TCP; the same account exists on the replica
    replica_root: MySQLTarget

    def options(self, *databases: str, **kw) -> ChecksumOptions:
        dsn = replica_dsn(MySQLTarget(host="127.0.0.1", port=self.replica.port))
        return ChecksumOptions(replica_dsns=(dsn,), databases=databases, **kw)

    def caught_up(self) -> None:
        wait_caught_up(self.source, self.replica)


@pytest.fixture(scope="module")
def pair(mariadb_factory):
    source, replica, password = checksum_pair(mariadb_factory, "ck")
    yield Pair(
        source,
        replica,
        MySQLTarget(host="127.0.0.1", port=source.port, user="xbp_checksum", password=password),
        MySQLTarget(socket=str(replica.socket), user="root", password=replica.root_password),
    )
    mariadb_factory.discard(replica)
    mariadb_factory.discard(source)


@pytest.fixture
def schema(pair):
    """A seeded schema on the source, replicated; dropped with its checksum rows afterwards."""
    db = unique_name("ck")
    seed_database(pair.source, db, rows=2000)
    pair.caught_up()
    yield db
    pair.source.query(f"DROP DATABASE `{db}`")
    pair.source.query("DELETE FROM percona.checksums WHERE db = %s", (db,))
    pair.caught_up()


def drift(pair: Pair, db: str) -> None:
    execute_unlogged(pair.replica, f"UPDATE `{db}`.customers SET name = 'drifted' WHERE id = 7")


def test_clean_pair_checksums_clean_and_the_gate_passes(pair, schema):
    run = run_checksum(pair.checksum_user, pair.options(schema))
    assert run.ok and run.exit_code == 0, run
    tables = {t.table: t for t in run.tables}
    assert set(tables) == {f"{schema}.audit", f"{schema}.customers", f"{schema}.orders"}
    assert tables[f"{schema}.orders"].rows == 2000 and tables[f"{schema}.customers"].rows == 200
    assert all(t.chunks >= 1 and t.diffs == 0 for t in tables.values())

    pair.caught_up()
    verdict = check_replica(pair.replica_root, GatePolicy(), "replica ck/r1")
    assert verdict.outcome == "pass", verdict.message()
    assert verdict.findings.chunks >= 3 and verdict.findings.age_seconds is not None
    gates = {g.name: g for g in verdict.gate_results()}
    assert gates["replica_health"].status == "pass" and gates["replica_health"].detail["sql_running"]
    assert gates["checksum"].status == "pass" and gates["checksum"].detail["differing_tables"] == []


def test_a_row_changed_on_the_replica_alone_is_found_and_gated(pair, schema):
    drift(pair, schema)
    run = run_checksum(pair.checksum_user, pair.options(schema))
    assert run.exit_code & 16 and [t.table for t in run.differing] == [f"{schema}.customers"]
    assert run.problems == []

    pair.caught_up()
    for on_diff, action, status in (
        ("fail", "fail", "fail"),
        ("skip", "skip", "skipped"),
        ("mark", "proceed", "marked"),
    ):
        verdict = check_replica(pair.replica_root, GatePolicy(on_diff=on_diff))
        assert (verdict.outcome, verdict.action) == ("diff", action)
        assert f"{schema}.customers" in verdict.message()
        assert verdict.differing_tables == [f"{schema}.customers"]
        assert verdict.gate_results()[1].status == status


def test_stopped_sql_thread_blocks_the_gate_and_stops_the_checksum(pair, schema):
    run_checksum(pair.checksum_user, pair.options(schema))
    pair.caught_up()
    pair.replica.query("STOP SLAVE SQL_THREAD")
    try:
        verdict = check_replica(pair.replica_root, GatePolicy(on_diff="mark"))
        assert verdict.outcome == "blocked" and verdict.action == "fail"
        assert "SQL thread is not running" in verdict.message()
        assert verdict.gate_results()[0].status == "fail"
        # pt-table-checksum gives up instead of waiting forever for the replica.
        stopped = run_checksum(pair.checksum_user, pair.options(schema))
        assert "REPLICATION_STOPPED" in stopped.flags and not stopped.ok
    finally:
        pair.replica.query("START SLAVE SQL_THREAD")
    pair.caught_up()


def test_lag_over_the_threshold_blocks_the_gate(pair, schema):
    run_checksum(pair.checksum_user, pair.options(schema))
    pair.caught_up()
    # A delayed replica lags for real: events wait MASTER_DELAY seconds before they apply.
    pair.replica.query("STOP SLAVE")
    pair.replica.query("CHANGE MASTER TO MASTER_DELAY = 120")
    pair.replica.query("START SLAVE")
    try:
        pair.source.query(f"INSERT INTO `{schema}`.audit VALUES (100000, 'late')")
        wait_for(
            lambda: (slave_status(pair.replica).get("Seconds_Behind_Master") or 0) >= 2,
            what="replica lag",
        )
        # Seconds_Behind_Master is sampled: one read can land on a momentary 0 while the
        # delayed event is handed over, so give the gate a few reads to see the lag.
        verdict = wait_for(
            lambda: (
                (v := check_replica(pair.replica_root, GatePolicy(max_lag_seconds=1))).outcome == "blocked"
                and v
            ),
            timeout=20,
            what="the gate to see the lag",
        )
        assert verdict.outcome == "blocked"
        assert "over max_lag_seconds 1" in verdict.message()
        assert check_replica(pair.replica_root, GatePolicy(max_lag_seconds=3600)).outcome == "pass"
    finally:
        pair.replica.query("STOP SLAVE")
        pair.replica.query("CHANGE MASTER TO MASTER_DELAY = 0")
        pair.replica.query("START SLAVE")
    pair.caught_up()


def test_stale_or_missing_results_block_until_the_checksum_runs_again(pair, schema):
    run_checksum(pair.checksum_user, pair.options(schema))
    conn = pair.source.connect()
    try:
        cur = conn.cursor()
        # As statements, so the replica keeps its own CRCs; only the times move back two days.
        cur.execute("SET SESSION binlog_format = 'STATEMENT'")
        cur.execute("UPDATE percona.checksums SET ts = ts - INTERVAL 2 DAY")
    finally:
        conn.close()
    pair.caught_up()
    verdict = check_replica(pair.replica_root, GatePolicy())
    assert verdict.outcome == "blocked" and "over max_age_hours 26" in verdict.message()
    run_checksum(pair.checksum_user, pair.options(schema))
    pair.caught_up()
    assert check_replica(pair.replica_root, GatePolicy()).outcome == "pass"
    other = check_replica(pair.replica_root, GatePolicy(replicate="percona.never_run"))
    assert other.outcome == "blocked" and "percona.never_run does not exist" in other.message()


def test_credentials_reach_pt_table_checksum_only_through_a_private_file(pair, schema):
    secret = pair.checksum_user.password
    assert secret
    locker = pair.source.connect()
    result: dict = {}
    try:
        # Hold a table lock so the run stays alive long enough to be inspected.
        locker.cursor().execute(f"LOCK TABLES `{schema}`.customers WRITE")
        worker = threading.Thread(
            target=lambda: result.update(run=run_checksum(pair.checksum_user, pair.options(schema)))
        )
        worker.start()
        proc = wait_for(lambda: _pt_process(), what="pt-table-checksum process")
        argv = process_argv(proc.pid)
        creds = next(p.split("F=", 1)[1] for p in argv if "F=" in p)
        mode = stat.S_IMODE(os.stat(creds).st_mode)
        dir_mode = stat.S_IMODE(os.stat(Path(creds).parent).st_mode)
    finally:
        locker.cursor().execute("UNLOCK TABLES")
        locker.close()
    worker.join(120)
    assert not any(secret in a for a in argv) and not any(",p=" in a for a in argv)
    assert (mode, dir_mode) == (0o600, 0o700)
    assert not os.path.exists(creds), "the defaults file must be removed after the run"
    assert result["run"].ok


def _pt_process():
    for child in psutil.Process().children(recursive=True):
        try:
            if any("pt-table-checksum" in part for part in child.cmdline()):
                return child
        except psutil.NoSuchProcess:
            continue
    return None


def test_processlist_discovery_misses_a_replica_on_a_shared_address(pair, schema):
    # Why the dsn table is the default: processlist pairs the replica's address (127.0.0.1) with
    # the source's own port, and finds only the source itself.
    run = run_checksum(pair.checksum_user, pair.options(schema, recursion_method="processlist"))
    assert "NO_SLAVES_FOUND" in run.flags and "no replica was found" in run.problems[0]


def test_cli_checksum_prints_the_result_and_fails_on_differences(pair, schema, tmp_path, monkeypatch, capsys):
    replica_cnf = pair.replica.write_client_defaults(tmp_path / "replica.cnf")
    monkeypatch.setenv("XBP_CHECKSUM_PASSWORD", pair.checksum_user.password or "")
    config = {
        "storage": {"local_path": str(tmp_path / "store")},
        "clusters": [
            {
                "name": "ck",
                "checksum": {
                    "source": {
                        "name": "src",
                        "host": "127.0.0.1",
                        "port": pair.source.port,
                        "user": "xbp_checksum",
                        "password_env": "XBP_CHECKSUM_PASSWORD",
                    },
                    "databases": [schema],
                },
                "hosts": [
                    {
                        "name": "r1",
                        "defaults_file": str(replica_cnf),
                        "host": "127.0.0.1",
                        "port": pair.replica.port,
                        "checksum_gate": {"on_diff": "fail"},
                    }
                ],
            }
        ],
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = ["checksum", "--config", str(path), "--cluster", "ck", "--host", "r1"]

    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"{schema}.orders" in out and "gate: pass" in out

    drift(pair, schema)
    assert cli.main(argv) == 1
    out = capsys.readouterr().out
    assert f"DIFFERENCES in: {schema}.customers" in out
    assert "gate: diff" in out and f"{schema}.customers" in out.split("gate: diff", 1)[1]
    assert cli.main([*argv, "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["checksum"]["differing_tables"] == [f"{schema}.customers"]
    assert {g["name"]: g["status"] for g in result["gate"]} == {"replica_health": "pass", "checksum": "fail"}
