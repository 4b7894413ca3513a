"""Backup throughput: our one-pass pipeline against the same stages in a shell, the raw tool, and staging.

    .venv/bin/python bench/backup_throughput.py [--size-gb 1.0] [--repeats 2] [--keep] [--write-docs]

On one sandbox MariaDB holding at least ``--size-gb`` GiB of InnoDB data, in one invocation:

  (a) raw      ``mariabackup --backup --stream=xbstream > /dev/null``: the floor (reading + framing).
  (b) pipeline ``run_backup()`` into a LocalStore: mariabackup -> zstd (python-zstandard, level 3,
               one thread per core) -> gpg -> file, plus everything a real backup does around it
               (tool/server checks, key import, manifest). Runs in a child Python process so its peak
               RSS (ru_maxrss, interpreter included) is the pipeline's own.
  (c) shell    ``mariabackup | zstd -3 -T0 | gpg --encrypt > file``: the same stages with no Python.
  (d) staged   ``mariabackup --target-dir``, then ``tar | gzip``, then ``gpg`` on the tarball.

(b) and (c) alternate (b, c, b, c, ...) and their medians are compared. Every method that writes a
file makes it durable (LocalStore fsyncs on commit; the shell methods end with ``sync FILE``). The
mariabackup argv of (a)-(c) is the provider's own (``engine.backup_argv``, --parallel=2), and the
credentials reach every tool through a 0600 ``--defaults-file`` (the first option: no other option file). Outputs of (b) and (c) are
decrypted and decompressed once afterwards (untimed) to check they hold the whole stream.

Targets (printed as PASS/MISS, never asserted): b/c <= 1.10, d/b >= 3.0, peak RSS of (b) < 300 MB.
Exit status: 0 whatever the ratios; 1 if a method failed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from xtrabackup_provider.core.engine.argv import BackupOptions, backup_argv  # noqa: E402
from xtrabackup_provider.core.engine.tools import detect_tool

SECTION = "backup_throughput"
TARGET_B_OVER_C = 1.10
TARGET_D_OVER_B = 3.0
TARGET_RSS_BYTES = 300 * 1000 * 1000  # 300 MB
ZSTD_LEVEL = 3
PARALLEL = 2  # BackupRequest's default --parallel for mariabackup


@dataclass
class Run:
    seconds: float
    cpu_seconds: float
    raw_bytes: int | None = None
    stored_bytes: int | None = None
    tree_rss: int = 0  # sampled peak RSS of the whole process tree
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Method:
    key: str
    title: str
    command: str
    runs: list[Run] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.runs)

    def median(self, attr: str) -> float | None:
        values = [getattr(r, attr) for r in self.runs if getattr(r, attr) is not None]
        return C.median(values)

    def first(self, attr: str) -> Any:
        return next((getattr(r, attr) for r in self.runs if getattr(r, attr) is not None), None)


# -- the child process for (b) ------------------------------------------------------------------------------


def pipeline_child() -> int:
    """Run one run_backup() from a JSON config on stdin; print a JSON result on stdout."""
    cfg = json.loads(sys.stdin.read())
    from xtrabackup_provider.core.backup import run as backup
    from xtrabackup_provider.core.catalog.backups import Catalog
    from xtrabackup_provider.core.db.server import MySQLTarget
    from xtrabackup_provider.core.storage.local import LocalStore

    stream: dict[str, float] = {}
    real_stream = backup.stream_to_store

    def timed_stream(*args: Any, **kwargs: Any) -> Any:
        result = real_stream(*args, **kwargs)
        stream["seconds"] = result.seconds
        return result

    backup.stream_to_store = timed_stream
    request = backup.BackupRequest(
        catalog=Catalog(LocalStore(cfg["store"]), "bench", "c", "h"),
        target=MySQLTarget(host=None, socket=cfg["socket"], user="root", password=cfg["password"]),
        public_keys=[cfg["public_key"]],
        kind="full",
        compression_level=cfg["level"],
    )
    cpu_before = _cpu_self_and_children()
    started = time.monotonic()
    manifest = backup.run_backup(request)
    seconds = time.monotonic() - started
    cpu = _cpu_self_and_children() - cpu_before
    hwm_kib = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm_kib = int(line.split()[1])
    print(
        json.dumps(
            {
                "seconds": seconds,
                "stream_seconds": stream.get("seconds"),
                "cpu_seconds": cpu,
                "raw_bytes": manifest.raw_bytes,
                "stored_bytes": manifest.stored_bytes,
                "object": str(Path(cfg["store"]) / manifest.objects[0].key),
                "maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "vmhwm_bytes": hwm_kib * 1024,
            }
        )
    )
    return 0


def _cpu_self_and_children() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


# -- the methods --------------------------------------------------------------------------------------------


class Bench:
    def __init__(self, work: Path, server: Any, key: C.GpgKey, keep: bool) -> None:
        self.work = work
        self.server = server
        self.key = key
        self.keep = keep
        self.creds = server.write_client_defaults(work / "client.cnf")  # 0600
        self.tool = detect_tool("mariabackup")
        self.seq = 0
        self.verified: set[str] = set()
        shutil.rmtree(work / "runs", ignore_errors=True)  # a kept work dir's previous outputs

    def fresh_dir(self, name: str) -> Path:
        self.seq += 1
        path = self.work / "runs" / f"{self.seq:02d}-{name}"
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def discard(self, path: Path) -> None:
        if not self.keep:
            shutil.rmtree(path, ignore_errors=True)

    def stream_argv(self, run_dir: Path) -> list[str]:
        (run_dir / "lsn").mkdir()
        (run_dir / "scratch").mkdir()
        opts = BackupOptions(
            datadir=str(self.server.datadir),
            lsn_dir=str(run_dir / "lsn"),
            scratch_dir=str(run_dir / "scratch"),
            parallel=PARALLEL,
        )
        return backup_argv(self.tool, str(self.creds), opts)

    # (a)
    def raw(self) -> Run:
        run_dir = self.fresh_dir("raw")
        argv = self.stream_argv(run_dir)
        m = C.run_measured(C.shell_pipeline(f"{C.quote(argv)} 2> {run_dir / 'mariabackup.log'} > /dev/null"))
        m.check(f"raw mariabackup (log: {run_dir / 'mariabackup.log'})")
        self.discard(run_dir)
        return Run(m.seconds, m.cpu_seconds, tree_rss=m.tree_rss_peak)

    # (b)
    def pipeline(self) -> Run:
        run_dir = self.fresh_dir("pipeline")
        config = {
            "store": str(run_dir / "store"),
            "socket": str(self.server.socket),
            "password": self.server.root_password,
            "public_key": self.key.public_key,
            "level": ZSTD_LEVEL,
        }
        m = C.run_measured(
            [sys.executable, str(Path(__file__).resolve()), "--pipeline-child"],
            input=json.dumps(config).encode(),
        )
        m.check("run_backup child")
        result = json.loads(m.stdout.decode().strip().splitlines()[-1])
        run = Run(
            result["seconds"],
            result["cpu_seconds"],
            result["raw_bytes"],
            result["stored_bytes"],
            m.tree_rss_peak,
            extra={
                "process_seconds": m.seconds,
                "stream_seconds": result["stream_seconds"],
                "maxrss_bytes": result["maxrss_bytes"],
                "vmhwm_bytes": result["vmhwm_bytes"],
                "process_cpu_seconds": m.cpu_seconds,
            },
        )
        if "b" not in self.verified:
            raw = self.decoded_bytes(Path(result["object"]))
            if raw != result["raw_bytes"]:
                raise RuntimeError(f"(b) decodes to {raw} bytes, the manifest says {result['raw_bytes']}")
            self.verified.add("b")
        self.discard(run_dir)
        return run

    # (c)
    def shell(self) -> Run:
        run_dir = self.fresh_dir("shell")
        out = run_dir / "backup.xbstream.zst.gpg"
        script = (
            f"{C.quote(self.stream_argv(run_dir))} 2> {run_dir / 'mariabackup.log'}"
            f" | zstd -{ZSTD_LEVEL} -T0 -q | {C.quote(self.key.encrypt_argv())} > {out}\n"
            f"sync -- {out}\n"
        )
        m = C.run_measured(C.shell_pipeline(script))
        m.check(f"shell pipeline (log: {run_dir / 'mariabackup.log'})")
        run = Run(m.seconds, m.cpu_seconds, stored_bytes=out.stat().st_size, tree_rss=m.tree_rss_peak)
        if "c" not in self.verified:
            run.raw_bytes = self.decoded_bytes(out)
            self.verified.add("c")
        self.discard(run_dir)
        return run

    # (d)
    def staged(self) -> Run:
        run_dir = self.fresh_dir("staged")
        stage, tarball = run_dir / "stage", run_dir / "backup.tar.gz"
        encrypted = run_dir / "backup.tar.gz.gpg"
        copy_argv = [
            "mariabackup",
            f"--defaults-file={self.creds}",
            "--backup",
            f"--target-dir={stage}",
            f"--datadir={self.server.datadir}",
            f"--parallel={PARALLEL}",
        ]
        steps = [
            ("copy", f"{C.quote(copy_argv)} 2> {run_dir / 'mariabackup.log'}"),
            ("tar | gzip", f"tar -C {stage} -cf - . | gzip > {tarball}"),
            (
                "gpg",
                f"{C.quote(self.key.encrypt_argv())} --output {encrypted} {tarball}\nsync -- {encrypted}",
            ),
        ]
        phases: dict[str, float] = {}
        seconds = cpu = 0.0
        peak = 0
        for name, script in steps:
            m = C.run_measured(C.shell_pipeline(script))
            m.check(f"staged step {name!r} (mariabackup log: {run_dir / 'mariabackup.log'})")
            phases[name] = m.seconds
            seconds += m.seconds
            cpu += m.cpu_seconds
            peak = max(peak, m.tree_rss_peak)
        run = Run(
            seconds,
            cpu,
            C.tree_bytes(stage),
            encrypted.stat().st_size,
            peak,
            extra={"phases": phases, "tarball_bytes": tarball.stat().st_size},
        )
        self.discard(run_dir)
        return run

    def decoded_bytes(self, path: Path) -> int:
        """Untimed check: decrypt and decompress ``path``; return the size of the xbstream inside."""
        fd = self.key.passphrase_fd()
        try:
            script = f"{C.quote(self.key.decrypt_argv(fd))} < {path} | zstd -dc | wc -c"
            m = C.run_measured(C.shell_pipeline(script), pass_fds=(fd,))
        finally:
            os.close(fd)
        m.check(f"decrypting {path.name}")
        return int(m.stdout.split()[0])


def measure(method: Method, fn: Callable[[], Run]) -> None:
    if method.error:
        return
    C.log(f"({method.key}) {method.title} run {len(method.runs) + 1} ...")
    try:
        run = fn()
    except Exception as exc:  # noqa: BLE001 - recorded, reported, and turned into exit status 1
        method.error = f"{type(exc).__name__}: {exc}"
        C.log(f"({method.key}) FAILED: {method.error}")
        return
    method.runs.append(run)
    C.log(f"({method.key}) {run.seconds:.2f}s wall, {run.cpu_seconds:.2f}s CPU")


# -- report -------------------------------------------------------------------------------------------------


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def verdict(value: float | None, ok: bool) -> str:
    return "n/a" if value is None else ("PASS" if ok else "MISS")


def report(
    methods: dict[str, Method],
    dataset: C.Dataset,
    facts: dict[str, str],
    loads: tuple[str, str],
    command: str,
) -> str:
    a, b, c, d = (methods[k] for k in "abcd")
    # (a) discards its stream; it is the same xbstream (b) and (c) compress, so use their size for MiB/s.
    stream_bytes = b.first("raw_bytes") or c.first("raw_bytes")
    rows = []
    for m in methods.values():
        if not m.ok:
            rows.append([f"({m.key}) {m.title}", len(m.runs), "FAILED", "", "", "", "", "", "", ""])
            continue
        wall = m.median("seconds")
        raw = m.first("raw_bytes") if m.key == "d" else (m.first("raw_bytes") or stream_bytes)
        stored = m.median("stored_bytes")
        rss = max(r.extra["maxrss_bytes"] for r in m.runs) if m.key == "b" else None
        rows.append(
            [
                f"({m.key}) {m.title}",
                len(m.runs),
                C.fmt_seconds(wall),
                " / ".join(f"{r.seconds:.2f}" for r in m.runs),
                C.fmt_seconds(m.median("cpu_seconds")),
                C.fmt_bytes(m.first("raw_bytes")) if m.first("raw_bytes") else "(discarded)",
                C.fmt_bytes(stored) if stored else "-",
                f"{raw / stored:.2f}x" if raw and stored else "-",
                f"{raw / wall / C.MiB:.0f}" if raw and wall else "-",
                (C.fmt_bytes(rss) + " / " if rss else "") + C.fmt_bytes(max(r.tree_rss for r in m.runs)),
            ]
        )
    table = C.markdown_table(
        [
            "Method",
            "Runs",
            "Wall s (median)",
            "Wall s (each run)",
            "CPU s",
            "Raw",
            "Stored",
            "Ratio",
            "Raw MiB/s",
            "Peak RSS (own / tree)",
        ],
        rows,
    )

    b_wall, c_wall = b.median("seconds") if b.ok else None, c.median("seconds") if c.ok else None
    a_wall, d_wall = a.median("seconds") if a.ok else None, d.median("seconds") if d.ok else None
    b_over_c, d_over_b, b_over_a = _ratio(b_wall, c_wall), _ratio(d_wall, b_wall), _ratio(b_wall, a_wall)
    rss = max(r.extra["maxrss_bytes"] for r in b.runs) if b.ok else None
    ratio_rows = [
        [
            "b/c (pipeline vs shell, wall)",
            _fmt_ratio(b_over_c),
            f"<= {TARGET_B_OVER_C:.2f}",
            verdict(b_over_c, b_over_c is not None and b_over_c <= TARGET_B_OVER_C),
        ],
        [
            "d/b (staged vs pipeline, wall)",
            _fmt_ratio(d_over_b),
            f">= {TARGET_D_OVER_B:.1f}",
            verdict(d_over_b, d_over_b is not None and d_over_b >= TARGET_D_OVER_B),
        ],
        ["b/a (pipeline vs raw tool, wall)", _fmt_ratio(b_over_a), "(info)", ""],
        [
            "b/c (CPU seconds)",
            _fmt_ratio(_ratio(b.median("cpu_seconds"), c.median("cpu_seconds"))),
            "(info)",
            "",
        ],
        [
            "peak RSS of (b), Python process",
            C.fmt_bytes(rss),
            "< 300 MB (286 MiB)",
            verdict(rss, rss is not None and rss < TARGET_RSS_BYTES),
        ],
    ]
    ratios = C.markdown_table(["Ratio", "Measured", "Target", "Result"], ratio_rows)

    notes = [
        "CPU s is user + sys of every process of a method (for (b): the Python process's threads and its "
        "tools, during `run_backup()`). (a) discards its stream, so its Raw MiB/s uses the xbstream size "
        "(b) measured; (d)'s Raw is the size of the staged directory.",
    ]
    if b.ok:
        stream = C.median([r.extra["stream_seconds"] for r in b.runs if r.extra.get("stream_seconds")])
        proc = C.median([r.extra["process_seconds"] for r in b.runs])
        hwm = max(r.extra["vmhwm_bytes"] for r in b.runs)
        notes.append(
            f"(b) wall is the `run_backup()` call; of it, `stream_to_store` took {C.fmt_seconds(stream)} s "
            f"(median). The child process including interpreter start and imports took "
            f"{C.fmt_seconds(proc)} s. Own peak RSS is ru_maxrss of that process (VmHWM {C.fmt_bytes(hwm)}); "
            f"tree RSS is sampled every 0.1 s over the process and its children (mariabackup, gpg)."
        )
    if d.ok:
        run = d.runs[0]
        phases = ", ".join(f"{k} {v:.2f} s" for k, v in run.extra["phases"].items())
        tarball = C.fmt_bytes(run.extra["tarball_bytes"])
        notes.append(f"(d) phases: {phases}; the intermediate tarball was {tarball}.")
    for m in methods.values():
        if m.error:
            notes.append(f"({m.key}) failed: `{m.error[:500]}`")

    tables = ", ".join(f"{k} {C.fmt_bytes(v)}" for k, v in dataset.table_bytes.items())
    lines = [
        "## Backup throughput",
        "",
        f"`{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        f"- Dataset: {C.fmt_bytes(dataset.innodb_bytes)} of InnoDB data ({tables}; {dataset.rows:,} rows in "
        f"orders and events), datadir {C.fmt_bytes(dataset.datadir_bytes)}"
        + (f", loaded in {dataset.seconds:.0f} s." if dataset.seconds else " (reused)."),
        f"- Machine: {facts['cpus']} CPUs, {facts['memory']}, {facts['os']}; "
        f"mariabackup {facts['mariabackup']}; "
        f"{facts['zstd']}; {facts['gpg']}; python-zstandard {facts['python-zstandard']}; "
        f"Python {facts['python']}.",
        f"- Load average (1/5/15 min) before: {loads[0]}; after: {loads[1]}.",
        "",
        "Methods (all read the same datadir with a warm page cache; every output file is fsynced):",
        "",
        *[f"- ({m.key}) {m.title}: `{m.command}`" for m in methods.values()],
        "",
        table,
        "",
        ratios,
        "",
        *[f"- {n}" for n in notes],
    ]
    return "\n".join(lines) + "\n"


def _fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


# -- main ---------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--size-gb", type=float, default=1.0, help="GiB of InnoDB data to back up (default 1.0)"
    )
    parser.add_argument("--repeats", type=int, default=2, help="runs of (b) and (c), alternating (default 2)")
    parser.add_argument(
        "--keep",
        action="store_true",
        help=f"work in {C.BENCH_OUT / 'backup_throughput'}, keep it, and reuse its dataset next time",
    )
    parser.add_argument("--write-docs", action="store_true", help=f"replace this section of {C.BENCH_DOC}")
    parser.add_argument("--pipeline-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pipeline_child:
        return pipeline_child()

    command = ".venv/bin/python bench/backup_throughput.py"
    command += f" --size-gb {args.size_gb:g}" + (f" --repeats {args.repeats}" if args.repeats != 2 else "")
    target = int(args.size_gb * C.GiB)
    facts = C.system_facts()
    methods = {
        "a": Method("a", "raw mariabackup", "mariabackup --backup --stream=xbstream ... > /dev/null"),
        "b": Method(
            "b",
            "our pipeline",
            f"run_backup(): mariabackup -> python-zstandard level {ZSTD_LEVEL}, "
            "threads=cores -> gpg -> LocalStore",
        ),
        "c": Method(
            "c",
            "shell pipeline",
            f"mariabackup ... | zstd -{ZSTD_LEVEL} -T0 | gpg --encrypt "
            "--compress-algo none > file; sync file",
        ),
        "d": Method(
            "d",
            "staged",
            "mariabackup --target-dir=DIR; tar -C DIR -cf - . | gzip > f.tar.gz; "
            "gpg --encrypt f.tar.gz; sync f.tar.gz.gpg",
        ),
    }
    with (
        C.workdir("backup_throughput", args.keep) as work,
        C.dataset_server(work, target, reuse=args.keep) as (server, dataset),
        C.gpg_key(work) as key,
    ):
        size = f"{C.fmt_bytes(dataset.innodb_bytes)} of InnoDB data"
        size += f" (datadir {C.fmt_bytes(dataset.datadir_bytes)})"
        C.log(f"dataset: {size}" + (f", loaded in {dataset.seconds:.0f}s" if dataset.seconds else ", reused"))
        print(f"Dataset: {size}", flush=True)
        bench = Bench(work, server, key, args.keep)
        C.warm_page_cache(server.datadir)
        load_before = C.load_average()
        measure(methods["a"], bench.raw)
        for _ in range(args.repeats):
            measure(methods["b"], bench.pipeline)
            measure(methods["c"], bench.shell)
        measure(methods["d"], bench.staged)
        load_after = C.load_average()

    text = report(methods, dataset, facts, (load_before, load_after), command)
    print(text)
    if args.write_docs:
        C.update_doc_section(SECTION, text)
        C.log(f"wrote the {SECTION} section of {C.BENCH_DOC}")
    return 1 if any(not m.ok for m in methods.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
