"""The cost of the second copy: streamed from the first target after the backup is registered (what
the provider does), or written to both targets in the same pass (a tee), in one run.

    .venv/bin/python bench/copies.py [--size-mb 256] [--rounds 3] [--keep] [--write-docs]

One sandbox MariaDB holds at least ``--size-mb`` MiB of InnoDB data; two moto S3 endpoints run as
child processes (like two S3 regions, they do not share this process's CPU time). Each round
runs, in a rotating order:

  first only  ``run_backup()`` to endpoint A: the baseline
  after       ``run_backup()`` to A, then ``copy_host()`` A -> B: every object streamed back from A,
              sha256-checked, written to B, then B's manifest (core/backup/copies.py)
  tee         ``run_backup()`` through a writer that sends every byte to A and to B in the same
              pass, then B's manifest

For each: the backup's wall time (what the database host is busy for), the copy's wall time, the
total, this process's CPU seconds with its children (the tool, gpg), and the bytes read back from
A. Medians over the rounds, ratios against the baseline. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from xtrabackup_provider.core.backup.copies import CopyTarget, copy_host  # noqa: E402
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup  # noqa: E402
from xtrabackup_provider.core.catalog.backups import Catalog  # noqa: E402
from xtrabackup_provider.core.catalog.manifest import Manifest  # noqa: E402
from xtrabackup_provider.core.catalog.records import CopyOrigin  # noqa: E402
from xtrabackup_provider.core.db.server import MySQLTarget  # noqa: E402
from xtrabackup_provider.core.storage.base import ObjectStore, ObjectWriter, PutOptions  # noqa: E402
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client  # noqa: E402

SECTION = "copies"
PREFIX = "bench"


class TeeWriter:
    """Every byte to both writers; committed (or aborted) together."""

    def __init__(self, a: ObjectWriter, b: ObjectWriter) -> None:
        self.a, self.b = a, b

    def write(self, data: bytes) -> None:
        self.a.write(data)
        self.b.write(data)

    def commit(self) -> int:
        size = self.a.commit()
        self.b.commit()
        return size

    def abort(self) -> None:
        self.a.abort()
        self.b.abort()


class TeeStore:
    """Store A, whose writers also write the same key to store B (the one-pass alternative)."""

    def __init__(self, a: ObjectStore, b: ObjectStore) -> None:
        self.a, self.b = a, b
        self.location = a.location

    def open_writer(self, key: str, options: PutOptions | None = None) -> ObjectWriter:
        return TeeWriter(self.a.open_writer(key, options), self.b.open_writer(key, options))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.a, name)


@dataclass
class Run:
    backup: float
    copy: float
    cpu: float
    read_back: int


@dataclass
class Mode:
    key: str
    title: str
    runs: list[Run] = field(default_factory=list)

    def median(self, attr: str) -> float | None:
        return C.median_of(self.runs, attr)


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class Bench:
    def __init__(self, server: Any, key: C.GpgKey, endpoints: tuple[str, str]) -> None:
        self.server, self.key = server, key
        self.clients = [make_s3_client(e, C.S3_REGION) for e in endpoints]
        self.round = 0

    def stores(self) -> tuple[S3Store, S3Store]:
        self.round += 1
        stores = []
        for n, client in enumerate(self.clients):
            bucket = f"bench-{n}-{self.round}"
            client.create_bucket(Bucket=bucket)
            stores.append(S3Store(client, bucket))
        return stores[0], stores[1]

    def request(self, store: Any) -> BackupRequest:
        target = MySQLTarget(socket=str(self.server.socket), user="root", password=self.server.root_password)
        catalog = Catalog(store, PREFIX, "copies", "db1")
        return BackupRequest(catalog, target, kind="full", public_keys=[self.key.public_key])

    def first_only(self) -> Run:
        a, _b = self.stores()
        cpu, t0 = _cpu(), time.monotonic()
        run_backup(self.request(a))
        return Run(time.monotonic() - t0, 0.0, _cpu() - cpu, 0)

    def after(self) -> Run:
        a, b = self.stores()
        cpu, t0 = _cpu(), time.monotonic()
        m = run_backup(self.request(a))
        t1 = time.monotonic()
        report = copy_host(
            Catalog(a, PREFIX, "copies", "db1"), CopyTarget("b", b, prefix=PREFIX), what="backups"
        )
        assert report.copied == [m.backup_id], report.line()
        return Run(t1 - t0, time.monotonic() - t1, _cpu() - cpu, report.bytes)

    def tee(self) -> Run:
        a, b = self.stores()
        cpu, t0 = _cpu(), time.monotonic()
        m = run_backup(self.request(TeeStore(a, b)))
        t1 = time.monotonic()
        origin = CopyOrigin(target="primary", location=a.location, copied_at=datetime.now(UTC))
        Catalog(b, PREFIX, "copies", "db1").write(
            Manifest.model_validate(m.model_dump() | {"copy_of": origin})
        )
        return Run(t1 - t0, time.monotonic() - t1, _cpu() - cpu, 0)


def report(
    modes: dict[str, Mode],
    dataset: C.Dataset,
    stored: int,
    facts: dict[str, str],
    loads: list[str],
    command: str,
) -> str:
    base = modes["first"]
    rows = []
    for m in modes.values():
        total = (m.median("backup") or 0) + (m.median("copy") or 0)
        rows.append(
            [
                m.title,
                C.fmt_seconds(m.median("backup")),
                C.fmt_ratio(m.median("backup"), base.median("backup")),
                C.fmt_seconds(m.median("copy")),
                C.fmt_seconds(total),
                C.fmt_ratio(total, base.median("backup")),
                C.fmt_seconds(m.median("cpu")),
                C.fmt_ratio(m.median("cpu"), base.median("cpu")),
                C.fmt_bytes(m.median("read_back")),
            ]
        )
    table = C.markdown_table(
        [
            "mode",
            "backup (s)",
            "/ first only",
            "copy (s)",
            "total (s)",
            "/ first only",
            "CPU (s)",
            "/ first only",
            "read back from A",
        ],
        rows,
    )
    after, tee = modes["after"], modes["tee"]
    after_total = (after.median("backup") or 0) + (after.median("copy") or 0)
    tee_total = (tee.median("backup") or 0) + (tee.median("copy") or 0)
    cheaper = "tee" if tee_total < after_total else "after"
    lines = [
        "## The second copy: streamed from the first, or written to both in one pass",
        "",
        f"`{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        f"- Dataset: {C.fmt_bytes(dataset.innodb_bytes)} of InnoDB data; each full backup stores {C.fmt_bytes(stored)}"
        " (zstd level 3, gpg). Two moto S3 endpoints, each in its own process.",
        f"- Machine: {facts['cpus']} CPUs, {facts['memory']}, {facts['os']}; mariabackup {facts['mariabackup']}.",
        f"- Load average (1/5/15 min) before: {loads[0]}; after: {loads[1]} (the machine is shared).",
        f"- {len(base.runs)} rounds, modes in rotating order; medians.",
        "",
        table,
        "",
        f"- Cheaper in total wall time here: **{cheaper}** ({C.fmt_seconds(min(after_total, tee_total))} s against"
        f" {C.fmt_seconds(max(after_total, tee_total))} s). The tee keeps the database host busy"
        f" {C.fmt_ratio(tee.median('backup'), base.median('backup'))}x the baseline, the copy after it"
        f" {C.fmt_ratio(after.median('backup'), base.median('backup'))}x (the copy itself runs after the backup is"
        f" registered, on any worker), and reads {C.fmt_bytes(after.median('read_back'))} back from the first target.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--keep", action="store_true", help=f"work in {C.BENCH_OUT / 'copies'} and reuse its dataset"
    )
    parser.add_argument("--write-docs", action="store_true", help=f"replace this section of {C.BENCH_DOC}")
    args = parser.parse_args(argv)
    command = f".venv/bin/python bench/copies.py --size-mb {args.size_mb} --rounds {args.rounds}"
    modes = {
        "first": Mode("first", "first target only"),
        "after": Mode("after", "copy streamed from the first, after the backup"),
        "tee": Mode("tee", "written to both in one pass"),
    }
    facts = C.system_facts()
    import os

    os.environ.update(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION=C.S3_REGION
    )
    stored = 0
    with (
        C.workdir("copies", args.keep) as work,
        C.dataset_server(work, args.size_mb * C.MiB, reuse=args.keep) as (server, dataset),
        C.gpg_key(work) as key,
        C.moto_s3() as endpoint_a,
        C.moto_s3() as endpoint_b,
    ):
        bench = Bench(server, key, (endpoint_a, endpoint_b))
        C.warm_page_cache(server.datadir)
        loads = [C.load_average()]
        order = ["first", "after", "tee"]
        for r in range(args.rounds):
            for k in order[r % 3 :] + order[: r % 3]:
                run = {"first": bench.first_only, "after": bench.after, "tee": bench.tee}[k]()
                modes[k].runs.append(run)
                stored = stored or run.read_back
                C.log(f"round {r + 1} {k}: backup {run.backup:.1f}s copy {run.copy:.1f}s cpu {run.cpu:.1f}s")
        loads.append(C.load_average())
    text = report(modes, dataset, stored, facts, loads, command)
    print(text)
    if args.write_docs:
        C.update_doc_section(SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
