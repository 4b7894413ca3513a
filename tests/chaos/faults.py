"""Faults at random, seeded and logged: each injector does one fault to the fleet and returns its
record: what was done, when, which clusters it can disturb, and what must show for it (a regex over
the task logs and the run's own CLI logs, or Airflow's audit log) within how long. A fault that
found no victim (no tool was streaming, no task ran on the killed worker) says so and needs no
evidence.

Faults overlap: each runs in its own thread (tests/chaos/run.py), holding the resources it
disturbs (a server, a worker, an endpoint, a scratch filesystem, a cluster's CLI) so that two
faults never fight over one thing, e.g. a restart of the replica that is being re-seeded.

Kinds: kill_worker, kill_tool (mariabackup or gpg mid-stream; zstd runs inside the worker's own
process as python-zstandard threads, so killing "zstd" is killing the worker), kill_cli (a CLI
backup killed mid-commit at a crash point), restart_db, scratch_full, clock_skew (a CLI backup
under libfaketime), reseed_replica, s3_partition (an endpoint down for minutes, a retention run
against it meanwhile), second_shipper (a CLI `binlogs ship` beside the follower: refused by the
shipping lock, and every binlog manifest still names its own bytes), second_restore (two CLI
restores into one new target started together: one refused by the target's lock, the other's
restore intact), restart_s3 (an endpoint's fault proxy SIGKILLed and started again on its port
after 15-60 s, a CLI `list` meanwhile), pause_shipper (the shipping follower SIGSTOPped past its
lease, a CLI `binlogs ship` elsewhere takes its lock over, then SIGCONT: it registers nothing),
worker_clock (the backed-up host's Celery worker restarted under libfaketime, 10 minutes ahead or
20 minutes behind, for one backup DAG run: refused naming the clock, or registered in the past).
The proxies' background faults (latency, 5xx, SlowDown, resets, truncated
answers) are counted from their own logs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleet import BACKUP_HOST, CHECKED_DBS, Fleet
from invariants import registered
from restorer import decrypting_home, restore_chain
from storeview import HostView, StoreReader, pieces

from helpers import (
    RUN,
    S3_ACCESS_KEY,
    S3_REGION,
    S3_SECRET_KEY,
    restored_checksums,
    start_replication,
    wait_caught_up,
)

HERE = Path(__file__).resolve().parent
FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
CLI_CRASH_POINTS = (
    "backup.after_objects",
    "backup.after_manifest",
    "lock.before_release",
    "parts.between_commits",
)
KINDS = ("kill_worker", "kill_tool", "kill_cli", "restart_db", "scratch_full", "clock_skew",
         "reseed_replica", "s3_partition", "second_shipper", "second_restore", "damage_object",
         "pause_past_lease", "kill_scheduler", "kill_redis", "spool_full", "clock_ahead", "restart_s3",
         "pause_shipper", "worker_clock")  # fmt: skip
# Drawn only when CHAOS_FAULTS names them, not in the default bag: none has had a fleet run of its
# own yet (clock_ahead's hole is closed on one server: tests/chaos/test_clock.py).
OPT_IN = ("kill_scheduler", "kill_redis", "spool_full", "clock_ahead", "restart_s3", "pause_shipper",
          "worker_clock")  # fmt: skip
DEFAULT_KINDS = tuple(k for k in KINDS if k not in OPT_IN)
# Kinds whose fault without a victim is not counted (issue 39): logged in faults.jsonl only.
COUNTED_WITH_VICTIM_ONLY = frozenset(
    {
        "second_shipper",
        "second_restore",
        "damage_object",
        "pause_past_lease",
        "kill_scheduler",
        "kill_redis",
        "spool_full",
        "clock_ahead",
        "restart_s3",
        "pause_shipper",
        "worker_clock",
    }
)
BUSY = "cannot start: another"  # the host lock's refusal (core/catalog/lock.py)
UNREACHABLE = "Cannot reach the S3 endpoint"  # core/storage/s3.py, while an endpoint is partitioned
# Binlog shipping refusing a new history under the old names (core/binlog/ship.py, catalog.py).
REFUSED_HISTORY = r"binlogs were reset \(RESET MASTER\?\)"
# The first backup of a re-seeded replica is a full, saying why (core/backup/lineage.py, decide.py).
RESEED_FULL = r"(does not descend from|the server changed since)"
# The binlog shipping lock's refusal of a second shipper, naming the holder's pid (core/catalog/lock.py).
SHIPPER_BUSY = (
    r"binlog shipping of {0} cannot start: another binlog shipping of {0} is running: [^\n]*\(pid \d+\)"
)
# A second restore into a target another restore holds (core/restore/standby_lock.py), or finding
# the first one's finished restore there.
TARGET_HELD = r"target datadir \S+ (is held by another restore \(|[^\n]*not an empty directory)"
# Airflow fails a task whose worker died once its heartbeat is missed
# ([scheduler] task_instance_heartbeat_timeout, 300 s) and records it in its audit log.
HEARTBEAT_TIMEOUT = "audit:heartbeat timeout"
KILL_CLI_BOUND = 900  # the next scheduled backup (every 4 minutes) or a later one takes the lock over
# A run taking over the lock of a holder whose lease ran out, on another machine (core/catalog/lock.py).
# An endpoint that refuses connections, as the product says it (botocore's EndpointConnectionError,
# core/storage/s3.py s3_hint).
S3_DOWN = r"(Could not connect to the endpoint URL|Connection refused|Cannot reach the S3 endpoint)"
# A shipper taking the binlog shipping lock over from a holder whose lease ran out, and the holder
# finding it lost that lock (core/catalog/lock.py: the renewal's or confirm()'s compare-and-swap).
SHIP_TAKEN = r"taking over the stale lock \S*/{c}/{host}/binlog-ship\.lock of xtrabackup-provider binlog shipping of {c}/{host} on "
SHIP_LOST = r"binlog shipping of {c}/{host} lost the host lock \S*/{c}/{host}/binlog-ship\.lock"
# pause_shipper's own: the takeover of the paused pid's lock, the loss to its taker elsewhere (seed 77:
# SHIP_TAKEN alone matched the follower's own takeover from its killed first attempt).
SHIP_TAKEN_FROM = SHIP_TAKEN + r"[^\n]*\(pid {pid}\)"
SHIP_LOST_TO = SHIP_LOST + r" to another run; it (is now held by [^\n]* on elsewhere-{c} |is gone)"
# worker_clock's skews (libfaketime's FAKETIME): a worker 10 minutes ahead, or 20 minutes behind.
WORKER_SKEWS = ("+10m", "-20m")
# A backup refused by the store's clock (core/backup/run.py _check_clock: more than 60 s ahead),
# and one refused because the newest backup's id is later than its clock (_start_after_newest).
CLOCK_AHEAD_REFUSED = r"this worker's clock is \d+ s ahead of the store's"
CLOCK_BEHIND_REFUSED = (
    r"is later than this worker's clock \([^)]*\); backup ids must follow each other in time: sync the clocks"
)
CLOCK_REFUSED = f"{CLOCK_AHEAD_REFUSED}|{CLOCK_BEHIND_REFUSED}"
MAX_CLOCK_AHEAD_S = 60  # core/backup/run.py MAX_CLOCK_AHEAD
BACKUP_TASK = "backup.backup"  # the backup DAG's mapped backup task (dags/backup.py, group "backup")
TAKEN_FROM = r"taking over the stale lock \S*/{c}/{host}/backup\.lock of [^\n]*on elsewhere-{c} "


@dataclass(frozen=True)
class Damaged:
    """A stored object a damage_object fault damages."""

    what: str  # "backup" or "binlog"
    subject: str  # the backup id or the binlog's name
    stream: str  # the manifest's object (a backup's stream, a binlog segment's object)
    piece: str  # the stored object damaged: the stream, or one of its segments
    manifest: str  # the manifest that names it (put back only while that is there)
    pitr: tuple[str, ...] = ()  # a binlog's: the restore flags that replay it (--backup-id, --to-gtid)

    @property
    def name(self) -> str:
        return self.stream.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Effect:
    verdict: str  # "ok: ..." or "VIOLATION: ..."
    shown: list[str]  # regexes its CLI logs must hold


class NoTarget(Exception):
    """Every target of this kind is busy with another fault: try another kind."""


@dataclass
class Fault:
    kind: str
    target: str
    t0: float
    # A regex that must show after t0 ("audit:<event>": Airflow's audit log); None: no victim.
    evidence: str | None
    more_evidence: list[str] = field(default_factory=list)  # regexes that must show as well
    bound_s: float = 900
    note: str = ""
    clusters: list[str] = field(default_factory=list)  # what it can disturb (check alerts it explains)
    victims: list[list[str]] = field(default_factory=list)  # [dag_id, task_id, run_id] it hit
    where: str = ""  # the evidence must be in a log whose path holds this (a task run's)
    seen: str | None = None  # where the evidence was found
    t1: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Injector:
    fleet: Fleet
    log: list[Fault] = field(default_factory=list)
    busy: set[str] = field(default_factory=set)  # resources a running fault holds
    uncounted: list[Fault] = field(default_factory=list)  # faults that found no victim (not counted)
    verified: set[tuple[str, str]] = field(default_factory=set)  # (key, sha256) of binlog objects read
    in_flight: dict[int, float] = field(default_factory=dict)  # thread id -> when its running fault began
    damaged: dict[str, tuple[float, float, str]] = field(default_factory=dict)  # key -> (from, to, by what)
    mutex: threading.Lock = field(default_factory=threading.Lock)
    # Process groups of paused CLIs: a run stopped meanwhile must not leave them SIGSTOPped behind.
    paused_groups: set[int] = field(default_factory=set)

    def close(self) -> None:
        """Kill what a fault left paused (SIGKILL ends a stopped process too)."""
        for pgid in list(self.paused_groups):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            self.paused_groups.discard(pgid)

    def env(self, **extra: str) -> dict[str, str]:
        clean = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW", "XBP_CRASH", "LD_PRELOAD", "FAKETIME"))
        }
        return {**clean, "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY,
                "AWS_DEFAULT_REGION": S3_REGION, "XTRABACKUP_GPG_PASSPHRASE": self.fleet.keys.passphrase, **extra}  # fmt: skip

    def cli(self, name: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """The CLI against the proxied endpoints (it suffers the faults); its output is a CLI log."""
        proc = subprocess.run([sys.executable, "-c", RUN, *args, "--config", str(self.fleet.config)],
                              capture_output=True, text=True, env=self.env(**env), timeout=1200)  # fmt: skip
        (self.fleet.work / "cli").mkdir(exist_ok=True)
        (self.fleet.work / "cli" / f"{time.time():.3f}-{name}.log").write_text(
            f"$ {' '.join(args)}  (env {sorted(env)})\nexit {proc.returncode}\n{proc.stdout}{proc.stderr}"
        )
        return proc

    def cli_together(self, name: str, *args: str, runs: int = 2) -> list[tuple[int, str]]:
        """`runs` CLI processes of the same command started together: (exit, output) of each, each
        output also a CLI log."""
        argv = [sys.executable, "-c", RUN, *args, "--config", str(self.fleet.config)]
        procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=self.env()) for _ in range(runs)]  # fmt: skip
        out = []
        for n, proc in enumerate(procs):
            text, _ = proc.communicate(timeout=1800)
            (self.fleet.work / "cli").mkdir(exist_ok=True)
            (self.fleet.work / "cli" / f"{time.time():.3f}-{name}-{n}.log").write_text(
                f"$ {' '.join(args)}\nexit {proc.returncode}\n{text}"
            )
            out.append((proc.returncode, text))
        return out

    def verdict(self, name: str, text: str) -> None:
        """The fault's own check of its effect, as a CLI log its evidence names."""
        (self.fleet.work / "cli").mkdir(exist_ok=True)
        (self.fleet.work / "cli" / f"{time.time():.3f}-{name}-verdict.log").write_text(
            f"{name.split('-')[0]} verdict: {text}\n"
        )

    def primary(self) -> StoreReader:
        """The primary store read directly (not through the fault proxy), as the checker does."""
        ep = self.fleet.endpoints["primary"]
        return StoreReader(ep.client(), ep.bucket)

    def cli_backup(
        self, name: str, cluster: str, *flags: str, patience: float = 480, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """A CLI backup of the cluster's host, tried again while a scheduled run holds the host lock
        or the endpoint is partitioned (another fault): its own fault must reach the product."""
        deadline = time.time() + patience
        while True:
            proc = self.cli(
                name, "backup", "--cluster", cluster, "--host", BACKUP_HOST, "--no-copies", *flags, **env
            )
            if not any(w in proc.stderr for w in (BUSY, UNREACHABLE)) or time.time() > deadline:
                return proc
            time.sleep(15)

    # -- scheduling ---------------------------------------------------------------------------------

    def claim(self, rng: random.Random, options: list[tuple[str, ...]]) -> tuple[str, ...]:
        """One of `options` (tuples of resources) whose resources are all free, now held."""
        with self.mutex:
            free = [o for o in options if not set(o) & self.busy]
            if not free:
                raise NoTarget(", ".join("+".join(o) for o in options))
            chosen = rng.choice(free)
            self.busy |= set(chosen)
            return chosen

    def release(self, resources: tuple[str, ...]) -> None:
        with self.mutex:
            self.busy -= set(resources)

    def inject(self, kind: str, rng: random.Random) -> Fault:
        """Run one fault of `kind` to its end (NoTarget: all its targets are busy)."""
        fn: Callable[[random.Random], Fault] = getattr(self, kind)
        t0 = time.time()
        self.in_flight[threading.get_ident()] = t0  # the checker judges what overlaps it once it ends
        try:
            fault = fn(rng)
        except NoTarget:
            self.in_flight.pop(threading.get_ident(), None)
            raise
        except Exception as exc:  # noqa: BLE001 - the harness's own failure: reported, the run goes on
            fault = Fault(kind, "-", t0, None, note=clip(f"HARNESS ERROR: {exc!r}"))
        fault.t1 = time.time()
        with self.mutex:
            if (
                fault.kind in COUNTED_WITH_VICTIM_ONLY
                and fault.evidence is None
                and "HARNESS" not in fault.note
            ):
                self.uncounted.append(fault)
                fault.note = f"not counted (no victim): {fault.note}"
            else:
                self.log.append(fault)
            with (self.fleet.work / "faults.jsonl").open("a") as fh:
                fh.write(json.dumps(fault.as_dict()) + "\n")
            self.in_flight.pop(threading.get_ident(), None)
        return fault

    def clusters(self) -> list[str]:
        return sorted(self.fleet.clusters)

    def running_on(self, host: str) -> list[list[str]]:
        """[dag_id, task_id, run_id] of the task instances running on the worker of `host` ("c1-r1")."""
        stack = self.fleet.stack
        assert stack is not None
        rows = stack.db("SELECT dag_id, task_id, run_id FROM task_instance WHERE state='running' AND hostname=?",
                        f"{host}-worker")  # fmt: skip
        return [list(r) for r in rows]

    def shipping(self, cluster: str) -> list[list[str]]:
        """[dag_id, task_id, run_id] of the cluster's running binlog shipping task (on any worker)."""
        stack = self.fleet.stack
        assert stack is not None
        rows = stack.db("SELECT dag_id, task_id, run_id FROM task_instance WHERE state='running' AND dag_id=? "
                        "AND task_id='ship_binlogs'", f"mysql_binlog_shipping_{cluster}")  # fmt: skip
        return [list(r) for r in rows]

    def victim_clusters(self, cluster: str, victims: list[list[str]]) -> list[str]:
        hit = {cluster} | {c for v in victims for c in self.fleet.clusters if v[0].endswith(f"_{c}")}
        return sorted(hit)

    # -- processes ----------------------------------------------------------------------------------

    def kill_worker(self, rng: random.Random) -> Fault:
        held = self.claim(rng, [(f"worker:{c}",) for c in self.clusters()])
        try:
            c = held[0].split(":")[1]
            stack = self.fleet.stack
            assert stack is not None
            name = f"worker-{c}-{BACKUP_HOST}"
            t0 = time.time()
            while not (victims := self.running_on(f"{c}-{BACKUP_HOST}")) and time.time() < t0 + 180:
                time.sleep(2)  # a worker killed while idle shows nothing: wait for a task, a while
            os.killpg(stack.procs[name].pid, signal.SIGKILL)
            stack.procs[name].wait()
            del stack.procs[name]
            time.sleep(rng.uniform(5, 40))
            stack.start_worker(f"{c}-{BACKUP_HOST}", queue=f"{c}-{BACKUP_HOST}")
        finally:
            self.release(held)
        names = ", ".join(f"{d}.{t}" for d, t, _ in victims)
        return Fault("kill_worker", name, t0, HEARTBEAT_TIMEOUT if victims else None, bound_s=600,
                     note=f"running: {names or 'nothing'}", clusters=self.victim_clusters(c, victims),
                     victims=victims)  # fmt: skip

    def kill_tool(self, rng: random.Random) -> Fault:
        """SIGKILL a mariabackup or gpg that a worker of the fleet runs mid-stream. None streaming
        after a minute: a backup run of a cluster is started (mariabackup streams for seconds, the
        gpg of a binlog segment for less than the scan of the process table)."""
        held = self.claim(rng, [("tool",)])
        try:
            t0 = time.time()
            triggered = False
            while not (tools := self._tools()) and time.time() < t0 + 300:
                if not triggered and time.time() > t0 + 60 and self.fleet.stack:
                    self.fleet.stack.trigger(f"mysql_backup_{rng.choice(self.clusters())}")
                    triggered = True
                time.sleep(0.2)
            if not tools:
                return Fault(
                    "kill_tool", "-", t0, None, note="no mariabackup or gpg was streaming for 5 minutes"
                )
            pid, argv, worker = rng.choice(tools)
            name = Path(argv[0]).name
            c = worker.split("-")[1]
            victims = self.running_on(worker.removeprefix("worker-"))
            if not kill_running(pid, argv):
                return Fault("kill_tool", name, t0, None, note="it ended first")
        finally:
            self.release(held)
        # In the log of the task it ran under (a worker runs one task at a time here).
        where = f"dag_id={victims[0][0]}/run_id={victims[0][2]}/" if len(victims) == 1 else ""
        return Fault("kill_tool", f"{name} pid {pid} on {worker}", t0, rf"{name}[^\n]{{0,300}}killed by signal 9",
                     bound_s=600, note=" ".join(argv[:4]), clusters=self.victim_clusters(c, victims),
                     victims=victims, where=where)  # fmt: skip

    def _tools(self) -> list[tuple[int, list[str], str]]:
        """(pid, argv, worker name) of the mariabackup and gpg processes the fleet's workers run."""
        out = []
        for pid, argv in _processes():
            streams = {"mariabackup": ("--backup", "--prepare"), "gpg": ("--encrypt", "--decrypt")}
            wanted = streams.get(Path(argv[0]).name, ())
            if any(a in argv for a in wanted) and (worker := self._worker_of(pid)):
                out.append((pid, argv, worker))
        return out

    def _worker_of(self, pid: int, orphans: bool = False) -> str | None:
        stack = self.fleet.stack
        roots = (
            {p.pid: name for name, p in stack.procs.items() if name.startswith("worker-")} if stack else {}
        )
        return worker_of(pid, roots, orphans)

    def kill_cli(self, rng: random.Random) -> Fault:
        # The host's worker too: its next backup run's log is the evidence, and a kill_worker that
        # hit that run cut its log short after the takeover (seed 3802: the run took the lock over
        # and registered its backup, its log ended before the line): held until the line shows.
        held = self.claim(rng, [(f"cli:{c}", f"worker:{c}") for c in self.clusters()])
        evidence = None
        try:
            c, point = held[0].split(":")[1], rng.choice(CLI_CRASH_POINTS)
            t0 = time.time()
            proc = self.cli_backup("kill_cli", c, XBP_CRASH_AT=point)
            if proc.returncode == -9:
                # Killed holding the host lock: the next run of the host takes it over and says so.
                evidence = rf"taking over the stale lock \S*/{c}/{BACKUP_HOST}/backup\.lock"
                self.hold_until_seen(held[1:], evidence, t0, KILL_CLI_BOUND)
        finally:
            self.release(held if evidence is None else held[:1])
        if evidence is None:
            # Refused (the scheduled runs held the lock throughout) or it did not reach the point.
            return Fault("kill_cli", f"{c} at {point}", t0, None,
                         note=f"exit {proc.returncode}: {proc.stderr[-300:]}", clusters=[c])  # fmt: skip
        return Fault("kill_cli", f"{c} at {point}", t0, evidence, bound_s=KILL_CLI_BOUND, note="killed",
                     clusters=[c])  # fmt: skip

    def hold_until_seen(self, resources: tuple[str, ...], pattern: str, since: float, bound_s: float) -> None:
        """Keep `resources` held, past the fault's end, until `pattern` shows in the logs (at most
        until `bound_s` after `since`): no other fault disturbs where its evidence is written."""

        def wait() -> None:
            try:
                self._wait_for(pattern, since, max(0.0, since + bound_s - time.time()))
            finally:
                self.release(resources)

        threading.Thread(target=wait, name=f"hold {'+'.join(resources)}", daemon=True).start()

    # -- servers ------------------------------------------------------------------------------------

    def restart_db(self, rng: random.Random) -> Fault:
        held = self.claim(rng, [(f"server:{c}-{r}",) for c in self.clusters() for r in ("src", "r1", "r2")])
        try:
            name = held[0].split(":")[1]
            c = self.fleet.clusters[name.split("-")[0]]
            role = name.split("-")[1]
            server = c.servers()[role]
            followers = self._live_followers(c.name) if role == BACKUP_HOST else []
            t0 = time.time()
            how = "killed" if rng.random() < 0.5 else "stopped"
            server.kill() if how == "killed" else server.stop()
            time.sleep(rng.uniform(2, 20))
            server.start(timeout=300)
            if role == "src":
                self.fleet.restart_load(c)
        finally:
            self.release(held)
        evidence, note = restart_evidence(role, followers)
        # In the log of the shipping run that followed it (its retry writes to the same run's).
        where = f"dag_id={followers[0][0]}/run_id={followers[0][2]}/" if len(followers) == 1 else ""
        return Fault("restart_db", f"{c.name}-{role} {how}", t0, evidence, bound_s=600,
                     clusters=[c.name] if role == BACKUP_HOST else [], note=note, victims=followers,
                     where=where)  # fmt: skip

    def reseed_replica(self, rng: random.Random) -> Fault:
        """r1's datadir replaced by a copy of r2's (same server_id, port, path). Binlog shipping
        must refuse the new binlogs under the old names (the datadir held none, so they restart at
        .000001) rather than replace the stored ones. Then the DBA does what that error says: r1
        gets a server_id of its own (its binlogs go to a directory of their own) and takes a backup
        with --new-server at once (without it, backups and shipping refuse a server the catalog
        does not know; a scheduled run may or may not meet that first, so it is no evidence).
        The next backup is a full that says why: the data does not descend from its parent (a
        scheduled run before the new server_id) or the server changed since it."""
        # The cluster's CLI too: until the --new-server backup, every backup of r1 is refused.
        held = self.claim(rng, [(f"server:{c}-r1", f"server:{c}-r2", f"cli:{c}") for c in self.clusters()])
        try:
            c = self.fleet.clusters[held[0].split(":")[1].split("-")[0]]
            t0 = time.time()
            self._reseed(c, t0)
            refused = self._wait_for(REFUSED_HISTORY, t0, 600)
            r1 = c.replicas["r1"]
            r1.stop()
            r1.server_id = self.fleet.new_server_id()
            r1.start(timeout=300)
            # Backups and shipping now refuse the server the catalog does not know; the DBA tells a
            # backup once that it is the host's new server. That run takes a full: the data does
            # not descend from the chain before.
            taken = self.cli_backup("reseed_replica", c.name, "--new-server", patience=600)
        finally:
            self.release(held)
        return Fault("reseed_replica", f"{c.name}-r1 from {c.name}-r2", t0, RESEED_FULL,
                     more_evidence=[REFUSED_HISTORY], bound_s=900, clusters=[c.name],
                     note=f"r1 now server_id {r1.server_id}; shipping refused the new binlogs: {refused or 'NOT SEEN'}; "
                          f"backup --new-server: exit {taken.returncode}")  # fmt: skip

    def _wait_for(self, pattern: str, since: float, seconds: float) -> str | None:
        from evidence import lines  # evidence imports this module

        deadline, regex = time.time() + seconds, re.compile(pattern)
        while time.time() < deadline:
            if hit := next((raw for _t, _p, raw in lines(self.fleet.work, since) if regex.search(raw)), None):
                return hit[:160]
            time.sleep(min(20.0, max(0.0, deadline - time.time())))
        return None

    def _reseed(self, c: Any, t0: float) -> None:
        r1, r2 = c.replicas["r1"], c.replicas["r2"]
        copy = self.fleet.root / f"reseed-{c.name}"
        shutil.rmtree(copy, ignore_errors=True)
        creds = r2.write_client_defaults(self.fleet.work / f"reseed-{c.name}.cnf")
        self._copy_of(f"{c.name}-r2", creds, copy)
        gtid = (copy / "xtrabackup_slave_info").read_text().split("'")[1]
        r1.stop()
        shutil.rmtree(r1.datadir)
        shutil.move(str(copy), str(r1.datadir))
        r1.start(timeout=300)
        own, r1.root_password = r1.root_password, r2.root_password  # the accounts came with the data
        r1.set_root_password(own or "")  # unlogged: no errant GTID on a replica
        r1.query("STOP SLAVE")
        r1.query("RESET SLAVE ALL")
        r1.query("SET GLOBAL gtid_slave_pos = %s", (gtid,))
        start_replication(c.source, r1, user=f"reseed{int(t0)}")
        wait_caught_up(c.source, r1, timeout=300)

    def _copy_of(self, name: str, creds: Path, copy: Path, tries: int = 3) -> None:
        """The harness's own prepared copy of a server (mariabackup --backup, --prepare): tried again
        on failure (it is not the product under test), each failed try's whole output kept in the
        run's directory and its error lines in the final error."""
        failed = []
        for n in range(1, tries + 1):
            shutil.rmtree(copy, ignore_errors=True)
            for args in ([f"--defaults-file={creds}", "--backup", f"--target-dir={copy}", "--slave-info"],
                         ["--no-defaults", "--prepare", f"--target-dir={copy}"]):  # fmt: skip
                done = subprocess.run(["mariabackup", *args], capture_output=True, text=True)
                if done.returncode != 0:
                    log = self.fleet.work / f"copy-{name}-{time.time():.0f}-{n}.log"
                    log.write_text(f"$ mariabackup {' '.join(args)}\nexit {done.returncode}\n{done.stderr}")
                    failed.append(
                        f"try {n}: mariabackup {args[1]} exit {done.returncode}: {error_lines(done.stderr)} ({log.name})"
                    )
                    print(f"harness: the copy of {name}: {failed[-1]}", flush=True)
                    break
            else:
                return
            time.sleep(10)
        raise AssertionError(f"the harness's copy of {name} failed {tries} times: {'; '.join(failed)}")

    # -- storage ------------------------------------------------------------------------------------

    def scratch_full(self, rng: random.Random) -> Fault:
        """The cluster's restore scratch filesystem full while a restore test runs: filled, a restore
        test started, and emptied again once that test has ended."""
        # The restore test must reach the scratch: the workers (it runs on any: the default queue), the
        # tools it starts and the primary store are left alone meanwhile.
        workers = tuple(f"worker:{c}" for c in self.clusters())
        held = self.claim(
            rng, [(f"scratch:{c}", *workers, "tool", "endpoint:primary") for c in self.clusters()]
        )
        try:
            c = held[0].split(":")[1]
            scratch = self.fleet.scratch[c]
            t0 = time.time()
            filler = scratch / "filler"
            subprocess.run(
                ["dd", "if=/dev/zero", f"of={filler}", "bs=1M"], capture_output=True
            )  # until ENOSPC
            stack = self.fleet.stack
            assert stack is not None
            dag = f"mysql_restore_test_{c}"
            run = stack.trigger(dag, {"host": BACKUP_HOST})
            deadline = time.time() + 900
            while not stack.finished(dag, run) and time.time() < deadline:
                time.sleep(10)
            state = stack.run_state(dag, run)
            filler.unlink()
        finally:
            self.release(held)
        return Fault("scratch_full", f"{c} restore scratch", t0, r"(No space left on device|Errno 28|ENOSPC)",
                     bound_s=900, clusters=[c], note=f"restore test run {run}: {state}",
                     where=f"dag_id={dag}/run_id={run}/")  # fmt: skip

    def clock_ahead(self, rng: random.Random) -> Fault:
        """A DBA's host whose clock is 10 minutes ahead runs a backup (libfaketime, this process
        only). What must show: it is refused naming the clock, as the store's clock (the Date of
        every answer) tells it is ahead. A backup registered under an id 10 minutes in the future
        makes every honest run of the host refuse to back up until real time passes it ("the
        newest backup ... is later than this worker's clock"): the verdict says so when it
        happens, and the fault does not show."""
        held = self.claim(rng, [(f"cli:{c}",) for c in self.clusters()])
        try:
            c = held[0].split(":")[1]
            t0 = time.time()
            tag = f"clock_ahead-{c}-{t0:.0f}"
            path = os.pathsep.join([str(HERE / "faketime"), os.environ.get("PYTHONPATH", "")])
            proc = self.cli_backup(tag, c, LD_PRELOAD=str(FAKETIME), FAKETIME="+10m",
                                   FAKETIME_DONT_FAKE_MONOTONIC="1", PYTHONPATH=path)  # fmt: skip
            out = _output(proc)
            if BUSY in out or UNREACHABLE in out:
                return Fault("clock_ahead", f"{c} CLI +10m", t0, None, clusters=[c],
                             note="the scheduled runs held the host lock throughout, or the endpoint was down")  # fmt: skip
            registered = re.findall(r"registered (\d{8}T\d{6}Z-\w+)", out)
            verdict = "ok: refused naming the clock" if proc.returncode != 0 and "clock" in out else (
                f"VIOLATION: a host 10 minutes ahead registered {registered or '?'} (exit {proc.returncode}): "
                "every honest backup of the host is refused until real time passes its id")  # fmt: skip
            if registered or proc.returncode == 0:
                blocked = self._wait_for(r"is later than this worker's clock", t0, 420)
                verdict += f"; next run: {blocked or 'not refused within 7 minutes'}"
            self.verdict(tag, verdict)
        finally:
            self.release(held)
        return Fault("clock_ahead", f"{c} CLI +10m", t0, r"clock_ahead verdict: ok", bound_s=time.time() - t0 + 120,
                     where=f"-{tag}", clusters=[c], note=verdict[:400])  # fmt: skip

    def clock_skew(self, rng: random.Random) -> Fault:
        """A DBA's host whose clock is 20 minutes behind runs a backup (libfaketime, this process only:
        the tools it starts get a scrubbed environment)."""
        held = self.claim(rng, [(f"cli:{c}",) for c in self.clusters()])
        try:
            c = held[0].split(":")[1]
            t0 = time.time()
            if not FAKETIME.exists():
                raise AssertionError(
                    f"{FAKETIME} is missing: `apt-get install libfaketime` (make chaos installs it)"
                )
            # The sitecustomize in faketime/ works around libfaketime's broken sleep (its docstring).
            path = os.pathsep.join([str(HERE / "faketime"), os.environ.get("PYTHONPATH", "")])
            proc = self.cli_backup("clock_skew", c, LD_PRELOAD=str(FAKETIME), FAKETIME="-20m",
                                   FAKETIME_DONT_FAKE_MONOTONIC="1", PYTHONPATH=path)  # fmt: skip
        finally:
            self.release(held)
        if BUSY in proc.stderr:
            return Fault("clock_skew", f"{c} CLI -20m", t0, None, clusters=[c],
                         note="the scheduled runs held the host lock throughout")  # fmt: skip
        # 2 minutes from its last try (the tries before met a partitioned endpoint or a busy lock).
        return Fault("clock_skew", f"{c} CLI -20m", t0, r"sync the clocks", bound_s=time.time() - t0 + 120, clusters=[c],
                     note=f"exit {proc.returncode}")  # fmt: skip

    def worker_clock(self, rng: random.Random) -> Fault:
        """The backed-up host's Celery worker restarted with its clock 10 minutes ahead or 20 minutes
        behind (libfaketime, as clock_skew's CLI: the task processes it forks inherit it; the
        tools they start get a scrubbed environment), a backup DAG run of its cluster triggered,
        and once that run has ended and the worker is idle (or 15 minutes passed) the worker is
        started again on the true clock (always: a finally). Meanwhile it takes its host's queue
        alone (the backup and standby tasks of its host), not the default one: retention, copies,
        restore tests and binlog shipping of any cluster would run skewed there too, each a
        question of its own. Airflow itself minds little: a task's heartbeat is stamped by the API
        server's clock (execution API, last_heartbeat_at), so a skewed worker's task is no zombie;
        the start and end dates it reports are its own clock's. What must show (worker_clock_verdict):
        ahead, the scheduled backup is refused naming the clock (the store's Date) and nothing is
        registered; behind, it is refused because the newest backup's id is later than its clock
        (sync the clocks), or, no backup that recent, it registers one whose id lies in the past,
        still after the newest; no id later than the true clock; then a run on the true clock
        succeeds. A run that failed for another reason (not reaching the clock check) found no
        victim."""
        # The host lock (no CLI backup of the cluster) and its server are left to the run. kill_tool
        # waits too: a tool killed on the skewed worker would cut the run short, and a task log
        # written 20 minutes behind holds its evidence under times before the kill.
        held = self.claim(
            rng, [(f"worker:{c}", f"cli:{c}", f"server:{c}-{BACKUP_HOST}", "tool") for c in self.clusters()]
        )
        stack = self.fleet.stack
        assert stack is not None
        c, skew = held[0].split(":")[1], rng.choice(WORKER_SKEWS)
        host, dag, t0 = f"{c}-{BACKUP_HOST}", f"mysql_backup_{c}", time.time()
        tag, target = f"worker_clock-{c}-{t0:.0f}", f"worker-{c}-{BACKUP_HOST} {skew}"
        skewed = False
        try:
            if not self._idle(host, 360):  # a restart cuts what it runs: wait for a pause (shipping)
                return Fault(
                    "worker_clock", target, t0, None, clusters=[c], note="its worker never idle for 6 minutes"
                )
            if not FAKETIME.exists():
                raise AssertionError(
                    f"{FAKETIME} is missing: `apt-get install libfaketime` (make chaos installs it)"
                )
            before = self._backup_ids(c)
            skewed = True  # from here on, whatever fails, the finally starts it on the true clock
            self._restart_worker(host, **skewed_env(skew, stack.extra_env.get("PYTHONPATH")))
            run = stack.trigger(dag)
            taken = self._skewed_window(c, host, dag, run, before, 900)
            ran = self._backup_task(dag, run)
            self._restart_worker(host)
            skewed = False
            after = self._honest_runs(dag)
            newest = max(before, default=None)
            verdict = worker_clock_verdict(skew, ran, newest, taken, after)
            self.verdict(tag, verdict)
        finally:
            if skewed:
                self._restart_worker(host)
            self.release(held)
        victims = [[dag, BACKUP_TASK, run]]
        if verdict.startswith("no victim"):
            return Fault("worker_clock", target, t0, None, clusters=[c], victims=victims, note=verdict[:400])
        return Fault("worker_clock", target, t0, r"worker_clock verdict: ok", bound_s=time.time() - t0 + 120,
                     where=f"-{tag}", clusters=[c], victims=victims, note=verdict[:400])  # fmt: skip

    def _idle(self, host: str, seconds: float) -> bool:
        """Wait (at most `seconds`) until the host's worker runs no task; whether it is idle."""
        deadline = time.time() + seconds
        while (busy := self.running_on(host)) and time.time() < deadline:
            time.sleep(5)
        return not busy

    def _restart_worker(self, host: str, **env: str) -> None:
        """The host's Celery worker stopped (SIGTERM; SIGKILL after a minute) and started again: with
        `env` (a skewed clock) on its host's queue alone, without it as the fleet started it."""
        stack = self.fleet.stack
        assert stack is not None
        if f"worker-{host}" in stack.procs:
            stack.stop(f"worker-{host}")
        stack.start_worker(host, queue=host, default=not env, **env)

    def _backup_ids(self, c: str) -> set[str]:
        """The ids of the host's registered (finished) backups on the primary store."""
        view = self.primary().host(f"backups/{c}/{BACKUP_HOST}")
        return {b for b, m in view.manifests.items() if m.get("finished_at")}

    def _skewed_window(
        self, c: str, host: str, dag: str, run: str, before: set[str], bound: float
    ) -> dict[str, float]:
        """The host's backups registered from now until the run has ended and the worker is idle (at
        most `bound` s): id -> when (true clock) it was first seen."""
        stack = self.fleet.stack
        assert stack is not None
        seen: dict[str, float] = {}
        deadline = time.time() + bound
        while True:
            for b in self._backup_ids(c) - before:
                seen.setdefault(b, time.time())
            if (stack.finished(dag, run) and not self.running_on(host)) or time.time() > deadline:
                return seen
            time.sleep(15)

    def _backup_task(self, dag: str, run: str) -> tuple[str | None, str]:
        """The state of a backup DAG run's backup task and its log."""
        stack = self.fleet.stack
        assert stack is not None
        states = [
            ti["state"] for (task, _), ti in stack.task_instances(dag, run).items() if task == BACKUP_TASK
        ]
        logs = sorted((stack.home / "logs").glob(f"dag_id={dag}/run_id={run}/task_id={BACKUP_TASK}/**/*.log"))
        return (states[0] if states else None), "\n".join(p.read_text(errors="replace") for p in logs)

    def _honest_runs(self, dag: str, tries: int = 3) -> list[tuple[str | None, str]]:
        """Backup DAG runs on the true clock, until one succeeds or is refused naming the clock (a
        try failed by another fault is tried again): (backup task state, its log) of each."""
        stack = self.fleet.stack
        assert stack is not None
        out: list[tuple[str | None, str]] = []
        for _ in range(tries):
            run = stack.trigger(dag)
            deadline = time.time() + 900
            while not stack.finished(dag, run) and time.time() < deadline:
                time.sleep(10)
            out.append(self._backup_task(dag, run))
            if out[-1][0] == "success" or re.search(CLOCK_REFUSED, out[-1][1]):
                break
        return out

    def s3_partition(self, rng: random.Random) -> Fault:
        held = self.claim(rng, [(f"endpoint:{n}",) for n in sorted(self.fleet.endpoints)])
        try:
            name = held[0].split(":")[1]
            ep = self.fleet.endpoints[name]
            minutes = rng.uniform(1.5, 4)
            t0 = time.time()
            ep.control_set(**{**self.fleet.background, "seed": rng.randrange(1 << 30),
                              "partition_until": t0 + minutes * 60})  # fmt: skip
            time.sleep(2)
            c = rng.choice(self.clusters())
            extra = ["--target-store", "offsite"] if name == "offsite" else []
            self.cli(
                "retention", "retention", "apply", "--confirm", "--cluster", c, "--host", BACKUP_HOST, *extra
            )
            time.sleep(max(0.0, t0 + minutes * 60 - time.time()))
        finally:
            self.release(held)
        return Fault("s3_partition", f"{name} for {minutes:.1f} min", t0,
                     r"(Could not connect to the endpoint URL|Connection refused|EndpointConnectionError)",
                     bound_s=minutes * 60 + 300, clusters=self.clusters(), note=name)  # fmt: skip

    # -- second writers (issue 38) ------------------------------------------------------------------

    def second_shipper(self, rng: random.Random) -> Fault:
        """A DBA's `binlogs ship` of the backed-up host while the DAG's follower ships it: refused at
        once by the shipping lock, naming the follower's pid. Its effect is checked on the store
        once the follower has stored more (or 10 minutes passed): every binlog manifest of the host
        names objects whose bytes have the manifest's sha256, and no shipped binlog is missing. A
        second shipper that was not refused (no follower held the lock) found no victim."""
        # r1 held: a restart or re-seed of the server would refuse the CLI for another reason.
        held = self.claim(rng, [(f"shipper:{c}", f"server:{c}-r1") for c in self.clusters()])
        try:
            c = held[0].split(":")[1]
            dag = f"mysql_binlog_shipping_{c}"
            t0 = time.time()
            while not (victims := self.running(dag)) and time.time() < t0 + 360:
                time.sleep(2)  # the follower runs 4 of every 5 minutes
            time.sleep(rng.uniform(5, 20))  # past its start: it holds the lock
            tag = f"second_shipper-{c}-{t0:.0f}"  # its own logs: no other fault's evidence counts
            proc = self.cli(tag, "binlogs", "ship", "--cluster", c, "--host", BACKUP_HOST)
            out = proc.stdout + proc.stderr
            refused = re.search(SHIPPER_BUSY.format(re.escape(f"{c}/{BACKUP_HOST}")), out)
            if proc.returncode == 0 or refused is None:
                return Fault("second_shipper", f"{c}-{BACKUP_HOST}", t0, None, clusters=[c],
                             note=f"not refused (no follower held the lock): exit {proc.returncode}: {out.strip()[-200:]}")  # fmt: skip
            # The holder it names is the follower: a process under a worker that runs the shipping
            # DAG's task (it has no queue of its own: any worker).
            pid = int(re.findall(r"\(pid (\d+)\)", refused.group(0))[-1])
            holder = self._worker_of(pid, orphans=True)
            shippers = {f"worker-{h.removesuffix('-worker')}" for h in self.running_hosts(dag)}
            verdict = self._binlogs_intact(c, after=time.time())
            if holder not in shippers and holder != ORPHANED_TASK:
                verdict = f"VIOLATION: the refusal names pid {pid} ({holder}), not the follower's (on {sorted(shippers)}); {verdict}"
            self.verdict(tag, verdict)
        finally:
            self.release(held)
        return Fault("second_shipper", f"{c}-{BACKUP_HOST}", t0, SHIPPER_BUSY.format(re.escape(f"{c}/{BACKUP_HOST}")),
                     more_evidence=[r"second_shipper verdict: ok"], bound_s=time.time() - t0 + 120,
                     where=f"-{tag}", clusters=[c], victims=victims,
                     note=f"exit {proc.returncode}; holder pid {pid} ({holder}); {verdict}")  # fmt: skip

    def running(self, dag: str) -> list[list[str]]:
        stack = self.fleet.stack
        assert stack is not None
        rows = stack.db(
            "SELECT dag_id, task_id, run_id FROM task_instance WHERE state='running' AND dag_id=?", dag
        )
        return [list(r) for r in rows]

    def running_hosts(self, dag: str) -> list[str]:
        """The Celery hostnames ("c1-r1-worker") running a task of `dag`."""
        stack = self.fleet.stack
        assert stack is not None
        rows = stack.db("SELECT hostname FROM task_instance WHERE state='running' AND dag_id=?", dag)
        return [str(r[0]) for r in rows]

    def _binlogs_intact(self, c: str, after: float, patience: float = 600) -> str:
        """ "ok: ..." when every binlog manifest of the cluster's host on the primary store names
        objects whose bytes hash to its sha256 and no shipped binlog is missing; else what is wrong."""
        reader, deadline = self.primary(), time.time() + patience
        while True:
            view = reader.host(f"backups/{c}/{BACKUP_HOST}")
            stored = [*view.binlogs.values(), *view.partials.values()]
            went_on = any(_epoch(m.get("shipped_at")) > after for m in stored)
            if went_on or time.time() > deadline:
                break
            time.sleep(15)
        checked, wrong = self._sha256_checked(reader, view)
        wrong += [v for v in registered(view) if "binlog" in v]
        shipping = "shipping went on" if went_on else f"nothing shipped for {patience:.0f} s after"
        if wrong:
            return f"VIOLATION: {'; '.join(wrong)[:600]} ({checked} object(s) checked; {shipping})"
        return f"ok: {checked} binlog object(s) of {len(stored)} manifest(s) hash to their manifest's sha256, none missing ({shipping})"

    def _sha256_checked(self, reader: StoreReader, view: HostView) -> tuple[int, list[str]]:
        checked, wrong = 0, []
        for name, m in sorted(
            [*view.binlogs.items(), *((f"{n} (partial)", p) for n, p in view.partials.items())]
        ):
            for seg in m.get("segments", []):
                obj = seg["object"]
                if (obj["key"], obj["sha256"]) not in self.verified:
                    digest = hashlib.sha256()
                    try:
                        for key, _size in pieces(obj):
                            digest.update(reader.get_bytes(key))
                    except reader.client.exceptions.NoSuchKey:
                        continue  # retention, or a completed partial, removed it since the listing
                    if digest.hexdigest() != obj["sha256"]:
                        wrong.append(f"binlog {name} names {obj['key']}, whose sha256 is not the manifest's")
                        continue
                    self.verified.add((obj["key"], obj["sha256"]))
                checked += 1
        return checked, wrong

    def second_restore(self, rng: random.Random) -> Fault:
        """Two CLI restores of the cluster's newest backup into one new target directory, started
        together (as a restorer does one): one restores, the other is refused at once naming the
        target. The winner's restore must be intact: started, its CHECKSUM TABLE equals the
        checker's own restore of that backup (tests/chaos/restorer.py: the tools alone, which the
        checker compares with the reference replica). Both failing otherwise found no victim."""
        held = self.claim(rng, [(f"restore:{c}",) for c in self.clusters()])
        work = Path()
        try:
            c = held[0].split(":")[1]
            t0 = time.time()
            reader = self.primary()
            view = reader.host(f"backups/{c}/{BACKUP_HOST}")
            done = sorted(b for b, m in view.manifests.items() if m.get("gtid"))
            if not done:
                return Fault("second_restore", c, t0, None, clusters=[c], note="no backup yet")
            bid = done[-1]
            work = self.fleet.root / f"second-restore-{c}-{int(t0)}"
            work.mkdir(parents=True)
            target = work / "data"
            tag = f"second_restore-{c}-{t0:.0f}"  # its own logs: no other fault's evidence counts
            runs = self.cli_together(tag, "restore", "--cluster", c, "--host", BACKUP_HOST,
                                     "--backup-id", bid, "--target-datadir", str(target))  # fmt: skip
            won = [out for rc, out in runs if rc == 0]
            lost = [out for rc, out in runs if rc != 0 and re.search(TARGET_HELD, out)]
            exits = [rc for rc, _ in runs]
            if not won and not lost:
                return Fault("second_restore", f"{c} {bid}", t0, None, clusters=[c],
                             note=f"neither restored nor refused: exits {exits}: {runs[0][1].strip()[-200:]}")  # fmt: skip
            verdict = self._restore_intact(reader, view, bid, work) if len(won) == 1 and len(lost) == 1 else (
                f"VIOLATION: exits {exits}, {len(won)} restored, {len(lost)} refused naming the target")  # fmt: skip
            self.verdict(tag, verdict)
        finally:
            self.release(held)
            if work != Path():
                shutil.rmtree(work, ignore_errors=True)
        return Fault("second_restore", f"{c} {bid}", t0, TARGET_HELD, more_evidence=[r"second_restore verdict: ok"],
                     bound_s=time.time() - t0 + 120, where=f"-{tag}", clusters=[c],
                     note=f"exits {exits}; {verdict}")  # fmt: skip

    def _restore_intact(self, reader: StoreReader, view: HostView, bid: str, work: Path) -> str:
        target = work / "data"
        if not target.is_dir() or not any(target.iterdir()):
            return f"VIOLATION: the target {target} was emptied"
        try:
            got = restored_checksums(target, work / "sb", CHECKED_DBS, server_id=992)
            with decrypting_home(self.fleet.keys.private_key, self.fleet.keys.passphrase) as gpg:
                reference = restore_chain(reader, view.chain(bid), gpg, work / "ref")
            expected = restored_checksums(reference, work / "refsb", CHECKED_DBS, server_id=993)
        except Exception as exc:  # noqa: BLE001 - a restore that does not start is the finding
            return f"VIOLATION: the restored target does not start or check: {exc!r}"[:600]
        if got != expected:
            diff = ", ".join(f"{k}: {got.get(k)} != {expected.get(k)}" for k in sorted(set(got) | set(expected))
                             if got.get(k) != expected.get(k))  # fmt: skip
            return f"VIOLATION: the restore of {bid} differs from the checker's own: {diff[:400]}"
        return f"ok: the restore of {bid} starts and its {len(got)} table checksums equal the checker's own restore"

    # -- stored objects damaged (issue 39 item 4) ---------------------------------------------------

    def damage_object(self, rng: random.Random) -> Fault:
        """One stored object held on both targets damaged on the primary, the offsite copy or both:
        its bytes altered at its size (corrupt) or deleted; a stream of the newest backup, or a
        segment of a closed binlog. The effect, checked through the product: for a backup,
        `backups verify --deep` fails it on each damaged target naming the object and passes it
        where the copy is intact; `restore` (a backup) or `restore --to-gtid` through the binlog
        (from a backup before it) falls back to the offsite copy when only the primary's is damaged
        (a `note:` saying why; a backup's restore then equals the checker's own), refuses naming
        the object when both are, and a PITR from the damaged offsite copy alone fails naming it.
        The bytes are kept and put back afterwards (unless retention dropped their manifest
        meanwhile): the run goes on with a whole store; while damaged, the checker's findings that
        name the object are this fault's."""
        held = self.claim(rng, [(f"damage:{c}", f"restore:{c}", "endpoint:primary", "endpoint:offsite")
                                for c in self.clusters()])  # fmt: skip
        work = Path()
        try:
            c = held[0].split(":")[1]
            t0 = time.time()
            what = rng.choice(["backup", "binlog"])
            picked = self._copied_backup(c, rng) if what == "backup" else self._copied_binlog(c, rng)
            if picked is None:
                return Fault(
                    "damage_object", c, t0, None, clusters=[c], note=f"no {what} on both targets yet"
                )
            where = rng.choice(["primary", "offsite", "both"])
            how = rng.choice(["corrupt", "delete"])
            damaged = ["primary", "offsite"] if where == "both" else [where]
            tag = f"damage_object-{c}-{t0:.0f}"  # its own logs: no other fault's evidence counts
            work = self.fleet.root / f"damage-{c}-{int(t0)}"
            work.mkdir(parents=True)
            kept: dict[str, bytes] = {}
            try:
                for store in damaged:
                    kept[store] = self._damage(store, picked.piece, how)
                    self.damaged[picked.piece] = (t0, float("inf"), f"damage_object {how} {picked.piece}")
                effect = self._damage_effect(c, picked, damaged, tag, work)
            finally:
                put_back = self._put_back(picked, kept)
                self.damaged[picked.piece] = (
                    t0,
                    time.time(),
                    f"damage_object {how} {picked.piece} on {where}",
                )
            verdict = effect.verdict
            if verdict.startswith("ok") and damaged == ["primary"] and what == "backup":
                # The fallback's restore against the checker's own (the object put back first).
                reader = self.primary()
                intact = self._restore_intact(
                    reader, reader.host(f"backups/{c}/{BACKUP_HOST}"), picked.subject, work
                )
                verdict = f"{verdict}; {intact}" if intact.startswith("ok") else intact
            self.verdict(tag, f"{verdict}; {put_back}")
        finally:
            self.release(held)
            if work != Path():
                shutil.rmtree(work, ignore_errors=True)
        target = f"{c} {what} {picked.subject} {picked.name} ({how}, on {where})"
        return Fault("damage_object", target, t0, effect.shown[0], more_evidence=[*effect.shown[1:], r"damage_object verdict: ok"],
                     bound_s=time.time() - t0 + 120, where=f"-{tag}", clusters=[c], note=verdict[:400])  # fmt: skip

    def excuse(self, text: str) -> str | None:
        """The fault that explains a checker finding naming an object it damaged (while damaged, and
        for a sweep's length after it was put back)."""
        for key, (t0, t1, what) in list(self.damaged.items()):
            if key in text and t0 <= time.time() <= t1 + 300:
                return what
        return None

    def reader(self, store: str) -> StoreReader:
        ep = self.fleet.endpoints[store]
        return StoreReader(ep.client(), ep.bucket, store)

    def _copied_backup(self, c: str, rng: random.Random) -> Damaged | None:
        """A stream of the newest finished backup whose offsite copy names the same stored bytes."""
        prefix = f"backups/{c}/{BACKUP_HOST}"
        primary, offsite = self.reader("primary").host(prefix), self.reader("offsite").host(prefix)
        both = sorted(
            b for b, m in primary.manifests.items()
            if m.get("finished_at") and b in offsite.manifests
            and _streams(m) == _streams(offsite.manifests[b])
        )  # fmt: skip
        if not both:
            return None
        bid = both[-1]
        obj = rng.choice(primary.manifests[bid]["objects"])
        piece = rng.choice(pieces(obj))[0]
        return Damaged("backup", bid, obj["key"], piece, f"{prefix}/backups/{bid}/manifest.json")

    def _copied_binlog(self, c: str, rng: random.Random) -> Damaged | None:
        """A segment of the newest closed binlog whose offsite copy names the same stored bytes and
        that a finished backup on both targets precedes: a PITR from that backup to the binlog's
        last GTID replays all of it."""
        prefix = f"backups/{c}/{BACKUP_HOST}"
        primary, offsite = self.reader("primary").host(prefix), self.reader("offsite").host(prefix)
        for key in sorted(
            primary.binlogs, key=lambda k: _gtid_seq(primary.binlogs[k].get("gtid_last")), reverse=True
        ):
            m, there = primary.binlogs[key], offsite.binlogs.get(key)
            if there is None or _segments(m) != _segments(there) or not m.get("segments"):
                continue
            first = _gtid_seq(m.get("gtid_first"))
            bases = sorted(
                (b for b, bm in primary.manifests.items()
                 if bm.get("finished_at") and b in offsite.manifests and 0 < _gtid_seq(bm.get("gtid")) < first),
            )  # fmt: skip
            if not bases:
                continue
            seg = rng.choice(m["segments"])["object"]
            piece = rng.choice(pieces(seg))[0]
            to = next(g.strip() for g in str(m["gtid_last"]).split(",") if g.strip().startswith("0-"))
            manifest = f"{prefix}/binlogs/{key}.json"
            return Damaged("binlog", str(m["name"]), seg["key"], piece, manifest,
                           ("--backup-id", bases[-1], "--to-gtid", to))  # fmt: skip
        return None

    def _damage(self, store: str, key: str, how: str) -> bytes:
        """Alter `key` on `store` at its size (16 bytes in its middle inverted) or delete it; its
        bytes before."""
        reader = self.reader(store)
        data = reader.get_bytes(key)
        if how == "delete":
            reader.client.delete_object(Bucket=reader.bucket, Key=key)
        else:
            bad = bytearray(data)
            mid = len(bad) // 2
            bad[mid : mid + 16] = bytes(b ^ 0xFF for b in bad[mid : mid + 16])
            reader.client.put_object(Bucket=reader.bucket, Key=key, Body=bytes(bad))
        return data

    def _put_back(self, picked: Damaged, kept: dict[str, bytes]) -> str:
        """The damaged object's bytes stored again where its manifest still names it."""
        done = []
        for store, data in kept.items():
            reader = self.reader(store)
            try:
                reader.client.head_object(Bucket=reader.bucket, Key=picked.manifest)
            except Exception:  # noqa: BLE001 - retention dropped it meanwhile: leave it gone
                done.append(f"{store}: not put back (its manifest is gone)")
                continue
            reader.client.put_object(Bucket=reader.bucket, Key=picked.piece, Body=data)
            done.append(f"{store}: put back")
        return ", ".join(done)

    def _damage_effect(self, c: str, picked: Damaged, damaged: list[str], tag: str, work: Path) -> Effect:
        """What must show in the product's output (regexes over its CLI logs), and "ok: ..." when it
        did, else "VIOLATION: ..." saying what it did."""
        common = ("--cluster", c, "--host", BACKUP_HOST)
        name, wrong, shown = picked.name, [], []
        if picked.what == "backup":
            key = str(self.fleet.work / "private.asc")
            out = _output(self.cli(f"{tag}-verify", "verify", *common, "--backup-id", picked.subject,
                                   "--deep", "--private-key-file", key))  # fmt: skip
            for store, want in verify_lines(picked.subject, name, damaged).items():
                shown += [want] if store in damaged else []
                if not re.search(want, out, re.M):
                    wrong.append(f"verify of {store}: not /{want}/")
            if damaged == ["offsite"]:
                return Effect(f"VIOLATION: {'; '.join(wrong)}: {out[-300:]}" if wrong else
                              "ok: verify failed the offsite copy naming it, passed the primary", shown)  # fmt: skip
            args: tuple[str, ...] = ("--backup-id", picked.subject)
        else:
            args = picked.pitr
        alone = ("--target-store", "offsite") if damaged == ["offsite"] else ()
        proc = self.cli(
            f"{tag}-restore", "restore", *common, *args, *alone, "--target-datadir", str(work / "data")
        )
        out = _output(proc)
        label = "backup" if picked.what == "backup" else "binlog"
        want = restore_line(picked.what, picked.subject, name, damaged)
        if damaged == ["primary"]:
            if proc.returncode != 0 or not re.search(want, out):
                wrong.append(
                    f"restore did not fall back to the offsite copy (exit {proc.returncode}): {out[-300:]}"
                )
        else:
            left = (work / "data").is_dir() and any((work / "data").iterdir())
            if proc.returncode == 0 or not re.search(want, out) or left:
                wrong.append(f"restore from damaged copies only: exit {proc.returncode}, "
                             f"{'left files in the target, ' if left else ''}{out[-300:]}")  # fmt: skip
        shown.append(want)
        if wrong:
            return Effect(f"VIOLATION: {'; '.join(wrong)}"[:800], shown)
        did = "fell back to the offsite copy" if damaged == ["primary"] else "refused naming it"
        return Effect(f"ok: the {label}'s restore {did}" + (", verify failed the damaged copies naming it"
                                                             if picked.what == "backup" else ""), shown)  # fmt: skip

    # -- a holder that outlives its lease (issue 39 item 4) -----------------------------------------

    def pause_past_lease(self, rng: random.Random) -> Fault:
        """A CLI backup on another machine (its own hostname: a UTS namespace, so the lock cannot
        ask the process table and trusts the lease, as for a host elsewhere) stops itself with
        SIGSTOP once its objects are stored, before it registers them (XBP_PAUSE_AT), as a paused
        VM does. Past its lease a backup run of the DAG takes its lock over; then it gets SIGCONT.
        The effect: the resumed run registers nothing (fencing: `not registering <id>: nothing was
        registered or deleted by this run`, and no manifest of that id on the store)."""
        # Not the endpoint: a partition meanwhile only delays the takeover (fencing must hold anyway).
        held = self.claim(rng, [pause_resources(c) for c in self.clusters()])
        try:
            c = held[0].split(":")[1]
            t0 = time.time()
            tag = f"pause_past_lease-{c}-{t0:.0f}"
            proc, log = self._paused_backup(c, tag, patience=480)
            if proc is None:
                return Fault("pause_past_lease", c, t0, None, clusters=[c], note=log)
            paused = time.time()
            stack = self.fleet.stack
            assert stack is not None
            time.sleep(135)  # the 2-minute lease and the store clock's margin
            dag = f"mysql_backup_{c}"
            run = stack.trigger(dag)
            took = self._wait_for(TAKEN_FROM.format(c=c, host=BACKUP_HOST), paused, 900)
            os.killpg(proc.pid, signal.SIGCONT)
            try:
                proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            self.paused_groups.discard(proc.pid)
            out = Path(log).read_text(errors="replace")
            verdict = self._fenced(c, out, proc.returncode, took)
            self.verdict(tag, verdict)
        finally:
            self.release(held)
        return Fault("pause_past_lease", f"{c} CLI backup paused {time.time() - paused:.0f} s", t0,
                     TAKEN_FROM.format(c=c, host=BACKUP_HOST),
                     more_evidence=[r"pause_past_lease verdict: ok"], bound_s=time.time() - t0 + 120,
                     clusters=[c], note=f"triggered {dag} {run}; {verdict}"[:400])  # fmt: skip

    def _paused_backup(self, c: str, tag: str, patience: float) -> tuple[subprocess.Popen[bytes] | None, str]:
        """A CLI backup of the cluster's host under another hostname, once it stopped itself before
        registering (tried again while a scheduled run holds the lock); (None, why) if it never did."""
        argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', f"elsewhere-{c}",
                sys.executable, "-c", RUN, "backup", "--cluster", c, "--host", BACKUP_HOST, "--no-copies",
                "--config", str(self.fleet.config)]  # fmt: skip
        (self.fleet.work / "cli").mkdir(exist_ok=True)
        deadline = time.time() + patience
        while True:
            log = self.fleet.work / "cli" / f"{time.time():.3f}-{tag}.log"
            with log.open("wb") as fh:
                proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env=self.env(XBP_PAUSE_AT="backup.after_objects"), start_new_session=True)  # fmt: skip
            while proc.poll() is None and not _stopped(proc.pid):
                time.sleep(1)
            if proc.poll() is None:
                self.paused_groups.add(proc.pid)
                return proc, str(log)
            out = log.read_text(errors="replace")
            if not any(w in out for w in (BUSY, UNREACHABLE)) or time.time() > deadline:
                return None, f"it never paused: exit {proc.returncode}: {out.strip()[-300:]}"
            time.sleep(15)

    def _fenced(self, c: str, out: str, code: int | None, took: str | None) -> str:
        return fenced(out, code, took, set(self.primary().host(f"backups/{c}/{BACKUP_HOST}").manifests))

    # -- an S3 endpoint restarted (issue 39 item 4) -------------------------------------------------

    def restart_s3(self, rng: random.Random) -> Fault:
        """An endpoint restarted: moto keeps its data in memory, so the fault proxy in front of it
        is what restarts (SIGKILL: connections in flight are cut), its port closed for 15-60 s,
        then started again on that port with the same control file. Meanwhile a CLI `list` of a
        cluster's host on that target: the product says it could not connect. The effect checked
        after the restart: the same CLI succeeds again (the checker's invariants see that nothing
        is lost). A CLI whose retries outlasted the downtime (exit 0) found no victim."""
        held = self.claim(rng, [(f"endpoint:{n}",) for n in sorted(self.fleet.endpoints)])
        try:
            name = held[0].split(":")[1]
            ep, c, down = self.fleet.endpoints[name], rng.choice(self.clusters()), rng.uniform(15, 60)
            argv = ("list", "--cluster", c, "--host", BACKUP_HOST, "--target-store", name)
            t0 = time.time()
            tag = f"restart_s3-{name}-{t0:.0f}"  # its own logs: no other fault's evidence counts
            proxy = ep.procs[1]
            os.killpg(proxy.pid, signal.SIGKILL)
            proxy.wait()
            box: list[subprocess.CompletedProcess[str]] = []
            try:
                time.sleep(1)
                victim = threading.Thread(
                    target=lambda: box.append(self.cli(f"{tag}-down", *argv)), daemon=True
                )
                victim.start()
                time.sleep(max(0.0, t0 + down - time.time()))
            finally:  # never left down, whatever failed
                ep.procs[1] = self.fleet.start_proxy(ep)
            back = time.time()
            victim.join(600)
            during = (box[0].returncode, _output(box[0])) if box else (None, "it did not end in 10 minutes")
            after = []
            for _ in range(3):  # a background proxy fault may fail one try
                proc = self.cli(f"{tag}-after", *argv)
                after.append((proc.returncode, _output(proc)))
                if proc.returncode == 0:
                    break
                time.sleep(10)
            verdict = restarted(during, after)
            self.verdict(tag, verdict)
        finally:
            self.release(held)
        target = f"{name} down {back - t0:.0f} s"
        if during[0] == 0:
            return Fault(
                "restart_s3", target, t0, None, clusters=self.clusters(), note=f"{name}: {verdict}"[:400]
            )
        return Fault("restart_s3", target, t0, S3_DOWN, more_evidence=[r"restart_s3 verdict: ok"],
                     bound_s=time.time() - t0 + 120, where=f"-{tag}", clusters=self.clusters(),
                     note=f"{name}: {verdict}"[:400])  # fmt: skip

    # -- a shipping follower that outlives its lease (issue 39 item 4) -------------------------------

    def pause_shipper(self, rng: random.Random) -> Fault:
        """The binlog shipping follower of a cluster (the task process that holds the host's
        shipping lock, under a worker) stopped with SIGSTOP, as a paused VM; its mariadb-binlog
        child goes on writing its local copy. On this machine the lock trusts the process table (a
        stopped process lives), so past the 2-minute lease a CLI `binlogs ship --continuous 60`
        runs as another machine (its own hostname: a UTS namespace) and takes the lock over; then
        SIGCONT. The effect: the resumed follower says it lost the lock and registers nothing (no
        manifest names an object of its upload id that none named at the pause: core/binlog/ship.py
        confirm()s before each manifest) and removes what it uploaded since (no object of its
        upload id stored after the pause and named by no manifest), its task ends, and every
        binlog manifest of the host still names its own bytes. No follower holding the lock: no
        victim."""
        held = self.claim(rng, [(f"shipper:{c}", f"server:{c}-r1") for c in self.clusters()])
        try:
            c = held[0].split(":")[1]
            dag, t0 = f"mysql_binlog_shipping_{c}", time.time()
            tag = f"pause_shipper-{c}-{t0:.0f}"
            while not (victims := self._following(dag)) and time.time() < t0 + 360:
                time.sleep(2)  # the follower runs 4 of every 5 minutes
            time.sleep(rng.uniform(5, 20))  # past its start: it holds the lock
            lock = f"backups/{c}/{BACKUP_HOST}/binlog-ship.lock"
            holder = self._lock_body(lock)
            pid = int(holder.get("pid") or 0)
            if not victims or not pid or self._worker_of(pid, orphans=True) is None:
                return Fault("pause_shipper", c, t0, None, clusters=[c],
                             note=f"no follower under a worker held {lock}: {str(holder)[:200]}")  # fmt: skip
            uid = str(holder["token"])[:8]  # core/binlog/ship.py upload_id: its objects' keys carry it
            named = upload_keys(self._binlog_manifests(c), uid)
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                return Fault(
                    "pause_shipper", c, t0, None, clusters=[c], note=f"the follower pid {pid} ended first"
                )
            paused = time.time()
            try:
                time.sleep(135)  # the 2-minute lease and the store clock's margin
                took, taker, log = self._take_ship_lock(c, tag, patience=300)
            finally:
                os.kill(pid, signal.SIGCONT)
            resumed = time.time()
            lost = self._wait_for(SHIP_LOST_TO.format(c=c, host=BACKUP_HOST), resumed - 5, 300)
            stack = self.fleet.stack
            assert stack is not None
            deadline = time.time() + 300
            while (state := _ti_state(stack, victims[0])) == "running" and time.time() < deadline:
                time.sleep(5)
            taken = _wait(taker, 400)
            late = late_registrations(named, self._binlog_manifests(c), uid)
            parts = [ship_fenced(took, lost, state, late), self._binlogs_intact(c, after=resumed)]
            # What it uploaded before confirm() refused, it removes (core/binlog/ship.py _confirm).
            debris = unnamed_uploads(self.primary(), f"backups/{c}/{BACKUP_HOST}/binlogs/", uid, paused)
            if debris:
                parts.append(
                    f"VIOLATION: it left {len(debris)} object(s) no manifest names: {', '.join(debris)[:300]}"
                )
            verdict = "; ".join(sorted(parts, key=lambda v: v.startswith("ok")))  # a violation first
            self.verdict(tag, verdict)
        finally:
            self.release(held)
        note = (f"pid {pid} paused {resumed - paused:.0f} s; taker exit {taken} ({Path(log).name}); follower {state}; "
                f"{len(debris)} object(s) of its upload id stored after the pause and named by no manifest; {verdict}")  # fmt: skip
        return Fault("pause_shipper", f"{c} follower pid {pid}", t0, SHIP_TAKEN_FROM.format(c=c, host=BACKUP_HOST, pid=pid),
                     more_evidence=[SHIP_LOST_TO.format(c=c, host=BACKUP_HOST), r"pause_shipper verdict: ok"],
                     bound_s=time.time() - t0 + 120, clusters=[c], victims=victims, note=note[:600])  # fmt: skip

    def _live_followers(self, c: str) -> list[list[str]]:
        """The cluster's running shipping task instances, if a live follower under a worker holds the
        shipping lock: a task instance of a SIGKILLed worker stays running for minutes (until its
        heartbeat times out) with no process behind it (seed 120515: a restart 3 minutes after a
        kill_worker expected the dead follower to name the lost connection)."""
        followers = self.shipping(c)
        pid = int(self._lock_body(f"backups/{c}/{BACKUP_HOST}/binlog-ship.lock").get("pid") or 0)
        return followers if followers and pid and self._worker_of(pid, orphans=True) is not None else []

    def _following(self, dag: str) -> list[list[str]]:
        """The shipping task instances of `dag` running (its binlog copies run after them)."""
        return [v for v in self.running(dag) if v[1] == "ship_binlogs"]

    def _lock_body(self, key: str) -> dict[str, Any]:
        reader = self.primary()
        try:
            return reader.get_json(key)
        except (reader.client.exceptions.NoSuchKey, ValueError, AssertionError):
            return {}

    def _binlog_manifests(self, c: str) -> list[dict[str, Any]]:
        view = self.primary().host(f"backups/{c}/{BACKUP_HOST}")
        return [*view.binlogs.values(), *view.partials.values()]

    def _take_ship_lock(
        self, c: str, tag: str, patience: float
    ) -> tuple[str | None, subprocess.Popen[bytes] | None, str]:
        """A CLI `binlogs ship --continuous 60` of the cluster's host under another hostname, tried
        again while the paused follower's lease lasts: (its takeover line, the running process, its
        log), or (None, None, log) once `patience` ran out."""
        argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', f"elsewhere-{c}",
                sys.executable, "-c", RUN, "binlogs", "ship", "--continuous", "60", "--cluster", c,
                "--host", BACKUP_HOST, "--config", str(self.fleet.config)]  # fmt: skip
        (self.fleet.work / "cli").mkdir(exist_ok=True)
        pattern, deadline = re.compile(SHIP_TAKEN.format(c=c, host=BACKUP_HOST)), time.time() + patience
        while True:
            log = self.fleet.work / "cli" / f"{time.time():.3f}-{tag}-taker.log"
            with log.open("wb") as fh:
                proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env=self.env(), start_new_session=True)  # fmt: skip
            while proc.poll() is None and not (hit := pattern.search(log.read_text(errors="replace"))):
                time.sleep(1)
            if hit := pattern.search(log.read_text(errors="replace")):
                return hit.group(0), proc, str(log)
            if time.time() > deadline:
                return None, None, str(log)
            time.sleep(10)  # refused: the lease has not run out by the store's clock yet

    # -- the workers' temp directory full (issue 39 item 4) ------------------------------------------

    def spool_full(self, rng: random.Random) -> Fault:
        """The workers' TMPDIR (a tmpfs: the binlog shipper's spool, its credentials files, its children's homes) filled while a
        cluster's follower ships, for 1-2 minutes, then emptied. The effect: the shipping task
        fails on ENOSPC; nothing is registered half (every binlog manifest of the host names
        objects whose bytes have its sha256, no shipped binlog is missing) and shipping goes on
        once space returns (a binlog shipped after). Whether the error names the directory is
        said in the verdict. No follower running: no victim, not counted."""
        held = self.claim(rng, [("spool",)])
        try:
            spool, c = self.fleet.worker_tmp, rng.choice(self.clusters())
            dag, t0 = f"mysql_binlog_shipping_{c}", time.time()
            tag = f"spool_full-{c}-{t0:.0f}"
            while not (victims := self.running(dag)) and time.time() < t0 + 360:
                time.sleep(2)
            if not victims:
                return Fault(
                    "spool_full", str(spool), t0, None, clusters=[c], note="no follower ran for 6 minutes"
                )
            filler = spool / "filler"
            subprocess.run(
                ["dd", "if=/dev/zero", f"of={filler}", "bs=1M"], capture_output=True
            )  # until ENOSPC
            time.sleep(rng.uniform(60, 120))
            filler.unlink()
            emptied = time.time()
            verdict = self._binlogs_intact(c, after=emptied)
            if "shipping went on" not in verdict and verdict.startswith("ok"):
                verdict = f"VIOLATION: shipping did not go on once space returned: {verdict}"
            said = self._wait_for(
                rf"(No space left on device|Errcode: 28|Errno 28)[^\n]*{re.escape(str(spool))}", t0, 1
            )
            verdict += f"; the ENOSPC error {'names' if said else 'does NOT name'} {spool}"
            self.verdict(tag, verdict)
        finally:
            self.release(held)
        return Fault("spool_full", f"{spool} during {dag}", t0, r"(No space left on device|Errcode: 28|Errno 28)",
                     more_evidence=[r"spool_full verdict: ok"], bound_s=emptied - t0 + 300, clusters=self.clusters(), victims=victims,
                     note=verdict[:400])  # fmt: skip

    # -- Airflow's own components (issue 39 item 4) -------------------------------------------------

    def kill_scheduler(self, rng: random.Random) -> Fault:
        """SIGKILL of Airflow's scheduler while tasks run, started again after 10-60 s."""
        return self._kill_component("kill_scheduler", "scheduler", rng)

    def kill_redis(self, rng: random.Random) -> Fault:
        """SIGKILL of Redis, the Celery broker (no persistence: the queued messages are lost), started
        again on its port after 10-60 s."""
        return self._kill_component("kill_redis", "redis", rng)

    def _kill_component(self, kind: str, name: str, rng: random.Random) -> Fault:
        """The effect, checked from Airflow's database and the store: every task instance running or
        queued at the kill leaves that state (none hangs), each cluster's backup DAG runs a task that
        starts after the restart and succeeds, and no backup was registered twice (no two backups
        of a host since the kill name one parent: a forked chain). No task running or queued at the
        kill: no victim, not counted."""
        held = self.claim(rng, [(f"airflow:{name}",)])
        try:
            stack = self.fleet.stack
            assert stack is not None
            t0 = time.time()
            tag = f"{kind}-{t0:.0f}"
            victims = [list(r) for r in stack.db(
                "SELECT dag_id, task_id, run_id FROM task_instance WHERE state IN ('running', 'queued')")]  # fmt: skip
            proc = stack.procs.pop(name)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            time.sleep(rng.uniform(10, 60))
            if name == "redis":
                stack.start_redis()
            else:
                stack.start(name, [str(Path(sys.executable).parent / "airflow"), name])
            restarted = time.time()
            verdict = self._resumed(victims, restarted, t0) if victims else "no task was running or queued"
            self.verdict(tag, verdict)
        finally:
            self.release(held)
        if not victims:
            return Fault(kind, name, t0, None, note=verdict)
        return Fault(kind, name, t0, rf"{kind} verdict: ok", bound_s=time.time() - t0 + 120, where=f"-{tag}",
                     clusters=self.clusters(), victims=victims, note=verdict[:400])  # fmt: skip

    def _resumed(self, victims: list[list[str]], restarted: float, t0: float, patience: float = 900) -> str:
        stack = self.fleet.stack
        assert stack is not None
        deadline = time.time() + patience
        while True:
            stuck = [v for v in victims if _ti_state(stack, v) in ("running", "queued", "scheduled")]
            fresh = {c: _succeeded_since(stack, f"mysql_backup_{c}", restarted) for c in self.clusters()}
            if (not stuck and all(fresh.values())) or time.time() > deadline:
                break
            time.sleep(20)
        wrong = [f"{'.'.join(v[:2])} ({v[2]}) still {_ti_state(stack, v)}" for v in stuck]
        wrong += [
            f"no task of mysql_backup_{c} started after the restart and succeeded"
            for c, ok in fresh.items()
            if not ok
        ]
        for c in self.clusters():
            view = self.primary().host(f"backups/{c}/{BACKUP_HOST}")
            wrong += [f"{c}: {fork}" for fork in forks(list(view.manifests.values()), t0)]
        ended = Counter(_ti_state(stack, v) for v in victims)
        if wrong:
            return f"VIOLATION: {'; '.join(wrong)}"[:800]
        return (f"ok: the {len(victims)} task(s) running or queued at the kill ended {dict(ended)}; every cluster's "
                f"backup DAG ran a task started after the restart to success; no chain forked")  # fmt: skip


ORPHANED_TASK = "an Airflow task whose worker was killed"
# MySQLdb says "Server has gone away" (2006): seed 120503's shipper did, and it was not matched.
DB_LOST = r"(?i)(Lost connection to|server has gone away|Can't connect to|Connection refused)"


def restart_evidence(role: str, followers: list[list[str]]) -> tuple[str | None, str]:
    """What a restart of the cluster's `role` server must show, and the fault's note; `followers`:
    the cluster's binlog shipping tasks running when it went down."""
    # The backed-up replica is the product's server: its continuous shipping task names the lost
    # connection. Between runs, or while its runs are refused (seed 120503, 11:36: a re-seeded r1),
    # nothing of the product talks to it. The others are not the product's.
    if role != BACKUP_HOST:
        # A source or the other replica down for seconds disturbs nothing the check watches.
        return None, "the product does not talk to this server"
    if not followers:
        return None, "no binlog shipping task was following it"
    return DB_LOST, ""


def kill_running(pid: int, argv: list[str]) -> bool:
    """SIGKILL `pid` if it still runs `argv`; False: it had ended first (its parent reads its own
    exit status). Stopped first, so it cannot end between the check and the kill: a process that
    has exited but is not reaped takes SIGKILL without an error (seed 120503: a binlog segment's
    gpg, counted killed, its task never failed), and an ended one's pid can be reused."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + 2
    while (state := _state(pid)) not in (None, "T", "t", "Z", "X") and time.monotonic() < deadline:
        time.sleep(0.005)  # the stop lands once it leaves the kernel
    if state in (None, "Z", "X") or _cmdline(pid) != "\0".join(argv).rstrip("\0"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)  # not the tool scanned: leave it as it was
        return False
    os.kill(pid, signal.SIGKILL)
    return True


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _cmdline(pid: int) -> str:
    """Its argv, NUL-separated (empty for a zombie)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").rstrip("\0")
    except OSError:
        return ""


def pause_resources(c: str) -> tuple[str, ...]:
    """What pause_past_lease holds: the cluster's CLI, and its backed-up host's worker. A
    kill_worker of the run that takes the lock over orphans its task, whose log then ends before
    the takeover line (seed 120531: the takeover and the backup happened, the evidence was lost)."""
    return (f"cli:{c}", f"worker:{c}")


# Airflow 3's process titles: a task's supervisor, and the task runner it forks.
TASK_TITLES = (b"airflow supervisor:", b"airflow worker -- ")


def worker_of(pid: int, roots: dict[int, str], orphans: bool = False) -> str | None:
    """The worker (named in `roots`, by its pid) whose process tree holds `pid`. With `orphans`, a
    process in a task (under TASK_TITLES) whose worker is gone is ORPHANED_TASK: a SIGKILLed Celery
    worker's task supervisors carry on, and their task with them (seed 120501: the shipping
    follower of a killed worker still held its lock and renewed it); or the supervisor died with
    the worker and the task runner lives on, a child of init (seed 120521)."""
    supervised = False
    for _ in range(20):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes()
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            return None
        supervised = supervised or title.startswith(TASK_TITLES)
        if pid in roots:
            return roots[pid]
        if pid <= 1:
            break
    return ORPHANED_TASK if orphans and supervised else None


def _output(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout + proc.stderr


def _streams(manifest: dict[str, Any]) -> list[tuple[str, int]]:
    """(sha256, size) of a backup manifest's streams: two targets' copies hold the same bytes."""
    return [(str(o.get("sha256")), int(o["size"])) for o in manifest.get("objects", [])]


def forks(manifests: list[dict[str, Any]], since: float) -> list[str]:
    """Each parent that two or more backups finished since `since` continue: a chain forked, as
    when one run registered twice or two runs of a host ran at once."""
    parents = Counter(
        str(m["parent_id"]) for m in manifests if m.get("parent_id") and _epoch(m.get("finished_at")) >= since
    )
    return [
        f"{n} backups registered since the kill name parent {p} (a forked chain)"
        for p, n in parents.items()
        if n > 1
    ]


def fenced(out: str, code: int | None, took: str | None, registered: set[str]) -> str:
    """ "ok: ..." when a run resumed past its lease registered nothing: a run took its lock over
    (`took`: that line), it failed saying so (`out`, `code`) and `registered` (the backup ids on
    the store) lacks the backup it was about to register; else "VIOLATION: ..."."""
    m = re.search(r"not registering (\S+): nothing was registered or deleted by this run", out)
    if took is None:
        return f"VIOLATION: no run took the paused run's lock over; it ended with exit {code}: {out.strip()[-300:]}"
    if code == 0 or m is None:
        return f"VIOLATION: the resumed run was not fenced: exit {code}: {out.strip()[-400:]}"
    if m.group(1) in registered:
        return f"VIOLATION: the resumed run was refused, yet {m.group(1)} is registered"
    return f"ok: the resumed run (exit {code}) registered nothing: no manifest of {m.group(1)}"


def restarted(during: tuple[int | None, str], after: list[tuple[int, str]]) -> str:
    """restart_s3's verdict from the CLI run while the endpoint was down (exit, output) and its
    tries after the restart: "ok: ..." when the first failed naming the connection (or rode the
    downtime out) and a try after the restart succeeded; else "VIOLATION: ..."."""
    code, out = during
    if code is None:
        return f"VIOLATION: the CLI run during the downtime did not end: {out.strip()[-300:]}"
    if code != 0 and not re.search(S3_DOWN, out):
        return f"VIOLATION: the CLI failed during the downtime without naming the connection: exit {code}: {out.strip()[-300:]}"
    if not any(c == 0 for c, _ in after):
        last = after[-1] if after else (None, "")
        return f"VIOLATION: the CLI did not succeed after the restart ({len(after)} tries): exit {last[0]}: {last[1].strip()[-300:]}"
    how = (
        "its retries rode the downtime out" if code == 0 else f"it failed naming the connection (exit {code})"
    )
    return f"ok: during the downtime {how}; after the restart it succeeded"


def skewed_env(skew: str, pythonpath: str | None) -> dict[str, str]:
    """What a process's environment gets for a clock `skew` (libfaketime's FAKETIME: "+10m"), as
    clock_skew's CLI does; the sitecustomize in faketime/ mends libfaketime's sleep (its docstring).
    `pythonpath`: the process's own, kept after it (a planted copy: tests/chaos/plant.py)."""
    path = os.pathsep.join(p for p in (str(HERE / "faketime"), pythonpath) if p)
    return {
        "LD_PRELOAD": str(FAKETIME),
        "FAKETIME": skew,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": path,
    }


def backup_time(backup_id: str) -> float:
    """When a backup id says its backup started ("20261205T081138Z-inc"), by its worker's clock."""
    return datetime.strptime(backup_id[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()


def worker_clock_verdict(skew: str, ran: tuple[str | None, str], newest_before: str | None,
                         registered: dict[str, float], after: list[tuple[str | None, str]]) -> str:  # fmt: skip
    """worker_clock's verdict. `skew`: the worker's FAKETIME ("+10m", "-20m"); `ran`: its backup
    task's state and log; `newest_before`: the host's newest backup id before; `registered`: the
    ids registered while it was skewed -> when each was first seen (true clock); `after`: the runs
    on the true clock after (state, log). "VIOLATION: ..." for what the product must never do: an
    id later than the true clock, ids out of order, a worker ahead not refused, an honest run
    refused after (or none succeeding); "no victim: ..." when the skewed run never met the clock
    check (it failed for another reason); else "ok: ..."."""
    state, out = ran
    wrong = []
    if future := sorted(b for b, seen in registered.items() if backup_time(b) > seen + MAX_CLOCK_AHEAD_S):
        wrong.append(f"registered {', '.join(future)} under an id later than the true clock: every honest run of "
                     "the host is refused until then")  # fmt: skip
    if newest_before and (late := sorted(b for b in registered if b[:16] <= newest_before[:16])):
        wrong.append(f"registered {', '.join(late)}, not later than the newest before ({newest_before}): backup "
                     "ids no longer follow each other in time")  # fmt: skip
    what = None
    if skew.startswith("+"):
        if state == "success" or registered:
            wrong.append(f"a worker {skew} ahead was not refused: its backup task {state}, registered "
                         f"{', '.join(sorted(registered)) or 'nothing'}")  # fmt: skip
        elif re.search(CLOCK_AHEAD_REFUSED, out):
            what = "refused naming the clock (the store's), nothing registered"
    elif re.search(CLOCK_AHEAD_REFUSED, out):
        wrong.append(f"a worker {skew} behind was refused as ahead of the store's clock")
    elif re.search(CLOCK_BEHIND_REFUSED, out):
        what = "refused: the newest backup's id is later than its clock (sync the clocks)"
    elif state == "success" and registered:
        past = ", ".join(
            f"{b} ({seen - backup_time(b):.0f} s before it showed)" for b, seen in sorted(registered.items())
        )
        what = (
            f"no backup as recent as its clock: registered {past}, after the newest before ({newest_before})"
        )
    elif state == "success":
        wrong.append("its backup task succeeded, yet no backup of the host was registered")
    if refused := [log for _s, log in after if re.search(CLOCK_REFUSED, log)]:
        wrong.append(f"a run on the true clock after was refused: {error_lines(refused[0], 300)}")
    elif not any(s == "success" for s, _log in after):
        last = after[-1] if after else (None, "")
        wrong.append(f"no backup run on the true clock succeeded after ({len(after)} tries; the last "
                     f"{last[0]}: {error_lines(last[1], 300)})")  # fmt: skip
    if wrong:
        return f"VIOLATION: {'; '.join(wrong)}"
    if what is None:
        return f"no victim: its backup task ended {state} before the clock check: {error_lines(out, 300)}"
    return f"ok: a worker {skew}: {what}; the next run on the true clock succeeded"


def upload_keys(manifests: list[dict[str, Any]], uid: str) -> set[str]:
    """The keys of a shipping run's objects (its upload id in them) that binlog manifests name."""
    return {
        key
        for m in manifests
        for seg in m.get("segments", [])
        for key, _size in pieces(seg["object"])
        if f".{uid}." in key
    }


def late_registrations(named: set[str], manifests: list[dict[str, Any]], uid: str) -> list[str]:
    """Objects of the paused run (upload id `uid`) that a manifest names now and none named at the
    pause (`named`): registered by it after it was resumed."""
    return sorted(upload_keys(manifests, uid) - named)


def ship_fenced(took: str | None, lost: str | None, state: str | None, late: list[str]) -> str:
    """pause_shipper's verdict: a shipper took the paused follower's lock over (`took`: its line),
    the resumed follower said it lost the lock (`lost`), its task ended (`state`: the task
    instance's), and it registered nothing after (`late`: its objects named since the pause)."""
    if took is None:
        return "VIOLATION: no shipper took the paused follower's lock over after its lease ran out"
    if late:
        return f"VIOLATION: the resumed follower registered {len(late)} object(s) after its lock was taken over: {', '.join(late)[:400]}"
    if lost is None:
        return f"VIOLATION: the resumed follower never said it lost the lock (its task: {state})"
    if state == "running":
        return "VIOLATION: the resumed follower's task is still running after it lost its lock"
    return f"ok: taken over, the resumed follower said it lost the lock, registered nothing and its task ended ({state})"


def unnamed_uploads(reader: StoreReader, prefix: str, uid: str, since: float) -> list[str]:
    """Objects of the shipping run `uid` under `prefix` stored after `since` that no manifest names
    (what a fenced run uploaded before its confirm() refused: debris retention removes)."""
    view_keys = reader.list(prefix)
    manifests = []
    for key in view_keys:
        if key.endswith(".json") and "/gaps/" not in key:
            with contextlib.suppress(Exception):
                manifests.append(reader.get_json(key))
    named = upload_keys(manifests, uid)
    return sorted(
        k
        for k, o in view_keys.items()
        if f".{uid}." in k and o.modified.timestamp() > since and k not in named
    )


def _wait(proc: subprocess.Popen[bytes] | None, seconds: float) -> int | None:
    """The exit of `proc` within `seconds` (killed after: None)."""
    if proc is None:
        return None
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def verify_lines(backup_id: str, name: str, damaged: list[str]) -> dict[str, str]:
    """Storage target -> the line `backups verify --deep` must print for the backup whose object
    `name` (its stream's file name) is damaged on the `damaged` targets."""
    bid = re.escape(backup_id)
    return {store: rf"^{store}\s+{bid}\s+" + (rf"FAILED[^\n]*{re.escape(name)}" if store in damaged else "OK")
            for store in ("primary", "offsite")}  # fmt: skip


def restore_line(what: str, subject: str, name: str, damaged: list[str]) -> str:
    """What a restore (a backup's, or a PITR through a binlog) must print when object `name` of
    `subject` is damaged on the `damaged` targets: the primary alone, a fallback note; both, a
    refusal naming it; the offsite copy read alone, its name in the error."""
    if damaged == ["primary"]:
        return rf"note: {what} {re.escape(subject)}: fetched from target offsite because primary: "
    if len(damaged) == 2:
        return rf"no storage target holds {re.escape(name)} intact"
    return re.escape(name)


def _segments(manifest: dict[str, Any]) -> list[tuple[str, int]]:
    """(sha256, size) of a binlog manifest's segment objects."""
    return [(str(s["object"].get("sha256")), int(s["object"]["size"])) for s in manifest.get("segments", [])]


def _gtid_seq(gtid: Any) -> int:
    """The domain-0 sequence number of a MariaDB GTID position ("0-1-42,1-2-7" -> 42; 0: none)."""
    for g in str(gtid or "").split(","):
        parts = g.strip().split("-")
        if len(parts) == 3 and parts[0] == "0" and parts[2].isdigit():
            return int(parts[2])
    return 0


def _stopped(pid: int) -> bool:
    """The process is stopped (SIGSTOP: state T)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def _ti_state(stack: Any, ti: list[str]) -> str | None:
    rows = stack.db("SELECT state FROM task_instance WHERE dag_id=? AND task_id=? AND run_id=?", *ti)
    return rows[0][0] if rows else None


def _succeeded_since(stack: Any, dag: str, since: float) -> bool:
    """A task of `dag` started after `since` and succeeded."""
    rows = stack.db("SELECT start_date FROM task_instance WHERE dag_id=? AND state='success'", dag)
    return any(r[0] and _utc(str(r[0])) >= since for r in rows)


def _utc(value: str) -> float:
    """An Airflow database time (UTC, with or without its offset)."""
    when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def clip(text: str, limit: int = 1500) -> str:
    """At most `limit` characters of a message: its start and, above all, its end (where a tool's
    error and an exception's cause are), with what was left out in between counted."""
    if len(text) <= limit:
        return text
    head = limit // 5
    return f"{text[:head]} [... {len(text) - limit} characters ...] {text[-(limit - head) :]}"


def error_lines(output: str, limit: int = 600) -> str:
    """A tool's error lines (its `[ERROR]`s and `Error:`s), else its last lines: the part that
    says what went wrong, not the start-up banner."""
    lines = output.strip().splitlines()
    errors = [line for line in lines if re.search(r"\berror\b", line, re.IGNORECASE)]
    return clip(" | ".join(errors or lines[-3:]), limit)


def _epoch(value: Any) -> float:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _processes() -> list[tuple[int, list[str]]]:
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                argv = Path(f"/proc/{entry.name}/cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if argv and argv[0]:
                out.append((int(entry.name), argv))
    return out
