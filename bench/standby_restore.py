"""P2b: restore from the prepared standby against the chain restore of the same backup.

    .venv/bin/python bench/standby_restore.py [--size-mb 600] [--repeats 2] [--keep] [--write-docs]

The restore_rto dataset and chain (``bench/restore_rto.py``: a sandbox MariaDB with ``--size-mb``
MiB of InnoDB data, a full + 6 incrementals, zstd + GPG into moto's S3 over HTTP). The standby is
brought up to date once, untimed (``core.restore.standby.update_standby``: it is kept current by the
standby task ahead of any incident). Then, alternating, ``--repeats`` times each, into an empty
datadir up to a started server (the server start is inside the clock):

  (chain)    ``core.restore.restore()`` of the newest backup: fetch + decrypt + extract the 7
             objects, prepare, move-back (restore_rto's "ours");
  (standby)  ``core.restore.standby.restore_standby()``: the checks against the catalog, then a
             copy of the standby's prepared base (the standby stays usable; the default);

and once at the end (it consumes the standby):

  (standby, move)  the same with ``move=True`` (``restore --from-standby --move-standby``).

Every restored server must hold what the source held at the last backup (``CHECKSUM TABLE`` of every
table equal). Target (printed, never asserted): chain / standby >= 5 (medians of wall time).
Exit 1 if a restore failed or its data differ.
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
import restore_rto as R  # noqa: E402
from xtrabackup_provider.core.catalog.backups import Catalog  # noqa: E402
from xtrabackup_provider.core.db.sandbox import table_checksums  # noqa: E402
from xtrabackup_provider.core.pipeline.gpg import KeyPair, generate_key_pair  # noqa: E402
from xtrabackup_provider.core.restore.standby import restore_standby, update_standby  # noqa: E402
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client  # noqa: E402

SECTION = "standby_restore"
TARGET_RATIO = 5.0
CHAIN, STANDBY, MOVE = "chain restore", "standby (copy)", "standby (move)"


class StandbyRestores(R.Restores):
    def standby(self, directory: Path, *, move: bool = False) -> R.RtoRun:
        base = self._fresh("standby")
        datadir = base / "data"
        run = R.RtoRun(MOVE if move else STANDBY, 0.0, 0.0, {})
        R._sync()
        cpu0 = R._cpu()
        started = time.monotonic()
        report = restore_standby(self.catalog, directory, datadir, move=move)
        run.cpu_seconds = R._cpu() - cpu0
        run.phases = dict(report.timings)
        try:
            self._start_and_verify(run, datadir, base / "srv", started)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        return run


def run_table(runs: dict[str, list[R.RtoRun]], verdict: str) -> str:
    """One row per restore: method, run, wall and CPU seconds, phases, whether its data are equal."""
    rows = []
    for name, method_runs in runs.items():
        for n, run in enumerate(method_runs, 1):
            phases = ", ".join(f"{k} {v:.1f}" for k, v in run.phases.items())
            equal = "yes" if run.data_ok else "NO " + "; ".join(run.mismatched)[:200]
            rows.append([name, n, f"{run.seconds:.1f}", f"{run.cpu_seconds:.1f}", phases, equal])
    return C.markdown_table(
        ["method", "run", "to a started server (s)", "CPU (s)", "phases (s)", verdict], rows
    )


def encrypted_chain(server: Any, dataset: C.Dataset, endpoint: str) -> tuple[Any, Catalog, KeyPair, str]:
    """restore_rto's chain (a full + its incrementals, zstd + GPG) in a new bucket of `endpoint`:
    the S3 client, the catalog, the key pair and its passphrase."""
    client = make_s3_client(endpoint, C.S3_REGION, **C.S3_CREDENTIALS)
    client.create_bucket(Bucket=R.BUCKET)
    catalog = Catalog(S3Store(client, R.BUCKET), "bench", "c1", "h1")
    passphrase = secrets.token_urlsafe(24)
    keys = generate_key_pair("xbp bench <bench@example.invalid>", passphrase)
    C.log(f"a full + {R.INCREMENTALS} incrementals into {endpoint}/{R.BUCKET}")
    R.build_chain(server, catalog, keys.public_key, dataset.rows)
    return client, catalog, keys, passphrase


def report(
    command: str,
    dataset: C.Dataset,
    facts: dict[str, str],
    loads: tuple[str, str],
    standby_seconds: float,
    runs: dict[str, list[R.RtoRun]],
    error: str | None,
) -> str:
    lines = [
        "## P2b: restore from the standby vs the chain restore",
        "",
        f"`{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        f"- Dataset: the restore_rto dataset, {C.fmt_bytes(dataset.innodb_bytes)} of InnoDB data, datadir "
        f"{C.fmt_bytes(dataset.datadir_bytes)}; a full + {R.INCREMENTALS} incrementals, zstd + GPG, in moto S3.",
        f"- Machine: {facts['cpus']} CPUs, {facts['memory']}, {facts['os']}; mariabackup {facts['mariabackup']}.",
        f"- Load average (1/5/15 min) before: {loads[0]}; after: {loads[1]}.",
        f"- Bringing the standby up to date (untimed in the restores, done ahead by the standby task): "
        f"{standby_seconds:.1f} s.",
        "",
    ]
    lines += [run_table(runs, "data equal"), ""]
    chain = C.median([r.seconds for r in runs.get(CHAIN, [])])
    standby = C.median([r.seconds for r in runs.get(STANDBY, [])])
    if chain and standby:
        ratio = chain / standby
        lines.append(
            f"Medians: chain {chain:.1f} s, standby (copy) {standby:.1f} s: **{ratio:.1f}x** "
            f"(target >= {TARGET_RATIO:.0f}x: {'PASS' if ratio >= TARGET_RATIO else 'MISS'})."
        )
        moved = runs.get(MOVE)
        if moved:
            lines.append(
                f"Standby moved instead of copied: {moved[0].seconds:.1f} s ({chain / moved[0].seconds:.1f}x)."
            )
    if error:
        lines.append(f"FAILED: {error}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=600, help="MiB of InnoDB data (default 600)")
    parser.add_argument("--repeats", type=int, default=2, help="restores per method, alternating (default 2)")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="work in bench/out/restore_rto and reuse its dataset (as restore_rto)",
    )
    parser.add_argument("--write-docs", action="store_true", help=f"replace this section of {C.BENCH_DOC}")
    args = parser.parse_args(argv)
    command = f".venv/bin/python bench/standby_restore.py --size-mb {args.size_mb}"
    if args.repeats != 2:
        command += f" --repeats {args.repeats}"
    facts = C.system_facts()
    runs: dict[str, list[R.RtoRun]] = {CHAIN: [], STANDBY: []}
    error: str | None = None
    standby_seconds = 0.0
    with (
        C.workdir("restore_rto", args.keep) as work,
        C.dataset_server(work, args.size_mb * C.MiB, reuse=args.keep, database=R.DATABASE) as (
            server,
            dataset,
        ),
        C.moto_s3() as endpoint,
    ):
        load_before = C.load_average()
        client, catalog, keys, passphrase = encrypted_chain(server, dataset, endpoint)
        expected = table_checksums(server, [R.DATABASE])
        restores = StandbyRestores(work, catalog, client, keys.private_key, passphrase, expected)
        directory = work / "standby"
        shutil.rmtree(directory, ignore_errors=True)
        t0 = time.monotonic()
        update_standby(catalog, directory, private_key=keys.private_key, passphrase=passphrase)
        standby_seconds = time.monotonic() - t0
        C.log(f"standby up to date in {standby_seconds:.1f}s")
        methods = {CHAIN: restores.ours, STANDBY: lambda: restores.standby(directory)}
        for r in range(args.repeats):
            for name in (CHAIN, STANDBY) if r % 2 == 0 else (STANDBY, CHAIN):
                error = R._rto_run(runs, name, methods[name], r) or error
        error = R._rto_run(runs, MOVE, lambda: restores.standby(directory, move=True), 0) or error
        shutil.rmtree(directory, ignore_errors=True)
        load_after = C.load_average()
    text = report(command, dataset, facts, (load_before, load_after), standby_seconds, runs, error)
    print(text)
    if args.write_docs:
        C.update_doc_section(SECTION, text)
    failed = bool(error) or any(r.data_ok is False for method_runs in runs.values() for r in method_runs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
