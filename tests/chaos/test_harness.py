"""The chaos harness's own bookkeeping (tests/chaos/faults.py), no fleet: a harness error keeps the
part of a tool's output that says what went wrong, and a fault keeps what its evidence needs held
until the evidence shows."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deployment"))  # fleet.py's airflow_stack

from faults import Injector, NoTarget, clip, error_lines, pause_resources  # noqa: E402

# The start of what mariabackup printed when the harness's copy of a re-seed's r2 failed (seed
# 3901): the old note kept its first 500 characters, all banner, and none of the error.
BANNER = """[00] 2026-12-05 04:43:32 Connecting to MariaDB server host: localhost, user: root, password: set, port: 55463, socket: /tmp/xbpc-9kk2cixg/c2-r2/mysqld.sock
[00] 2026-12-05 04:43:32 Using server version 10.11.19-MariaDB-0+deb12u1-log
mariabackup based on MariaDB server 10.11.19-MariaDB debian-linux-gnu (x86_64)
[00] 2026-12-05 04:43:32 uses posix_fadvise().
[00] 2026-12-05 04:43:32 cd to /tmp/xbpc-9kk2cixg/c2-r2/data/
[00] 2026-12-05 04:43:32 open files limit requested 0, set to 1024
[00] 2026-12-05 04:43:32 mariabackup: using the following InnoDB configuration:
[00] 2026-12-05 04:43:32 innodb_data_home_dir =
[00] 2026-12-05 04:43:32 innodb_data_file_path = ibdata1:12M:autoextend
"""
FAILURE = "2026-12-05  4:43:32 0 [ERROR] InnoDB: Cannot open datafile './chaos/t2.ibd'\n[00] 2026-12-05 04:43:32 Error: failed\n"


def test_a_tools_error_lines_are_kept_not_its_banner():
    said = error_lines(BANNER + FAILURE)
    assert "Cannot open datafile './chaos/t2.ibd'" in said and "Error: failed" in said
    assert "Connecting to MariaDB" not in said


def test_without_error_lines_the_last_lines_are_kept():
    said = error_lines(BANNER + "[00] 2026-12-05 04:43:33 killed\n")
    assert said.endswith("killed") and "Connecting" not in said


def test_a_long_harness_error_keeps_its_end():
    note = clip(f"HARNESS ERROR: {AssertionError(BANNER * 10 + FAILURE)!r}")
    assert len(note) < 1600
    assert note.startswith("HARNESS ERROR: AssertionError(")
    assert "Cannot open datafile" in note and "Error: failed" in note
    assert "characters ...]" in note


def _injector(tmp_path: Path) -> Injector:
    return Injector(cast(Any, SimpleNamespace(work=tmp_path)))


def _busy(injector: Injector, resource: str) -> bool:
    try:
        held = injector.claim(random.Random(0), [(resource,)])
    except NoTarget:
        return True
    injector.release(held)
    return False


def test_a_resource_held_for_evidence_is_free_once_the_evidence_shows(tmp_path):
    """kill_cli holds the host's worker until the next run's log says it took the lock over (a
    kill_worker of that run cut the line from its log once)."""
    injector = _injector(tmp_path)
    since = time.time() - 1
    held = injector.claim(random.Random(0), [("worker:c1",)])
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / f"{time.time():.3f}-backup.log").write_text(
        "taking over the stale lock s3://b/backups/c1/r1/backup.lock of ...\n"
    )
    injector.hold_until_seen(held, r"taking over the stale lock \S*/c1/r1/backup\.lock", since, 900)
    deadline = time.time() + 10
    while _busy(injector, "worker:c1") and time.time() < deadline:
        time.sleep(0.1)
    assert not _busy(injector, "worker:c1")


def test_a_resource_held_for_evidence_is_busy_until_then_and_free_after_the_bound(tmp_path):
    injector = _injector(tmp_path)
    held = injector.claim(random.Random(0), [("worker:c1",)])
    injector.hold_until_seen(held, r"taking over the stale lock", time.time(), 3)
    assert _busy(injector, "worker:c1"), "released before its evidence showed"
    deadline = time.time() + 30
    while _busy(injector, "worker:c1") and time.time() < deadline:
        time.sleep(0.5)
    assert not _busy(injector, "worker:c1"), "still held past its bound"


def test_a_paused_backup_keeps_kill_worker_off_its_cluster(tmp_path):
    """kill_worker claims worker:<c>: while pause_past_lease waits for the takeover on c1, the
    worker of the run that takes it over is not killed; c2's still can be."""
    injector = _injector(tmp_path)
    held = injector.claim(random.Random(0), [pause_resources("c1")])
    assert _busy(injector, "worker:c1") and not _busy(injector, "worker:c2")
    injector.release(held)
    assert not _busy(injector, "worker:c1")


@pytest.fixture(autouse=True)
def _no_airflow_logs(tmp_path):
    (tmp_path / "airflow" / "logs").mkdir(parents=True)
