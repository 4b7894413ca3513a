"""P7: point-in-time replay of >= 1 GiB of sysbench binlogs, the replication applier against the pipe.

    .venv/bin/python bench/pitr_replay.py [--gib 1.05] [--rounds 2] [--keep] [--data DIR] [--write-docs]

Dataset (made once; ``--keep`` keeps it in ``bench/out/pitr_replay`` and reuses it): a sandbox
MariaDB (binlog ROW, FULL row images, 256 MiB binlog files) with ``--tables`` sysbench tables of
``--table-size`` rows; ``mariabackup --backup`` into a directory right after ``sysbench prepare``;
then ``oltp_write_only --threads=8`` until at least ``--gib`` GiB of binlog were written after the
backup's position. The source's ``CHECKSUM TABLE`` of every table and its GTID are recorded; the
backup is prepared once. ``--data DIR`` reuses such a dataset (``prepared/``, ``binlogs/``,
``facts.json``) read-only.

Each run: a fresh ``cp -a`` of the prepared backup, then ``core.pitr.applier.replay_binlogs()`` of
all binlogs to the source's last GTID, by

  (applier)  the restored server's replication applier: the binlogs as relay logs, 4 parallel
             optimistic workers, ``START SLAVE SQL_THREAD UNTIL`` the planned end (the default);
  (pipe)     ``mariadb-binlog --start-position ... | mariadb`` into a sandbox (``--replay pipe``).

Both sandboxes get the same server options (``--innodb-buffer-pool-size=1G
--innodb-log-file-size=512M --innodb-flush-log-at-trx-commit=2``). After each run a sandbox on the
result compares ``CHECKSUM TABLE`` of every table and ``gtid_slave_pos`` with the source's. Methods
alternate (applier, pipe / pipe, applier ...). CPU = user + sys of the replay: this process (the
stop planner, which both methods run first) and every child (the servers, mariadb-binlog, the
client); the planner's own time is measured once more on its own and printed. Target (printed, never asserted): pipe / applier >= 2.5
(medians of wall time), identical data. Exit 1 if a run failed or its data differ.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from xtrabackup_provider.core.catalog.manifest import Manifest  # noqa: E402
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums  # noqa: E402
from xtrabackup_provider.core.engine.metadata import read_binlog_position  # noqa: E402
from xtrabackup_provider.core.pitr.applier import replay_binlogs, stop_of  # noqa: E402
from xtrabackup_provider.core.pitr.plan import PitrPlan, PitrTarget  # noqa: E402

SECTION = "pitr_replay"
REPLAY_SERVER = [
    "--innodb-buffer-pool-size=1G",
    "--innodb-log-file-size=512M",
    "--innodb-flush-log-at-trx-commit=2",
]
SOURCE_SERVER = [*REPLAY_SERVER, "--sync-binlog=0", "--max-binlog-size=256M", "--binlog-row-image=FULL"]


def _sysbench(server: SandboxServer, tables: int, size: int) -> list[str]:
    return [
        "sysbench",
        "oltp_write_only",
        "--db-driver=mysql",
        f"--mysql-socket={server.socket}",
        "--mysql-user=root",
        "--mysql-db=sbtest",
        f"--tables={tables}",
        f"--table-size={size}",
    ]


def make_dataset(work: Path, gib: float, tables: int, size: int, threads: int) -> Path:
    data = work / "dataset"
    if (data / "facts.json").exists():
        C.log(f"reusing the dataset in {data}")
        return data
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    server = SandboxServer.create(work / "src", server_id=1870, extra_args=SOURCE_SERVER)
    try:
        server.query("CREATE DATABASE sbtest")
        sb = _sysbench(server, tables, size)
        t0 = time.monotonic()
        subprocess.run([*sb, "--threads=2", "prepare"], check=True, capture_output=True)
        C.log(f"sysbench prepare: {tables} x {size:,} rows in {time.monotonic() - t0:.0f}s")
        cnf = server.write_client_defaults(server.basedir / "client.cnf")
        backup = data / "prepared"
        subprocess.run(
            ["mariabackup", f"--defaults-file={cnf}", "--backup", f"--target-dir={backup}"],
            check=True,
            capture_output=True,
        )
        start = read_binlog_position(backup)
        C.log(f"backup at {start.file}:{start.position} ({start.gtid})")

        def written() -> int:
            total = 0
            for name, size_, *_ in server.query("SHOW BINARY LOGS"):
                if name > start.file:
                    total += int(size_)
                elif name == start.file:
                    total += int(size_) - int(start.position or 0)
            return total

        log = (work / "sysbench.log").open("w")
        run = subprocess.Popen(
            [*sb, f"--threads={threads}", "--time=7200", "--report-interval=60", "run"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        t0 = time.monotonic()
        try:
            while written() < gib * C.GiB:
                if run.poll() is not None:
                    raise RuntimeError(f"sysbench ended early: {(work / 'sysbench.log').read_text()[-2000:]}")
                time.sleep(2)
        finally:
            run.terminate()  # our own child
            run.wait()
            log.close()
        seconds = time.monotonic() - t0
        facts: dict[str, Any] = {
            "start": [start.file, start.position, start.gtid or ""],
            "binlog_bytes_after_backup": written(),
            "write_seconds": seconds,
            "threads": threads,
            "tables": tables,
            "table_size": size,
            "end_gtid": server.query("SELECT @@gtid_binlog_pos")[0][0],
            "checksums": table_checksums(server, ["sbtest"]),
        }
        server.query("FLUSH BINARY LOGS")
        names = [r[0] for r in server.query("SHOW BINARY LOGS") if r[0] >= start.file][:-1]
        facts["transactions"] = int(facts["end_gtid"].split("-")[-1]) - int(
            (start.gtid or "0-0-0").split("-")[-1]
        )
        server.stop()
        (data / "binlogs").mkdir()
        for name in names:
            shutil.copyfile(server.datadir / name, data / "binlogs" / name)
        facts["binlogs"] = names
        C.log(f"{C.fmt_bytes(facts['binlog_bytes_after_backup'])} of binlogs in {seconds:.0f}s; preparing")
        subprocess.run(
            ["mariabackup", "--no-defaults", "--prepare", f"--target-dir={backup}", "--use-memory=1G"],
            check=True,
            capture_output=True,
        )
        (data / "facts.json").write_text(json.dumps(facts, indent=1))
    finally:
        server.destroy()
    return data


def _facts(data: Path) -> dict[str, Any]:
    for name in ("facts.json", "bench.json"):
        if (data / name).exists():
            return dict(json.loads((data / name).read_text()))
    raise SystemExit(f"{data}: no facts.json")


def _cpu_used() -> float:
    """This process (the stop planner walks the binlogs here) and its children (servers, tools)."""
    return sum(
        usage.ru_utime + usage.ru_stime
        for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    )


def _plan(data: Path, facts: dict[str, Any]) -> tuple[PitrPlan, list[Path]]:
    files = [data / "binlogs" / name for name in facts["binlogs"]]
    file, pos, gtid = facts["start"]
    backup = Manifest.model_construct(
        backup_id="bench", binlog_file=file, binlog_position=int(pos), gtid=gtid
    )
    return PitrPlan(backup, [], PitrTarget.at_gtid(facts["end_gtid"])), files


def planning_seconds(data: Path, facts: dict[str, Any]) -> float:
    """The stop planner alone (both methods run it first, inside their wall time)."""
    plan, files = _plan(data, facts)
    C.warm_page_cache(data / "binlogs")
    t0 = time.monotonic()
    stop_of(plan, files)
    return time.monotonic() - t0


def one_run(work: Path, data: Path, facts: dict[str, Any], method: str, n: int) -> dict[str, Any]:
    run = work / f"run{n}"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()
    datadir = run / "data"
    subprocess.run(["cp", "-a", str(data / "prepared"), str(datadir)], check=True)
    plan, files = _plan(data, facts)
    C.warm_page_cache(data / "binlogs")
    subprocess.run(["sync"], check=False)
    load_before = C.load_average()
    cpu0 = _cpu_used()
    t0 = time.monotonic()
    error = None
    try:
        stop = replay_binlogs(method, plan, files, datadir, server_args=REPLAY_SERVER)
    except Exception as exc:  # noqa: BLE001 - reported, exit status 1
        error, stop = f"{type(exc).__name__}: {exc}", None
    seconds = time.monotonic() - t0
    cpu = _cpu_used() - cpu0
    load_after = C.load_average()
    row: dict[str, Any] = {
        "method": method,
        "seconds": seconds,
        "cpu": cpu,
        "load_before": load_before,
        "load_after": load_after,
        "error": error,
        "transactions": stop.transactions if stop else 0,
    }
    if error is None:
        with SandboxServer.on_datadir(
            datadir, run / "check", server_id=4300, log_bin=False, extra_args=REPLAY_SERVER
        ) as s:
            s.start()
            row["identical"] = table_checksums(s, ["sbtest"]) == facts["checksums"]
            row["gtid_slave_pos"] = s.query("SELECT @@gtid_slave_pos")[0][0]
    shutil.rmtree(run, ignore_errors=True)
    C.log(f"  {method}: {seconds:.1f}s wall, {cpu:.1f}s CPU, identical={row.get('identical')} {error or ''}")
    return row


def report(
    command: str, facts: dict[str, Any], rows: list[dict[str, Any]], sysfacts: dict[str, str], planning: float
) -> str:
    by = {m: [r for r in rows if r["method"] == m and not r["error"]] for m in ("applier", "pipe")}
    med = {m: C.median([r["seconds"] for r in by[m]]) for m in by}
    cpu = {m: C.median([r["cpu"] for r in by[m]]) for m in by}
    ratio = med["pipe"] / med["applier"] if med["pipe"] and med["applier"] else None
    cpu_ratio = cpu["pipe"] / cpu["applier"] if cpu["pipe"] and cpu["applier"] else None
    identical = bool(rows) and all(r.get("identical") for r in rows)
    table = C.markdown_table(
        ["Run", "Method", "Wall s", "CPU s", "Identical data", "gtid_slave_pos", "Load avg before / after"],
        [
            [
                i + 1,
                r["method"],
                f"{r['seconds']:.1f}",
                f"{r['cpu']:.1f}",
                "yes" if r.get("identical") else ("FAILED: " + r["error"] if r["error"] else "NO"),
                r.get("gtid_slave_pos", "-"),
                f"{r['load_before']} / {r['load_after']}",
            ]
            for i, r in enumerate(rows)
        ],
    )
    verdict = "PASS" if ratio and ratio >= 2.5 and identical else "MISS"
    return f"""## PITR replay: the replication applier against the pipe (P7)

`{command}` on {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}.

- Binlogs: {C.fmt_bytes(facts["binlog_bytes_after_backup"])} written after the backup by sysbench `oltp_write_only`
  ({facts.get("threads", 8)} threads, {facts["tables"]} tables x {facts["table_size"]:,} rows, ROW format, FULL images) in
  {len(facts["binlogs"])} files, replayed from `{facts["start"][0]}:{facts["start"][1]}` ({facts["start"][2]}) to
  GTID {facts["end_gtid"]}.
- Machine: {sysfacts["cpus"]} CPUs, {sysfacts["memory"]}, {sysfacts["os"]}; {sysfacts["mariabackup"]}.
- Both replay sandboxes: `{" ".join(REPLAY_SERVER)}`; the applier with 4 parallel workers (optimistic).
- The stop planner (`core.pitr.applier.stop_of`, run first by both methods, inside their wall and
  CPU time) took {planning:.1f} s on its own.

{table}

| Ratio | Measured | Target | Result |
|---|---|---|---|
| pipe / applier, wall (medians) | {f"{ratio:.2f}" if ratio else "n/a"} | >= 2.5 | {verdict} |
| pipe / applier, CPU (medians) | {f"{cpu_ratio:.2f}" if cpu_ratio else "n/a"} | (info) | |
| data identical to the source (CHECKSUM TABLE, every run) | {"yes" if identical else "NO"} | yes | {"PASS" if identical else "MISS"} |
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--gib", type=float, default=1.05, help="GiB of binlog after the backup (default 1.05)"
    )
    parser.add_argument("--tables", type=int, default=8)
    parser.add_argument("--table-size", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=8, help="sysbench threads (default 8)")
    parser.add_argument("--rounds", type=int, default=2, help="runs per method, alternating (default 2)")
    parser.add_argument(
        "--data", type=Path, help="an existing dataset directory (prepared/, binlogs/, facts.json)"
    )
    parser.add_argument(
        "--keep", action="store_true", help=f"work in {C.BENCH_OUT / SECTION} and keep the dataset"
    )
    parser.add_argument("--write-docs", action="store_true", help=f"replace this section of {C.BENCH_DOC}")
    args = parser.parse_args(argv)
    source = f"--data {args.data}" if args.data else f"--gib {args.gib}"
    command = f".venv/bin/python bench/pitr_replay.py {source} --rounds {args.rounds}"
    sysfacts = C.system_facts()
    rows: list[dict[str, Any]] = []
    with C.workdir(SECTION, args.keep) as work:
        data = args.data or make_dataset(work, args.gib, args.tables, args.table_size, args.threads)
        facts = _facts(data)
        C.log(
            f"{len(facts['binlogs'])} binlogs, {C.fmt_bytes(facts['binlog_bytes_after_backup'])} after the backup"
        )
        planning = planning_seconds(data, facts)
        C.log(f"stop planning alone: {planning:.1f}s")
        n = 0
        for r in range(args.rounds):
            for method in ("applier", "pipe") if r % 2 == 0 else ("pipe", "applier"):
                n += 1
                C.log(f"round {r + 1}: {method}")
                rows.append(one_run(work, data, facts, method, n))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    text = report(command, facts, rows, sysfacts, planning)
    print(text)
    if args.write_docs:
        C.update_doc_section(SECTION, text)
    return 0 if rows and all(r.get("identical") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
