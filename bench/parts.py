"""K-part backups (issue #19): backup and restore throughput with K = 1, 2 (4), CPU per GiB, peak
RSS, and the per-core cost of a restore against `gpg -d | zstd -d | mbstream -x` by hand.

    .venv/bin/python bench/parts.py [--size-mb 1024] [--repeats 3] [--ks 1,2] [--partitions 8] [--keep] [--write-docs]

One sandbox MariaDB holding at least ``--size-mb`` MiB of InnoDB data (the dataset of ``_common``),
a throwaway GPG key pair, a LocalStore (fsync'd files) per backup. In one invocation:

1. Per repetition, for each K in ``--ks`` (the order alternates between repetitions): ``run_backup``
   with ``max_parts=K`` (``part_min_bytes=0``; a K above the usable cores is forced past that cap),
   then ``restore()`` of that backup into an empty datadir (fetch + extract, prepare, move-back).
   Wall and CPU (this process's threads plus every waited-for child) and the sampled peak RSS of
   the process tree without the sandbox server; restore's fetch+extract phase separately (what K changes). The first restore
   of each K is started and its ``CHECKSUM TABLE`` of every table compared with the source's.
2. Pinned to one core (``os.sched_setaffinity``, inherited by every thread and child started after
   it): for each K the fetch + extract of the first backup alone (``fetch_one``) against the same
   objects by hand, ``gpg --decrypt < part | zstd -d | mbstream -x`` one after the other. CPU
   seconds per GiB of xbstream, and ours / by hand.

Ratios are against K=1 of the same repetition (medians over repetitions). Load average is recorded
before and after: on a shared 2-core machine the walls are noisy. Exit 0 unless a method failed or
a restore did not reproduce the source's data.
"""

from __future__ import annotations

import argparse
import os
import resource
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from xtrabackup_provider.core.backup import run as backup_run  # noqa: E402
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup  # noqa: E402
from xtrabackup_provider.core.catalog.backups import Catalog  # noqa: E402
from xtrabackup_provider.core.catalog.manifest import Manifest  # noqa: E402
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums  # noqa: E402
from xtrabackup_provider.core.db.server import MySQLTarget  # noqa: E402
from xtrabackup_provider.core.engine.tools import detect_tool  # noqa: E402
from xtrabackup_provider.core.pipeline.gpg import GpgHome, generate_key_pair  # noqa: E402
from xtrabackup_provider.core.restore.chain import RestoreRequest, fetch_one, restore  # noqa: E402
from xtrabackup_provider.core.storage.local import LocalStore  # noqa: E402

SECTION = "parts"
PASS_FD = 9
DATABASE = "bench"


@dataclass
class Run:
    k: str  # "1", "2", "2t" (K=2 with zstd threads = cores in each part)
    wall: float
    cpu: float
    rss: int
    extra: dict[str, float] = field(default_factory=dict)


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class PipelineRss(C.TreeRssSampler):
    """Peak RSS of this process and its children, leaving out the sandbox server's tree."""

    def __init__(self, server_pid: int | None) -> None:
        super().__init__(os.getpid())
        self.server_pid = server_pid

    def run(self) -> None:
        while not self._stop_event.is_set():
            skip = set(C._descendants(self.server_pid)) if self.server_pid else set()
            self.peak = max(self.peak, sum(C._rss(p) for p in C._descendants(self.pid) if p not in skip))
            self._stop_event.wait(self.interval)


SERVER_PID: int | None = None


def measured(fn: Callable[[], Any]) -> tuple[Any, float, float, int]:
    """fn's result, wall, CPU (threads + waited-for children), sampled peak RSS of the process tree
    without the sandbox server."""
    sampler = PipelineRss(SERVER_PID)
    sampler.start()
    cpu0, t0 = _cpu(), time.monotonic()
    try:
        result = fn()
    finally:
        peak = sampler.stop()
    return result, time.monotonic() - t0, _cpu() - cpu0, peak


class Bench:
    def __init__(self, work: Path, server: SandboxServer, public_key: str, private_key: str, passphrase: str):
        self.work, self.server = work, server
        self.public_key, self.private_key, self.passphrase = public_key, private_key, passphrase
        self.target = MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)
        self.expected = table_checksums(server, [DATABASE])
        self.first: dict[str, tuple[Catalog, Manifest]] = {}
        self.n = 0

    def backup(self, method: str) -> tuple[Run, Catalog, Manifest]:
        k = int(method.rstrip("t"))
        self.n += 1
        catalog = Catalog(LocalStore(self.work / f"store{self.n}"), "bench", "c1", "h1")
        request = BackupRequest(
            catalog=catalog,
            target=self.target,
            kind="full",
            public_keys=[self.public_key],
            max_parts=k,
            part_min_bytes=0,
            zstd_threads=backup_run.usable_cores() if method.endswith("t") else 0,
        )
        cores = backup_run.usable_cores
        if k > cores():
            backup_run.usable_cores = lambda: k  # type: ignore[assignment]  # forced past the core cap
        try:
            manifest, wall, cpu, rss = measured(lambda: run_backup(request))
        finally:
            backup_run.usable_cores = cores  # type: ignore[assignment]
        assert isinstance(manifest, Manifest)
        parts = len(manifest.objects) - 1 if manifest.format_version == 2 else 1
        if parts != k:
            raise RuntimeError(f"asked for {k} parts, the backup has {parts}")
        return (
            Run(method, wall, cpu, rss, {"raw": manifest.raw_bytes, "stored": manifest.stored_bytes}),
            catalog,
            manifest,
        )

    def restore(self, k: str, catalog: Catalog, manifest: Manifest, check: bool) -> Run:
        base = self.work / f"restore{self.n}"
        target = base / "data"
        request = RestoreRequest(
            catalog=catalog,
            target_datadir=target,
            backup_id=manifest.backup_id,
            private_key=self.private_key,
            passphrase=self.passphrase,
        )
        subprocess.run(["sync"], check=False)
        report, wall, cpu, rss = measured(lambda: restore(request))
        run = Run(k, wall, cpu, rss, {"fetch_extract": report.timings["fetch_extract"]})
        if check:
            with SandboxServer.on_datadir(target, base, server_id=900 + self.n) as restored:
                restored.start()
                got = table_checksums(restored, [DATABASE])
            if got != self.expected:
                raise RuntimeError(
                    f"K={k}: the restored data differs from the source: {got} != {self.expected}"
                )
            C.log(f"  K={k}: restored CHECKSUM TABLE equal to the source ({len(got)} tables)")
        shutil.rmtree(base, ignore_errors=True)
        return run

    def pinned_fetch(self, k: str) -> tuple[Run, Run]:
        """fetch_one of the first K-part backup on one core, and the same objects by hand."""
        catalog, manifest = self.first[k]
        store = catalog.store
        assert isinstance(store, LocalStore)
        tool = detect_tool(manifest.engine_flavour, None)
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(before)})
        try:
            with GpgHome() as gpg:
                gpg.import_private_key(self.private_key, self.passphrase)
                ours_dir = self.work / f"pin-ours{k}"
                ours_dir.mkdir()
                _, wall, cpu, rss = measured(lambda: fetch_one(catalog, manifest, tool, ours_dir, gpg))
                ours = Run(k, wall, cpu, rss)
                shutil.rmtree(ours_dir)
                hand_dir = self.work / f"pin-hand{k}"
                hand_dir.mkdir()
                secret = self.work / "passphrase"
                secret.touch(0o600)
                secret.write_text(self.passphrase + "\n")
                decrypt = C.quote(gpg.decrypt_argv(PASS_FD))
                # each gpg reads the passphrase from fd PASS_FD, opened afresh on the 0600 file
                script = "\n".join(
                    f"exec {PASS_FD}< {C.quote([str(secret)])}\n"
                    f"{decrypt} < {C.quote([str(store.root / o.key)])} | zstd -d -c | mbstream -x -C {hand_dir}"
                    for o in manifest.streams
                )
                try:
                    m = C.run_measured(C.shell_pipeline(script))
                    m.check("gpg -d | zstd -d | mbstream -x")
                finally:
                    secret.unlink()
                hand = Run(k, m.seconds, m.cpu_seconds, m.tree_rss_peak)
                shutil.rmtree(hand_dir)
        finally:
            os.sched_setaffinity(0, before)
        return ours, hand


def _med(values: list[float]) -> float:
    m = C.median(values)
    assert m is not None
    return m


def report(
    ks: list[str],
    backups: list[Run],
    restores: list[Run],
    pinned: dict[str, tuple[Run, Run]],
    dataset: C.Dataset,
    load: tuple[str, str],
    argv: list[str],
) -> str:
    raw_gib = _med([r.extra["raw"] for r in backups if r.k == ks[0]]) / C.GiB

    def rows(runs: list[Run], key: Callable[[Run], float]) -> dict[str, list[float]]:
        return {k: [key(r) for r in runs if r.k == k] for k in ks}

    def ratios(runs: list[Run], key: Callable[[Run], float]) -> dict[str, float]:
        per = rows(runs, key)
        return {k: _med([a / b for a, b in zip(per[k], per[ks[0]], strict=True)]) for k in ks}

    b_wall, r_wall = ratios(backups, lambda r: r.wall), ratios(restores, lambda r: r.wall)
    f_wall = ratios(restores, lambda r: r.extra["fetch_extract"])
    table = []
    for k in ks:
        b = [r for r in backups if r.k == k]
        r = [x for x in restores if x.k == k]
        table.append(
            [
                f"K={k}",
                C.fmt_seconds(_med([x.wall for x in b])),
                f"{b_wall[k]:.2f}",
                f"{_med([x.cpu for x in b]) / raw_gib:.1f}",
                C.fmt_bytes(_med([x.rss for x in b])),
                C.fmt_seconds(_med([x.extra["fetch_extract"] for x in r])),
                f"{f_wall[k]:.2f}",
                C.fmt_seconds(_med([x.wall for x in r])),
                f"{r_wall[k]:.2f}",
                f"{_med([x.cpu for x in r]) / raw_gib:.1f}",
                f"{sum(1 for a, c in zip(r, [x for x in restores if x.k == ks[0]], strict=True) if a.extra['fetch_extract'] < c.extra['fetch_extract'])} of {len(r)}",
            ]
        )
    pin_rows = [
        [
            f"K={k}",
            f"{ours.cpu / raw_gib:.2f}",
            f"{hand.cpu / raw_gib:.2f}",
            f"{ours.cpu / hand.cpu:.2f}",
            C.fmt_seconds(ours.wall),
            C.fmt_seconds(hand.wall),
        ]
        for k, (ours, hand) in pinned.items()
    ]
    reps = len(backups) // len(ks)
    return "\n".join(
        [
            "## K-part backups",
            "",
            f"Command: `.venv/bin/python bench/parts.py {' '.join(argv)}`. Dataset: {C.fmt_bytes(dataset.innodb_bytes)} "
            f"of InnoDB data (datadir {C.fmt_bytes(dataset.datadir_bytes)}; {raw_gib:.2f} GiB of xbstream). "
            f"LocalStore (fsync'd files), gpg-encrypted, zstd level 3. {reps} repetitions, K order alternating; "
            f"medians; ratios are paired with K={ks[0]} of the same repetition. Load average (1, 5, 15 min) "
            f"before: {load[0]}; after: {load[1]} on {os.cpu_count()} cores: **the machine was shared**, "
            "walls are noisy, read the paired ratios.",
            "",
            C.markdown_table(
                [
                    "K",
                    "backup wall",
                    f"/ K={ks[0]}",
                    "backup CPU s/GiB",
                    "backup peak RSS",
                    "restore fetch+extract",
                    f"/ K={ks[0]}",
                    "restore total",
                    f"/ K={ks[0]}",
                    "restore CPU s/GiB",
                    f"fetch+extract faster than K={ks[0]}",
                ],
                table,
            ),
            "",
            "Pinned to one core (fetch + extract of the first backup of each K, `fetch_one`, against "
            "`gpg --decrypt < object | zstd -d | mbstream -x` by hand on the same objects, one after the other):",
            "",
            C.markdown_table(
                ["K", "ours CPU s/GiB", "by hand CPU s/GiB", "ours / by hand", "ours wall", "by hand wall"],
                pin_rows,
            ),
        ]
    )


def partition(server: SandboxServer, partitions: int) -> None:
    """The split balances whole files: three tables cannot make four parts, partitions can."""
    if partitions <= 1:
        return
    for (table,) in server.query(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (DATABASE,)
    ):
        (have,) = server.query(
            "SELECT COUNT(*) FROM information_schema.partitions WHERE table_schema = %s AND table_name = %s"
            " AND partition_name IS NOT NULL",
            (DATABASE, table),
        )[0]
        if have != partitions:
            C.log(f"  partitioning {table} into {partitions} (KEY(id))")
            server.execute_script(
                f"ALTER TABLE `{table}` PARTITION BY KEY(id) PARTITIONS {partitions}", DATABASE
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="MiB of InnoDB data (default 1024)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--ks",
        default="1,2",
        help="the methods: numbers of parts, the first is the baseline; a 't' suffix gives each part zstd "
        "threads = cores instead of cores / K (default 1,2)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=8,
        help="hash-partition each table into this many files (default 8): K parts need more files than K",
    )
    parser.add_argument("--no-pinned", action="store_true", help="skip the one-core section")
    parser.add_argument("--keep", action="store_true", help="keep (and reuse) the dataset in bench/out/parts")
    parser.add_argument("--write-docs", action="store_true", help=f"replace this section of {C.BENCH_DOC}")
    args = parser.parse_args(argv)
    ks = args.ks.split(",")
    if any(not k.rstrip("t").isdigit() for k in ks):
        parser.error("--ks: numbers of parts, a 't' suffix for zstd threads = cores in each part (1,2,2t)")
    shown = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--write-docs"]
    with (
        C.workdir("parts", args.keep) as work,
        C.dataset_server(work / "ds", args.size_mb * C.MiB, reuse=args.keep, database=DATABASE) as (
            server,
            dataset,
        ),
    ):
        partition(server, args.partitions)
        global SERVER_PID
        SERVER_PID = server.pid
        passphrase = secrets.token_urlsafe(24)
        keys = generate_key_pair("xbp bench <bench@example.invalid>", passphrase)
        C.warm_page_cache(server.datadir)
        bench = Bench(work / "runs", server, keys.public_key, keys.private_key, passphrase)
        load_before = C.load_average()
        backups: list[Run] = []
        restores: list[Run] = []
        for rep in range(args.repeats):
            for k in ks if rep % 2 == 0 else list(reversed(ks)):
                C.log(f"repetition {rep + 1}: backup K={k} (load {C.load_average()})")
                run, catalog, manifest = bench.backup(k)
                backups.append(run)
                C.log(f"  {C.fmt_seconds(run.wall)}, CPU {run.cpu:.1f} s; restore")
                restores.append(bench.restore(k, catalog, manifest, check=k not in bench.first))
                if k in bench.first:
                    shutil.rmtree(catalog.store.root, ignore_errors=True)  # type: ignore[attr-defined]
                else:
                    bench.first[k] = (catalog, manifest)
                C.log(f"  restore {C.fmt_seconds(restores[-1].wall)}")
        pinned = {} if args.no_pinned else {k: bench.pinned_fetch(k) for k in ks}
        load_after = C.load_average()
        # Runs in the order taken; pair them per repetition for the ratios.
        backups.sort(key=lambda r: r.k)  # stable: each K's runs stay in repetition order
        restores.sort(key=lambda r: r.k)
        text = report(ks, backups, restores, pinned, dataset, (load_before, load_after), shown)
    print(text)
    if args.write_docs:
        C.update_doc_section(SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
