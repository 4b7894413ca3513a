"""Metrics really leave the operators: Airflow's StatsD client, configured the way a worker's task
runner configures it, sends them to a real UDP socket while the shipped DAGs run under dag.test()."""

from __future__ import annotations

import os
import socket
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from dag_helpers import load_dag_module, run_dag

from helpers import seed_database, unique_name, wait_for
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog, server_uuids
from xtrabackup_provider.core.catalog.reports import read_report

NAME = "airflow.xtrabackup.{what}.dagtest.db1.{metric}"


class StatsdListener(threading.Thread):
    """A UDP socket on a free port, collecting every StatsD line it receives."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            self.lines += data.decode().splitlines()

    def values(self, name: str, kind: str) -> list[float]:
        """Every value sent for `name` with StatsD type `kind` (g, ms, c)."""
        out = []
        for line in self.lines:
            stat, _, rest = line.partition(":")
            value, _, typ = rest.partition("|")
            if stat == name and typ.split("|")[0] == kind:
                out.append(float(value))
        return out


@pytest.fixture
def statsd(monkeypatch):
    from airflow.providers.common.compat.sdk import conf

    stats = pytest.importorskip("airflow.sdk.observability.stats")
    if not hasattr(stats, "initialize"):
        # The operators' metrics go through compat's Stats on every minor; what differs is how a
        # task runner sets Stats up, which this fixture repeats for dag.test() (3.3's API).
        pytest.skip("Airflow before 3.3: no airflow.sdk.observability.stats.initialize to set up StatsD")
    from airflow.sdk.observability.metrics import stats_utils

    listener = StatsdListener()
    listener.start()
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(listener.port))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")

    def configure() -> None:
        # What the task runner does as a worker starts a task; dag.test() runs tasks in this process.
        legacy = conf.getboolean("metrics", "legacy_names_on", fallback=True)
        stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=legacy)

    configure()
    yield listener
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "False")
    configure()
    listener.done.set()
    listener.join(5)
    listener.sock.close()


def _values(listener: StatsdListener, what: str, metric: str, kind: str) -> list[float]:
    return listener.values(NAME.format(what=what, metric=metric), kind)


def _received(listener: StatsdListener, what: str, metric: str, kind: str) -> None:
    """Wait for the metric an operator sends last (UDP on loopback keeps the order)."""
    wait_for(lambda: _values(listener, what, metric, kind), timeout=10, what=f"{what} {metric}")


def _set_cluster(**settings) -> None:
    path = Path(os.environ["XTRABACKUP_FLEET_CONFIG"])
    config = yaml.safe_load(path.read_text())
    config["clusters"][0].update(settings)
    path.write_text(yaml.safe_dump(config))


def _host(**settings) -> None:
    path = Path(os.environ["XTRABACKUP_FLEET_CONFIG"])
    config = yaml.safe_load(path.read_text())
    config["clusters"][0]["hosts"][0].update(settings)
    path.write_text(yaml.safe_dump(config))


def test_backup_restore_test_and_binlog_metrics_reach_statsd(fleet, statsd):
    server, catalog = fleet
    seed_database(server, unique_name("metrics"), rows=500)
    _set_cluster(binlogs={"gate_backups": False})

    assert run_dag(load_dag_module("mysql_backup").mysql_backup_dagtest).state == "success"
    _received(statsd, "backup", "full", "c")
    m = catalog.latest()
    assert m is not None
    seconds = (m.finished_at - m.started_at).total_seconds()
    assert _values(statsd, "backup", "raw_bytes", "g") == [m.raw_bytes]
    assert _values(statsd, "backup", "stored_bytes", "g") == [m.stored_bytes]
    assert _values(statsd, "backup", "duration", "ms") == [pytest.approx(seconds * 1000, abs=1)]
    throughput = _values(statsd, "backup", "throughput_bytes_per_second", "g")
    assert throughput == [pytest.approx(m.raw_bytes / seconds, rel=1e-3)]
    assert _values(statsd, "backup", "succeeded", "c") == [1]
    assert _values(statsd, "backup", "failed", "c") == []

    dag = load_dag_module("mysql_restore_test").mysql_restore_test_dagtest
    assert run_dag(dag, run_conf={"host": "db1"}).state == "success"
    _received(statsd, "restore_test", "passed", "c")
    report = read_report(catalog, m.backup_id)
    assert report and report["verdict"] == "pass"
    restore_ms = 1000 * sum(report["timings"][k] for k in ("fetch_extract", "prepare", "copy_back"))
    assert _values(statsd, "restore_test", "restore_time", "ms") == [pytest.approx(restore_ms, abs=1)]
    total_ms = 1000 * sum(report["timings"].values())
    assert _values(statsd, "restore_test", "duration", "ms") == [pytest.approx(total_ms, abs=1)]
    assert _values(statsd, "restore_test", "failed", "c") == []

    before = datetime.now(UTC)
    assert run_dag(load_dag_module("mysql_binlog_shipping").mysql_binlog_shipping_dagtest).state == "success"
    after = datetime.now(UTC)
    _received(statsd, "binlog", "shipping_runs", "c")
    (uuid,) = server_uuids(catalog)
    index = BinlogCatalog(catalog, uuid).index()
    newest = index.best(index.names()[-1])
    assert newest is not None
    until = newest.covers_until or newest.last_event_time
    assert until is not None
    (lag,) = _values(statsd, "binlog", "lag_seconds", "g")
    # Sent during the run: now - the newest shipped event, with `now` between before and after.
    assert (before - until).total_seconds() - 1 <= lag <= (after - until).total_seconds() + 1
    assert _values(statsd, "binlog", "shipped_count", "g")[0] >= 1

    # A backup that fails is counted too (the backup tool does not exist on this worker).
    _host(binary="/nonexistent/mariabackup")
    dag = load_dag_module("mysql_backup").mysql_backup_dagtest
    assert run_dag(dag, run_conf={"kind": "full"}).state == "failed"
    _received(statsd, "backup", "failed", "c")
    assert _values(statsd, "backup", "failed", "c") == [1]
    assert _values(statsd, "backup", "succeeded", "c") == [1], "the failed run must not count as a backup"


def test_what_a_backup_cost_and_the_check_figures_reach_statsd(fleet, statsd):
    server, catalog = fleet
    seed_database(server, unique_name("metrics"), rows=300)
    assert run_dag(load_dag_module("mysql_backup").mysql_backup_dagtest).state == "success"
    _received(statsd, "backup", "full", "c")
    m = catalog.latest()
    assert m is not None and m.impact is not None
    for what, seconds in m.impact.blocked_seconds.items():
        assert _values(statsd, "backup", f"{what}_blocked_seconds", "g") == [pytest.approx(seconds)]
    assert set(m.impact.blocked_seconds) == {"commits", "ddl", "non_transactional_writes"}

    # No restore test has passed yet: a warning (the check DAG succeeds), and every figure is sent.
    dag = load_dag_module("mysql_backup_check").mysql_backup_check_dagtest
    assert run_dag(dag).state == "success"
    _received(statsd, "check", "copies_behind", "g")
    assert _values(statsd, "check", "status", "g") == [1]
    (age,) = _values(statsd, "check", "backup_age_seconds", "g")
    assert 0 <= age <= (datetime.now(UTC) - m.finished_at).total_seconds() + 1
    assert _values(statsd, "check", "binlog_gaps", "g") == [0]
