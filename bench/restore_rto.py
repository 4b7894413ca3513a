"""Restore RTO of an encrypted chain from S3, and prepare time against --use-memory.

    .venv/bin/python bench/restore_rto.py [--size-mb 600] [--redo-mb 1024] [--keep] [--write-docs]

One sandbox MariaDB holding at least ``--size-mb`` MiB of InnoDB data (the dataset of ``_common``), a
moto S3 endpoint over HTTP (``ThreadedMotoServer`` in a child process) and a throwaway GPG key pair.
In one invocation:

1. **RTO.** A full + 6 incrementals (each after a round of INSERTs, UPDATEs and DELETEs on the three
   tables, and a forced checkpoint so the incremental carries page deltas rather than redo) taken with
   ``run_backup()``, zstd-compressed and GPG-encrypted into the S3 endpoint. Then the whole chain is
   restored by each method (alternating, ``--rto-repeats`` times), each time into an empty datadir up to a started server
   (``SandboxServer.on_datadir(...).start()`` is inside both clocks):

   (ours)     ``core.restore.restore()``: the 7 objects fetched in parallel with ranged GETs and
              streamed through sha256 -> gpg | zstd -d | mbstream -x, no file staged; prepare with
              ``--use-memory`` sized from the copied redo (applied incrementals removed while the next
              step runs); move-back.
   (baseline) what a script does by hand, one step and one object after another: ``get_object`` of
              every object to a file; then per object ``gpg --decrypt`` to a file, ``zstd -d`` to a file,
              ``mbstream -x`` into its directory; ``mariabackup --prepare`` of the base and
              ``--prepare --incremental-dir`` of each incremental with the tool's default memory;
              ``--copy-back``.

   Both restored servers must hold what the source held at the last backup (``CHECKSUM TABLE`` of
   every table equal); the ratio baseline/ours is reported. ``sync`` runs (untimed) before each method
   so no method pays for the previous one's writeback.

2. **Prepare memory.** The source restarts with ``--innodb-log-file-size=2G``; a second connection
   runs point UPDATEs of random rows of ``events`` (scattered over the whole table) while
   ``mariabackup --backup --stream | mbstream -x`` runs. The bench passes the stream through and, half
   way, stops reading it (a slow destination) until the server has written ``--redo-mb`` MiB of redo, so
   at least that much redo is copied into the backup; its size is measured (ib_logfile0) and checked
   against what mariabackup reports. Every prepare then runs on a fresh ``cp -a`` copy of the extracted
   backup, alternating ``--use-memory`` = ``prepare.size_use_memory(redo, available_memory())`` (sized)
   with ``--use-memory=100M`` (the default). How many recovery batches the tool needed is read from its
   stderr ("Multi-batch recovery needed", "To recover: ...").

moto answers a ranged GET by copying the whole object first (O(object) per range); the bench's moto
serves only the range, as S3 does, unless ``--stock-moto`` (see ``_common.moto_s3``).

Targets (printed as PASS/MISS, never asserted): RTO baseline/ours >= 1.5; prepare default/sized > 1
whenever the redo exceeds the default memory. Exit status: 0 whatever the ratios; 1 if a method failed
or a restore did not reproduce the source's data.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup  # noqa: E402
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest  # noqa: E402
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums  # noqa: E402
from xtrabackup_provider.core.db.server import MySQLTarget  # noqa: E402
from xtrabackup_provider.core.engine.argv import (
    BackupOptions,
    PrepareStep,
    PrepareTuning,
    backup_argv,
    copy_back_argv,
    extract_argv,
    prepare_argv,
    prepare_steps,
)  # noqa: E402
from xtrabackup_provider.core.engine.tools import ToolVersion, detect_tool
from xtrabackup_provider.core.pipeline.gpg import GpgHome, generate_key_pair, passphrase_pipe  # noqa: E402
from xtrabackup_provider.core.restore import chain as restore_mod  # noqa: E402
from xtrabackup_provider.core.restore import prepare
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client  # noqa: E402

SECTION = "restore_rto"
TARGET_RTO_RATIO = 1.5
INCREMENTALS = 6
BUCKET = "xbp-bench"
DATABASE = "bench"
PARALLEL_DOWNLOADS = restore_mod.default_parallel_downloads()  # what RestoreRequest uses here
VARIANT_SERIAL = "ours, parallel_downloads=1"
VARIANT_FOUR = "ours, parallel_downloads=4"
VARIANT_COPY = "ours, copy-back"
BIG_REDO_LOG = "2G"
LOAD_ROWS = 2000  # rows per UPDATE of the write load
MAX_HOLD_SECONDS = 600
_COPIED = re.compile(r"Redo log \(from LSN (\d+) to (\d+)\) was copied")


# -- results -------------------------------------------------------------------------------------------------


@dataclass
class BackupStep:
    backup_id: str
    kind: str
    raw_bytes: int
    stored_bytes: int
    seconds: float
    change: str = ""


@dataclass
class RtoRun:
    method: str
    seconds: float
    cpu_seconds: float
    phases: dict[str, float]
    prepare_steps: list[tuple[str, float]] = field(default_factory=list)
    prepare_argv: list[list[str]] = field(default_factory=list)
    fetch_seconds: list[float] = field(default_factory=list)  # ours: per object, in parallel
    intermediate_bytes: int = 0  # baseline: files staged on disk
    data_ok: bool | None = None
    mismatched: list[str] = field(default_factory=list)


@dataclass
class PrepareRun:
    variant: str  # "sized" | "default"
    use_memory: int
    seconds: float
    cpu_seconds: float
    multi_batch: int  # "Multi-batch recovery needed" lines
    batches: int  # "To recover: ..." lines: one per batch
    recovery_lines: list[str] = field(default_factory=list)


@dataclass
class MemoryResult:
    redo_bytes: int = 0  # ib_logfile0 of the extracted backup (prepare.redo_bytes)
    reported_from: int | None = None
    reported_to: int | None = None
    lsn_delta: int = 0  # the source's LSN advance while the backup ran
    load_rate: float = 0.0  # bytes of redo per second while the backup ran
    load_rows: int = 0
    hold_after: int = 0  # stream bytes passed before the bench stopped reading
    hold_seconds: float = 0.0
    backup_seconds: float = 0.0
    data_bytes: int = 0
    sized: int = 0
    available: int = 0
    runs: list[PrepareRun] = field(default_factory=list)
    error: str | None = None

    @property
    def reported_bytes(self) -> int | None:
        if self.reported_from is None or self.reported_to is None:
            return None
        return self.reported_to - self.reported_from


def _cpu() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def _sync() -> None:
    subprocess.run(["sync"], check=False)


# -- part 1: the chain -----------------------------------------------------------------------------------------


def change_round(server: SandboxServer, n: int, base_rows: int) -> str:
    """Round ``n`` of changes between backups: new rows, a contiguous block of order updates, updates
    scattered over the whole events table, and deleted attachments."""
    inserts = max(1000, base_rows // 50)  # 2 %
    first = C.max_id(server, "orders", DATABASE) + 1
    C.load_rows(server, first, first + inserts - 1, DATABASE)
    span = max(1000, base_rows * 3 // 100)  # 3 %
    lo = 1 + ((n - 1) * span) % max(1, base_rows - span)
    server.execute_script(
        f"""
        UPDATE orders SET status = ELT(1 + (id + {n}) % 5, 'new', 'paid', 'shipped', 'delivered', 'refunded'),
                          amount = amount + 1, note = CONCAT('round {n}: ', LEFT(note, 200))
         WHERE id BETWEEN {lo} AND {lo + span - 1};
        UPDATE events SET payload = REVERSE(payload), kind = (kind + 1) % 12 WHERE id % 499 = {n};
        DELETE FROM attachments WHERE id BETWEEN {lo} AND {lo + span // 4};
        """,
        database=DATABASE,
    )
    return (
        f"+{inserts:,} orders/events, {span:,} orders updated, 0.2 % of events updated, attachments deleted"
    )


def build_chain(server: SandboxServer, catalog: Catalog, public_key: str, base_rows: int) -> list[BackupStep]:
    target = MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)
    steps: list[BackupStep] = []
    last_id = ""
    for n in range(INCREMENTALS + 1):
        t0 = time.monotonic()
        change = change_round(server, n, base_rows) if n else "initial load"
        t1 = time.monotonic()
        flush = C.checkpoint(server)
        if n:
            C.log(f"  round {n} of changes: {t1 - t0:.1f}s, checkpoint {flush:.1f}s")
        kind = "full" if n == 0 else "incremental"
        # backup ids have one-second resolution
        while datetime.now(UTC).strftime("%Y%m%dT%H%M%S") == last_id[:15]:
            time.sleep(0.1)
        t0 = time.monotonic()
        m = run_backup(BackupRequest(catalog=catalog, target=target, kind=kind, public_keys=[public_key]))
        seconds = time.monotonic() - t0
        last_id = m.backup_id
        steps.append(BackupStep(m.backup_id, m.kind, m.raw_bytes, m.stored_bytes, seconds, change))
        C.log(
            f"  {m.backup_id}: {m.kind}, {C.fmt_bytes(m.raw_bytes)} raw -> {C.fmt_bytes(m.stored_bytes)} "
            f"stored in {seconds:.1f}s"
        )
    return steps


# -- part 1: the two restores -------------------------------------------------------------------------------------


class Restores:
    def __init__(
        self,
        work: Path,
        catalog: Catalog,
        client: Any,
        private_key: str,
        passphrase: str,
        expected: dict[str, int],
    ) -> None:
        self.work = work
        self.catalog = catalog
        self.client = client
        self.private_key = private_key
        self.passphrase = passphrase
        self.expected = expected
        self.tool = detect_tool("mariabackup")
        self.seq = 0

    def _fresh(self, name: str) -> Path:
        self.seq += 1
        path = self.work / f"r{self.seq}-{name}"
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def _start_and_verify(self, run: RtoRun, datadir: Path, basedir: Path, started: float) -> None:
        """Start a server on the restored datadir (inside the clock), then compare checksums (outside)."""
        t0 = time.monotonic()
        server = SandboxServer.on_datadir(datadir, basedir, server_id=100 + self.seq, log_bin=False)
        try:
            server.start()
            run.phases["start"] = time.monotonic() - t0
            run.seconds = time.monotonic() - started
            got = table_checksums(server, [DATABASE])
        finally:
            server.stop()
        run.mismatched = sorted(
            k for k in self.expected.keys() | got.keys() if self.expected.get(k) != got.get(k)
        )
        run.data_ok = not run.mismatched

    def ours(
        self, parallel_downloads: int | None = None, move_back: bool = True, label: str = "ours"
    ) -> RtoRun:
        base = self._fresh("ours")
        datadir = base / "data"
        run = RtoRun(label, 0.0, 0.0, {})
        extra = {"plan+checks": 0.0}
        real = {
            "run_step": prepare.run_step,
            "fetch_one": restore_mod.fetch_one,
            "plan_chain": restore_mod.plan_chain,
            "check_target": restore_mod.check_target,
            "_check_not_archived": restore_mod._check_not_archived,
            "_prepare_tool": restore_mod._prepare_tool,
        }

        def timed(fn: Callable[..., Any], phase: str) -> Callable[..., Any]:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                t0 = time.monotonic()
                try:
                    return fn(*args, **kwargs)
                finally:
                    extra[phase] += time.monotonic() - t0

            return wrapper

        def timed_step(tool: Any, step: PrepareStep, tuning: Any) -> Any:
            result = real["run_step"](tool, step, tuning)
            run.prepare_steps.append((_step_name(len(run.prepare_steps)), result.seconds))
            return result

        def timed_fetch(*args: Any, **kwargs: Any) -> Any:
            t0 = time.monotonic()
            result = real["fetch_one"](*args, **kwargs)
            run.fetch_seconds.append(time.monotonic() - t0)
            return result

        # Wrap (never change) what restore() calls, to split its wall time into phases.
        prepare.run_step = timed_step
        restore_mod.fetch_one = timed_fetch
        for name in ("plan_chain", "check_target", "_check_not_archived", "_prepare_tool"):
            setattr(restore_mod, name, timed(real[name], "plan+checks"))
        _sync()
        cpu0 = _cpu()
        started = time.monotonic()
        try:
            report = restore_mod.restore(
                restore_mod.RestoreRequest(
                    catalog=self.catalog,
                    target_datadir=datadir,
                    private_key=self.private_key,
                    passphrase=self.passphrase,
                    use_memory=None,
                    parallel_downloads=parallel_downloads,
                    move_back=move_back,
                )
            )
        finally:
            prepare.run_step = real["run_step"]
            for name, fn in real.items():
                if name != "run_step":
                    setattr(restore_mod, name, fn)
        restored = time.monotonic()
        run.cpu_seconds = _cpu() - cpu0
        run.phases = {
            "plan+checks": extra["plan+checks"],
            "fetch+decrypt+decompress+extract": report.timings.get("fetch_extract", 0.0),
            "prepare": report.timings.get("prepare", 0.0),
            "move-back" if move_back else "copy-back": report.timings.get("copy_back", 0.0),
            "scratch cleanup": report.timings.get("scratch_cleanup", 0.0),
        }
        run.phases["other"] = restored - started - sum(run.phases.values())
        run.prepare_argv = report.prepare_argv
        try:
            self._start_and_verify(run, datadir, base / "srv", started)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        return run

    def baseline(self, chain: list[Manifest]) -> RtoRun:
        base = self._fresh("baseline")
        dl, dec, raw, ext = (base / d for d in ("download", "decrypted", "decompressed", "extracted"))
        for d in (dl, dec, raw, ext):
            d.mkdir()
        datadir = base / "data"
        run = RtoRun("baseline", 0.0, 0.0, {})
        names = [f"{i}-{m.backup_id}" for i, m in enumerate(chain)]
        dirs = [ext / n for n in names]
        _sync()
        cpu0 = _cpu()
        started = time.monotonic()
        try:
            t0 = time.monotonic()
            for m, n in zip(chain, names, strict=True):
                obj = m.backup_object
                resp = self.client.get_object(Bucket=BUCKET, Key=obj.key)
                with open(dl / f"{n}.xbstream.zst.gpg", "wb") as fh:
                    for chunk in resp["Body"].iter_chunks(8 * C.MiB):
                        fh.write(chunk)
            run.phases["download"] = time.monotonic() - t0

            t0 = time.monotonic()
            with GpgHome() as gpg:
                gpg.import_private_key(self.private_key, self.passphrase)
                for n in names:
                    fd = passphrase_pipe(self.passphrase)
                    try:
                        argv = gpg.decrypt_argv(fd)
                        script = f"{C.quote(argv)} < {dl / n}.xbstream.zst.gpg > {dec / n}.xbstream.zst"
                        C.run_measured(C.shell_pipeline(script), pass_fds=(fd,)).check(f"gpg --decrypt {n}")
                    finally:
                        os.close(fd)
            run.phases["decrypt"] = time.monotonic() - t0

            t0 = time.monotonic()
            for n in names:
                argv = ["zstd", "-d", "-q", f"{dec / n}.xbstream.zst", "-o", f"{raw / n}.xbstream"]
                C.run_measured(argv).check(f"zstd -d {n}")
            run.phases["decompress"] = time.monotonic() - t0

            t0 = time.monotonic()
            for n, d in zip(names, dirs, strict=True):
                d.mkdir()
                script = f"{C.quote(extract_argv(self.tool, str(d)))} < {raw / n}.xbstream"
                C.run_measured(C.shell_pipeline(script)).check(f"mbstream -x {n}")
            run.phases["extract"] = time.monotonic() - t0

            t0 = time.monotonic()
            for step in prepare_steps(self.tool, str(dirs[0]), [str(d) for d in dirs[1:]]):
                argv = prepare_argv(self.tool, step)  # no tuning: the tool's default memory
                s0 = time.monotonic()
                C.run_measured(argv).check(_step_name(len(run.prepare_steps)))
                run.prepare_steps.append((_step_name(len(run.prepare_steps)), time.monotonic() - s0))
                run.prepare_argv.append(argv)
            run.phases["prepare"] = time.monotonic() - t0

            t0 = time.monotonic()
            datadir.mkdir()
            argv = copy_back_argv(self.tool, str(dirs[0]), str(datadir), move=False)
            C.run_measured(argv).check("copy-back")
            run.phases["copy-back"] = time.monotonic() - t0
            run.cpu_seconds = _cpu() - cpu0
            run.intermediate_bytes = sum(C.tree_bytes(d) for d in (dl, dec, raw))
            self._start_and_verify(run, datadir, base / "srv", started)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        return run


def _step_name(index: int) -> str:
    return "prepare the full" if index == 0 else f"apply incremental {index}"


# -- part 2: prepare memory ----------------------------------------------------------------------------------------


class WriteLoad(threading.Thread):
    """OLTP-style point UPDATEs: each statement rewrites the payload of LOAD_ROWS random events rows
    (scattered over the whole table), one statement after another until stopped."""

    def __init__(self, server: SandboxServer, max_id: int, seed: int = 42) -> None:
        super().__init__(name="write-load", daemon=True)
        self.server = server
        self.max_id = max_id
        self.random = random.Random(seed)
        self.rows = 0
        self.statements = 0
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            conn = self.server.connect(DATABASE)
            try:
                cur = conn.cursor()
                while not self._stop_event.is_set():
                    ids = ",".join(str(i) for i in self.random.sample(range(1, self.max_id + 1), LOAD_ROWS))
                    cur.execute(
                        "UPDATE events SET payload = REVERSE(payload), kind = MOD(kind + 1, 12)"
                        f" WHERE id IN ({ids})"
                    )
                    self.rows += cur.rowcount
                    self.statements += 1
            finally:
                conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join()
        if self.error:
            raise RuntimeError(f"write load failed: {self.error!r}") from self.error


def restart_with_big_redo(server: SandboxServer) -> None:
    server.stop()
    server.extra_args.append(f"--innodb-log-file-size={BIG_REDO_LOG}")
    server.start()
    size = int(server.query("SELECT @@innodb_log_file_size")[0][0])
    C.log(f"  source restarted with innodb_log_file_size = {C.fmt_bytes(size)}")


def data_bytes(datadir: Path) -> int:
    """What mariabackup copies: the datadir without the server's own redo log."""
    redo = sum(p.stat().st_size for p in datadir.glob("ib_logfile*"))
    return C.tree_bytes(datadir) - redo


def big_redo_backup(
    work: Path, server: SandboxServer, tool: ToolVersion, redo_target: int, result: MemoryResult
) -> Path:
    """A backup of ``server`` taken under a write load, with at least ``redo_target`` bytes of copied redo.

    ``mariabackup --backup --stream | mbstream -x``, with the bench between the two: once half of the
    data has passed, it stops reading the stream (a slow destination) until the server has written
    ``redo_target`` (+5 %) of redo since the backup started. mariabackup keeps copying the redo log
    meanwhile (into a temporary file, streamed last), so all of it lands in the backup's ib_logfile0.
    """
    creds = server.write_client_defaults(work / "client.cnf")
    result.data_bytes = data_bytes(server.datadir)
    result.hold_after = result.data_bytes // 2
    for d in ("lsn", "scratch", "backup"):
        (work / d).mkdir()
    backup_dir = work / "backup"
    opts = BackupOptions(
        datadir=str(server.datadir),
        lsn_dir=str(work / "lsn"),
        scratch_dir=str(work / "scratch"),
        parallel=2,
    )
    argv = backup_argv(tool, str(creds), opts)
    log_file = work / "mariabackup.log"
    load = WriteLoad(server, C.max_id(server, "events", DATABASE))
    gate = threading.Event()
    pumped = {"bytes": 0}
    procs: list[subprocess.Popen[bytes]] = []
    lsn0 = C.lsn_current(server)
    started = time.monotonic()
    load.start()
    try:
        with open(log_file, "wb") as log_fh:
            producer = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log_fh, start_new_session=True
            )
            procs.append(producer)
            consumer = subprocess.Popen(
                extract_argv(tool, str(backup_dir)),
                stdin=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            procs.append(consumer)

        def pump() -> None:
            assert producer.stdout is not None and consumer.stdin is not None
            try:
                while chunk := os.read(producer.stdout.fileno(), C.MiB):
                    consumer.stdin.write(chunk)
                    pumped["bytes"] += len(chunk)
                    if pumped["bytes"] >= result.hold_after and not gate.is_set():
                        gate.wait()
            finally:
                consumer.stdin.close()

        pumper = threading.Thread(target=pump, name="gate", daemon=True)
        pumper.start()
        deadline = started + MAX_HOLD_SECONDS
        goal = int(redo_target * 1.05)
        while producer.poll() is None and time.monotonic() < deadline:
            if C.lsn_current(server) - lsn0 >= goal:
                break
            time.sleep(0.5)
        result.hold_seconds = time.monotonic() - started
        load.stop()  # the target is reached: the rest of the backup runs without the load
        result.lsn_delta = C.lsn_current(server) - lsn0
        C.log(
            f"  {C.fmt_bytes(result.lsn_delta)} of redo written in {result.hold_seconds:.0f}s "
            f"({C.fmt_bytes(pumped['bytes'])} of the stream passed); letting the backup finish"
        )
        gate.set()
        rc = producer.wait()
        pumper.join()
        consumer_err = consumer.stderr.read() if consumer.stderr else b""
        consumer.wait()
        result.backup_seconds = time.monotonic() - started
        if rc != 0:
            raise RuntimeError(f"mariabackup --backup exited {rc}: {log_file.read_text()[-1500:]}")
        if consumer.returncode != 0:
            raise RuntimeError(f"mbstream -x exited {consumer.returncode}: {consumer_err.decode()[-1500:]}")
    finally:
        gate.set()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        load.stop()
    result.load_rows = load.rows
    result.load_rate = result.lsn_delta / result.hold_seconds if result.hold_seconds else 0.0
    found = _COPIED.findall(log_file.read_text(errors="replace"))
    if found:
        result.reported_from, result.reported_to = (int(x) for x in found[-1])
    result.redo_bytes = prepare.redo_bytes(backup_dir)
    C.log(
        f"  backup took {result.backup_seconds:.0f}s; copied redo: ib_logfile0 {C.fmt_bytes(result.redo_bytes)}, "
        f"mariabackup reports {C.fmt_bytes(result.reported_bytes)}"
    )
    return backup_dir


_RECOVERY_LINES = ("Starting crash recovery", "Multi-batch recovery needed", "End of log", "To recover:")


def _batch_info(stderr: str) -> tuple[int, int, list[str]]:
    """(multi-batch messages, recovery batches, the recovery lines) from a prepare's stderr.

    MariaDB logs one "To recover: ..." line as it applies each batch ("To recover: LSN a/b; N pages"
    for every batch but the last, "To recover: N pages" for the last), so their count is the number
    of batches; "Multi-batch recovery needed at LSN x" says the parsed redo did not fit in memory.
    """
    lines = [line.split("[Note] ", 1)[-1].strip() for line in stderr.splitlines()]
    multi = sum("Multi-batch recovery needed" in line for line in lines)
    batches = sum("To recover:" in line for line in lines)
    recovery = [line for line in lines if any(k in line for k in _RECOVERY_LINES)]
    return multi, batches, recovery


def prepare_runs(work: Path, tool: ToolVersion, backup_dir: Path, result: MemoryResult, repeats: int) -> None:
    result.available = prepare.available_memory()
    result.sized = prepare.size_use_memory(result.redo_bytes, result.available)
    variants = {"sized": result.sized, "default": prepare.DEFAULT_USE_MEMORY}
    order = ["default", "sized"]
    for r in range(repeats):
        for variant in order if r % 2 == 0 else order[::-1]:
            scratch = work / f"prep-{variant}-{r}"
            shutil.rmtree(scratch, ignore_errors=True)
            C.log(f"  prepare ({variant}, --use-memory={variants[variant] // C.MiB}M) run {r + 1}: copying")
            subprocess.run(["cp", "-a", "--reflink=auto", str(backup_dir), str(scratch)], check=True)
            _sync()
            try:
                step = PrepareStep(str(scratch), None, apply_log_only=False)
                argv = prepare_argv(tool, step, PrepareTuning(use_memory_bytes=variants[variant]))
                m = C.run_measured(argv)
                m.check(f"mariabackup --prepare ({variant})")
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            stderr = m.stderr.decode(errors="replace")
            multi, batches, recovery = _batch_info(stderr)
            result.runs.append(
                PrepareRun(variant, variants[variant], m.seconds, m.cpu_seconds, multi, batches, recovery)
            )
            C.log(f"    {m.seconds:.1f}s wall, {m.cpu_seconds:.1f}s CPU; {batches} recovery batch(es)")


_PAGES = re.compile(r"To recover: (?:LSN \d+/\d+; )?(\d+) pages")


def _batch_pages(recovery_lines: list[str]) -> list[int]:
    """Pages per recovery batch, from the "To recover: ..." lines."""
    return [int(m.group(1)) for line in recovery_lines if (m := _PAGES.search(line))]


def _abridge(lines: list[str], head: int = 5, tail: int = 2) -> list[str]:
    if len(lines) <= head + tail + 1:
        return lines
    return lines[:head] + [f"... {len(lines) - head - tail} more ..."] + lines[-tail:]


# -- report --------------------------------------------------------------------------------------------------------


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


def report(
    *,
    command: str,
    dataset: C.Dataset,
    facts: dict[str, str],
    loads: tuple[str, str],
    chain: list[BackupStep],
    rto: dict[str, list[RtoRun]],
    rto_error: str | None,
    mem: MemoryResult | None,
    redo_target: int,
    stock_moto: bool = False,
) -> str:
    lines: list[str] = [
        "## Restore RTO and prepare memory",
        "",
        f"`{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        f"- Dataset: {C.fmt_bytes(dataset.innodb_bytes)} of InnoDB data "
        f"({', '.join(f'{k} {C.fmt_bytes(v)}' for k, v in dataset.table_bytes.items())}; "
        f"{dataset.rows:,} rows in orders and events), datadir {C.fmt_bytes(dataset.datadir_bytes)}"
        + (f", loaded in {dataset.seconds:.0f} s." if dataset.seconds else " (reused)."),
        f"- Machine: {facts['cpus']} CPUs, {facts['memory']}, {facts['os']}; mariabackup {facts['mariabackup']}; "
        f"{facts['zstd']}; {facts['gpg']}; Python {facts['python']}. S3 is moto's `ThreadedMotoServer` over "
        "HTTP on 127.0.0.1, in a child process"
        + (
            " (stock: every ranged GET copies the whole object)."
            if stock_moto
            else "; stock moto reads and copies the whole object for every ranged GET (a 256 MiB object "
            "read as 8 MiB ranges took 6.0 s against 0.3 s for one GET, measured once while writing this "
            "bench), so the bench's moto serves a range by reading only that range, as S3 does."
        ),
        f"- Load average (1/5/15 min) before: {loads[0]}; after: {loads[1]}.",
        "",
        "### 1. RTO: full + 6 incrementals, encrypted in S3, to a started server",
        "",
    ]
    if chain:
        rows = [
            [s.backup_id, s.kind, C.fmt_bytes(s.raw_bytes), C.fmt_bytes(s.stored_bytes), f"{s.seconds:.1f}"]
            for s in chain
        ]
        total_raw = sum(s.raw_bytes for s in chain)
        total_stored = sum(s.stored_bytes for s in chain)
        rows.append(["total", "", C.fmt_bytes(total_raw), C.fmt_bytes(total_stored), ""])
        lines += [
            "The chain (`run_backup()`: mariabackup -> zstd -3 -> gpg -> S3 multipart). Before each "
            f"incremental: {chain[1].change if len(chain) > 1 else ''}; then the source flushes its dirty "
            "pages and checkpoints (`_common.checkpoint`), as a page cleaner would have between two backups "
            "taken hours apart, so each incremental carries page deltas (without it, MariaDB's idle page "
            "cleaner leaves the checkpoint where it was and every incremental re-copies all the redo since).",
            "",
            C.markdown_table(["Backup", "Kind", "Raw (xbstream)", "Stored", "Backup s"], rows),
            "",
        ]
    lines += [
        f"- (ours) `core.restore.restore()` with its defaults: parallel ranged GETs ({PARALLEL_DOWNLOADS} objects "
        "(`default_parallel_downloads()`: one per core, 2 to 4) x 4 ranges of 8 MiB in flight), "
        "each object's bytes hashed (sha256) in Python and written into `gpg --decrypt | zstd -d | mbstream -x` "
        "(OS pipes: no decrypted or decompressed byte passes through Python), nothing staged; prepare with "
        "`--use-memory` sized from the redo, each applied incremental directory removed in the background while "
        "the next step runs; `--move-back`; start.",
        "- (baseline) one step after another: `get_object` of each object to a file; per object `gpg --decrypt` "
        "to a file, `zstd -d` to a file, `mbstream -x` into its directory; `mariabackup --prepare` then "
        "`--prepare --incremental-dir` x6 with the default memory; `--copy-back`; start.",
        "",
    ]
    ours, base = rto.get("ours", []), rto.get("baseline", [])
    runs_all = [r for runs in rto.values() for r in runs]
    if runs_all:
        phase_names: list[str] = []
        for r in runs_all:
            phase_names += [p for p in r.phases if p not in phase_names]
        headers = ["Phase (s)"] + [
            r.method + (f" #{i + 1}" if len(rto[r.method]) > 1 else "")
            for r in runs_all
            for i in [rto[r.method].index(r)]
        ]
        rows = [["**wall, to a started server**"] + [f"**{r.seconds:.2f}**" for r in runs_all]]
        rows += [[p] + [f"{r.phases[p]:.2f}" if p in r.phases else "" for r in runs_all] for p in phase_names]
        rows.append(["CPU s (this process + its tools)"] + [f"{r.cpu_seconds:.1f}" for r in runs_all])
        rows.append(
            ["CHECKSUM TABLE vs source"]
            + ["equal" if r.data_ok else f"DIFFER: {', '.join(r.mismatched)}" for r in runs_all]
        )
        lines += [C.markdown_table(headers, rows), ""]
        step_names = [n for n, _ in (ours or base)[0].prepare_steps]
        step_rows = []
        for i, name in enumerate(step_names):
            row = [name]
            for runs in (ours, base):
                vals = [r.prepare_steps[i][1] for r in runs if i < len(r.prepare_steps)]
                row.append(" / ".join(f"{v:.2f}" for v in vals) or "-")
            step_rows.append(row)
        lines += [
            "Prepare steps (s):",
            "",
            C.markdown_table(["Step", "ours", "baseline"], step_rows),
            "",
        ]
    o = C.median([r.seconds for r in ours]) if ours else None
    b = C.median([r.seconds for r in base]) if base else None
    rto_ratio = _ratio(b, o)
    data_ok = all(r.data_ok for r in runs_all) if ours and base else None
    if runs_all:
        if rto_ratio is not None:
            lines.append(
                f"- **baseline / ours = {rto_ratio:.2f}** (medians of {len(base)} and {len(ours)} runs: "
                f"{b:.2f} s / {o:.2f} s)."
            )
        if ours:
            argv = ours[0].prepare_argv[0] if ours[0].prepare_argv else []
            mem_flag = next((a for a in argv if a.startswith("--use-memory")), "(none)")
            fetch = ", ".join(f"{s:.1f}" for s in ours[0].fetch_seconds)
            lines.append(
                "- `CPU s` counts this process and the tools it waited for, not gpg-agent (a daemon). The agent "
                "derives the key once per object: ~0.14 s in all with the minimum S2K count the restore's throwaway "
                "home uses (`crypto._cheap_agent_protection`), 2.6 s (measured once, 7 objects) with its calibrated "
                "default."
            )
            lines.append(
                f"- ours: `fetch+...` includes the throwaway GNUPGHOME and the private key's import; per-object "
                f"stream times ({PARALLEL_DOWNLOADS} objects at a time, in completion order): {fetch} s, the "
                f"full being the critical path. Prepare ran with `{mem_flag}` (sized from the small redo of "
                "these backups). `scratch cleanup` is what is left after the move-back, before `restore()` "
                "returns: waiting for the removal of the last applied incremental, and removing the scratch "
                "directory.",
            )
        if base:
            lines.append(
                f"- baseline staged {C.fmt_bytes(base[0].intermediate_bytes)} of intermediate files "
                "(downloaded, decrypted, decompressed) besides the extracted directories."
            )
        if VARIANT_SERIAL in rto or VARIANT_COPY in rto:
            lines.append(
                f"- `{VARIANT_SERIAL}`: ours fetching one object at a time (each still with parallel ranged "
                f"GETs); `{VARIANT_FOUR}` (when the default is not 4): four at a time; "
                f"`{VARIANT_COPY}`: ours with `move_back=False`. One run each, to see what parallel "
                "objects and move-back are worth."
            )
        lines.append("")
    if rto_error:
        lines += [f"- RTO failed: `{rto_error[:800]}`", ""]

    lines += ["### 2. Prepare time against `--use-memory`", ""]
    mem_ratio = None
    mem_ok: bool | None = None
    if mem is not None and mem.redo_bytes:
        reported = C.fmt_bytes(mem.reported_bytes) if mem.reported_bytes is not None else "n/a"
        lines += [
            f"- Copied redo: **{C.fmt_bytes(mem.redo_bytes)}** (`ib_logfile0` of the extracted backup; "
            f'mariabackup reported "Redo log (from LSN {mem.reported_from} to {mem.reported_to}) was copied" '
            f"= {reported}); target >= {C.fmt_bytes(redo_target)}.",
            f"- How: source restarted with `--innodb-log-file-size={BIG_REDO_LOG}`; one connection ran "
            f"`UPDATE events SET payload = REVERSE(payload), ... WHERE id IN (<{LOAD_ROWS} random ids>)` "
            f"statements back to back ({mem.load_rows:,} rows, {C.fmt_bytes(mem.load_rate)}/s of redo) while "
            f"`mariabackup --backup --parallel=2 --stream=xbstream | mbstream -x` ran; the bench stopped reading "
            f"the stream after {C.fmt_bytes(mem.hold_after)} (half of the {C.fmt_bytes(mem.data_bytes)} of data) "
            f"until the server had written the target redo ({mem.hold_seconds:.0f} s), as a slow destination "
            f"would; the backup took {mem.backup_seconds:.0f} s.",
            f"- sized = `prepare.size_use_memory({mem.redo_bytes}, available_memory()={mem.available})` = "
            f"{C.fmt_bytes(mem.sized)}; default = `--use-memory=100M` (`prepare.DEFAULT_USE_MEMORY`; "
            "mariabackup's built-in default is 96 MiB). Each prepare ran on a fresh `cp -a` copy of the "
            "extracted backup, alternating the order.",
            "",
        ]
        rows = []
        for variant in ("sized", "default"):
            runs = [r for r in mem.runs if r.variant == variant]
            if not runs:
                continue
            rows.append(
                [
                    variant,
                    f"{runs[0].use_memory // C.MiB} MiB",
                    len(runs),
                    C.fmt_seconds(C.median([r.seconds for r in runs])),
                    " / ".join(f"{r.seconds:.1f}" for r in runs),
                    C.fmt_seconds(C.median([r.cpu_seconds for r in runs])),
                    " / ".join("yes" if r.multi_batch else "no" for r in runs),
                    " / ".join(str(r.batches) for r in runs),
                ]
            )
        lines += [
            C.markdown_table(
                [
                    "Prepare",
                    "--use-memory",
                    "Runs",
                    "Wall s (median)",
                    "Wall s (each)",
                    "CPU s",
                    '"Multi-batch recovery needed"',
                    "Recovery batches",
                ],
                rows,
            ),
            "",
        ]
        sized = C.median([r.seconds for r in mem.runs if r.variant == "sized"])
        default = C.median([r.seconds for r in mem.runs if r.variant == "default"])
        mem_ratio = _ratio(default, sized)
        if mem_ratio is not None:
            mem_ok = mem_ratio > 1.0 if mem.redo_bytes > prepare.DEFAULT_USE_MEMORY else None
        default_runs = [r for r in mem.runs if r.variant == "default"]
        sized_runs = [r for r in mem.runs if r.variant == "sized"]
        if default_runs and sized_runs:
            d, s = default_runs[0], sized_runs[0]
            d_pages = _batch_pages(d.recovery_lines)
            s_pages = _batch_pages(s.recovery_lines)
            per_batch = int(C.median(d_pages[:-1] or d_pages) or 0)
            lines += [
                f"- Why: with {d.use_memory // C.MiB} MiB the parsed redo does not fit, so recovery ran in "
                f'{d.batches} batches (one "To recover:" line each). The scattered updates make every batch '
                f"touch ~{per_batch:,} pages ({C.fmt_bytes(per_batch * 16 * C.KiB)}, more than the buffer pool), "
                f"so each batch reads those pages back from the data files and writes them out again: "
                f"{sum(d_pages):,} page applications in all. With {C.fmt_bytes(s.use_memory)} the whole redo "
                f"was parsed once and applied in {s.batches} batch(es) to {sum(s_pages):,} pages. Recovery "
                "lines of the first default and sized runs (mariabackup's stderr, abridged):",
                "",
                "```",
                *_abridge(d.recovery_lines),
                "---",
                *_abridge(s.recovery_lines),
                "```",
                "",
            ]
    if mem is not None and mem.error:
        lines += [f"- Prepare memory part failed: `{mem.error[:800]}`", ""]

    lines += [
        "### Targets",
        "",
        C.markdown_table(
            ["Target", "Measured", "Goal", "Result"],
            [
                [
                    "RTO baseline / ours (wall)",
                    _fmt_ratio(rto_ratio),
                    f">= {TARGET_RTO_RATIO}",
                    _verdict(None if rto_ratio is None else rto_ratio >= TARGET_RTO_RATIO),
                ],
                [
                    "restored data equal to the source",
                    "yes" if data_ok else ("no" if data_ok is False else "n/a"),
                    "both methods",
                    _verdict(data_ok),
                ],
                [
                    "copied redo",
                    C.fmt_bytes(mem.redo_bytes) if mem else "n/a",
                    f">= {C.fmt_bytes(redo_target)}",
                    _verdict(None if not mem or not mem.redo_bytes else mem.redo_bytes >= redo_target),
                ],
                [
                    "prepare default / sized (wall)",
                    _fmt_ratio(mem_ratio),
                    "> 1.00 (redo > default memory)",
                    _verdict(mem_ok),
                ],
            ],
        ),
        "",
    ]
    return "\n".join(lines) + "\n"


# -- main ----------------------------------------------------------------------------------------------------------


def _attempt(what: str, fn: Callable[[], Any]) -> tuple[Any, str | None]:
    try:
        return fn(), None
    except Exception as exc:  # noqa: BLE001 - reported, and turned into exit status 1
        C.log(f"{what} FAILED: {type(exc).__name__}: {exc}")
        return None, f"{type(exc).__name__}: {exc}"


def _rto_run(rto: dict[str, list[RtoRun]], name: str, fn: Callable[[], RtoRun], repeat: int) -> str | None:
    C.log(f"restore ({name}) run {repeat + 1} ...")
    run, err = _attempt(f"restore ({name})", fn)
    if err:
        return f"{name}: {err}"
    rto.setdefault(name, []).append(run)
    phases = ", ".join(f"{k} {v:.1f}" for k, v in run.phases.items())
    C.log(f"  {run.seconds:.1f}s ({phases}); data {'equal' if run.data_ok else 'DIFFERS'}")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=600, help="MiB of InnoDB data (default 600)")
    parser.add_argument(
        "--redo-mb", type=int, default=1024, help="MiB of copied redo part 2 needs at least (default 1024)"
    )
    parser.add_argument(
        "--rto-repeats", type=int, default=2, help="restores per method, alternating (default 2)"
    )
    parser.add_argument(
        "--prepare-repeats", type=int, default=2, help="prepares per memory setting (default 2)"
    )
    parser.add_argument("--only", choices=("rto", "memory"), help="run one part only")
    parser.add_argument(
        "--investigate",
        action="store_true",
        help="also restore with ours one object at a time, and with copy-back instead of move-back",
    )
    parser.add_argument(
        "--stock-moto",
        action="store_true",
        help="keep moto's ranged GETs, which copy the whole object per range (S3 does not)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help=f"work in {C.BENCH_OUT / 'restore_rto'}, keep it, and reuse its dataset next time",
    )
    parser.add_argument("--write-docs", action="store_true", help=f"replace this section of {C.BENCH_DOC}")
    args = parser.parse_args(argv)

    command = f".venv/bin/python bench/restore_rto.py --size-mb {args.size_mb} --redo-mb {args.redo_mb}"
    for flag, value, default in (
        ("--rto-repeats", args.rto_repeats, 2),
        ("--prepare-repeats", args.prepare_repeats, 2),
    ):
        if value != default:
            command += f" {flag} {value}"
    if args.only:
        command += f" --only {args.only}"
    if args.stock_moto:
        command += " --stock-moto"
    if args.investigate:
        command += " --investigate"
    redo_target = args.redo_mb * C.MiB
    facts = C.system_facts()
    chain: list[BackupStep] = []
    rto: dict[str, list[RtoRun]] = {"ours": [], "baseline": []}
    rto_error: str | None = None
    mem: MemoryResult | None = None
    started = time.monotonic()
    with (
        C.workdir("restore_rto", args.keep) as work,
        C.dataset_server(work, args.size_mb * C.MiB, reuse=args.keep, database=DATABASE) as (server, dataset),
    ):
        C.log(
            f"dataset: {C.fmt_bytes(dataset.innodb_bytes)} of InnoDB data, datadir {C.fmt_bytes(dataset.datadir_bytes)}"
        )
        load_before = C.load_average()
        if args.only in (None, "rto"):
            with C.moto_s3(stock_ranges=args.stock_moto) as endpoint:
                client = make_s3_client(endpoint, C.S3_REGION, **C.S3_CREDENTIALS)
                client.create_bucket(Bucket=BUCKET)
                catalog = Catalog(S3Store(client, BUCKET), "bench", "c1", "h1")
                passphrase = secrets.token_urlsafe(24)
                keys = generate_key_pair("xbp bench <bench@example.invalid>", passphrase)
                C.log(f"part 1: a full + {INCREMENTALS} incrementals into {endpoint}/{BUCKET}")
                chain, rto_error = _attempt(
                    "the chain", lambda: build_chain(server, catalog, keys.public_key, dataset.rows)
                )
                if chain:
                    expected = table_checksums(server, [DATABASE])
                    restores = Restores(work, catalog, client, keys.private_key, passphrase, expected)
                    manifests = catalog.latest_chain()
                    methods: dict[str, Callable[[], RtoRun]] = {
                        "ours": restores.ours,
                        "baseline": lambda: restores.baseline(manifests),
                    }
                    for r in range(args.rto_repeats):
                        for name in ("ours", "baseline") if r % 2 == 0 else ("baseline", "ours"):
                            rto_error = _rto_run(rto, name, methods[name], r) or rto_error
                    if args.investigate:
                        variants: dict[str, Callable[[], RtoRun]] = {
                            VARIANT_SERIAL: lambda: restores.ours(parallel_downloads=1, label=VARIANT_SERIAL),
                            VARIANT_FOUR: lambda: restores.ours(parallel_downloads=4, label=VARIANT_FOUR),
                            VARIANT_COPY: lambda: restores.ours(move_back=False, label=VARIANT_COPY),
                        }
                        if PARALLEL_DOWNLOADS == 4:
                            del variants[VARIANT_FOUR]  # that is the default here
                        for name, fn in variants.items():
                            rto_error = _rto_run(rto, name, fn, 0) or rto_error
        if args.only in (None, "memory"):
            mem = MemoryResult()
            C.log(f"part 2: a backup with >= {C.fmt_bytes(redo_target)} of copied redo")
            tool = detect_tool("mariabackup")
            mem_work = work / "memory"
            mem_work.mkdir(exist_ok=True)

            def part2() -> None:
                assert mem is not None
                restart_with_big_redo(server)
                backup_dir = big_redo_backup(mem_work, server, tool, redo_target, mem)
                server.stop()  # nothing else runs while prepare is measured
                prepare_runs(mem_work, tool, backup_dir, mem, args.prepare_repeats)

            try:
                _, mem.error = _attempt("prepare memory", part2)
            finally:
                shutil.rmtree(mem_work, ignore_errors=True)
        load_after = C.load_average()
    C.log(f"finished in {time.monotonic() - started:.0f}s")

    text = report(
        command=command,
        dataset=dataset,
        facts=facts,
        loads=(load_before, load_after),
        chain=chain,
        rto=rto,
        rto_error=rto_error,
        mem=mem,
        redo_target=redo_target,
        stock_moto=args.stock_moto,
    )
    text += f"\nWhole benchmark: {time.monotonic() - started:.0f} s including the dataset load.\n"
    print(text)
    if args.write_docs:
        C.update_doc_section(SECTION, text)
        C.log(f"wrote the {SECTION} section of {C.BENCH_DOC}")
    failed = bool(rto_error) or (mem is not None and bool(mem.error))
    failed |= any(r.data_ok is False for runs in rto.values() for r in runs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
