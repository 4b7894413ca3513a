"""`make chaos`: the fleet (tests/chaos/fleet.py) under random faults (tests/chaos/faults.py) for
CHAOS_MINUTES (60), seeded by CHAOS_SEED (random, printed), with the checker (tests/chaos/checker.py)
in its own thread during the run and again at the end.

Faults start every CHAOS_FAULT_EVERY seconds on average (45; each gap uniform in 0.5x..1.5x),
each in its own thread, so long ones (a re-seed, a partition) overlap the next ones. The kinds
come from a shuffled bag of every kind (CHAOS_FAULTS=kind,kind narrows it): each bag is used up
before the next is drawn, so a 10-minute run meets every kind and an hour meets each several
times. CHAOS_PITR_POINTS (10) random PITR points per window.

The checker keeps its own books (tests/chaos/ledger.py, `ledger.jsonl` in the run's directory):
a transaction a second on every source with its GTID, every manifest it saw; from them the
retention floor, the shipping lag, the RPO, and at the end every acknowledged range the store can
no longer restore. CHAOS_PLANT=retention|shipping|manifest runs the fleet on a copy of the provider
with that bug planted (tests/chaos/plant.py), live from the fault phase on.

Exits 1 on any violated invariant, fault that did not show within its bound, lost transaction or
backup, missed alert or false alert; the last line is the summary:
`chaos: seed S, faults with an effect N {kind: n}, restores checked R {kind: n}, PITR points
checked K {kind: n}, transactions lost T, backups lost B, missed alerts M, false alerts F`.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path

from checker import Checker
from evidence import Alert, ProxyFault, alerts, explain, find, missed
from fleet import Fleet
from ledger import FaultSeen, Ledger, LoadWriter, Policy, stops_shipping
from plant import go_live, plant

from faults import DEFAULT_KINDS, KINDS, Fault, Injector, NoTarget

CHECK_EVERY = 120  # seconds between two sweeps of the invariants during the run
WARMUP_TIMEOUT = 1500
FINAL_TIMEOUT = 1200
BACKUP_EVERY = 4 * 60  # the fleet's backup schedule (fleet.py): a dead holder's lock waits for the next run
TAKEOVER = timedelta(seconds=2 * BACKUP_EVERY + 120)


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # in the main thread: the fleet is stopped on the way out


def main() -> int:
    # A run started in the background ignores SIGINT; SIGTERM and SIGINT both stop the fleet.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    minutes = float(os.environ.get("CHAOS_MINUTES") or 60)
    seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1 << 31))
    points = int(os.environ.get("CHAOS_PITR_POINTS") or 10)
    every = float(os.environ.get("CHAOS_FAULT_EVERY") or 45)
    kinds = [k for k in (os.environ.get("CHAOS_FAULTS") or ",".join(DEFAULT_KINDS)).split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        print(f"error: CHAOS_FAULTS names {unknown}: the kinds are {', '.join(KINDS)}", file=sys.stderr)
        return 2
    work = Path(os.environ.get("CHAOS_DIR") or tempfile.mkdtemp(prefix="xbp-chaos-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    print(
        f"chaos: seed {seed} (CHAOS_SEED={seed} replays it), {minutes:g} minutes of faults "
        f"({', '.join(kinds)}; one every {every:g} s on average), logs in {work}",
        flush=True,
    )
    rng = random.Random(seed)
    fleet = Fleet(work, minutes)
    bug = os.environ.get("CHAOS_PLANT") or ""
    planted = plant(bug, work) if bug else None
    if planted:
        fleet.pythonpath = str(planted)  # the fleet's Airflow; the faults' CLIs inherit this:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(planted), os.environ.get("PYTHONPATH", "")])
        print(f"chaos: CHAOS_PLANT={bug}: the fleet runs {planted} (live from the fault phase)", flush=True)
    injector = Injector(fleet)
    ledger = Ledger(work / "ledger.jsonl", {"primary": Policy.of(fleet.retention),
                                            "offsite": Policy.of(fleet.offsite_retention)})  # fmt: skip
    checker = Checker(fleet, random.Random(rng.random()), points=points, takeover=TAKEOVER,
                      pitr_window=timedelta(days=fleet.retention["pitr_days"]), ledger=ledger,
                      faults=lambda: faults_seen(injector),
                      running_since=lambda: min(injector.in_flight.values(), default=float("inf")),
                      excused=injector.excuse)  # fmt: skip
    writer: LoadWriter | None = None
    try:
        started, writer = start(fleet, checker, ledger)
        live, watcher = faults_phase(fleet, injector, checker, rng, minutes, kinds, every, planted)
        return finish(fleet, injector, checker, started, seed, bug, live, watcher)
    finally:
        if writer:
            writer.close()
        injector.close()
        fleet.close()


def faults_seen(injector: Injector) -> list[FaultSeen]:
    """The faults that ended, as the ledger judges with them: an effect is a victim and its evidence
    (before the final wait for evidence, a victim)."""
    return [
        FaultSeen(
            f.kind,
            tuple(f.clusters),
            f.t0,
            f.t1 or time.time(),
            f.evidence is not None and not f.note.startswith("HARNESS"),
            stops_shipping(f.kind, f.target, f.note, f.victims),
        )
        for f in list(injector.log)
    ]


def start(fleet: Fleet, checker: Checker, ledger: Ledger) -> tuple[float, LoadWriter]:
    fleet.start_s3()
    fleet.start_servers()
    fleet.mount_scratch()
    fleet.write_configs()
    fleet.start_load()
    writer = LoadWriter(ledger, {name: c.source for name, c in fleet.clusters.items()})
    writer.start()
    stack = fleet.start_airflow()
    stack.wait("the api-server", stack.healthy, 600)
    dags = set(fleet.dag_ids())
    stack.wait("the DAGs", lambda: dags <= {r[0] for r in stack.db("SELECT dag_id FROM serialized_dag")}, 900)
    errors = stack.db("SELECT filename, stacktrace FROM import_error")
    assert not errors, errors
    for dag in sorted(dags):
        stack.unpause(dag)
    print("chaos: fleet up, DAGs unpaused; waiting for each cluster's first backup", flush=True)
    stack.wait("a first backup of each cluster",
               lambda: all(v.manifests for (s, _), (_, v) in checker.views().items() if s == "primary"),
               WARMUP_TIMEOUT, interval=15)  # fmt: skip
    for ep in fleet.endpoints.values():
        ep.control_set(**fleet.background, seed=random.Random(ep.name).randrange(1 << 30))
    return time.time(), writer


def faults_phase(fleet: Fleet, injector: Injector, checker: Checker, rng: random.Random, minutes: float,
                 kinds: list[str], every: float, planted: Path | None) -> tuple[float, Watcher]:  # fmt: skip
    """The faults; returns when a planted bug went live (0: none planted) and the checker's thread,
    still sweeping (it goes on while the last faults' evidence is awaited)."""
    live = 0.0
    if planted:
        go_live(planted)
        live = time.time()
        print(f"chaos: the planted bug is live from {time.strftime('%H:%M:%S')}", flush=True)
    end = time.time() + minutes * 60
    watcher = Watcher(checker)
    running: list[threading.Thread] = []
    postponed: list[str] = []  # kinds whose every target was busy: tried first next time
    bag: list[str] = []
    next_fault = time.time() + rng.uniform(0.5, 1.5) * every / 2
    while time.time() < end:
        if time.time() >= next_fault:
            if not bag:
                bag = rng.sample(kinds, len(kinds))
            kind = postponed.pop(0) if postponed else bag.pop(0)
            fault_rng = random.Random(rng.random())
            thread = threading.Thread(target=one_fault, args=(injector, kind, fault_rng, postponed),
                                      name=kind, daemon=True)  # fmt: skip
            thread.start()
            running.append(thread)
            next_fault = time.time() + rng.uniform(0.5, 1.5) * every
        if rng.random() < 0.02:
            print(f"ddl: {fleet.ddl(rng)}", flush=True)
        time.sleep(2)
    print(
        f"chaos: fault phase over; waiting for {sum(t.is_alive() for t in running)} running fault(s)",
        flush=True,
    )
    for thread in running:
        thread.join(FINAL_TIMEOUT)
    return live, watcher


class Watcher:
    """The checker's thread during the run (check_loop)."""

    def __init__(self, checker: Checker) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=check_loop, args=(checker, self.stop), name="checker", daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def one_fault(injector: Injector, kind: str, rng: random.Random, postponed: list[str]) -> None:
    try:
        fault = injector.inject(kind, rng)
    except NoTarget as busy:
        postponed.append(kind)
        print(f"fault {kind} postponed: its targets are busy ({busy})", flush=True)
        return
    at = time.strftime("%H:%M:%S", time.localtime(fault.t0))
    print(f"fault {len(injector.log)} at {at} ({fault.t1 - fault.t0:.0f} s): {fault.kind} {fault.target} "
          f"{fault.note[:120]}", flush=True)  # fmt: skip


def check_loop(checker: Checker, stop: threading.Event) -> None:
    """During the run: the invariants every CHECK_EVERY seconds, and between two sweeps the targets
    that became checkable (closed chains and PITR windows), in GTID order."""
    while not stop.is_set():
        sweep_at = time.time()
        try:
            checker.sweep(final=False)
            checker.plan(final=False)
            checker.work(until=sweep_at + CHECK_EVERY)
        except Exception as exc:  # noqa: BLE001 - the checker's own failure is a harness error
            checker.violation(f"harness: the checker failed: {exc!r}"[:600])
        stop.wait(max(0.0, sweep_at + CHECK_EVERY - time.time()))


def finish(fleet: Fleet, injector: Injector, checker: Checker, started: float, seed: int, bug: str,
           live: float, watcher: Watcher) -> int:  # fmt: skip
    for ep in fleet.endpoints.values():
        ep.control_set(seed=0)  # faults over: the final runs and checks see healthy endpoints
    pending = [f for f in injector.log if f.evidence]
    deadline = time.time() + min(FINAL_TIMEOUT, max([f.t0 + f.bound_s - time.time() for f in pending] or [0]))
    while time.time() < deadline and any(find(fleet.work, f, fleet.stack) is None for f in pending):
        time.sleep(20)
    for f in injector.log:
        f.seen = find(fleet.work, f, fleet.stack)
    watcher.close()
    final_backups(fleet)
    checker.sweep(final=True)
    checker.plan(final=True)
    checker.work(until=float("inf"))
    checker.sweep(final=False)  # the lag and the RPO once more, after the final checks
    checker.final_books()
    proxy = proxy_faults(fleet)
    false = false_alerts(fleet, injector.log, proxy, started, checker)
    missing = missed(checker.history, alerts(fleet.work, started))
    for m in missing:
        print(f"MISSED ALERT: {m}", flush=True)
    for f in injector.log:
        if f.note.startswith("HARNESS ERROR"):
            checker.violation(f"harness: could not inject {f.kind}: {f.note}")
        elif f.seen is None:
            checker.violation(f"fault {f.kind} {f.target} at {time.strftime('%H:%M:%S', time.localtime(f.t0))} "
                              f"did not show within {f.bound_s:.0f} s")  # fmt: skip
    kinds = Counter(f.kind for f in injector.log) + Counter(f"s3 {p.fault}" for p in proxy)
    effect = Counter(f.kind for f in injector.log if f.evidence is not None and f.seen is not None
                     and not f.note.startswith("HARNESS"))  # fmt: skip
    caught = [(t - live, v) for t, v in checker.violation_log if live and t >= live]
    summary = {
        "seed": seed, "planted": bug, "planted_live": live,
        "first_violation_after_live_s": round(caught[0][0]) if caught else None,
        "faults": dict(kinds), "faults_with_effect": dict(effect), "restores": dict(checker.restores_by),
        "pitr_points": dict(checker.pitr_by), "pitr_points_by_edge": dict(checker.pitr_why),
        "pitr_windows": checker.windows, "skipped_targets": checker.skipped,
        "transactions_lost": checker.transactions_lost, "backups_lost": sorted(checker.backups_lost),
        "violations": checker.violations, "violation_times": checker.violation_log, "missed_alerts": missing,
        "false_alerts": false, "explained_findings": [asdict(f) for f in checker.explained],
        "faults_log": [f.as_dict() for f in injector.log],
    }  # fmt: skip
    (fleet.work / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print(
        f"faults injected by kind (with the proxies' background faults): {dict(kinds)}; PITR windows: "
        f"{checker.windows}; PITR points by edge: {dict(checker.pitr_why)}; targets skipped: {checker.skipped}; "
        f"violations: {len(checker.violations)}; "
        f"details in {fleet.work}/summary.json"
    )
    if bug:
        print(f"chaos: planted bug {bug}: " + (f"first caught {caught[0][0]:.0f} s after it went live: {caught[0][1][:300]}"
                                               if caught else "NOT CAUGHT"), flush=True)  # fmt: skip
    print(
        f"chaos: seed {seed}, faults with an effect {sum(effect.values())} {dict(sorted(effect.items()))}, "
        f"restores checked {checker.restores} {dict(checker.restores_by)}, "
        f"PITR points checked {checker.pitr_points} {dict(checker.pitr_by)}, "
        f"transactions lost {checker.transactions_lost}, backups lost {len(checker.backups_lost)}, "
        f"missed alerts {len(missing)}, false alerts {len(false)}",
        flush=True,
    )
    return 1 if checker.violations or false or missing else 0


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


def proxy_faults(fleet: Fleet) -> list[ProxyFault]:
    out = []
    for name, ep in fleet.endpoints.items():
        if ep.log.exists():
            for line in ep.log.read_text().splitlines():
                event = json.loads(line)
                if event["fault"] != "healed":
                    out.append(ProxyFault(float(event["t"]), name, str(event["fault"])))
    return out


def false_alerts(fleet: Fleet, faults: list[Fault], proxy: list[ProxyFault], started: float,
                 checker: Checker) -> list[str]:  # fmt: skip
    """Check alerts (WARNING / CRITICAL) with a finding no fault explains (evidence.explain), once
    the host had been OK (before that, a new fleet has no backup or restore test yet: true alerts)."""
    ok_since: dict[str, float] = {}
    out = []
    for alert in alerts(fleet.work, started):
        if alert.status == "OK":
            ok_since.setdefault(alert.cluster, alert.t)
            continue
        if alert.cluster not in ok_since:
            continue
        why = explain(alert, faults, proxy, checker.history, checker.lag_floor)
        print(f"alert {_hms(alert)} {alert.line[:160]}: {'; '.join(why)}", flush=True)
        if any("UNEXPLAINED" in w for w in why):
            out.append(f"{_hms(alert)} {alert.line} ({'; '.join(why)})")
            print(f"FALSE ALERT: {alert.line}", flush=True)
    return out


def _hms(alert: Alert) -> str:
    return time.strftime("%H:%M:%S", time.localtime(alert.t))


if __name__ == "__main__":
    sys.exit(main())
