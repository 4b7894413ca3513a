"""The chaos faults' own logic (tests/chaos/faults.py), no fleet: the evidence a fault waits for is
what the product logs, and its bookkeeping of damaged objects and paused processes."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deployment"))  # fleet.py's airflow_stack

from fleet import Endpoint, Fleet  # noqa: E402
from ledger import stops_shipping  # noqa: E402

from faults import (  # noqa: E402
    ORPHANED_TASK,
    SHIP_LOST,
    SHIP_LOST_TO,
    SHIP_TAKEN,
    SHIP_TAKEN_FROM,
    TAKEN_FROM,
    Injector,
    _gtid_seq,
    _stopped,
    forks,
    late_registrations,
    restarted,
    ship_fenced,
    upload_keys,
    worker_of,
)
from xtrabackup_provider.core.catalog.backups import Catalog  # noqa: E402
from xtrabackup_provider.core.catalog.lock import _HELD, LOCK_NAME, SHIP_LOCK_NAME, HostLock, HostLockBusy  # noqa: E402
from xtrabackup_provider.core.db.sandbox import free_port  # noqa: E402
from xtrabackup_provider.core.storage.local import LocalStore  # noqa: E402


def test_the_takeover_evidence_matches_the_products_own_line_for_a_holder_elsewhere(tmp_path, caplog):
    """pause_past_lease waits for this line: the lock of a paused CLI on host elsewhere-c1, its
    lease run out, taken over by the next run."""
    catalog = Catalog(LocalStore(str(tmp_path / "bucket")), "backups", "c1", "r1")
    past = datetime.now(UTC) - timedelta(minutes=5)
    body = {"token": "f" * 32, "owner": "xtrabackup-provider backup of c1/r1", "hostname": "elsewhere-c1",
            "pid": 9999, "pid_start": 1, "machine": "elsewhere-c1/another-boot", "lease_seconds": 1,
            "acquired_at": (past - timedelta(minutes=2)).isoformat(), "expires_at": past.isoformat()}  # fmt: skip
    catalog.store.put_bytes(f"backups/c1/r1/{LOCK_NAME}", json.dumps(body).encode())
    time.sleep(3.5)  # its one-second lease and the store clock's margin, by the store's clock
    with caplog.at_level(logging.WARNING), HostLock(catalog):
        pass
    lines = [r.getMessage() for r in caplog.records if "taking over" in r.getMessage()]
    assert lines, caplog.text
    assert re.search(TAKEN_FROM.format(c="c1", host="r1"), lines[0] + " "), lines[0]
    assert not re.search(TAKEN_FROM.format(c="c2", host="r1"), lines[0] + " "), "it must name its own cluster"


def test_a_finding_naming_a_damaged_object_is_excused_only_while_damaged_and_a_sweep_after():
    injector = Injector(cast(Any, None))
    now = time.time()
    injector.damaged["backups/c1/r1/backups/B/part-0.xbs.zst.gpg"] = (
        now - 60,
        float("inf"),
        "damage_object X",
    )
    injector.damaged["backups/c1/r1/binlogs/u/b.000003"] = (now - 900, now - 600, "damage_object Y")
    finding = "primary c1: backup B needs backups/c1/r1/backups/B/part-0.xbs.zst.gpg: it holds 3 bytes"
    assert injector.excuse(finding) == "damage_object X"
    assert injector.excuse("primary c1: backup B needs backups/c1/r1/backups/B/part-1.xbs.zst.gpg") is None
    # Put back ten minutes ago: a finding naming it now is the product's (or the repair's) own.
    assert injector.excuse("binlog u/b.000003 needs backups/c1/r1/binlogs/u/b.000003, which is gone") is None


def test_gtid_seq_reads_domain_0():
    assert _gtid_seq("0-1-42") == 42
    assert _gtid_seq("1-2-7,0-1-42") == 42
    assert _gtid_seq("1-2-7") == 0
    assert _gtid_seq(None) == 0


def test_stopped_tells_a_process_stopped_by_sigstop():
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert not _stopped(proc.pid)
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not _stopped(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _stopped(proc.pid)
        os.kill(proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + 10
        while _stopped(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _stopped(proc.pid)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("pid", [0, 2**22 + 1])
def test_stopped_is_false_for_no_such_process(pid):
    assert not _stopped(pid)


def test_forks_names_a_parent_two_backups_continue_since_the_fault_only():
    def m(bid: str, parent: str | None, at: str) -> dict[str, Any]:
        return {"backup_id": bid, "parent_id": parent, "finished_at": at}

    t0 = datetime(2026, 12, 5, 8, 0, tzinfo=UTC).timestamp()
    chain = [
        m("F", None, "2026-12-05T07:50:00Z"),
        m("I1", "F", "2026-12-05T08:01:00Z"),
        m("I2", "I1", "2026-12-05T08:05:00Z"),
    ]
    assert forks(chain, t0) == []
    twice = [*chain, m("I1b", "F", "2026-12-05T08:02:00Z")]
    assert forks(twice, t0) == ["2 backups registered since the kill name parent F (a forked chain)"]
    # Forked before the fault: not this fault's.
    assert forks(twice, datetime(2026, 12, 5, 8, 3, tzinfo=UTC).timestamp()) == []


def test_a_task_outliving_its_killed_worker_is_told_from_a_stranger():
    # A parent titled as Airflow's task supervisor, its child the task (the lock holder): with its
    # worker's pid known it is that worker's; with the worker gone, an orphaned task, not unknown.
    script = (
        "import setproctitle, subprocess, sys; setproctitle.setproctitle('airflow supervisor: t1'); "
        "child = subprocess.Popen(['sleep', '30']); print(child.pid, flush=True); sys.stdin.read()"
    )
    sup = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    plain = subprocess.Popen(["sleep", "30"])
    try:
        assert sup.stdout is not None
        task = int(sup.stdout.readline())
        assert worker_of(task, {os.getpid(): "worker-c1-r1"}, orphans=True) == "worker-c1-r1"
        assert worker_of(task, {}, orphans=True) == ORPHANED_TASK
        assert worker_of(task, {}) is None  # kill_tool's victims: only tools under a live worker
        assert worker_of(plain.pid, {}, orphans=True) is None
    finally:
        sup.kill()
        plain.kill()
        sup.wait()
        plain.wait()


def test_a_task_runner_whose_supervisor_died_with_its_worker_is_an_orphaned_task():
    # Seed 120521: the kill took the worker and the supervisor; the task runner ("airflow worker --
    # <ti id>", a child of init) went on following the binlog and holding the shipping lock.
    script = (
        "import setproctitle, sys; setproctitle.setproctitle('airflow worker -- ti1'); "
        "print('titled', flush=True); sys.stdin.read()"
    )
    runner = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert runner.stdout is not None and runner.stdout.readline() == "titled\n"
        assert worker_of(runner.pid, {}, orphans=True) == ORPHANED_TASK
        assert worker_of(runner.pid, {os.getpid(): "worker-c1-r1"}, orphans=True) == "worker-c1-r1"
        assert worker_of(runner.pid, {}) is None
    finally:
        runner.kill()
        runner.wait()


# -- restart_s3 and pause_shipper ---------------------------------------------------------------------


def test_the_shipping_lock_lines_pause_shipper_waits_for_are_the_products_own(tmp_path, caplog):
    """A follower holding the shipping lock loses it to a shipper elsewhere that took it over past
    its lease: the taker's line is SHIP_TAKEN, and the fenced follower's refusal before it would
    register progress is SHIP_LOST and says that nothing was registered."""
    catalog = Catalog(LocalStore(str(tmp_path / "bucket")), "backups", "c1", "r1")
    follower = HostLock(catalog, purpose="binlog shipping", name=SHIP_LOCK_NAME)
    follower.acquire()
    try:
        # As the follower's lock reads to a shipper on another machine once its lease ran out.
        key = f"backups/c1/r1/{SHIP_LOCK_NAME}"
        body = json.loads(catalog.store.get_bytes(key))
        body |= {"machine": "c1-r1-host/another-boot", "lease_seconds": 1}
        catalog.store.put_bytes(key, json.dumps(body).encode())
        time.sleep(3.5)  # its one-second lease and the store clock's margin, by the store's clock
        _HELD.discard(follower.token)  # the taker's process is not the follower's
        with caplog.at_level(logging.WARNING):
            taker = HostLock(catalog, purpose="binlog shipping", name=SHIP_LOCK_NAME)
            taker.acquire()
        _HELD.add(follower.token)
        took = [r.getMessage() for r in caplog.records if "taking over" in r.getMessage()]
        assert took and re.search(SHIP_TAKEN.format(c="c1", host="r1"), took[0]), caplog.text
        assert not re.search(SHIP_TAKEN.format(c="c2", host="r1"), took[0]), "it must name its own cluster"
        assert re.search(SHIP_TAKEN_FROM.format(c="c1", host="r1", pid=os.getpid()), took[0]), took[0]
        assert not re.search(SHIP_TAKEN_FROM.format(c="c1", host="r1", pid=1), took[0]), (
            "only the paused pid's"
        )
        # The taker runs elsewhere (pause_shipper's CLI has its own hostname).
        taken = json.loads(catalog.store.get_bytes(key)) | {"hostname": "elsewhere-c1"}
        catalog.store.put_bytes(key, json.dumps(taken).encode())
        taker.etag = catalog.store.get_versioned(key).etag
        with pytest.raises(HostLockBusy) as lost:
            follower.confirm("registering the progress of mysql-bin.000007")
        assert re.search(SHIP_LOST.format(c="c1", host="r1"), str(lost.value)), lost.value
        assert re.search(SHIP_LOST_TO.format(c="c1", host="r1"), str(lost.value)), lost.value
        assert "nothing was registered or deleted by this run" in str(lost.value)
        taker.release()
    finally:
        follower.release()
    assert catalog.store.head(key) is None, "the taker released the lock; the follower that lost it kept off"


def _manifest(name: str, *keys: str) -> dict[str, Any]:
    return {"name": name, "segments": [{"object": {"key": k, "size": 1, "sha256": "x"}} for k in keys]}


def test_late_registrations_are_the_paused_runs_objects_named_only_since_the_pause():
    p = "backups/c1/r1/binlogs/u/mysql-bin.000007.partial"
    at_pause = [_manifest("mysql-bin.000007", f"{p}-000000000000.aaaa1111.zst.gpg")]
    named = upload_keys(at_pause, "aaaa1111")
    assert named == {f"{p}-000000000000.aaaa1111.zst.gpg"}
    # The taker adopted the paused run's segment and stored its own after it: nothing late.
    adopted = [
        _manifest(
            "mysql-bin.000007", f"{p}-000000000000.aaaa1111.zst.gpg", f"{p}-000000004096.bbbb2222.zst.gpg"
        )
    ]
    assert late_registrations(named, adopted, "aaaa1111") == []
    # The resumed run rewrote the partial with a segment of its own: registered after it lost the lock.
    late = [
        _manifest(
            "mysql-bin.000007", f"{p}-000000000000.aaaa1111.zst.gpg", f"{p}-000000004096.aaaa1111.zst.gpg"
        )
    ]
    assert late_registrations(named, late, "aaaa1111") == [f"{p}-000000004096.aaaa1111.zst.gpg"]


def test_ship_fenced_is_ok_only_when_taken_over_said_lost_registered_nothing_and_ended():
    took, lost = "taking over the stale lock ...", "binlog shipping of c1/r1 lost the host lock ..."
    assert ship_fenced(took, lost, "failed", []).startswith("ok")
    assert ship_fenced(took, lost, "up_for_retry", []).startswith("ok")
    assert "no shipper took" in ship_fenced(None, lost, "failed", [])
    assert "registered 1 object" in ship_fenced(took, lost, "failed", ["k.aaaa1111.zst"])
    assert "never said it lost" in ship_fenced(took, None, "success", [])
    assert "still running" in ship_fenced(took, lost, "running", [])


def test_restarted_needs_a_connection_error_or_a_ride_through_and_a_success_after():
    down = "WARNING: target primary: Cannot reach the S3 endpoint of bucket 'b' at http://127.0.0.1:1: ..."
    assert restarted((1, down), [(0, "BACKUP ID")]).startswith("ok: during the downtime it failed naming")
    assert restarted((0, "BACKUP ID"), [(0, "BACKUP ID")]).startswith("ok: during the downtime its retries")
    assert restarted((1, down), [(1, down), (1, down), (1, down)]).startswith(
        "VIOLATION: the CLI did not succeed"
    )
    assert restarted((1, "Traceback: KeyError"), [(0, "")]).startswith("VIOLATION: the CLI failed during")
    assert restarted((None, "it did not end"), [(0, "")]).startswith(
        "VIOLATION: the CLI run during the downtime did not end"
    )


def test_a_restart_of_the_primary_endpoint_stops_shipping_the_offsites_does_not():
    assert stops_shipping("restart_s3", "primary down 30 s", "primary: ok: ...", [])
    assert not stops_shipping("restart_s3", "offsite down 30 s", "offsite: ok: ...", [])
    assert stops_shipping("pause_shipper", "c1 follower pid 5", "", [])


def test_a_fault_proxy_killed_listens_again_on_its_port_when_started_again(tmp_path):
    control = tmp_path / "proxy.json"
    ep = Endpoint("primary", "b", free_port(), free_port(), control, tmp_path / "proxy.log")
    ep.control_set(seed=0)
    fleet = cast(Any, SimpleNamespace(work=tmp_path))
    proxy = Fleet.start_proxy(fleet, ep)
    try:
        socket.create_connection(("127.0.0.1", ep.proxy_port), timeout=5).close()
        os.killpg(proxy.pid, signal.SIGKILL)
        proxy.wait()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", ep.proxy_port), timeout=5).close()
        proxy = Fleet.start_proxy(fleet, ep)
        socket.create_connection(("127.0.0.1", ep.proxy_port), timeout=5).close()
    finally:
        os.killpg(proxy.pid, signal.SIGKILL)
        proxy.wait()


def test_a_run_stopped_during_a_pause_leaves_no_stopped_cli_behind():
    """pause_past_lease's CLI is SIGSTOPped in its own session; the run's teardown (Injector.close)
    must end its whole group, or a stopped CLI outlives the fleet."""
    cli = subprocess.Popen(["sh", "-c", "sleep 300 & wait"], start_new_session=True)
    injector = Injector(cast(Any, None))
    try:
        os.killpg(cli.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not _stopped(cli.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        injector.paused_groups.add(cli.pid)
        injector.close()
        assert cli.wait(timeout=10) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while _group_alive(cli.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _group_alive(cli.pid), "the paused CLI's child (its tools) outlived the run"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(cli.pid, signal.SIGKILL)
        cli.wait()


def _group_alive(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid and fields[0] != "Z":
                    return True
    return False
