"""Faults at random, seeded and logged: each injector does one fault to the fleet and returns its
record: what was done, when, and what must show for it (a regex over the task logs and the run's
own CLI logs) within how long. A fault that found no victim (no tool was streaming, no task ran
on the killed worker) says so and needs no evidence.

Kinds: kill_worker, kill_tool (mariabackup or gpg mid-stream; zstd runs inside the worker's own
process as python-zstandard threads, so killing "zstd" is killing the worker), kill_cli (a CLI
backup killed mid-commit at a crash point), restart_db, scratch_full, clock_skew (a CLI backup
under libfaketime), reseed_replica, s3_partition (an endpoint down for minutes, a retention run
against it meanwhile). The proxies' background faults (latency, 5xx, SlowDown, resets, truncated
answers) are counted from their own logs.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fleet import BACKUP_HOST, Fleet

from helpers import RUN, S3_ACCESS_KEY, S3_REGION, S3_SECRET_KEY, start_replication, wait_caught_up

FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
CLI_CRASH_POINTS = (
    "backup.after_objects",
    "backup.after_manifest",
    "lock.before_release",
    "parts.between_commits",
)


@dataclass
class Fault:
    kind: str
    target: str
    t0: float
    evidence: str | None  # regex that must appear in a task or CLI log written after t0; None: no victim
    bound_s: float = 900
    note: str = ""
    seen: str | None = None  # where the evidence was found
    t1: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Injector:
    fleet: Fleet
    rng: random.Random
    log: list[Fault] = field(default_factory=list)

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

    def inject(self) -> Fault:
        kinds = [self.kill_worker, self.kill_tool, self.kill_cli, self.restart_db, self.scratch_full,
                 self.clock_skew, self.reseed_replica, self.s3_partition]  # fmt: skip
        kind = self.rng.choice(kinds)
        try:
            fault = kind()
        except Exception as exc:  # noqa: BLE001 - the harness's own failure: reported, the run goes on
            fault = Fault(kind.__name__, "-", time.time(), None, note=f"HARNESS ERROR: {exc!r}"[:500])
        fault.t1 = time.time()
        self.log.append(fault)
        with (self.fleet.work / "faults.jsonl").open("a") as fh:
            import json

            fh.write(json.dumps(fault.as_dict()) + "\n")
        return fault

    def cluster(self) -> str:
        return self.rng.choice(sorted(self.fleet.clusters))

    # -- processes ----------------------------------------------------------------------------------

    def kill_worker(self) -> Fault:
        stack = self.fleet.stack
        assert stack is not None
        c = self.cluster()
        name = f"worker-{c}-{BACKUP_HOST}"
        t0 = time.time()
        running = stack.db("SELECT dag_id, task_id FROM task_instance WHERE state='running' AND hostname=?",
                           f"{c}-{BACKUP_HOST}-worker")  # fmt: skip
        os.killpg(stack.procs[name].pid, signal.SIGKILL)
        stack.procs[name].wait()
        del stack.procs[name]
        time.sleep(self.rng.uniform(5, 40))
        stack.start_worker(f"{c}-{BACKUP_HOST}", queue=f"{c}-{BACKUP_HOST}")
        victims = ", ".join(f"{d}.{t}" for d, t in running)
        # Airflow fails a task whose worker died once its heartbeat is missed.
        evidence = (
            None if not running else r"(heartbeat|zombie|Executor reports|externally|SIGKILL|-9|killed)"
        )
        return Fault("kill_worker", name, t0, evidence, note=f"running: {victims or 'nothing'}")

    def kill_tool(self) -> Fault:
        """SIGKILL a mariabackup or gpg that a worker of the fleet runs, if one is streaming."""
        t0 = time.time()
        tools = [(pid, argv) for pid, argv in _processes()
                 if Path(argv[0]).name in ("mariabackup", "gpg") and self._ours(pid)]  # fmt: skip
        if not tools:
            return Fault("kill_tool", "-", t0, None, note="no mariabackup or gpg was running")
        pid, argv = self.rng.choice(tools)
        name = Path(argv[0]).name
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return Fault("kill_tool", name, t0, None, note="it ended first")
        return Fault("kill_tool", f"{name} pid {pid}", t0, rf"{name}[^\n]{{0,300}}killed by signal 9",
                     note=" ".join(argv[:4]))  # fmt: skip

    def _ours(self, pid: int) -> bool:
        stack = self.fleet.stack
        roots = {p.pid for p in stack.procs.values()} if stack else set()
        for _ in range(20):
            try:
                pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                return False
            if pid in roots:
                return True
            if pid <= 1:
                return False
        return False

    def kill_cli(self) -> Fault:
        c, point = self.cluster(), self.rng.choice(CLI_CRASH_POINTS)
        t0 = time.time()
        proc = self.cli(
            "kill_cli", "backup", "--cluster", c, "--host", BACKUP_HOST, "--no-copies", XBP_CRASH_AT=point
        )
        if proc.returncode != -9:
            # Refused (the scheduled backup held the lock) or it did not reach the point.
            return Fault(
                "kill_cli", f"{c} at {point}", t0, None, note=f"exit {proc.returncode}: {proc.stderr[-300:]}"
            )
        # Killed holding the host lock: the next run of the host takes it over and says so.
        return Fault("kill_cli", f"{c} at {point}", t0, r"taking over the stale lock", note="killed")

    # -- servers ------------------------------------------------------------------------------------

    def restart_db(self) -> Fault:
        c = self.fleet.clusters[self.cluster()]
        role = self.rng.choice(["src", "r1", "r2"])
        server = c.servers()[role]
        t0 = time.time()
        (server.kill if self.rng.random() < 0.5 else server.stop)()
        time.sleep(self.rng.uniform(2, 20))
        server.start(timeout=300)
        if role == "src":
            self.fleet.restart_load(c)
        # Only the backed-up replica is the product's server; a run talking to it then fails by name.
        evidence = r"(Lost connection|gone away|Can't connect|2013|2006|2002)" if role == "r1" else None
        return Fault("restart_db", f"{c.name}-{role}", t0, evidence, bound_s=600,
                     note="" if evidence else "the product does not talk to this server")  # fmt: skip

    def reseed_replica(self) -> Fault:
        """r1's datadir replaced by a copy of r2's (same server_id, port, path): the next backup of
        r1 must be a full that says the data does not descend from its parent."""
        c = self.fleet.clusters[self.cluster()]
        r1, r2 = c.replicas["r1"], c.replicas["r2"]
        t0 = time.time()
        copy = self.fleet.root / f"reseed-{c.name}"
        shutil.rmtree(copy, ignore_errors=True)
        creds = r2.write_client_defaults(self.fleet.work / f"reseed-{c.name}.cnf")
        for args in ([f"--defaults-file={creds}", "--backup", f"--target-dir={copy}", "--slave-info"],
                     ["--no-defaults", "--prepare", f"--target-dir={copy}"]):  # fmt: skip
            done = subprocess.run(["mariabackup", *args], capture_output=True, text=True)
            assert done.returncode == 0, done.stderr[-2000:]
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
        return Fault(
            "reseed_replica", f"{c.name}-r1 from {c.name}-r2", t0, r"does not descend from", bound_s=900
        )

    # -- storage ------------------------------------------------------------------------------------

    def scratch_full(self) -> Fault:
        """The cluster's restore scratch filesystem filled up while a restore test runs."""
        c = self.cluster()
        scratch = self.fleet.scratch[c]
        t0 = time.time()
        filler = scratch / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M"], capture_output=True)  # until ENOSPC
        stack = self.fleet.stack
        assert stack is not None
        stack.trigger(f"mysql_restore_test_{c}", {"host": BACKUP_HOST})
        time.sleep(self.rng.uniform(60, 180))
        filler.unlink()
        return Fault(
            "scratch_full",
            f"{c} restore scratch",
            t0,
            r"(No space left|Errno 28|ENOSPC|disk is full)",
            bound_s=900,
        )

    def clock_skew(self) -> Fault:
        """A DBA's host whose clock is 20 minutes behind runs a backup (libfaketime, this process only:
        the tools it starts get a scrubbed environment)."""
        c = self.cluster()
        t0 = time.time()
        if not FAKETIME.exists():
            raise AssertionError(
                f"{FAKETIME} is missing: `apt-get install libfaketime` (make chaos installs it)"
            )
        proc = self.cli("clock_skew", "backup", "--cluster", c, "--host", BACKUP_HOST, "--no-copies",
                        LD_PRELOAD=str(FAKETIME), FAKETIME="-20m", FAKETIME_DONT_FAKE_MONOTONIC="1")  # fmt: skip
        return Fault("clock_skew", f"{c} CLI -20m", t0, r"(sync the clocks|another backup of|cannot start)",
                     bound_s=120, note=f"exit {proc.returncode}")  # fmt: skip

    def s3_partition(self) -> Fault:
        name = self.rng.choice(sorted(self.fleet.endpoints))
        ep = self.fleet.endpoints[name]
        minutes = self.rng.uniform(1.5, 4)
        t0 = time.time()
        ep.control_set(**{**self.fleet.background, "partition_until": t0 + minutes * 60})
        time.sleep(2)
        c = self.cluster()
        extra = ["--target-store", "offsite"] if name == "offsite" else []
        self.cli(
            "retention", "retention", "apply", "--confirm", "--cluster", c, "--host", BACKUP_HOST, *extra
        )
        return Fault("s3_partition", f"{name} for {minutes:.1f} min", t0,
                     r"(Could not connect|Connection refused|unreachable|EndpointConnectionError|cannot reach)",
                     bound_s=minutes * 60 + 300)  # fmt: skip


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
