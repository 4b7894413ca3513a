"""P2c: point-in-time recovery from the standby (rolled forward) vs the chain's PITR to the same point.

    .venv/bin/python bench/standby_pitr.py [--size-mb 600] [--rounds 2] [--after-rounds 1] [--keep] [--write-docs]

The restore_rto dataset and chain (``bench/restore_rto.py``: a sandbox MariaDB with ``--size-mb`` MiB
of InnoDB data, a full + 6 incrementals, zstd + GPG into moto's S3 over HTTP), with the binlog on:
the server restarts with ``log_bin`` after the initial load. After the newest backup,
``--after-rounds`` rounds of the same changes (restore_rto's ``change_round``) are committed and
shipped (``ship_binlogs``, encrypted); the target is the GTID of the last one. One round is what
the chain holds between two backups, so the default (1) is an incident just before the next
backup: the most binlog a PITR from the newest backup has to replay. The standby is brought
up to date once, untimed (the backup DAG's standby task keeps it so ahead of any incident; P2b).
Then, alternating, ``--rounds`` times each, into an empty datadir up to a started server (the server
start is inside the clock):

  (chain)    ``core.pitr.recover.point_in_time_restore()``: fetch the binlogs, fetch + decrypt +
             extract the 7 backups, prepare, move-back, replay through the applier;
  (standby)  ``core.pitr.from_standby.standby_point_in_time_restore()``: the same binlog fetch (while
             the standby is copied) and replay, with the standby's checks and copy in place of the
             chain (the standby stays usable);

and once at the end (it consumes the standby) the standby moved instead of copied.

Both must reach the target: ``CHECKSUM TABLE`` of every table equal to the source's at the target,
and ``gtid_slave_pos`` equal to the target GTID. Target (printed, never asserted): chain / standby >= 3
(medians of wall time). Exit 1 if a restore failed or its data differ.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
import restore_rto as R  # noqa: E402
import standby_restore as S  # noqa: E402
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs  # noqa: E402
from xtrabackup_provider.core.catalog.backups import Catalog  # noqa: E402
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums  # noqa: E402
from xtrabackup_provider.core.db.server import MySQLTarget  # noqa: E402
from xtrabackup_provider.core.pipeline.gpg import KeyPair  # noqa: E402
from xtrabackup_provider.core.pitr.from_standby import standby_point_in_time_restore  # noqa: E402
from xtrabackup_provider.core.pitr.plan import PitrTarget  # noqa: E402
from xtrabackup_provider.core.pitr.recover import PitrReport, PitrRequest, point_in_time_restore  # noqa: E402
from xtrabackup_provider.core.restore.standby import update_standby  # noqa: E402

SECTION = "standby_pitr"
TARGET_RATIO = 3.0
CHAIN, STANDBY, MOVE = "chain PITR", "standby + roll-forward", "standby (move) + roll-forward"


class Runs:
    """The two methods, each into a fresh datadir, verified against the source at the target."""

    def __init__(
        self, work: Path, catalog: Catalog, keys: KeyPair, passphrase: str, target: PitrTarget
    ) -> None:
        self.work, self.catalog, self.keys, self.passphrase, self.target = (
            work,
            catalog,
            keys,
            passphrase,
            target,
        )
        self.expected: dict[str, int] = {}
        self.seq = 0

    def _request(self, datadir: Path) -> PitrRequest:
        return PitrRequest(
            catalog=self.catalog,
            target_datadir=datadir,
            target=self.target,
            private_key=self.keys.private_key,
            passphrase=self.passphrase,
        )

    def run(self, name: str, restore: Callable[[PitrRequest], PitrReport]) -> R.RtoRun:
        self.seq += 1
        base = self.work / f"p{self.seq}"
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        run = R.RtoRun(name, 0.0, 0.0, {})
        R._sync()
        cpu0, started = R._cpu(), time.monotonic()
        try:
            report = restore(self._request(base / "data"))
            run.phases = {k: v for k, v in report.timings.items() if v >= 0.05}
            self._start_and_verify(run, base, started, report.reached_gtid)
            run.cpu_seconds = R._cpu() - cpu0
        finally:
            shutil.rmtree(base, ignore_errors=True)
        return run

    def _start_and_verify(self, run: R.RtoRun, base: Path, started: float, reached: str) -> None:
        t0 = time.monotonic()
        server = SandboxServer.on_datadir(
            base / "data", base / "srv", server_id=200 + self.seq, log_bin=False
        )
        try:
            server.start()
            run.phases["start"] = time.monotonic() - t0
            run.seconds = time.monotonic() - started
            got = table_checksums(server, [R.DATABASE])
            gtid = str(server.query("SELECT @@gtid_slave_pos")[0][0] or "")
        finally:
            server.stop()
        run.mismatched = sorted(
            k for k in self.expected.keys() | got.keys() if self.expected.get(k) != got.get(k)
        )
        if gtid != self.target.gtid or reached != self.target.gtid:
            run.mismatched.append(
                f"gtid_slave_pos {gtid or '-'} (reached {reached or '-'}), not {self.target.gtid}"
            )
        run.data_ok = not run.mismatched


def enable_binlog(server: SandboxServer) -> None:
    """The dataset is loaded without a binlog (fast); PITR needs one from the first backup on."""
    server.stop()
    server.log_bin = True
    server.start()


def after_backups(
    server: SandboxServer, catalog: Catalog, public_key: str, rounds: int, base_rows: int
) -> str:
    """Commit `rounds` rounds of changes after the newest backup, ship the binlogs; the last GTID."""
    for n in range(rounds):
        C.log(f"  after the newest backup, round {n + 1}: {R.change_round(server, 100 + n, base_rows)}")
    gtid = str(server.query("SELECT @@gtid_binlog_pos")[0][0])
    target = MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)
    t0 = time.monotonic()
    ship_binlogs(ShipRequest(catalog=catalog, target=target, public_keys=[public_key], flush=True))
    C.log(f"  binlogs shipped in {time.monotonic() - t0:.1f}s; target GTID {gtid}")
    return gtid


def report(
    command: str,
    dataset: C.Dataset,
    facts: dict[str, str],
    loads: tuple[str, str],
    setup: dict[str, str],
    runs: dict[str, list[R.RtoRun]],
    error: str | None,
) -> str:
    lines = [
        "## P2c: PITR from the standby (rolled forward) vs the chain's PITR",
        "",
        f"`{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        f"- Dataset: the restore_rto dataset, {C.fmt_bytes(dataset.innodb_bytes)} of InnoDB data, datadir "
        f"{C.fmt_bytes(dataset.datadir_bytes)}; a full + {R.INCREMENTALS} incrementals, zstd + GPG, in moto S3; "
        f"then {setup['after']}, binlogs shipped encrypted ({setup['binlogs']}); target GTID {setup['gtid']}.",
        f"- Machine: {facts['cpus']} CPUs, {facts['memory']}, {facts['os']}; mariabackup {facts['mariabackup']}.",
        f"- Load average (1/5/15 min) before: {loads[0]}; after: {loads[1]}.",
        f"- Bringing the standby up to date (untimed, done ahead by the standby task): {setup['standby']}.",
        "",
    ]
    lines += [S.run_table(runs, "CHECKSUM TABLE + gtid equal"), ""]
    chain = C.median([r.seconds for r in runs.get(CHAIN, [])])
    standby = C.median([r.seconds for r in runs.get(STANDBY, [])])
    if chain and standby:
        ratio = chain / standby
        spread = {
            name: f"{min(r.seconds for r in rs):.1f}-{max(r.seconds for r in rs):.1f} s"
            for name, rs in runs.items()
            if rs
        }
        lines.append(
            f"Medians: chain {chain:.1f} s ({spread.get(CHAIN)}), standby {standby:.1f} s ({spread.get(STANDBY)}): "
            f"**{ratio:.1f}x** (target >= {TARGET_RATIO:.0f}x: {'PASS' if ratio >= TARGET_RATIO else 'MISS'})."
        )
        if moved := runs.get(MOVE):
            lines.append(
                f"Standby moved instead of copied: {moved[0].seconds:.1f} s ({chain / moved[0].seconds:.1f}x)."
            )
    if error:
        lines.append(f"FAILED: {error}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=600, help="MiB of InnoDB data (default 600)")
    parser.add_argument("--rounds", type=int, default=2, help="restores per method, alternating (default 2)")
    parser.add_argument(
        "--after-rounds", type=int, default=1, help="rounds of changes after the newest backup (default 1)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="work in bench/out/standby_pitr and reuse its dataset"
    )
    parser.add_argument("--write-docs", action="store_true", help=f"replace this section of {C.BENCH_DOC}")
    args = parser.parse_args(argv)
    command = f".venv/bin/python bench/standby_pitr.py --size-mb {args.size_mb} --rounds {args.rounds}"
    command += f" --after-rounds {args.after_rounds}"
    facts = C.system_facts()
    runs: dict[str, list[R.RtoRun]] = {CHAIN: [], STANDBY: [], MOVE: []}
    error: str | None = None
    with (
        C.workdir("standby_pitr", args.keep) as work,
        C.dataset_server(work, args.size_mb * C.MiB, reuse=args.keep, database=R.DATABASE) as (
            server,
            dataset,
        ),
        C.moto_s3() as endpoint,
    ):
        load_before = C.load_average()
        enable_binlog(server)
        client, catalog, keys, passphrase = S.encrypted_chain(server, dataset, endpoint)
        gtid = after_backups(server, catalog, keys.public_key, args.after_rounds, dataset.rows)
        binlogs = [
            o
            for o in client.list_objects_v2(Bucket=R.BUCKET, Prefix="bench/c1/h1/binlogs/").get(
                "Contents", []
            )
        ]
        runner = Runs(work, catalog, keys, passphrase, PitrTarget.at_gtid(gtid))
        runner.expected = table_checksums(server, [R.DATABASE])
        directory = work / "standby"
        shutil.rmtree(directory, ignore_errors=True)
        t0 = time.monotonic()
        update_standby(catalog, directory, private_key=keys.private_key, passphrase=passphrase)
        setup = {
            "after": f"{args.after_rounds} round(s) of changes",
            "binlogs": C.fmt_bytes(sum(int(o["Size"]) for o in binlogs if not o["Key"].endswith(".json")))
            + " stored",
            "gtid": gtid,
            "standby": f"{time.monotonic() - t0:.1f} s",
        }
        C.log(f"standby up to date in {setup['standby']}")
        methods: dict[str, Callable[[], R.RtoRun]] = {
            CHAIN: lambda: runner.run(CHAIN, point_in_time_restore),
            STANDBY: lambda: runner.run(STANDBY, lambda req: standby_point_in_time_restore(req, directory)),
            MOVE: lambda: runner.run(
                MOVE, lambda req: standby_point_in_time_restore(req, directory, move=True)
            ),
        }
        for r in range(args.rounds):
            for name in (CHAIN, STANDBY) if r % 2 == 0 else (STANDBY, CHAIN):
                error = R._rto_run(runs, name, methods[name], r) or error
        error = R._rto_run(runs, MOVE, methods[MOVE], 0) or error
        shutil.rmtree(directory, ignore_errors=True)
        load_after = C.load_average()
    text = report(command, dataset, facts, (load_before, load_after), setup, runs, error)
    print(text)
    if args.write_docs:
        C.update_doc_section(SECTION, text)
    failed = bool(error) or any(r.data_ok is False for method_runs in runs.values() for r in method_runs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
