"""Restore-test wall time per level, and a replica built from a backup against the naive path.

    .venv/bin/python bench/restore_levels.py [--size-mb 600] [--write-minutes 2] [--repeats 2] [--keep] [--write-docs]

One sandbox MariaDB with the restore_rto dataset (``_common.dataset_server``: orders, events and
attachments, at least ``--size-mb`` MiB of InnoDB data) plus four sysbench tables, restarted with
its binlog on. A full backup (``run_backup()``: mariabackup -> zstd -> gpg, into a local directory),
then ``--write-minutes`` of ``sysbench oltp_write_only`` on the source, then its binlogs shipped
(``ship_binlogs()``). Writes stop before anything is measured. In one invocation, alternating:

1. **Restore-test levels.** ``run_restore_test()`` of that backup at quick, full and deep
   (core/restore/restore_test.py: quick = innochecksum of every tablespace + source shape + canary +
   position + CHECK TABLE on 50 tables; full = + every table + the shipped binlogs rolled forward;
   deep = + the copy replicating from the source, caught up, pt-table-checksum of every table).
   Wall time per level, with the phases.
2. **A replica built from the backup**, from nothing to caught up with the source (lag 0, the
   source's position applied), into a fresh datadir started by a start command (the way
   ``systemctl start mariadb`` would):
   (ours)  ``provision_replica()``: restore, start, CHANGE MASTER TO ... MASTER_USE_GTID from the
           backup's GTID, the replication applier fetches and applies the writes since.
   (naive) restore, start, ``mariadb-binlog --read-from-remote-server --to-last-log
           --start-position=<backup position> <backup binlog> | mariadb``, then CHANGE MASTER from
           the GTID the replay reached and START SLAVE until caught up.
   Both replicas must hold what the source holds (CHECKSUM TABLE of every table equal).

No target is asserted. Exit status: 0 whatever the figures; 1 if a method failed or a replica's
data differed from the source.
"""

from __future__ import annotations

import argparse
import secrets
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import _common as C  # noqa: E402
from replica_helpers import NewHost  # noqa: E402
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup  # noqa: E402
from xtrabackup_provider.core.binlog.replication import (  # noqa: E402
    ReplicationSource,
    attach,
    source_position,
    wait_caught_up,
)
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs  # noqa: E402
from xtrabackup_provider.core.catalog.backups import Catalog  # noqa: E402
from xtrabackup_provider.core.catalog.manifest import Manifest  # noqa: E402
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums  # noqa: E402
from xtrabackup_provider.core.db.server import MySQLTarget, connect, defaults_file  # noqa: E402
from xtrabackup_provider.core.pipeline.gpg import generate_key_pair  # noqa: E402
from xtrabackup_provider.core.pitr.replay import run_replay  # noqa: E402
from xtrabackup_provider.core.pitr.roll_forward import ShippedBinlogs  # noqa: E402
from xtrabackup_provider.core.restore.chain import RestoreRequest, restore  # noqa: E402
from xtrabackup_provider.core.restore.provision import ProvisionRequest, provision_replica, start_server  # noqa: E402
from xtrabackup_provider.core.restore.replica_compare import SourceCompare  # noqa: E402
from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test  # noqa: E402
from xtrabackup_provider.core.storage.local import LocalStore  # noqa: E402

SECTION = "restore_levels"
LEVELS = ("quick", "full", "deep")
SBTEST_TABLES, SBTEST_ROWS = 4, 100_000


@dataclass
class Keys:
    public: str
    private: str
    passphrase: str = field(repr=False)


@dataclass
class LevelRun:
    level: str
    seconds: float
    passed: bool
    timings: dict[str, float]
    failed: list[str]


@dataclass
class ReplicaRun:
    method: str
    seconds: float
    phases: dict[str, float]
    data_ok: bool


def _sysbench(server: SandboxServer, *args: str) -> str:
    argv = [
        "sysbench",
        "oltp_write_only",
        f"--mysql-socket={server.socket}",
        "--mysql-user=sbtest",  # a passwordless account on the socket: no secret on this argv
        "--mysql-db=sbtest",
        f"--tables={SBTEST_TABLES}",
        f"--table-size={SBTEST_ROWS}",
        *args,
    ]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"sysbench {' '.join(args)} exited {proc.returncode}: {proc.stderr[-1500:]}")
    return proc.stdout


def prepare_source(server: SandboxServer) -> tuple[str, str]:
    """Binlog on, a replication account and sysbench's tables; returns (replication password, user)."""
    server.stop()
    server.log_bin = True
    server.start()
    repl = uuid.uuid4().hex
    server.execute_script(
        f"CREATE USER IF NOT EXISTS repl@'127.0.0.1' IDENTIFIED BY '{repl}';"
        "GRANT REPLICATION SLAVE ON *.* TO repl@'127.0.0.1';"
        f"ALTER USER repl@'127.0.0.1' IDENTIFIED BY '{repl}';"
        "CREATE USER IF NOT EXISTS sbtest@localhost; GRANT ALL ON sbtest.* TO sbtest@localhost;"
        "CREATE DATABASE IF NOT EXISTS sbtest;"
    )
    if not server.query("SELECT 1 FROM information_schema.tables WHERE table_schema = 'sbtest' LIMIT 1"):
        C.log(f"sysbench prepare: {SBTEST_TABLES} tables of {SBTEST_ROWS:,} rows")
        _sysbench(server, "prepare")
    return repl, "repl"


def sysbench_writes(server: SandboxServer, minutes: float) -> dict[str, Any]:
    before = source_position(_admin(server))
    out = _sysbench(server, f"--time={int(minutes * 60)}", "--threads=2", "--report-interval=0", "run")
    after = source_position(_admin(server))
    tps = next((line.split()[2] for line in out.splitlines() if "transactions:" in line), "?")
    total = next((line.split()[1] for line in out.splitlines() if "transactions:" in line), "?")
    return {"gtid_before": before, "gtid_after": after, "transactions": total, "tps": tps.strip("(")}


def _admin(server: SandboxServer) -> MySQLTarget:
    return MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)


def _tcp_admin(server: SandboxServer) -> MySQLTarget:
    return MySQLTarget(host="127.0.0.1", port=server.port, user="root", password=server.root_password)


def level_run(
    work: Path, catalog: Catalog, backup: Manifest, keys: Keys, level: str, deep: SourceCompare
) -> LevelRun:
    t0 = time.monotonic()
    report = run_restore_test(
        RestoreTestRequest(
            catalog,
            Path(tempfile.mkdtemp(prefix="rt-", dir=work)),
            backup.backup_id,
            private_key=keys.private,
            passphrase=keys.passphrase,
            level=level,  # type: ignore[arg-type]
            roll_forward=ShippedBinlogs(catalog, keys.private, keys.passphrase),
            deep=deep,
        )
    )
    seconds = time.monotonic() - t0
    C.log(f"  {level}: {seconds:.1f}s, {report.headline()}")
    return LevelRun(level, seconds, report.passed, dict(report.timings), report.failed_checks)


class Replicas:
    def __init__(self, work: Path, catalog: Catalog, source: SandboxServer, repl: str, keys: Keys) -> None:
        self.work, self.catalog, self.source, self.keys = work, catalog, source, keys
        self.replication = ReplicationSource(
            "127.0.0.1", source.port, "repl", repl, connect_retry=1, label="source"
        )
        self.count = 0

    def _host(self) -> NewHost:
        self.count += 1
        return NewHost(Path(tempfile.mkdtemp(prefix="nh-", dir="/tmp")), server_id=9000 + self.count)

    def _verify(self, host: NewHost) -> bool:
        replica = host.server(self.source.root_password)
        dbs = ["sbtest", "bench"]
        return table_checksums(replica, dbs) == table_checksums(self.source, dbs)

    def ours(self) -> ReplicaRun:
        host = self._host()
        try:
            subprocess.run(["sync"], check=False)
            t0 = time.monotonic()
            report = provision_replica(
                ProvisionRequest(
                    catalog=self.catalog,
                    target_datadir=host.datadir,
                    source=self.replication,
                    source_admin=_tcp_admin(self.source),
                    replica=host.target(self.source.root_password),
                    start_command=host.start_command,
                    private_key=self.keys.private,
                    passphrase=self.keys.passphrase,
                    max_lag_seconds=0,
                    poll_seconds=0.2,
                    catch_up_timeout=7200,
                )
            )
            seconds = time.monotonic() - t0
            phases = {
                "restore": sum(report.timings.get(k, 0) for k in ("fetch_extract", "prepare", "copy_back")),
                "start": report.timings.get("start", 0),
                "replay": 0.0,
                "catch_up": report.timings.get("catch_up", 0),
            }
            return ReplicaRun("ours", seconds, phases, self._verify(host))
        finally:
            host.destroy()

    def naive(self, backup: Manifest) -> ReplicaRun:
        host = self._host()
        try:
            subprocess.run(["sync"], check=False)
            t0 = time.monotonic()
            restore(
                RestoreRequest(
                    catalog=self.catalog,
                    target_datadir=host.datadir,
                    backup_id=backup.backup_id,
                    private_key=self.keys.private,
                    passphrase=self.keys.passphrase,
                )
            )
            t1 = time.monotonic()
            replica = host.target(self.source.root_password)
            start_server(host.start_command, replica, 600)
            t2 = time.monotonic()
            with defaults_file(_tcp_admin(self.source)) as source_cnf, defaults_file(replica) as replica_cnf:
                run_replay(
                    [
                        "mariadb-binlog",
                        f"--defaults-file={source_cnf}",
                        "--read-from-remote-server",
                        "--to-last-log",
                        f"--start-position={backup.binlog_position}",
                        str(backup.binlog_file),
                    ],
                    ["mariadb", f"--defaults-file={replica_cnf}", "--binary-mode", "--batch"],
                )
            t3 = time.monotonic()
            reached = source_position(_tcp_admin(self.source))  # writes have stopped: the replay's end
            conn = connect(replica)
            try:
                attach(conn, self.replication, reached)
            finally:
                conn.close()
            wait_caught_up(
                lambda: connect(replica),
                self.replication,
                _tcp_admin(self.source),
                max_lag_seconds=0,
                timeout=7200,
                poll=0.2,
            )
            t4 = time.monotonic()
            phases = {"restore": t1 - t0, "start": t2 - t1, "replay": t3 - t2, "catch_up": t4 - t3}
            return ReplicaRun("naive", t4 - t0, phases, self._verify(host))
        finally:
            host.destroy()


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def report(
    command: str,
    dataset: C.Dataset,
    facts: dict[str, str],
    loads: tuple[str, str],
    backup: Manifest,
    writes: dict[str, Any],
    binlog_bytes: int,
    levels: list[LevelRun],
    replicas: list[ReplicaRun],
    errors: list[str],
) -> str:
    lines = [
        "## Restore-test levels and replicas built from backups",
        "",
        f"`{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        f"- Dataset: the restore_rto dataset, {C.fmt_bytes(dataset.innodb_bytes)} of InnoDB data "
        f"({dataset.rows:,} rows in orders and events), plus sysbench's {SBTEST_TABLES} x {SBTEST_ROWS:,} rows; "
        f"backup {backup.backup_id}: {C.fmt_bytes(backup.raw_bytes)} raw, {C.fmt_bytes(backup.stored_bytes)} stored.",
        f"- After the backup: `sysbench oltp_write_only --threads=2` for the given minutes: {writes['transactions']} "
        f"transactions ({writes['tps']}/s), GTID {writes['gtid_before']} -> {writes['gtid_after']}, "
        f"{C.fmt_bytes(binlog_bytes)} of binlogs shipped.",
        f"- Machine: {facts['cpus']} CPUs, {facts['memory']}, {facts['os']}, shared with other work; mariabackup "
        f"{facts['mariabackup']}. Load average (1/5/15 min) before: {loads[0]}; after: {loads[1]}.",
        "",
        "### 1. Restore-test wall time per level (medians; phases in seconds)",
        "",
    ]
    phases = [
        "fetch_extract",
        "prepare",
        "copy_back",
        "innochecksum",
        "start",
        "verify",
        "roll_forward",
        "replica_checksum",
    ]
    rows = []
    for level in LEVELS:
        runs = [r for r in levels if r.level == level]
        if not runs:
            continue
        med = {p: C.median([r.timings.get(p, 0.0) for r in runs]) for p in phases}
        rows.append(
            [
                level,
                len(runs),
                _fmt(C.median([r.seconds for r in runs])),
                *[_fmt(med[p]) if any(p in r.timings for r in runs) else "-" for p in phases],
                "pass"
                if all(r.passed for r in runs)
                else "FAIL " + ",".join(sorted({c for r in runs for c in r.failed})),
            ]
        )
    lines += [C.markdown_table(["Level", "Runs", "Wall s", *phases, "Verdict"], rows), ""]
    lines += ["### 2. A replica from nothing to caught up, the backup taken before the writes", ""]
    rows = []
    for method in ("ours", "naive"):
        runs = [r for r in replicas if r.method == method]
        if not runs:
            continue
        rows.append(
            [
                method,
                len(runs),
                _fmt(C.median([r.seconds for r in runs])),
                *[
                    _fmt(C.median([r.phases[p] for r in runs]))
                    for p in ("restore", "start", "replay", "catch_up")
                ],
                "equal" if all(r.data_ok for r in runs) else "DIFFERENT",
                ", ".join(f"{r.seconds:.1f}" for r in runs),
            ]
        )
    lines += [
        C.markdown_table(
            [
                "Method",
                "Runs",
                "Wall s (median)",
                "restore",
                "start",
                "replay",
                "catch-up",
                "Data",
                "Each run",
            ],
            rows,
        ),
        "",
    ]
    ours = C.median([r.seconds for r in replicas if r.method == "ours"])
    naive = C.median([r.seconds for r in replicas if r.method == "naive"])
    ours_tail = C.median([r.phases["catch_up"] for r in replicas if r.method == "ours"])
    naive_tail = C.median(
        [r.phases["replay"] + r.phases["catch_up"] for r in replicas if r.method == "naive"]
    )
    if ours and naive:
        lines.append(
            f"Naive / ours: {naive / ours:.2f} for the whole build; {naive_tail / ours_tail:.2f} for what "
            "comes after the server starts (replay + catch-up against catch-up)."
        )
    for error in errors:
        lines.append(f"\nFAILED: {error}")
    return "\n".join(lines) + "\n"


def _attempt(errors: list[str], what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - reported, the other methods go on
        C.log(f"{what} failed: {exc}")
        errors.append(f"{what}: {type(exc).__name__}: {str(exc)[:500]}")
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=600, help="MiB of InnoDB data (default 600)")
    parser.add_argument(
        "--write-minutes", type=float, default=2, help="sysbench after the backup (default 2)"
    )
    parser.add_argument("--repeats", type=int, default=2, help="runs per level and per method (default 2)")
    parser.add_argument("--only", choices=("levels", "replicas"), help="run one part only")
    parser.add_argument(
        "--keep", action="store_true", help=f"work in {C.BENCH_OUT / SECTION} and reuse its dataset"
    )
    parser.add_argument("--write-docs", action="store_true", help=f"replace this section of {C.BENCH_DOC}")
    args = parser.parse_args(argv)
    command = f".venv/bin/python bench/restore_levels.py --size-mb {args.size_mb} --write-minutes {args.write_minutes:g}"
    command += f" --repeats {args.repeats}" + (f" --only {args.only}" if args.only else "")
    facts, errors = C.system_facts(), []
    levels: list[LevelRun] = []
    replicas: list[ReplicaRun] = []
    started = time.monotonic()
    with (
        C.workdir(SECTION, args.keep) as work,
        C.dataset_server(work, args.size_mb * C.MiB, reuse=args.keep) as (
            server,
            dataset,
        ),
    ):
        repl, _user = prepare_source(server)
        passphrase = secrets.token_urlsafe(24)
        pair = generate_key_pair("xbp bench <bench@example.invalid>", passphrase)
        keys = Keys(pair.public_key, pair.private_key, passphrase)
        store = work / f"store-{uuid.uuid4().hex[:6]}"
        catalog = Catalog(LocalStore(store), "bench", "c1", "h1")
        C.log("the backup")
        backup = run_backup(BackupRequest(catalog=catalog, target=_admin(server), public_keys=[keys.public]))
        C.log(f"sysbench writes for {args.write_minutes:g} minute(s)")
        writes = sysbench_writes(server, args.write_minutes)
        shipped = ship_binlogs(
            ShipRequest(catalog=catalog, target=_admin(server), public_keys=[keys.public], flush=True)
        )
        C.log(f"shipped {len(shipped.shipped)} binlog(s), {C.fmt_bytes(shipped.raw_bytes)}")
        load_before = C.load_average()
        deep = SourceCompare(
            ReplicationSource("127.0.0.1", server.port, "repl", repl, connect_retry=1, label="source"),
            _tcp_admin(server),
            catch_up_timeout=7200,
            poll_seconds=0.5,
        )
        if args.only in (None, "levels"):
            C.log("part 1: restore-test levels")
            for r in range(args.repeats):
                for level in LEVELS if r % 2 == 0 else tuple(reversed(LEVELS)):
                    run = _attempt(
                        errors,
                        f"level {level}",
                        lambda lv=level: level_run(work, catalog, backup, keys, lv, deep),
                    )
                    if run:
                        levels.append(run)
        if args.only in (None, "replicas"):
            C.log("part 2: a replica built from the backup, ours against the naive path")
            builder = Replicas(work, catalog, server, repl, keys)
            for r in range(args.repeats):
                for method in ("ours", "naive") if r % 2 == 0 else ("naive", "ours"):
                    fn = builder.ours if method == "ours" else (lambda: builder.naive(backup))
                    run = _attempt(errors, f"replica ({method})", fn)
                    if run:
                        C.log(
                            f"  {method}: {run.seconds:.1f}s {run.phases} data {'equal' if run.data_ok else 'DIFFERENT'}"
                        )
                        replicas.append(run)
        load_after = C.load_average()
    text = report(
        command,
        dataset,
        facts,
        (load_before, load_after),
        backup,
        writes,
        shipped.raw_bytes,
        levels,
        replicas,
        errors,
    )
    text += f"\nWhole benchmark: {time.monotonic() - started:.0f} s including the dataset load.\n"
    print(text)
    if args.write_docs:
        C.update_doc_section(SECTION, text)
        C.log(f"wrote the {SECTION} section of {C.BENCH_DOC}")
    bad = bool(errors) or any(not r.data_ok for r in replicas) or any(not r.passed for r in levels)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
