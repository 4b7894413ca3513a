"""Retention planning speed: the planner over 100,000 manifests against sorting the same manifests.

    .venv/bin/python bench/retention_plan.py [--count 100000] [--repeats 5] [--write-docs]

Builds one host's catalog in memory: `--count` backups an hour apart (11 years at 100,000), a full
every 24 and incrementals in between, as real `core.catalog.manifest.Manifest` objects (the test suite's
factory, tests/manifest_factory.py). Then, in one invocation, alternating over `--repeats` rounds:

  (a) sort     ``sorted(manifests, key=(started_at, backup_id))``: the floor any planner pays.
  (b) plan     ``plan_retention(manifests, [], policy, now)``: the planner on manifests alone.
  (c) full     the same plus what ``plan_host`` hands it: a listing of 2 objects per backup
               (data and manifest) and one binlog per hour (`--count` binlogs).

The policy keeps the last 4 chains, 14 daily, 8 weekly, 24 monthly and 10 yearly slots and a 7-day
PITR window, so every rule and the chain closure run. Target (printed as PASS/MISS, never
asserted): (b) under 1 second. Exit status: 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

sys.path.insert(0, str(C.REPO / "tests"))
from manifest_factory import CLUSTER, HOST, PREFIX, UUID, make_manifest  # noqa: E402
from xtrabackup_provider.core.catalog.manifest import Manifest  # noqa: E402
from xtrabackup_provider.core.retention.model import BinlogItem, RetentionPolicy
from xtrabackup_provider.core.retention.plan import plan_retention  # noqa: E402
from xtrabackup_provider.core.storage.base import ObjectInfo  # noqa: E402

SECTION = "retention_plan"
TARGET_SECONDS = 1.0
T0 = datetime(2015, 1, 1, tzinfo=UTC)
BACKUPS = f"{PREFIX}/{CLUSTER}/{HOST}/backups/"
POLICY = RetentionPolicy(keep_last_chains=4, daily=14, weekly=8, monthly=24, yearly=10, pitr_days=7)


def build_catalog(count: int) -> tuple[list[Manifest], list[ObjectInfo], list[BinlogItem]]:
    manifests: list[Manifest] = []
    for i in range(count):
        when = T0 + timedelta(hours=i)
        bid = when.strftime("%Y%m%dT%H%M%SZ")
        if i % 24 == 0:
            manifests.append(
                make_manifest(bid + "-full", size=50 * C.GiB, binlog_file=f"mysql-bin.{i + 1:06d}")
            )
        else:
            manifests.append(
                make_manifest(
                    bid + "-inc", parent=manifests[-1], size=C.GiB, binlog_file=f"mysql-bin.{i + 1:06d}"
                )
            )
    listing = []
    for m in manifests:
        listing.append(ObjectInfo(m.backup_object.key, m.backup_object.size, "STANDARD", m.finished_at))
        listing.append(ObjectInfo(f"{BACKUPS}{m.backup_id}/manifest.json", 2500, "STANDARD", m.finished_at))
    binlogs = []
    for i in range(count):
        first = T0 + timedelta(hours=i)
        key = f"{PREFIX}/{CLUSTER}/{HOST}/binlogs/{UUID}/mysql-bin.{i + 1:06d}"
        binlogs.append(
            BinlogItem(UUID, f"mysql-bin.{i + 1:06d}", first, first + timedelta(minutes=59), 10 * C.MiB,
                       "STANDARD", key + ".zst.gpg", (key + ".json",))
        )  # fmt: skip
    return manifests, listing, binlogs


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    gc.collect()  # every method starts with the same heap
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--write-docs", action="store_true", help=f"update the {SECTION} section of docs/BENCHMARKS.md"
    )
    args = parser.parse_args()

    load_before = C.load_average()
    C.log(f"building {args.count:,} manifests, {2 * args.count:,} listed objects and {args.count:,} binlogs")
    started = time.monotonic()
    manifests, listing, binlogs = build_catalog(args.count)
    build_seconds = time.monotonic() - started
    now = T0 + timedelta(hours=args.count + 1)
    methods: dict[str, Callable[[], Any]] = {
        "(a) sort": lambda: sorted(manifests, key=lambda m: (m.started_at, m.backup_id)),
        "(b) plan": lambda: plan_retention(manifests, [], POLICY, now),
        "(c) full": lambda: plan_retention(
            manifests, binlogs, POLICY, now, listing=listing, backups_prefix=BACKUPS
        ),
    }
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in methods}
    outcome: dict[str, Any] = {}
    for n in range(args.repeats):
        for name, fn in methods.items():
            wall, cpu, result = timed(fn)
            runs[name].append((wall, cpu))
            if name != "(a) sort":
                outcome[name] = result.summary()["counts"]
        C.log(f"round {n + 1}: " + ", ".join(f"{k} {v[-1][0]:.3f} s" for k, v in runs.items()))
    body = report(args, runs, outcome, build_seconds, load_before)
    print(body)
    if args.write_docs:
        C.update_doc_section(SECTION, body)
        C.log(f"updated {C.BENCH_DOC}")
    return 0


def report(
    args: argparse.Namespace, runs: dict, outcome: dict, build_seconds: float, load_before: str
) -> str:
    med = {name: (C.median([r[0] for r in rs]), C.median([r[1] for r in rs])) for name, rs in runs.items()}
    sort_wall, sort_cpu = med["(a) sort"]
    facts = C.system_facts()
    rows = [
        [name, len(rs), f"{med[name][0]:.3f}", " / ".join(f"{r[0]:.3f}" for r in rs), f"{med[name][1]:.3f}",
         f"{med[name][0] / sort_wall:.1f}x"]
        for name, rs in runs.items()
    ]  # fmt: skip
    plan_wall = med["(b) plan"][0]
    verdict = "PASS" if plan_wall < TARGET_SECONDS else "MISS"
    targets = C.markdown_table(
        ["Ratio", "Measured", "Target", "Result"],
        [
            [
                f"(b) plan of {args.count:,} manifests, wall",
                f"{plan_wall:.3f} s",
                f"< {TARGET_SECONDS:.1f} s",
                verdict,
            ],
            ["(b) / (a), wall", f"{plan_wall / sort_wall:.1f}x", "(info)", ""],
            ["(c) / (a), wall", f"{med['(c) full'][0] / sort_wall:.1f}x", "(info)", ""],
        ],
    )
    return f"""## Retention planning

`.venv/bin/python bench/retention_plan.py --count {args.count} --repeats {args.repeats}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.

- Catalog: {args.count:,} manifests (one backup an hour, a full every 24: {args.count // 24:,} chains), \
{2 * args.count:,} listed objects, {args.count:,} binlogs; built in {build_seconds:.1f} s (not timed).
- Policy: keep_last_chains 4, daily 14, weekly 8, monthly 24, yearly 10, pitr_days 7, min_age_days 1.
  Outcome (b): {outcome.get("(b) plan")}; (c): {outcome.get("(c) full")}.
- Machine: {facts["cpus"]} CPUs, {facts["memory"]}, {facts["os"]}; Python {facts["python"]}.
- Load average (1/5/15 min) before: {load_before}; after: {C.load_average()}. Methods alternate a, b, c
  in each round; every run starts after a `gc.collect()`.

{C.markdown_table(["Method", "Runs", "Wall s (median)", "Wall s (each run)", "CPU s (median)", "vs sort"], rows)}

{targets}

- (a) is the least any planner must do (look at every manifest's time once and order them). (b) also
  reads each manifest's chain links, object and times, works out every chain's structure (depths,
  missing parents), validates from the manifests (`catalog.validate_chain`) each chain a rule looks
  at, applies the rules, closes the kept set over parents, and builds one item with its keys and
  reason per backup. (c) is what `plan_host` hands the planner: it adds grouping
  {2 * args.count:,} listed objects by backup directory (sizes and storage classes as stored now)
  and a keep/delete decision per binlog.
- CPU s is this process's CPU time for the call (`time.process_time`), less sensitive than wall time
  to the other processes on the machine.
"""


if __name__ == "__main__":
    sys.exit(main())
