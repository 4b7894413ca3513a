"""The worker_clock fault's own parts (tests/chaos/faults.py), no fleet: the refusals it looks for
are the product's own lines as a task log holds them, its verdict calls a VIOLATION only what the
product must never do, and the worker it restarts skewed really runs on a skewed clock, on its
host's queue alone, and comes back on the true clock as the fleet started it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deployment"))  # fleet.py's airflow_stack

from airflow_stack import BIN, AirflowStack  # noqa: E402
from fleet import Fleet  # noqa: E402

from faults import (  # noqa: E402
    CLOCK_AHEAD_REFUSED,
    CLOCK_BEHIND_REFUSED,
    COUNTED_WITH_VICTIM_ONLY,
    DEFAULT_KINDS,
    FAKETIME,
    KINDS,
    OPT_IN,
    Injector,
    skewed_env,
    worker_clock_verdict,
)
from xtrabackup_provider.core.backup import run as backup_run  # noqa: E402

NOW = datetime(2026, 12, 5, 14, 0, tzinfo=UTC).timestamp()
NEWEST = "20261205T135800Z-inc"  # two minutes before NOW
OK_AFTER = [("success", '{"event": "registered 20261205T140500Z-inc"}')]


def task_log(message: str) -> str:
    """A failed task's log line as Airflow writes it (JSON: the exception's text escaped in it)."""
    return json.dumps({"timestamp": "2026-12-05T14:00:01Z", "level": "error", "event": "Task failed with exception",
                       "error_detail": [{"exc_type": "BackupError", "exc_value": message}]})  # fmt: skip


def refusal(fn: Any, *args: Any) -> str:
    with pytest.raises(backup_run.BackupError) as refused:
        fn(*args)
    return task_log(str(refused.value))


def test_the_refusals_it_looks_for_are_the_products_own_lines_in_a_task_log(monkeypatch):
    catalog = SimpleNamespace(describe=lambda: "host c1/r1", backup_ids=lambda: ["20991231T000000Z-inc"])
    ahead = refusal(
        backup_run._check_clock, catalog, SimpleNamespace(clock_ahead=lambda: timedelta(seconds=600))
    )
    monkeypatch.setattr(backup_run, "MAX_CLOCK_WAIT_SECONDS", 0)
    behind = refusal(backup_run._start_after_newest, catalog)
    assert re.search(CLOCK_AHEAD_REFUSED, ahead) and not re.search(CLOCK_BEHIND_REFUSED, ahead), ahead
    assert re.search(CLOCK_BEHIND_REFUSED, behind) and not re.search(CLOCK_AHEAD_REFUSED, behind), behind


def test_a_worker_ahead_refused_naming_the_clock_with_nothing_registered_is_ok():
    ran = ("failed", task_log("this worker's clock is 600 s ahead of the store's (host c1/r1): ..."))
    verdict = worker_clock_verdict("+10m", ran, NEWEST, {}, OK_AFTER)
    assert verdict.startswith("ok: a worker +10m: refused naming the clock"), verdict


def test_a_worker_ahead_that_registers_a_future_id_is_a_violation_and_so_is_the_honest_refusal_after():
    future = "20261205T141000Z-inc"  # its id: 10 minutes after NOW, when it showed
    after = [("failed", task_log(f"the newest backup of host c1/r1, {future}, is later than this worker's clock "
                                 "(2026-12-05T14:05:00Z); backup ids must follow each other in time: sync the clocks (NTP)"))]  # fmt: skip
    verdict = worker_clock_verdict("+10m", ("success", ""), NEWEST, {future: NOW + 60}, after)
    assert verdict.startswith("VIOLATION: "), verdict
    assert "later than the true clock" in verdict and "was not refused" in verdict, verdict
    assert "a run on the true clock after was refused" in verdict, verdict


def test_a_worker_behind_refused_because_a_newer_backup_exists_is_ok():
    ran = ("failed", task_log(f"the newest backup of host c1/r1, {NEWEST}, is later than this worker's clock "
                              "(2026-12-05T13:40:00Z); backup ids must follow each other in time: sync the clocks (NTP)"))  # fmt: skip
    verdict = worker_clock_verdict("-20m", ran, NEWEST, {}, OK_AFTER)
    assert verdict.startswith("ok: a worker -20m: refused"), verdict


def test_a_worker_behind_may_register_in_the_past_after_the_newest_but_never_before_it():
    stale = "20261205T131000Z-full"  # no backup for 50 minutes: its clock is still past the newest
    past = "20261205T134100Z-full"
    ok = worker_clock_verdict("-20m", ("success", ""), stale, {past: NOW}, OK_AFTER)
    assert ok.startswith("ok: a worker -20m: no backup as recent as its clock: registered " + past), ok
    assert "1140 s before it showed" in ok, ok
    bad = worker_clock_verdict("-20m", ("success", ""), NEWEST, {past: NOW}, OK_AFTER)
    assert bad.startswith("VIOLATION: ") and "not later than the newest before" in bad, bad


def test_a_backup_task_that_succeeded_and_registered_nothing_is_a_violation():
    verdict = worker_clock_verdict("-20m", ("success", ""), NEWEST, {}, OK_AFTER)
    assert verdict.startswith("VIOLATION: ") and "no backup of the host was registered" in verdict, verdict


def test_a_run_failed_before_the_clock_check_found_no_victim_unless_the_honest_runs_fail_too():
    ran = ("failed", task_log("Could not connect to the endpoint URL: http://127.0.0.1:1/"))
    for skew in ("+10m", "-20m"):
        verdict = worker_clock_verdict(skew, ran, NEWEST, {}, OK_AFTER)
        assert verdict.startswith("no victim: its backup task ended failed"), verdict
    down = [("failed", task_log("mariabackup --backup failed (killed by signal 9)"))] * 3
    verdict = worker_clock_verdict("+10m", ran, NEWEST, {}, down)
    assert verdict.startswith("VIOLATION: no backup run on the true clock succeeded after (3 tries"), verdict


def test_it_is_opt_in_and_counted_only_with_a_victim():
    assert "worker_clock" in KINDS and "worker_clock" in OPT_IN and "worker_clock" not in DEFAULT_KINDS
    assert "worker_clock" in COUNTED_WITH_VICTIM_ONLY


@pytest.mark.skipif(
    not FAKETIME.exists(), reason="libfaketime is not installed (apt-get install libfaketime)"
)
def test_the_worker_restarted_skewed_runs_ahead_on_its_own_queue_and_comes_back_as_it_was(tmp_path):
    stack = AirflowStack(tmp_path)
    stack.worker_env = {"TMPDIR": str(tmp_path)}
    started: list[tuple[list[str], dict[str, str]]] = []
    stack.start = lambda name, argv, **env: started.append((argv, stack.env(**env)))  # type: ignore[method-assign]
    injector = Injector(cast(Fleet, SimpleNamespace(stack=stack)))
    injector._restart_worker("c1-r1", **skewed_env("+10m", None))
    injector._restart_worker("c1-r1")
    (skewed_argv, skewed), (true_argv, true) = started
    assert skewed_argv[skewed_argv.index("--queues") + 1] == "c1-r1", skewed_argv
    assert true_argv[true_argv.index("--queues") + 1] == "c1-r1,default", true_argv
    assert (
        skewed["TMPDIR"] == true["TMPDIR"] == str(tmp_path)
        and skewed["XBP_WORKER_HOSTNAME"] == "c1-r1-worker"
    )
    assert not {"LD_PRELOAD", "FAKETIME"} & set(true), "back on the true clock"
    # A process of the skewed worker (its environment): its clock is 10 minutes ahead, and it sleeps.
    code = "import time, datetime; time.sleep(0.2); print(datetime.datetime.now(datetime.UTC).timestamp())"
    for env, offset in ((skewed, 600), (true, 0)):
        t = datetime.now(UTC).timestamp()
        out = subprocess.run(
            [str(BIN / "python"), "-c", code], env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert abs(float(out.stdout) - t - offset) < 30, (offset, out.stdout, t)
