"""P1 per server: the product's full backup + restore against the shell pipeline of the same stages.

    .venv/bin/python bench/clone_p1.py --server mysql   [--tables 4] [--table-size 1100000] [--pairs 2]
    .venv/bin/python bench/clone_p1.py --server mariadb [...] [--write-docs]

Run with the server's programs first on PATH (MySQL 9.7: /var/lib/xtrabackup-provider/roots/mysql-9.7/bin;
MariaDB 11.8: .../roots/mariadb-11.8/bin; MariaDB 10.11: the host's). One sandbox server holds sysbench's
tables (``sysbench oltp_read_write prepare``, about 1 GiB at the defaults), restarted cleanly and read once
(warm page cache). Then, in one invocation, ``--pairs`` rounds, ours first in odd rounds and the shell
first in even ones (A B, B A, ...: neither method always runs right after the other's writes):

  backup, ours   ``run_backup()`` into a LocalStore (flavour ``clone`` on MySQL: CLONE LOCAL into a
                 private staging dir, a server started once on the copy to read its position, the copy
                 streamed as xbstream; ``mariabackup`` on MariaDB: its stream) -> zstd 3 -> gpg -> file.
  backup, shell  clone: ``mysql -e "CLONE LOCAL DATA DIRECTORY = 'DIR'"``; the settle (the product's
                 settling server's argv started on DIR, its clone_status read with ``mysql``, ``mysqladmin
                 shutdown``: the stage that gives the copy its binlog position and GTID set); ``tar -C DIR
                 -cf - . | zstd -3 -T0 | gpg --encrypt > FILE; sync FILE; rm -rf DIR``. mariabackup: ``mariabackup --backup
                 --stream=xbstream ... | zstd -3 -T0 | gpg --encrypt > FILE; sync FILE`` (the provider's argv).
  restore, ours  ``restore()`` of that backup into an empty datadir (fetch, decrypt, decompress, extract;
                 mariabackup: prepare and move-back too).
  restore, shell ``gpg --decrypt < FILE | zstd -dc | tar -x`` (clone) or ``| mbstream -x``, then
                 ``mariabackup --prepare`` and ``--move-back`` (mariabackup).

The P1 ratio is ours / shell of each pair (backup, restore, and the two summed); the report gives each
pair's ratio, their median and their range. The first restore of each method is started once (untimed)
and its CHECKSUM TABLE compared with the source's. Exit status 0 whatever the ratios, 1 if a method failed.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from xtrabackup_provider.core.backup import clone as clone_backup  # noqa: E402
from xtrabackup_provider.core.backup import run as backup_run  # noqa: E402
from xtrabackup_provider.core.catalog.backups import Catalog  # noqa: E402
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums  # noqa: E402
from xtrabackup_provider.core.db.server import MySQLTarget  # noqa: E402
from xtrabackup_provider.core.engine.argv import (  # noqa: E402
    BackupOptions,
    backup_argv,
    copy_back_argv,
    extract_argv,
    prepare_argv,
    prepare_steps,
)
from xtrabackup_provider.core.engine.tools import detect_tool  # noqa: E402
from xtrabackup_provider.core.pipeline.gpg import GpgHome, generate_key_pair, passphrase_pipe  # noqa: E402
from xtrabackup_provider.core.restore import chain as restore_mod  # noqa: E402
from xtrabackup_provider.core.storage.local import LocalStore  # noqa: E402

TARGET = 1.10
ZSTD_LEVEL = 3
PARALLEL = 2  # BackupRequest's default --parallel for mariabackup
SB_DB = "sbtest"
STAGES = ("backup", "restore", "total")
LESS_SETTLE = "backup less the settling server"  # clone only, information


# -- pure logic (tests/unit/test_bench_clone_p1.py) -----------------------------------------------------


@dataclass
class Pair:
    """One round: ours and the shell's seconds for each stage."""

    ours: dict[str, float] = field(default_factory=dict)
    shell: dict[str, float] = field(default_factory=dict)

    def ratio(self, stage: str) -> float | None:
        if stage == "total":
            if not all(s in d for d in (self.ours, self.shell) for s in ("backup", "restore")):
                return None
            num = self.ours["backup"] + self.ours["restore"]
            den = self.shell["backup"] + self.shell["restore"]
        else:
            if stage not in self.ours or stage not in self.shell:
                return None
            num, den = self.ours[stage], self.shell[stage]
        return num / den if den else None


@dataclass(frozen=True)
class Summary:
    ratios: list[float]  # pair by pair, in run order
    median: float | None
    low: float | None
    high: float | None

    @property
    def verdict(self) -> str:
        """PASS only when the median meets the goal; the range is quoted beside it, not hidden."""
        if self.median is None:
            return "n/a"
        return "PASS" if self.median <= TARGET else "MISS"


def summarize(pairs: Sequence[Pair], stage: str) -> Summary:
    ratios = [r for r in (p.ratio(stage) for p in pairs) if r is not None]
    if not ratios:
        return Summary([], None, None, None)
    return Summary(ratios, C.median(ratios), min(ratios), max(ratios))


def cpu_pairs(cpu: dict[str, list[float]]) -> list[Pair]:
    """The rounds' CPU seconds as pairs (keys b-ours, b-shell, r-ours, r-shell; each list in round
    order, shorter where a failure cut a round short): their ratio moves far less with the load of
    a shared machine than wall time does."""
    rounds = max((len(v) for v in cpu.values()), default=0)
    pairs = []
    for i in range(rounds):
        pair = Pair()
        for key, values in cpu.items():
            if i < len(values):
                stage = "backup" if key[0] == "b" else "restore"
                getattr(pair, key.split("-", 1)[1])[stage] = values[i]
        pairs.append(pair)
    return pairs


def round_order(index: int) -> list[tuple[str, str]]:
    """(stage, who) in the order round `index` (0-based) runs them: backups before restores (a
    restore reads its own method's backup), ours first in even-indexed rounds, the shell first in
    odd ones."""
    whos = ("ours", "shell") if index % 2 == 0 else ("shell", "ours")
    return [(stage, who) for stage in ("backup", "restore") for who in whos]


def section_name(family: str, version: str) -> str:
    """The docs/BENCHMARKS.md marker of one server's section: p1_<family>_<major>_<minor>."""
    parts = re.findall(r"\d+", version)[:2]
    if len(parts) < 2:
        raise ValueError(f"cannot read a major.minor version from {version!r}")
    return f"p1_{family}_{parts[0]}_{parts[1]}"


def fmt_summary(s: Summary) -> str:
    if s.median is None:
        return "n/a"
    return f"{s.median:.2f} (range {s.low:.2f} .. {s.high:.2f})"


# -- the server and its data ----------------------------------------------------------------------------


def server_args(family: str) -> list[str]:
    """Load fast (none of this changes what is backed up): a big buffer pool, lazy flushing."""
    if family == "mysql":
        return [
            "--innodb-buffer-pool-size=1G",
            "--innodb-flush-log-at-trx-commit=0",
            "--sync-binlog=0",
            "--innodb-redo-log-capacity=1G",
            "--plugin-load-add=mysql_clone.so",
        ]
    return [*C.FAST_LOAD_ARGS, "--sync-binlog=0"]


def sysbench_prepare(server: SandboxServer, tables: int, rows: int) -> float:
    """sysbench's tables through a throwaway password-less socket account (no secret in argv)."""
    server.execute_script(
        f"CREATE DATABASE {SB_DB}; CREATE USER sb@localhost; GRANT ALL ON {SB_DB}.* TO sb@localhost;"
    )
    argv = [
        "sysbench",
        "oltp_read_write",
        "--db-driver=mysql",
        f"--mysql-socket={server.socket}",
        "--mysql-user=sb",
        f"--mysql-db={SB_DB}",
        f"--tables={tables}",
        f"--table-size={rows}",
        "--threads=2",
        "prepare",
    ]
    started = time.monotonic()
    C.run_measured(argv).check("sysbench prepare")
    server.execute_script("DROP USER sb@localhost;")
    return time.monotonic() - started


@contextmanager
def loaded_server(work: Path, family: str, tables: int, rows: int) -> Iterator[tuple[SandboxServer, float]]:
    server = SandboxServer.create(
        work / "srv",
        server_id=1,
        root_password=secrets.token_urlsafe(18),
        family=family,
        extra_args=server_args(family),
    )
    try:
        C.log(f"sysbench prepare: {tables} x {rows:,} rows")
        seconds = sysbench_prepare(server, tables, rows)
        C.log(f"  loaded in {seconds:.0f} s; restarting (a clean shutdown flushes and checkpoints)")
        server.stop()
        server.start()
        yield server, seconds
    finally:
        server.stop()


# -- the methods ----------------------------------------------------------------------------------------


@dataclass
class Run:
    seconds: float
    cpu_seconds: float
    stored_bytes: int | None = None
    phases: dict[str, float] = field(default_factory=dict)


def _cpu() -> float:
    import resource

    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        u = resource.getrusage(who)
        total += u.ru_utime + u.ru_stime
    return total


@contextmanager
def timed_calls(module: Any, names: Sequence[str], into: dict[str, float]) -> Iterator[None]:
    """Wrap (never change) module-level functions the product calls, adding their wall time to `into`."""
    real = {n: getattr(module, n) for n in names}

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                into[name] = into.get(name, 0.0) + time.monotonic() - t0

        return wrapper

    for n, fn in real.items():
        setattr(module, n, wrap(n, fn))
    try:
        yield
    finally:
        for n, fn in real.items():
            setattr(module, n, fn)


class Bench:
    def __init__(self, work: Path, server: SandboxServer, family: str, keys: Any, passphrase: str) -> None:
        self.work = work
        self.server = server
        self.family = family
        self.flavour = "clone" if family == "mysql" else "mariabackup"
        self.keys = keys
        self.passphrase = passphrase
        self.creds = server.write_client_defaults(work / "client.cnf")  # 0600
        self.tool = detect_tool(self.flavour)  # type: ignore[arg-type]
        self.gpg = GpgHome()
        self.gpg.import_private_key(keys.private_key, passphrase)
        self.expected = table_checksums(server, [SB_DB])
        self.verified: dict[str, bool] = {}
        self.seq = 0
        self.last_ours: Catalog | None = None
        self.last_shell: Path | None = None

    def close(self) -> None:
        self.gpg.close()

    def fresh(self, name: str) -> Path:
        self.seq += 1
        path = self.work / "runs" / f"{self.seq:02d}-{name}"
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    # -- backup
    def backup_ours(self) -> Run:
        if self.last_ours is not None:
            shutil.rmtree(self.last_ours.store.root, ignore_errors=True)  # type: ignore[attr-defined]
        run_dir = self.fresh("b-ours")
        (run_dir / "staging").mkdir()
        catalog = Catalog(LocalStore(run_dir / "store"), "bench", "c", "h")
        request = backup_run.BackupRequest(
            catalog=catalog,
            target=MySQLTarget(
                host=None, socket=str(self.server.socket), user="root", password=self.server.root_password
            ),
            public_keys=[self.keys.public_key],
            kind="full",
            flavour=self.flavour,  # type: ignore[arg-type]
            staging_dir=str(run_dir / "staging"),
            compression_level=ZSTD_LEVEL,
            accept_new_server=True,
        )
        phases: dict[str, float] = {}
        C.fresh_cache(self.server.datadir)
        cpu0, t0 = _cpu(), time.monotonic()
        with (
            timed_calls(backup_run, ["stream_to_store"], phases),
            timed_calls(clone_backup, ["_clone", "_settle"], phases),
        ):
            manifest = backup_run.run_backup(request)
        seconds = time.monotonic() - t0
        # _clone, _settle and stream_to_store follow one another: the rest is the verb's own work.
        phases["other (checks, key import, manifest)"] = seconds - sum(phases.values())
        self.last_ours = catalog
        return Run(seconds, _cpu() - cpu0, manifest.stored_bytes, phases)

    def backup_shell(self) -> Run:
        if self.last_shell is not None:
            shutil.rmtree(self.last_shell.parent, ignore_errors=True)
        run_dir = self.fresh("b-shell")
        out = run_dir / "backup.zst.gpg"
        enc = C.quote(self.gpg.encrypt_argv([self.keys.fingerprint]))
        if self.flavour == "clone":
            copy = run_dir / "copy"
            sql = f"CLONE LOCAL DATA DIRECTORY = '{copy}'"
            script = (
                f"mysql --defaults-file={self.creds} -e {C.quote([sql])}\n"
                f"{self.settle_script(copy, run_dir)}"
                f"tar -C {copy} -cf - . | zstd -{ZSTD_LEVEL} -T0 -q | {enc} > {out}\n"
                f"sync -- {out}\nrm -rf -- {copy}\n"
            )
        else:
            (run_dir / "lsn").mkdir()
            (run_dir / "scratch").mkdir()
            opts = BackupOptions(
                datadir=str(self.server.datadir),
                lsn_dir=str(run_dir / "lsn"),
                scratch_dir=str(run_dir / "scratch"),
                parallel=PARALLEL,
            )
            argv = backup_argv(self.tool, str(self.creds), opts)
            script = (
                f"{C.quote(argv)} 2> {run_dir / 'tool.log'} | zstd -{ZSTD_LEVEL} -T0 -q | {enc} > {out}\n"
                f"sync -- {out}\n"
            )
        C.fresh_cache(self.server.datadir)
        m = C.run_measured(C.shell_pipeline(script))
        m.check(f"backup, shell (run dir {run_dir})")
        self.last_shell = out
        phases = {}
        if (stamps := run_dir / "settle.time").exists():
            t0, t1 = (float(t) for t in stamps.read_text().split())
            phases["_settle"] = t1 - t0
        return Run(m.seconds, m.cpu_seconds, out.stat().st_size, phases)

    def settle_script(self, copy: Path, run_dir: Path) -> str:
        """The shell's settle, the stage that gives a clone its binlog position and GTID set: the
        product's settling server's argv on the copy, one query on its socket, a clean shutdown."""
        target = MySQLTarget(
            host=None, socket=str(self.server.socket), user="root", password=self.server.root_password
        )
        settler = clone_backup.settling_server(
            copy, run_dir / "settle", 1, clone_backup.server_layout(target), None
        )
        sock, client = settler.socket, f"--no-defaults -S {settler.socket} -uroot"
        query = (
            "SELECT STATE, BINLOG_FILE, BINLOG_POSITION, GTID_EXECUTED FROM performance_schema.clone_status"
        )
        return (
            f"t0=$(date +%s.%N); mkdir -p {settler.tmpdir}\n"
            f"{C.quote(settler.server_args())} > /dev/null 2>&1 &\n"
            f"until [ -S {sock} ] && mysqladmin {client} ping > /dev/null 2>&1; do sleep 0.05; done\n"
            f"mysql {client} -N -e {C.quote([query])} > {run_dir / 'position'}\n"
            f"mysqladmin {client} shutdown; wait\n"
            f'rm -f -- {copy}/auto.cnf; echo "$t0 $(date +%s.%N)" > {run_dir / "settle.time"}\n'
        )

    # -- restore
    def restore_ours(self) -> Run:
        assert self.last_ours is not None
        base = self.fresh("r-ours")
        datadir = base / "data"
        C.fresh_cache(self.last_ours.store.root)  # type: ignore[attr-defined]
        inner: dict[str, float] = {}
        cpu0, t0 = _cpu(), time.monotonic()
        with timed_calls(restore_mod, ["_import_private", "fetch_one"], inner):
            report = restore_mod.restore(
                restore_mod.RestoreRequest(
                    catalog=self.last_ours,
                    target_datadir=datadir,
                    private_key=self.keys.private_key,
                    passphrase=self.passphrase,
                    option_files=False,
                )
            )
        seconds = time.monotonic() - t0
        phases = dict(report.timings)
        phases["other (plan, checks, lease)"] = seconds - sum(report.timings.values())
        # Inside fetch_extract: the key's import into a throwaway GNUPGHOME, then the stream itself.
        phases.update({f"(of fetch_extract) {k.lstrip('_')}": v for k, v in inner.items()})
        run = Run(seconds, _cpu() - cpu0, phases=phases)
        self._verify_once("ours", datadir, base)
        shutil.rmtree(base, ignore_errors=True)
        return run

    def restore_shell(self) -> Run:
        assert self.last_shell is not None
        base = self.fresh("r-shell")
        datadir = base / "data"
        fd = passphrase_pipe(self.passphrase)
        dec = C.quote(self.gpg.decrypt_argv(fd))
        if self.flavour == "clone":
            script = f"mkdir -- {datadir}\n{dec} < {self.last_shell} | zstd -dc | tar -C {datadir} -xf -\n"
        else:
            ext = base / "extracted"
            steps = [C.quote(prepare_argv(self.tool, s)) for s in prepare_steps(self.tool, str(ext), [])]
            script = (
                f"mkdir -- {ext} {datadir}\n"
                f"{dec} < {self.last_shell} | zstd -dc | {C.quote(extract_argv(self.tool, str(ext)))}\n"
                + "".join(f"{s} 2>> {base / 'prepare.log'}\n" for s in steps)
                + f"{C.quote(copy_back_argv(self.tool, str(ext), str(datadir), move=True))}"
                f" 2> {base / 'move-back.log'}\n"
            )
        C.fresh_cache(self.last_shell)
        try:
            m = C.run_measured(C.shell_pipeline(script), pass_fds=(fd,))
        finally:
            os.close(fd)
        m.check(f"restore, shell (run dir {base})")
        self._verify_once("shell", datadir, base)
        shutil.rmtree(base, ignore_errors=True)
        return Run(m.seconds, m.cpu_seconds)

    def _verify_once(self, who: str, datadir: Path, base: Path) -> None:
        """Untimed: start a server on the first restore of each method, compare CHECKSUM TABLE."""
        if who in self.verified:
            return
        restored = SandboxServer.on_datadir(
            datadir, base / "sb", server_id=900 + self.seq, family=self.family, log_bin=False
        )
        restored.start()
        try:
            got = table_checksums(restored, [SB_DB])
        finally:
            restored.stop()
        self.verified[who] = got == self.expected
        if got != self.expected:
            raise RuntimeError(f"restore, {who}: CHECKSUM TABLE differs from the source's")


# -- report ---------------------------------------------------------------------------------------------


def report(
    *,
    command: str,
    family: str,
    version: str,
    tool_text: str,
    pairs: list[Pair],
    runs: dict[str, list[Run]],
    dataset: dict[str, Any],
    loads: list[str],
    facts: dict[str, str],
    error: str | None,
) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    engine = "clone" if family == "mysql" else "mariabackup"
    lines = [
        f"## P1 on {'MySQL' if family == 'mysql' else 'MariaDB'} {version}: `{engine}` backup + restore against the shell",
        "",
        f"`{command}` on {when}.",
        "",
        f"- Dataset: sysbench, {dataset['tables']} tables x {dataset['rows']:,} rows: {C.fmt_bytes(dataset['ibd'])} of .ibd files"
        f" in {SB_DB}, datadir {C.fmt_bytes(dataset['datadir'])}; loaded in {dataset['load_seconds']:.0f} s (not timed).",
        f"- Machine: {facts['cpus']} CPUs, {facts['memory']}, {facts['os']}; server {version}; tool {tool_text};"
        f" {facts['zstd']}; {facts['gpg']}.",
        f"- Load average (1/5/15 min) at each pair's start and at the end: {' | '.join(loads)}.",
        "",
    ]
    rows = []
    for key, title in (
        ("b-ours", "backup, ours"),
        ("b-shell", "backup, shell"),
        ("r-ours", "restore, ours"),
        ("r-shell", "restore, shell"),
    ):
        rs = runs[key]
        rows.append(
            [
                title,
                len(rs),
                C.fmt_seconds(C.median([r.seconds for r in rs])),
                " / ".join(f"{r.seconds:.2f}" for r in rs) or "-",
                C.fmt_seconds(C.median([r.cpu_seconds for r in rs])),
                C.fmt_bytes(C.median([r.stored_bytes for r in rs if r.stored_bytes]))
                if key[0] == "b"
                else "-",
            ]
        )
    lines += [
        C.markdown_table(
            ["Method", "Runs", "Wall s (median)", "Wall s (each run)", "CPU s (median)", "Stored"], rows
        ),
        "",
    ]
    ratio_rows = []
    for stage in (*STAGES, LESS_SETTLE):
        s = summarize(pairs, stage)
        if stage == LESS_SETTLE and not s.ratios:
            continue
        each = " / ".join(f"{r:.2f}" for r in s.ratios) or "-"
        goal, verdict = (f"<= {TARGET:.2f}", s.verdict) if stage in STAGES else ("(info)", "")
        ratio_rows.append([f"{stage}: ours / shell (wall)", each, fmt_summary(s), goal, verdict])
    by_cpu = cpu_pairs({k: [r.cpu_seconds for r in rs] for k, rs in runs.items()})
    for stage in STAGES:
        s = summarize(by_cpu, stage)
        each = " / ".join(f"{r:.2f}" for r in s.ratios) or "-"
        ratio_rows.append([f"{stage}: ours / shell (CPU s)", each, fmt_summary(s), "(info)", ""])
    lines += [
        C.markdown_table(["P1 ratio", "Pair by pair", "Median (range)", "Goal", "Median"], ratio_rows),
        "",
    ]
    phases: dict[str, list[float]] = {}
    for r in runs["b-ours"]:
        for k, v in r.phases.items():
            phases.setdefault(f"backup {k.lstrip('_')}", []).append(v)
    for r in runs["r-ours"]:
        for k, v in r.phases.items():
            phases.setdefault(f"restore {k}", []).append(v)
    if phases:
        lines.append(
            "- Ours, phases (s, each run): "
            + "; ".join(f"{k} {' / '.join(f'{v:.2f}' for v in vs)}" for k, vs in phases.items())
            + "."
        )
    lines.append(
        "- CPU s: this process and the tools it waited for (ours: `run_backup()` / `restore()` in-process;"
        " shell: the bash pipeline and its stages)."
    )
    if error:
        lines.append(f"- **A method failed**: {error}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--server", choices=("mysql", "mariadb"), required=True)
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--table-size", type=int, default=1_100_000)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the work dir under bench/out")
    args = parser.parse_args(argv)
    command = (
        f".venv/bin/python bench/clone_p1.py --server {args.server} --tables {args.tables}"
        f" --table-size {args.table_size} --pairs {args.pairs}"
    )
    facts = C.system_facts()
    family = args.server
    pairs: list[Pair] = []
    runs: dict[str, list[Run]] = {k: [] for k in ("b-ours", "b-shell", "r-ours", "r-shell")}
    loads: list[str] = []
    error: str | None = None
    passphrase = secrets.token_urlsafe(24)
    keys = generate_key_pair("xbp bench <bench@example.invalid>", passphrase)
    with (
        C.workdir(f"clone_p1_{family}", args.keep) as work,
        loaded_server(work, family, args.tables, args.table_size) as (server, load_seconds),
    ):
        version = str(server.query("SELECT VERSION()")[0][0])
        dataset = {
            "tables": args.tables,
            "rows": args.table_size,
            "ibd": sum(p.stat().st_size for p in (server.datadir / SB_DB).glob("*.ibd")),
            "datadir": C.tree_bytes(server.datadir),
            "load_seconds": load_seconds,
        }
        C.log(f"{version}: {C.fmt_bytes(dataset['ibd'])} in {SB_DB}; warming the page cache")
        C.warm_page_cache(server.datadir)
        bench = Bench(work, server, family, keys, passphrase)
        tool_text = f"{bench.tool.flavour} {bench.tool.text}" if family != "mysql" else "MySQL CLONE plugin"
        try:
            for i in range(args.pairs):
                loads.append(C.load_average())
                pair = Pair()
                pairs.append(pair)
                for stage, who in round_order(i):
                    key = f"{stage[0]}-{who}"
                    C.log(f"pair {i + 1}: {stage}, {who} ...")
                    run = getattr(bench, f"{stage}_{who}")()
                    runs[key].append(run)
                    getattr(pair, who)[stage] = run.seconds
                    if stage == "backup" and family == "mysql":
                        # What the clone costs beside the settling server (both methods run one).
                        settle = run.phases.get("_settle", 0.0)
                        getattr(pair, who)[LESS_SETTLE] = run.seconds - settle
                    C.log(f"  {run.seconds:.2f} s wall, {run.cpu_seconds:.2f} s CPU")
        except Exception as exc:  # noqa: BLE001 - reported, and the exit status says so
            error = f"{type(exc).__name__}: {exc}"
            C.log(f"FAILED: {error}")
        finally:
            bench.close()
        loads.append(C.load_average())
    body = report(
        command=command,
        family=family,
        version=version,
        tool_text=tool_text,
        pairs=pairs,
        runs=runs,
        dataset=dataset,
        loads=loads,
        facts=facts,
        error=error,
    )
    print(body)
    if args.write_docs:
        C.update_doc_section(section_name(family, version), body)
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(main())
