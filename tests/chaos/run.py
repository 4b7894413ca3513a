"""`make chaos`: the fleet (tests/chaos/fleet.py) under random faults (tests/chaos/faults.py) for
CHAOS_MINUTES (60), seeded by CHAOS_SEED (random, printed), with the checker (tests/chaos/checker.py)
during the run and at the end; CHAOS_PITR_POINTS (10) random PITR points per cluster at the end.
Exits 1 on any violated invariant, fault that did not show within its bound, or false alert;
the last line is the summary.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from checker import Checker
from evidence import alerts, find
from fleet import Fleet

from faults import Fault, Injector

FAULT_EVERY = (60, 180)  # seconds between two faults
CHECK_EVERY = 300
WARMUP_TIMEOUT = 1500
FINAL_TIMEOUT = 1200
EXPLAINS = 1200  # a check alert within this long after a fault is that fault's


def main() -> int:
    minutes = float(os.environ.get("CHAOS_MINUTES") or 60)
    seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1 << 31))
    points = int(os.environ.get("CHAOS_PITR_POINTS") or 10)
    work = Path(os.environ.get("CHAOS_DIR") or tempfile.mkdtemp(prefix="xbp-chaos-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    print(
        f"chaos: seed {seed} (CHAOS_SEED={seed} replays it), {minutes:g} minutes of faults, logs in {work}",
        flush=True,
    )
    rng = random.Random(seed)
    fleet = Fleet(work, minutes)
    injector = Injector(fleet, random.Random(rng.random()))
    checker = Checker(fleet, random.Random(rng.random()))
    try:
        started = start(fleet)
        faults_phase(fleet, injector, checker, rng, minutes)
        return finish(fleet, injector, checker, points, started)
    finally:
        fleet.close()


def start(fleet: Fleet) -> float:
    fleet.start_s3()
    fleet.start_servers()
    fleet.mount_scratch()
    fleet.write_configs()
    fleet.start_load()
    stack = fleet.start_airflow()
    stack.wait("the api-server", stack.healthy, 600)
    dags = set(fleet.dag_ids())
    stack.wait("the DAGs", lambda: dags <= {r[0] for r in stack.db("SELECT dag_id FROM serialized_dag")}, 900)
    errors = stack.db("SELECT filename, stacktrace FROM import_error")
    assert not errors, errors
    for dag in sorted(dags):
        stack.unpause(dag)
    print("chaos: fleet up, DAGs unpaused; waiting for each cluster's first backup", flush=True)
    checker = Checker(fleet, random.Random(0))
    stack.wait("a first backup of each cluster",
               lambda: all(v.manifests for (s, _), (_, v) in checker.views().items() if s == "primary"),
               WARMUP_TIMEOUT, interval=15)  # fmt: skip
    for ep in fleet.endpoints.values():
        ep.control_set(**fleet.background, seed=random.Random(ep.name).randrange(1 << 30))
    return time.time()


def faults_phase(
    fleet: Fleet, injector: Injector, checker: Checker, rng: random.Random, minutes: float
) -> None:
    end = time.time() + minutes * 60
    next_fault = time.time() + rng.uniform(*FAULT_EVERY) / 2
    next_check = time.time() + CHECK_EVERY
    while time.time() < end:
        if time.time() >= next_fault:
            fault = injector.inject()
            print(f"fault {len(injector.log)}: {fault.kind} {fault.target} {fault.note[:120]}", flush=True)
            next_fault = time.time() + rng.uniform(*FAULT_EVERY)
        if rng.random() < 0.05:
            print(f"ddl: {fleet.ddl(rng)}", flush=True)
        if time.time() >= next_check:
            checker.sweep(final=False)
            checker.restore_backups(limit=1)
            next_check = time.time() + CHECK_EVERY
        time.sleep(5)


def finish(fleet: Fleet, injector: Injector, checker: Checker, points: int, started: float) -> int:
    for ep in fleet.endpoints.values():
        ep.control_set(seed=0)  # faults over: the final runs and checks see healthy endpoints
    pending = [f for f in injector.log if f.evidence]
    deadline = time.time() + min(FINAL_TIMEOUT, max([f.t0 + f.bound_s - time.time() for f in pending] or [0]))
    while time.time() < deadline and any(find(fleet.work, f) is None for f in pending):
        time.sleep(20)
    for f in injector.log:
        f.seen = find(fleet.work, f)
    final_backups(fleet)
    checker.sweep(final=True)
    checker.final(points)
    proxy = proxy_faults(fleet)
    false = false_alerts(fleet, injector.log, started)
    undetected = [f for f in injector.log if f.seen is None]
    for f in injector.log:
        if f.note.startswith("HARNESS ERROR"):
            checker.violation(f"the harness could not inject {f.kind}: {f.note}")
    for f in undetected:
        checker.violation(
            f"fault {f.kind} {f.target} at {time.strftime('%H:%M:%S', time.localtime(f.t0))} did not show within {f.bound_s:.0f} s"
        )
    kinds = Counter(f.kind for f in injector.log) + proxy
    summary = {
        "faults": dict(kinds), "restores": checker.restores, "pitr_points": checker.pitr_points,
        "skipped_targets": checker.skipped, "violations": checker.violations, "false_alerts": false,
        "faults_log": [f.as_dict() for f in injector.log],
    }  # fmt: skip
    (fleet.work / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    lost = sum(1 for v in checker.violations if "did not show" not in v and "harness" not in v)
    print(
        f"faults by kind: {dict(kinds)}; violations: {len(checker.violations)}; details in {fleet.work}/summary.json"
    )
    print(
        f"chaos: {sum(kinds.values())} faults injected, {checker.restores} restores checked, "
        f"{checker.pitr_points} PITR points checked, lost {lost}, false alerts {len(false)}",
        flush=True,
    )
    return 1 if checker.violations or false else 0


def final_backups(fleet: Fleet) -> None:
    """One more backup run per cluster on a healthy fleet: it takes over what killed runs left."""
    stack = fleet.stack
    assert stack is not None
    runs = {c: stack.trigger(f"mysql_backup_{c}") for c in fleet.clusters}
    for c, run in runs.items():
        state = stack.wait(f"the final backup of {c}", lambda c=c, run=run: stack.finished(f"mysql_backup_{c}", run),
                           FINAL_TIMEOUT, interval=10)  # fmt: skip
        print(f"final backup run of {c}: {state}", flush=True)
        if state != "success":
            print(stack.explain(f"mysql_backup_{c}", run), flush=True)


def proxy_faults(fleet: Fleet) -> Counter[str]:
    out: Counter[str] = Counter()
    for ep in fleet.endpoints.values():
        if ep.log.exists():
            for line in ep.log.read_text().splitlines():
                fault = json.loads(line)["fault"]
                if fault != "healed":
                    out[f"s3 {fault}"] += 1
    return out


def false_alerts(fleet: Fleet, faults: list[Fault], started: float) -> list[str]:
    """Check lines (WARNING / CRITICAL) that no fault of the last EXPLAINS seconds explains, once the
    host had been OK (before that, a new fleet has no backup or restore test yet: true alerts)."""
    ok_since: dict[str, float] = {}
    out = []
    for t, status, cluster, line in sorted(alerts(fleet.work, started)):
        if status == "OK":
            ok_since.setdefault(cluster, t)
            continue
        if cluster not in ok_since:
            continue
        if not any(f.t0 <= t <= f.t1 + EXPLAINS for f in faults):
            out.append(line)
            print(f"FALSE ALERT: {line}", flush=True)
    return out


if __name__ == "__main__":
    sys.exit(main())
