"""The Backups view's model (core/report/view.py) on real stores: a bucket that never answers is
that host's status within the bound, never the page's; the row is `check`'s verdict for the host;
the host page reads the binlog gaps and the restore tests that proved each backup; what the
catalog says about the Airflow task that made a backup is reduced to ids; with the first storage
target down, the host page and the HTML report read the copy and say so."""

from __future__ import annotations

import socket
import threading
from datetime import UTC, datetime

import pytest

from fleet_factory import write_host
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.origin import airflow_origin
from xtrabackup_provider.core.config.load import parse_config
from xtrabackup_provider.core.config.schema import CheckConfig
from xtrabackup_provider.core.db.sandbox import free_port
from xtrabackup_provider.core.report.check import check_host
from xtrabackup_provider.core.report.html import render_html
from xtrabackup_provider.core.report.model import collect
from xtrabackup_provider.core.report.view import FleetCache, build_host, fleet_payload
from xtrabackup_provider.core.storage.local import LocalStore
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client


@pytest.fixture
def silent_endpoint():
    """An S3 endpoint that accepts connections and never answers (a hung load balancer)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def _reader(catalog: Catalog, cluster: str = "c1"):
    return lambda now: build_host([("primary", catalog)], CheckConfig(), True, now, cluster)


def test_a_bucket_that_never_answers_is_that_hosts_status_within_the_bound(tmp_path, silent_endpoint):
    now = datetime.now(UTC)
    good = Catalog(LocalStore(tmp_path), "backups", "c1", "db1")
    write_host(good, now)
    client = make_s3_client(silent_endpoint, "us-east-1", max_attempts=1, aws_access_key_id="x",
                            aws_secret_access_key="y")  # fmt: skip
    hung = Catalog(S3Store(client, "hung-bucket"), "backups", "c1", "db2")
    cache = FleetCache(ttl=60, bound=1.0)
    views = cache.views({("c1", "db1"): _reader(good), ("c1", "db2"): _reader(hung)}, now)
    rows = fleet_payload(views, now)["hosts"]
    assert [(r["host"], r["status"]) for r in rows] == [("db2", "critical"), ("db1", "ok")]
    assert rows[0]["worst_finding"] == "the catalog did not answer within 1 s (still reading; reload later)"
    assert rows[1]["newest_backup"] is not None


def test_the_row_is_checks_verdict_and_the_detail_shows_gaps_and_proofs(tmp_path):
    now = datetime.now(UTC)
    catalog = Catalog(LocalStore(tmp_path), "backups", "c1", "db1")
    made = write_host(catalog, now, gap_at=7, binlogs=5)
    view = build_host([("primary", catalog)], CheckConfig(), True, now, "c1")
    alone = check_host([("primary", catalog)], CheckConfig(), True, now, "c1")
    row = view.row()
    assert {k: row[k] for k in alone.as_dict()} == alone.as_dict()
    assert row["chain_length"] == 3 and row["newest_backup"]["backup_id"] == made[-1].backup_id
    # The window starts at the first backup after the gap (binlog 7 was purged before shipping).
    assert row["pitr"]["from"] == made[7].finished_at.isoformat()
    detail = view.detail()
    ((server,),) = [detail["binlogs"]]
    assert [(g["after"], g["before"]) for g in server["gaps"]] == [("mysql-bin.000006", "mysql-bin.000008")]
    assert "purged before shipping" in server["gaps"][0]["why"]
    proved = [b["backup_id"] for b in detail["backups"] if b["proved_by"]]
    assert proved == [m.backup_id for m in made[4:]]


@pytest.mark.parametrize(
    "value",
    [
        "a string",
        {"dag_id": "d"},  # no run
        {"dag_id": "d\n<script>", "run_id": "r"},
        {"dag_id": "d", "run_id": "r" * 251},
    ],
)
def test_a_recorded_origin_that_is_not_one_is_dropped(value):
    assert airflow_origin(value) == {}


def test_a_recorded_origin_keeps_only_ids():
    value = {
        "dag_id": "d",
        "run_id": "r",
        "task_id": "t",
        "map_index": 2,
        "try_number": True,
        "conn": "secret",
    }
    assert airflow_origin(value) == {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": 2}


def _down(host: str = "db1") -> Catalog:
    """A first target whose endpoint refuses connections (nothing listens on the port)."""
    client = make_s3_client(f"http://127.0.0.1:{free_port()}", "us-east-1", max_attempts=1,
                            aws_access_key_id="x", aws_secret_access_key="y")  # fmt: skip
    return Catalog(S3Store(client, "gone-bucket"), "backups", "c1", host)


def test_with_the_first_target_down_the_host_page_reads_the_copy(tmp_path):
    """The host page shows the chains, binlogs and restore tests of the copy that can be read,
    which target each backup is on, and where it read them, as restore and check do."""
    now = datetime.now(UTC)
    copy = Catalog(LocalStore(tmp_path), "far", "c1", "db1")
    made = write_host(copy, now, binlogs=5)
    view = build_host([("primary", _down()), ("offsite", copy)], CheckConfig(), True, now, "c1")
    detail = view.detail()
    assert [b["backup_id"] for b in detail["backups"]] == [m.backup_id for m in made], detail["problems"]
    assert {tuple(b["targets"]) for b in detail["backups"]} == {("offsite",)}
    assert detail["source"] == "offsite"
    assert detail["restore_tests"] and detail["binlogs"], detail
    row = view.row()
    assert row["newest_backup"]["backup_id"] == made[-1].backup_id and row["pitr"] is not None
    assert row["restorable_from"] == ["offsite"]
    assert any("storage target primary cannot be read" in p for p in detail["problems"])


def test_the_host_page_names_the_targets_holding_each_backup(tmp_path):
    now = datetime.now(UTC)
    first = Catalog(LocalStore(tmp_path / "first"), "backups", "c1", "db1")
    copy = Catalog(LocalStore(tmp_path / "copy"), "far", "c1", "db1")
    made = write_host(first, now, chains=1, incrementals=2)
    assert [m.backup_id for m in write_host(copy, now, chains=1, incrementals=2)] == [
        m.backup_id for m in made
    ]
    copy.store.delete([copy.object_key(made[-1].backup_id, "manifest.json")])  # the copy is one behind
    detail = build_host([("primary", first), ("offsite", copy)], CheckConfig(), True, now, "c1").detail()
    assert detail["source"] == "primary"
    assert [b["targets"] for b in detail["backups"]] == [["primary", "offsite"]] * 2 + [["primary"]]


def test_with_the_first_target_down_the_html_report_shows_the_copy(tmp_path):
    now = datetime.now(UTC)
    config = parse_config(
        {
            "storage": {"bucket": "gone-bucket"},
            "copies": [{"name": "offsite", "local_path": str(tmp_path), "prefix": "far"}],
            "clusters": [{"name": "c1", "hosts": [{"name": "db1"}]}],
        }
    )
    made = write_host(Catalog(LocalStore(tmp_path), "far", "c1", "db1"), now)
    report = collect(config, "c1", store=_down().store, now=now)
    (host,) = report.hosts
    assert [b.backup_id for b in host.backups] == [m.backup_id for m in made], host.problems
    assert host.source == "offsite" and host.last_verified is not None
    page = render_html(report)
    assert made[-1].backup_id in page and "storage target primary cannot be read" in page


def test_a_restore_test_that_proved_the_copy_shows_on_the_host_page(tmp_path):
    """A restore test writes its report on the target it read (the restore-test DAG's
    target_store=offsite): the host page's history and the row's last verified backup show it, as
    check does."""
    now = datetime.now(UTC)
    first = Catalog(LocalStore(tmp_path / "first"), "backups", "c1", "db1")
    copy = Catalog(LocalStore(tmp_path / "copy"), "far", "c1", "db1")
    made = write_host(first, now, chains=1, tested=False)
    write_host(copy, now, chains=1)  # the same backups, the newest restore-tested from the copy
    view = build_host([("primary", first), ("offsite", copy)], CheckConfig(), True, now, "c1")
    detail = view.detail()
    assert [t["backup_id"] for t in detail["restore_tests"]] == [made[-1].backup_id], detail["problems"]
    assert view.row()["last_verified"]["backup_id"] == made[-1].backup_id
    assert view.row()["last_restore_test"] == "pass"  # check's field: the same test
