"""Why the backup DAG reads checksum results instead of running pt-table-checksum itself.

    .venv/bin/python bench/checksum_gate.py [--size-mb 256] [--write-docs]

A sandbox source and its GTID replica (same root password, so pt reaches the replica with the
source's credentials), ``--size-mb`` MiB of InnoDB data loaded on the source (the dataset of
``_common``) and replicated. In one invocation, alternating:

  (a) ``run_checksum()``: pt-table-checksum of the dataset with the dsn table, as the checksum DAG
      runs it; the replica's Seconds_Behind_Master is sampled meanwhile.
  (b) ``check_replica()``: the gate (replica status + freshness and diff query on percona.checksums),
      as the backup DAG runs it before every backup.

Target (printed as PASS/MISS, never asserted): a/b >= 100, i.e. the gate costs under 1% of a
checksum run, so gating every backup is free while the checksum keeps its own schedule.
Exit status 0 whatever the ratio; 1 if a method failed or found differences.
"""

from __future__ import annotations

import argparse
import secrets
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

from _common import (
    MiB,
    SandboxServer,
    fmt_bytes,
    generate_dataset,
    load_average,
    log,
    markdown_table,
    median,
    system_facts,
    update_doc_section,
    workdir,
)
from xtrabackup_provider.core.db.checksum import ChecksumOptions, run_checksum
from xtrabackup_provider.core.db.gate import GatePolicy, check_replica
from xtrabackup_provider.core.db.server import MySQLTarget


def _replicate(source: SandboxServer, replica: SandboxServer, password: str) -> None:
    replica.query(
        "CHANGE MASTER TO master_host='127.0.0.1', master_port=%s, master_user='root', master_password=%s,"
        " master_use_gtid=slave_pos, master_connect_retry=1",
        (source.port, password),
    )
    replica.query("START SLAVE")


def _caught_up(source: SandboxServer, replica: SandboxServer, timeout: float = 1800) -> None:
    deadline = time.monotonic() + timeout
    target = source.query("SELECT @@gtid_binlog_pos")[0][0]
    while replica.query("SELECT @@gtid_slave_pos")[0][0] != target:
        if time.monotonic() > deadline:
            raise TimeoutError("the replica did not catch up")
        time.sleep(0.2)


class LagSampler(threading.Thread):
    def __init__(self, replica: SandboxServer) -> None:
        super().__init__(daemon=True)
        self.replica, self.max_lag, self._done = replica, 0, threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.2):
            conn = self.replica.connect()
            try:
                cur = conn.cursor()
                cur.execute("SHOW SLAVE STATUS")
                row = dict(zip([c[0] for c in cur.description], cur.fetchone(), strict=True))
            finally:
                conn.close()
            self.max_lag = max(self.max_lag, int(row["Seconds_Behind_Master"] or 0))

    def stop(self) -> int:
        self._done.set()
        self.join()
        return self.max_lag


def _pt_version() -> str:
    proc = subprocess.run(["pt-table-checksum", "--version"], capture_output=True, text=True)
    return proc.stdout.strip() or "pt-table-checksum (version unknown)"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--checksum-runs", type=int, default=2)
    parser.add_argument("--gate-runs", type=int, default=10)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    facts, load_before = system_facts(), load_average()
    password = secrets.token_urlsafe(16)
    with workdir("checksum_gate", keep=False) as base:
        source = SandboxServer.create(base / "src", server_id=1, root_password=password)
        replica = SandboxServer.create(base / "rep", server_id=2, root_password=password)
        try:
            _replicate(source, replica, password)
            log(f"loading {args.size_mb} MiB on the source")
            dataset = generate_dataset(source, args.size_mb * MiB)
            _caught_up(source, replica)
            body = _measure(args, source, replica, password, dataset)
        finally:
            replica.stop()
            source.stop()
    if body is None:
        return 1
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = (
        f"## Checksum gate\n\n`.venv/bin/python bench/checksum_gate.py --size-mb {args.size_mb}` on {when}.\n\n"
        f"- Machine: {facts['cpus']} CPUs, {facts['memory']}, {facts['os']}; {_pt_version()}; "
        f"{dataset.innodb_bytes // MiB} MiB dataset loaded in {dataset.seconds:.0f} s.\n"
        f"- Load average before: {load_before}; after: {load_average()}.\n\n{body}"
    )
    print(text)
    if args.write_docs:
        update_doc_section("checksum_gate", text)
    return 0


def _measure(args, source, replica, password, dataset) -> str | None:
    src = MySQLTarget(host="127.0.0.1", port=source.port, user="root", password=password)
    rep = MySQLTarget(socket=str(replica.socket), user="root", password=password)
    options = ChecksumOptions(replica_dsns=(f"h=127.0.0.1,P={replica.port}",), databases=(dataset.database,))
    checksum_s, gate_s, lags = [], [], []
    run = None
    for _ in range(args.checksum_runs):
        sampler = LagSampler(replica)
        sampler.start()
        t0 = time.monotonic()
        run = run_checksum(src, options)
        checksum_s.append(time.monotonic() - t0)
        lags.append(sampler.stop())
        _caught_up(source, replica)
        for _ in range(args.gate_runs // args.checksum_runs):
            t0 = time.monotonic()
            verdict = check_replica(rep, GatePolicy())
            gate_s.append(time.monotonic() - t0)
            if verdict.outcome != "pass":
                log(f"FAILED: the gate did not pass: {verdict.message()}")
                return None
    assert run is not None
    if not run.ok:
        log(f"FAILED: pt-table-checksum: {run.summary()}")
        return None
    a, b = median(checksum_s), median(gate_s)
    assert a is not None and b is not None
    rows, chunks = sum(t.rows for t in run.tables), sum(t.chunks for t in run.tables)
    table = markdown_table(
        ["Method", "Runs", "Wall s (median)", "Each run", "Work"],
        [
            [
                "(a) pt-table-checksum",
                len(checksum_s),
                f"{a:.2f}",
                " / ".join(f"{s:.2f}" for s in checksum_s),
                f"{rows:,} rows in {chunks} chunks, {fmt_bytes(dataset.innodb_bytes)}; max replica lag {max(lags)} s",
            ],
            [
                "(b) gate check",
                len(gate_s),
                f"{b:.4f}",
                f"{min(gate_s):.4f} .. {max(gate_s):.4f}",
                "SHOW REPLICA STATUS + freshness + diff query",
            ],
        ],
    )
    ratio = markdown_table(
        ["Ratio", "Measured", "Target", "Result"],
        [["a/b (checksum run vs gate check)", f"{a / b:,.0f}", ">= 100", "PASS" if a / b >= 100 else "MISS"]],
    )
    return f"{table}\n\n{ratio}\n"


if __name__ == "__main__":
    sys.exit(main())
