"""What restart_db and kill_tool (tests/chaos/faults.py) count as a fault with an effect, and the
evidence they wait for (seed 120503 called three of them violations the product did not commit)."""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deployment"))  # fleet.py's airflow_stack

from faults import DB_LOST, kill_running, restart_evidence  # noqa: E402
from helpers import root_target  # noqa: E402
from xtrabackup_provider.core.binlog.ship import master_position  # noqa: E402
from xtrabackup_provider.core.db.session import Session  # noqa: E402

FOLLOWER = ["mysql_binlog_shipping_c1", "ship_binlogs", "scheduled__2026-12-05T11:15:00+00:00"]


def test_a_restart_of_the_followed_replica_shows_in_the_shippers_own_words(mariadb_factory):
    # The shipper's session outlives the restart of its server (seed 120503, 11:15:08: the shipping
    # task's "SHOW BINARY LOGS failed: (2006, 'Server has gone away')" was not seen as evidence).
    server = mariadb_factory("restarted", root_password=secrets.token_urlsafe(16))
    with Session(root_target(server)) as session:
        master_position(session)
        server.kill()
        server.start()
        with pytest.raises(Exception) as failed:
            master_position(session, session.dialect)
    assert re.search(DB_LOST, str(failed.value)), str(failed.value)


def test_a_restart_is_evidence_only_while_the_shipper_follows_the_replica():
    # Seed 120503, 11:36:19: c1's shipping runs were refused (11:35:51) and the next started at
    # 11:40:22, after the server was back: nothing of the product talked to it.
    assert restart_evidence("r1", [FOLLOWER])[0] == DB_LOST
    evidence, note = restart_evidence("r1", [])
    assert evidence is None and "no binlog shipping task" in note
    assert restart_evidence("r2", [FOLLOWER])[0] is None  # not the product's server


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_tool_that_ended_before_the_kill_is_not_counted_killed():
    # A gpg of a binlog segment ends within the scan of the process table; one that has exited but
    # is not reaped yet (a zombie) takes SIGKILL without an error, and its parent reads exit 0.
    done = subprocess.Popen(["gpg", "--version"], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while _state(done.pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _state(done.pid) == "Z"
    assert kill_running(done.pid, ["gpg", "--version"]) is False
    assert done.wait() == 0  # what the product saw: nothing to show


def test_a_running_tool_is_killed_and_a_reused_pid_is_left_alone():
    tool = subprocess.Popen(["sleep", "30"])
    other = subprocess.Popen(["sleep", "31"])
    try:
        assert kill_running(tool.pid, ["sleep", "30"]) is True
        assert tool.wait(10) == -9  # what the product reads: killed by signal 9
        # The pid now runs something else than the scan saw: not ours to kill, and left running.
        assert kill_running(other.pid, ["gpg", "--encrypt"]) is False
        time.sleep(0.2)
        assert other.poll() is None and _state(other.pid) != "T"
    finally:
        for p in (tool, other):
            p.kill()
            p.wait()
