"""What a backup costs the source's clients, with and without the host's impact bounds, in one run.

    .venv/bin/python bench/impact.py [--size-mb 512] [--rounds 3] [--throttle 10] [--keep] [--write-docs]

One sandbox MariaDB holds at least ``--size-mb`` MiB of InnoDB data plus sysbench's tables, and
``sysbench oltp_read_write`` runs against it for the whole invocation (fixed threads, no rate cap,
a report every second). Each round runs three modes, in a rotating order:

  idle      nothing but sysbench, for as long as the round's first backup took
  unbounded ``run_backup()`` (mariabackup -> zstd -> gpg -> a directory) with no impact bounds
  gentle    the same with the host's bounds: ``--throttle=T``, nice 19 for the tool, gpg and the
            zstd threads, ionice idle for the tool (``impact:`` in the fleet config)

For each mode: the backup's duration, sysbench's transactions per second over the mode's window
and its per-second 95th percentile latency (medians over the rounds), and the seconds the
backup's locks blocked commits (the manifest's `impact.blocked_seconds`). Ratios are against
idle. Nothing is asserted: the machine is shared.
"""

from __future__ import annotations

import argparse
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from xtrabackup_provider.core.backup.impact import ImpactSettings  # noqa: E402
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup  # noqa: E402
from xtrabackup_provider.core.catalog.backups import Catalog  # noqa: E402
from xtrabackup_provider.core.db.server import MySQLTarget  # noqa: E402
from xtrabackup_provider.core.storage.local import LocalStore  # noqa: E402

SECTION = "impact"
SB_DB, SB_TABLES, SB_ROWS, SB_THREADS = "sbtest", 4, 20000, 4
_REPORT = re.compile(r"\[\s*(\d+)s\s*\].*?tps:\s*([\d.]+).*?lat \(ms,95%\):\s*([\d.]+)")


@dataclass
class Window:
    seconds: float
    tps: float | None
    p95_ms: float | None
    p95_worst_ms: float | None
    commits_blocked: float | None = None


@dataclass
class Mode:
    key: str
    title: str
    windows: list[Window] = field(default_factory=list)

    def median(self, attr: str) -> float | None:
        return C.median_of(self.windows, attr)


class Sysbench:
    """sysbench oltp_read_write in the background; its per-second reports with the wall time read."""

    def __init__(self, server: object, password: str) -> None:
        self.argv = [
            "sysbench",
            "oltp_read_write",
            "--db-driver=mysql",
            f"--mysql-socket={server.socket}",  # type: ignore[attr-defined]
            "--mysql-user=sb",
            f"--mysql-password={password}",  # a throwaway account of the bench's own sandbox
            f"--mysql-db={SB_DB}",
            f"--tables={SB_TABLES}",
            f"--table-size={SB_ROWS}",
        ]
        self.samples: list[tuple[float, float, float]] = []  # (wall, tps, p95 ms)
        self.proc: subprocess.Popen[str] | None = None

    def prepare(self) -> None:
        subprocess.run([*self.argv, "prepare"], check=True, capture_output=True, timeout=1800)

    def start(self) -> None:
        argv = [*self.argv, f"--threads={SB_THREADS}", "--time=0", "--report-interval=1", "run"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc and self.proc.stdout
        for line in self.proc.stdout:
            if m := _REPORT.search(line):
                self.samples.append((time.time(), float(m.group(2)), float(m.group(3))))

    def window(self, start: float, end: float) -> tuple[float | None, float | None, float | None]:
        inside = [(tps, p95) for at, tps, p95 in self.samples if start + 1 <= at <= end]
        if not inside:
            return None, None, None
        return (
            statistics.median(t for t, _ in inside),
            statistics.median(p for _, p in inside),
            max(p for _, p in inside),
        )

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


def backup(work: Path, server: object, key: C.GpgKey, impact: ImpactSettings) -> tuple[float, float | None]:
    store = work / "store"
    shutil.rmtree(store, ignore_errors=True)
    catalog = Catalog(LocalStore(store), "bench", "impact", "db1")
    target = MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)  # type: ignore[attr-defined]
    started = time.monotonic()
    m = run_backup(BackupRequest(catalog, target, kind="full", public_keys=[key.public_key], impact=impact))
    seconds = time.monotonic() - started
    shutil.rmtree(store, ignore_errors=True)
    return seconds, (m.impact.blocked_seconds.get("commits") if m.impact else None)


def report(
    modes: dict[str, Mode],
    dataset: C.Dataset,
    facts: dict[str, str],
    loads: tuple[str, str],
    command: str,
    throttle: int,
) -> str:
    idle = modes["idle"]
    rows = []
    for m in modes.values():
        tps, p95 = m.median("tps"), m.median("p95_ms")
        rows.append(
            [
                m.title,
                C.fmt_seconds(m.median("seconds")) if m.key != "idle" else "-",
                f"{tps:.0f}" if tps is not None else "n/a",
                C.fmt_ratio(tps, idle.median("tps")),
                f"{p95:.1f}" if p95 is not None else "n/a",
                C.fmt_ratio(p95, idle.median("p95_ms")),
                f"{m.median('p95_worst_ms'):.1f}" if m.median("p95_worst_ms") is not None else "n/a",
                C.fmt_seconds(m.median("commits_blocked")) if m.key != "idle" else "-",
            ]
        )
    table = C.markdown_table(
        [
            "mode",
            "backup (s)",
            "sysbench tps",
            "tps / idle",
            "p95 latency (ms)",
            "p95 / idle",
            "worst 1-s p95 (ms)",
            "commits blocked (s)",
        ],
        rows,
    )
    gentle, unbounded = modes["gentle"], modes["unbounded"]
    lines = [
        "## Impact on the source during a backup",
        "",
        f"`{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        f"- Dataset: {C.fmt_bytes(dataset.innodb_bytes)} of InnoDB data (datadir {C.fmt_bytes(dataset.datadir_bytes)}),"
        f" plus sysbench's {SB_TABLES} x {SB_ROWS} rows; `sysbench oltp_read_write --threads={SB_THREADS}`"
        " runs throughout, no rate cap.",
        f"- Machine: {facts['cpus']} CPUs, {facts['memory']}, {facts['os']}; mariabackup {facts['mariabackup']}.",
        f"- Load average (1/5/15 min) before: {loads[0]}; after: {loads[1]} (other engineers' tests share the machine).",
        f"- {len(idle.windows)} rounds, modes in rotating order; medians over the rounds. Each backup is a full"
        " `run_backup()` into a directory on the same disk, deleted after the run.",
        f"- gentle = `impact: {{throttle: {throttle}, nice: 19, ionice: idle}}`.",
        "",
        table,
        "",
        f"- The bounds cost the backup {C.fmt_ratio(gentle.median('seconds'), unbounded.median('seconds'))}x its unbounded"
        f" duration and gave sysbench {C.fmt_ratio(gentle.median('tps'), unbounded.median('tps'))}x the unbounded"
        f" throughput, {C.fmt_ratio(gentle.median('p95_ms'), unbounded.median('p95_ms'))}x its p95 latency.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=512, help="MiB of InnoDB data (default 512)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--throttle", type=int, default=10, help="the gentle mode's --throttle (default 10)")
    parser.add_argument(
        "--keep", action="store_true", help=f"work in {C.BENCH_OUT / 'impact'} and reuse its dataset"
    )
    parser.add_argument("--write-docs", action="store_true", help=f"replace this section of {C.BENCH_DOC}")
    args = parser.parse_args(argv)
    command = f".venv/bin/python bench/impact.py --size-mb {args.size_mb} --rounds {args.rounds} --throttle {args.throttle}"
    modes = {
        "idle": Mode("idle", "idle (sysbench alone)"),
        "unbounded": Mode("unbounded", "backup, no bounds"),
        "gentle": Mode("gentle", f"backup, throttle {args.throttle} + nice 19 + ionice idle"),
    }
    settings = {
        "unbounded": ImpactSettings(),
        "gentle": ImpactSettings(throttle=args.throttle, nice=19, ionice="idle"),
    }
    facts = C.system_facts()
    with (
        C.workdir("impact", args.keep) as work,
        C.dataset_server(work, args.size_mb * C.MiB, reuse=args.keep) as (server, dataset),
        C.gpg_key(work) as key,
    ):
        password = secrets.token_hex(12)
        server.execute_script(
            f"DROP DATABASE IF EXISTS {SB_DB}; CREATE DATABASE {SB_DB}; DROP USER IF EXISTS sb@localhost;"
            f" CREATE USER sb@localhost IDENTIFIED BY '{password}'; GRANT ALL ON {SB_DB}.* TO sb@localhost;"
        )
        load = Sysbench(server, password)
        C.log("sysbench prepare")
        load.prepare()
        C.warm_page_cache(server.datadir)
        load.start()
        time.sleep(10)  # warm up
        loads = [C.load_average()]
        try:
            order = ["unbounded", "gentle", "idle"]
            for r in range(args.rounds):
                last = 30.0
                for key_ in order[r % 3 :] + order[: r % 3]:
                    start = time.time()
                    if key_ == "idle":
                        time.sleep(max(modes["unbounded"].median("seconds") or last, 10))
                        blocked = None
                    else:
                        last, blocked = backup(work, server, key, settings[key_])
                    end = time.time()
                    tps, p95, worst = load.window(start, end)
                    modes[key_].windows.append(Window(end - start, tps, p95, worst, blocked))
                    C.log(
                        f"round {r + 1} {key_}: {end - start:.1f}s, tps {tps}, p95 {p95} ms, commits blocked {blocked}"
                    )
        finally:
            load.stop()
        loads.append(C.load_average())
    text = report(modes, dataset, facts, (loads[0], loads[1]), command, args.throttle)
    print(text)
    if args.write_docs:
        C.update_doc_section(SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
