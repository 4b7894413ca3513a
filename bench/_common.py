"""Shared helpers for the benchmarks in ``bench/``.

Benchmarks here never assert on time: the machines they run on are small and noisy, so every
script measures its baselines in the same invocation and reports ratios. This module holds what
more than one benchmark needs: a work directory, a sandbox MariaDB with a realistic dataset, a
throwaway GPG key pair, process measurement (wall, CPU, peak RSS of a process tree), and the
markdown plumbing for ``docs/BENCHMARKS.md``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import resource
import secrets
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "provider") not in sys.path:
    sys.path.insert(0, str(REPO / "provider"))

from xtrabackup_provider.core.db.sandbox import SandboxServer  # noqa: E402

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

BENCH_DOC = REPO / "docs" / "BENCHMARKS.md"
BENCH_OUT = REPO / "bench" / "out"  # git-ignored; only used with --keep


def log(message: str) -> None:
    """Progress goes to stderr so stdout stays the markdown result."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- formatting ------------------------------------------------------------------------------------


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def fmt_seconds(s: float | None) -> str:
    return "n/a" if s is None else f"{s:.2f}"


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def median_of(items: Sequence[Any], attr: str) -> float | None:
    """The median of `attr` over `items`, leaving out those where it is None."""
    return median([v for v in (getattr(i, attr) for i in items) if v is not None])


def fmt_ratio(num: float | None, den: float | None) -> str:
    return "n/a" if num is None or not den else f"{num / den:.2f}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


# -- work directory ----------------------------------------------------------------------------------


@contextlib.contextmanager
def workdir(name: str, keep: bool) -> Iterator[Path]:
    """``bench/out/<name>`` (kept, reused by the next ``--keep`` run) or a temp dir removed afterwards.

    Temp dirs live under /tmp: the sandbox's unix socket path must stay short.
    """
    if keep:
        path = BENCH_OUT / name
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    path = Path(tempfile.mkdtemp(prefix="xbp-bench-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def tree_bytes(path: Path) -> int:
    """Apparent size of the files under ``path``."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def warm_page_cache(path: Path) -> None:
    """Read every file once (`path` or those under it) so no method pays for a cold cache the others do not."""
    walked = [(str(path.parent), [], [path.name])] if path.is_file() else os.walk(path)
    for dirpath, _dirs, files in walked:
        for name in files:
            with contextlib.suppress(OSError), open(os.path.join(dirpath, name), "rb") as fh:
                while fh.read(4 * MiB):
                    pass


def fresh_cache(path: Path) -> None:
    """Before a timed step: its input alone in the page cache. Written back and dropped first (as
    root; elsewhere the cache is left as it is), so no step pays for reclaiming what the one
    before it left (the first restore after two backups took 2-3x the second's wall and CPU time
    whichever method it was), then `path` read once (warm, like the source's datadir)."""
    os.sync()
    with contextlib.suppress(OSError), open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3\n")
    warm_page_cache(path)


# -- system facts --------------------------------------------------------------------------------------


def _first_line(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "n/a"
    text = (proc.stdout or proc.stderr).strip().splitlines()
    return text[0].strip() if text else "n/a"


def system_facts() -> dict[str, str]:
    os_name = platform.system()
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    mem = "n/a"
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) * KiB / GiB:.1f} GiB"
    try:
        import zstandard

        pyzstd = f"{zstandard.__version__} (libzstd {'.'.join(map(str, zstandard.ZSTD_VERSION))})"
    except ImportError:  # pragma: no cover - a dependency of the provider
        pyzstd = "n/a"
    return {
        "cpus": str(os.cpu_count()),
        "memory": mem,
        "os": os_name,
        "python": platform.python_version(),
        "mariabackup": _first_line(["mariabackup", "--version"]).replace("mariabackup based on ", ""),
        "zstd": _first_line(["zstd", "--version"]).strip("* "),
        "gpg": _first_line(["gpg", "--version"]),
        "python-zstandard": pyzstd,
    }


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


# -- sandbox server and dataset ------------------------------------------------------------------------

# Load fast: a big buffer pool, no binlog, no doublewrite, lazy redo flush, and a redo log big
# enough that the load is not throttled by checkpoints. None of this changes what is backed up.
FAST_LOAD_ARGS = [
    "--innodb-buffer-pool-size=1G",
    "--innodb-log-file-size=512M",
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-doublewrite=0",
    # ibdata1 grows in 64 MiB steps by default: that much zeroes would inflate the compression ratio.
    "--innodb-autoextend-increment=8",
]

DATASET_SCHEMA_VERSION = 1

_WORDS_A = (
    "'alpha','bravo','charlie','delta','echo','foxtrot','golf','hotel','india','juliet','kilo','lima','mike'"
)
_WORDS_B = "'standard','express','priority','economy','same-day','pickup','freight'"
_NOTES = (
    "'please leave at the front door','call on arrival','fragile - handle with care','gift wrap requested',"
    "'no signature required','deliver after 5pm','contact customer before shipping','back-ordered item',"
    "'partial shipment','address verified','customer is a repeat buyer'"
)

_SCHEMA = """
CREATE TABLE orders (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  customer_id INT UNSIGNED NOT NULL,
  status VARCHAR(16) NOT NULL,
  amount DECIMAL(12,2) NOT NULL,
  created_at DATETIME NOT NULL,
  token CHAR(32) NOT NULL,
  ref CHAR(16) NOT NULL,
  note VARCHAR(255) NOT NULL,
  KEY idx_customer (customer_id)
) ENGINE=InnoDB;
CREATE TABLE events (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  order_id BIGINT UNSIGNED NOT NULL,
  kind TINYINT UNSIGNED NOT NULL,
  ts TIMESTAMP NOT NULL,
  digest CHAR(40) NOT NULL,
  payload TEXT NOT NULL
) ENGINE=InnoDB;
CREATE TABLE attachments (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  order_id BIGINT UNSIGNED NOT NULL,
  mime VARCHAR(32) NOT NULL,
  data BLOB NOT NULL
) ENGINE=InnoDB;
"""

# One batch: ids first..last of orders and events, and every 16th id as a 1 KiB random attachment
# (~10% of the bytes, incompressible). Ints, dates, md5/sha hex and templated text make the rest
# compress about like real OLTP data. seq_A_to_B comes from MariaDB's built-in SEQUENCE engine.
_BATCH = f"""
INSERT INTO orders
SELECT seq, FLOOR(RAND() * 2000000),
       ELT(1 + seq % 5, 'new', 'paid', 'shipped', 'delivered', 'refunded'),
       ROUND(RAND() * 1000, 2),
       TIMESTAMP'2024-01-01 00:00:00' + INTERVAL FLOOR(RAND() * 31536000) SECOND,
       MD5(seq), LEFT(SHA1(RAND()), 16),
       CONCAT_WS(' ', ELT(1 + seq % 13, {_WORDS_A}), ELT(1 + seq % 7, {_WORDS_B}), 'order', seq % 1000,
                 ELT(1 + (seq DIV 3) % 11, {_NOTES}))
FROM seq_{{first}}_to_{{last}};
INSERT INTO events
SELECT seq, seq DIV 2 + 1, seq % 12, TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq SECOND, SHA1(seq),
       CONCAT('{{{{"source":"', ELT(1 + seq % 4, 'web', 'ios', 'android', 'api'),
              '","ip":"10.', seq % 256, '.', (seq DIV 256) % 256, '.', (seq DIV 65536) % 256,
              '","ua":"', ELT(1 + seq % 5, 'Firefox/128.0', 'Chrome/126.0', 'Safari/17.5', 'curl/8.5.0',
                             'okhttp/4.12'), '","session":"', LEFT(SHA2(seq, 256), 24), '","trace":"', SHA1(RAND()),
              '","latency_ms":', ROUND(RAND() * 5000, 3), '}}}}')
FROM seq_{{first}}_to_{{last}};
INSERT INTO attachments
SELECT seq, seq, ELT(1 + seq % 3, 'image/png', 'application/pdf', 'image/jpeg'), RANDOM_BYTES(1024)
FROM seq_{{first}}_to_{{last}} WHERE seq % 16 = 0;
"""

_MAX_BATCH_ROWS = 100_000


@dataclass
class Dataset:
    database: str
    target_bytes: int
    innodb_bytes: int  # the .ibd files of `database`
    datadir_bytes: int  # everything under the datadir (system tablespace, undo, redo...)
    rows: int  # per table of orders/events
    seconds: float  # load time (0 when reused)
    schema_version: int = DATASET_SCHEMA_VERSION
    table_bytes: dict[str, int] = field(default_factory=dict)


def database_bytes(server: SandboxServer, database: str) -> dict[str, int]:
    """On-disk size of each table's .ibd file (InnoDB extends the file as it allocates pages)."""
    return {p.stem: p.stat().st_size for p in sorted((server.datadir / database).glob("*.ibd"))}


def generate_dataset(server: SandboxServer, target_bytes: int, database: str = "bench") -> Dataset:
    """Load at least ``target_bytes`` of InnoDB data into ``database`` with INSERT ... SELECT batches,
    then restart the server (a clean shutdown flushes every page and checkpoints the redo log)."""
    started = time.monotonic()
    server.execute_script(f"CREATE DATABASE {database};\nUSE {database};\n{_SCHEMA}")
    rows = 0
    batch = _MAX_BATCH_ROWS
    while (size := sum(database_bytes(server, database).values())) < target_bytes:
        if rows:
            per_row = size / rows
            batch = max(10_000, min(_MAX_BATCH_ROWS, math.ceil((target_bytes - size) / per_row * 1.02)))
        server.execute_script(_BATCH.format(first=rows + 1, last=rows + batch), database=database)
        rows += batch
        log(f"  loaded {rows:,} rows/table, {fmt_bytes(sum(database_bytes(server, database).values()))}")
    log("  restarting the server (clean shutdown flushes and checkpoints)")
    server.stop()
    server.start()
    tables = database_bytes(server, database)
    return Dataset(
        database=database,
        target_bytes=target_bytes,
        innodb_bytes=sum(tables.values()),
        datadir_bytes=tree_bytes(server.datadir),
        rows=rows,
        seconds=time.monotonic() - started,
        table_bytes=tables,
    )


@contextlib.contextmanager
def dataset_server(
    base: Path, target_bytes: int, *, reuse: bool, database: str = "bench", server_id: int = 1
) -> Iterator[tuple[SandboxServer, Dataset]]:
    """A running sandbox holding a dataset of at least ``target_bytes``; stopped on exit.

    With ``reuse`` a dataset left in ``base`` by an earlier run (same schema version, big enough) is
    started again instead of regenerated; otherwise ``base`` is wiped first.
    """
    state_file = base / "dataset.json"
    server: SandboxServer | None = None
    dataset: Dataset | None = None
    try:
        if reuse and state_file.is_file():
            state = json.loads(state_file.read_text())
            old = Dataset(**state["dataset"])
            if old.schema_version == DATASET_SCHEMA_VERSION and old.innodb_bytes >= target_bytes:
                log(f"reusing the dataset in {base} ({fmt_bytes(old.innodb_bytes)})")
                server = SandboxServer.on_datadir(
                    base / "srv" / "data",
                    base / "srv",
                    server_id=server_id,
                    skip_grant_tables=False,
                    root_password=state["root_password"],
                    log_bin=False,
                    extra_args=list(FAST_LOAD_ARGS),
                )
                server.start()
                old.seconds = 0.0
                dataset = old
        if server is None:
            shutil.rmtree(base / "srv", ignore_errors=True)
            state_file.unlink(missing_ok=True)
            log(f"creating a sandbox MariaDB in {base / 'srv'}")
            server = SandboxServer.create(
                base / "srv",
                server_id=server_id,
                root_password=secrets.token_urlsafe(18),
                log_bin=False,
                extra_args=list(FAST_LOAD_ARGS),
            )
            log(f"generating >= {fmt_bytes(target_bytes)} of InnoDB data")
            dataset = generate_dataset(server, target_bytes, database)
            if reuse:
                fd = os.open(state_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as fh:
                    json.dump({"dataset": asdict(dataset), "root_password": server.root_password}, fh)
        assert dataset is not None
        if dataset.innodb_bytes < target_bytes:
            raise RuntimeError(
                f"dataset is {fmt_bytes(dataset.innodb_bytes)}, below the {fmt_bytes(target_bytes)} target"
            )
        yield server, dataset
    finally:
        if server is not None:
            server.stop()


# -- GPG -----------------------------------------------------------------------------------------------


@dataclass
class GpgKey:
    home: Path
    fingerprint: str
    public_key: str
    passphrase: str = field(repr=False)

    def base_argv(self) -> list[str]:
        return ["gpg", "--homedir", str(self.home), "--batch", "--no-tty", "--quiet"]

    def encrypt_argv(self) -> list[str]:
        """The same flags as the provider's GpgHome.encrypt_argv (no gpg compression)."""
        flags = ["--trust-model", "always", "--compress-algo", "none", "--encrypt"]
        return self.base_argv() + flags + ["--recipient", self.fingerprint]

    def decrypt_argv(self, passphrase_fd: int) -> list[str]:
        flags = ["--pinentry-mode", "loopback", "--passphrase-fd", str(passphrase_fd)]
        return self.base_argv() + flags + ["--decrypt"]

    def passphrase_fd(self) -> int:
        """A pipe read end holding the passphrase (the caller passes it with pass_fds and closes it)."""
        read_fd, write_fd = os.pipe()
        os.write(write_fd, self.passphrase.encode() + b"\n")
        os.close(write_fd)
        return read_fd


def _gpg(home: Path, *args: str, passphrase: str | None = None) -> str:
    argv = ["gpg", "--homedir", str(home), "--batch", "--no-tty"]
    if passphrase is not None:
        argv += ["--pinentry-mode", "loopback", "--passphrase-fd", "0"]
    proc = subprocess.run(
        argv + list(args),
        input=(passphrase + "\n").encode() if passphrase is not None else None,
        stdin=None if passphrase is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"gpg {args[0]} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}")
    return proc.stdout.decode()


@contextlib.contextmanager
def gpg_key(parent: Path, uid: str = "xbp bench <bench@example.invalid>") -> Iterator[GpgKey]:
    """An ed25519 (sign) + cv25519 (encrypt) key pair with a random passphrase (given to gpg on fd 0,
    never argv) in a throwaway GNUPGHOME; its agent is killed and the directory removed on exit."""
    home = Path(tempfile.mkdtemp(prefix="g", dir=parent))
    home.chmod(0o700)
    try:
        passphrase = secrets.token_urlsafe(24)
        _gpg(home, "--quick-gen-key", uid, "ed25519", "sign", "never", passphrase=passphrase)
        listing = _gpg(home, "--with-colons", "--list-secret-keys", uid)
        fpr = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        _gpg(home, "--quick-add-key", fpr, "cv25519", "encr", "never", passphrase=passphrase)
        public = _gpg(home, "--armor", "--export", fpr)
        yield GpgKey(home, fpr, public, passphrase)
    finally:
        subprocess.run(
            ["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False
        )
        shutil.rmtree(home, ignore_errors=True)


# -- process measurement ---------------------------------------------------------------------------------


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{p}/task"):
                with contextlib.suppress(OSError), open(f"/proc/{p}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
    return found


_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


class TreeRssSampler(threading.Thread):
    """Samples the summed RSS of a process and all its descendants every ``interval`` seconds.

    Sampling can miss short spikes; it is a cross-check, not the authoritative figure (a process's
    own peak is exact in its ru_maxrss / VmHWM).
    """

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        super().__init__(name=f"rss-{pid}", daemon=True)
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.peak = max(self.peak, sum(_rss(p) for p in _descendants(self.pid)))
            self._stop_event.wait(self.interval)

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        return self.peak


@dataclass
class Measured:
    returncode: int
    seconds: float  # wall
    cpu_seconds: float  # user + sys of the whole process tree (every waited-for descendant)
    tree_rss_peak: int  # sampled, bytes
    stdout: bytes
    stderr: bytes

    def check(self, what: str) -> None:
        if self.returncode != 0:
            tail = self.stderr.decode(errors="replace").strip()[-2000:]
            raise RuntimeError(f"{what} exited {self.returncode}: {tail or '(no stderr)'}")


def run_measured(
    argv: list[str],
    *,
    input: bytes | None = None,
    stdout: Any = subprocess.PIPE,
    pass_fds: tuple[int, ...] = (),
    env: dict[str, str] | None = None,
) -> Measured:
    """Run ``argv`` in its own process group; wall time, CPU time of the tree, sampled peak tree RSS.

    CPU comes from the RUSAGE_CHILDREN delta, which counts every descendant that was waited for
    (a shell pipeline's stages, the pipeline's tools) and nothing else this process runs.
    If anything goes wrong (or Ctrl-C), the whole process group is killed.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        pass_fds=pass_fds,
        env=env,
        start_new_session=True,
    )
    sampler = TreeRssSampler(proc.pid)
    sampler.start()
    try:
        out, err = proc.communicate(input)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        peak = sampler.stop()
    seconds = time.monotonic() - started
    # Stages that outlived the group leader (a pipe reader that was never waited for) get no CPU
    # accounting; kill any such straggler so nothing keeps running into the next measurement.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Measured(proc.returncode, seconds, cpu, peak, out or b"", err or b"")


def shell_pipeline(script: str) -> list[str]:
    """argv for ``bash`` running ``script`` with errexit, nounset and pipefail."""
    return ["bash", "-c", "set -euo pipefail\n" + script]


def quote(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


# -- docs/BENCHMARKS.md ------------------------------------------------------------------------------------

_DOC_INTRO = """# Benchmarks

Numbers on this page come from the scripts in `bench/`. The machines they run on are small and
shared, so absolute times move from run to run: every benchmark runs its baselines **in the same
invocation, on the same dataset, with a warm page cache**, alternates repeated methods, and reports
medians and **ratios** against those baselines. No test asserts on timing; the scripts print
PASS/MISS against the targets and always exit 0 unless a method failed outright.

Reference machine: 2 cores, 24 GiB RAM, Debian 12, MariaDB 10.11 (mariabackup), zstd 1.5, GnuPG 2.2.
Each section names the command that reproduces it.
"""


def update_doc_section(name: str, body: str, path: Path = BENCH_DOC) -> None:
    """Replace the text between ``<!-- name:start -->`` and ``<!-- name:end -->`` in ``path``
    (appending the section if absent, creating the file with an intro if missing)."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{body.strip()}\n{end}"
    text = path.read_text() if path.exists() else _DOC_INTRO
    i, j = text.find(start), text.find(end)
    if i != -1 and j > i:
        text = text[:i] + block + text[j + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# -- more dataset helpers ------------------------------------------------------------------------------


def load_rows(server: SandboxServer, first: int, last: int, database: str = "bench") -> None:
    """Insert ids ``first..last`` of orders and events (and every 16th as an attachment) into a dataset
    made by :func:`generate_dataset`: the same row shapes as the initial load."""
    server.execute_script(_BATCH.format(first=first, last=last), database=database)


def max_id(server: SandboxServer, table: str = "orders", database: str = "bench") -> int:
    return int(server.query(f"SELECT COALESCE(MAX(id), 0) FROM {database}.{table}")[0][0])


def lsn_current(server: SandboxServer) -> int:
    """The server's current redo LSN (bytes of redo written since the log was created, near enough)."""
    return int(server.query("SHOW GLOBAL STATUS LIKE 'Innodb_lsn_current'")[0][1])


# -- S3 endpoint -------------------------------------------------------------------------------------------

S3_REGION = "us-east-1"
S3_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}

# moto answers a ranged GET by reading and copying the whole object, then slicing it: every range
# costs O(object size), so N ranges of one object cost O(N * size). S3 serves a range in O(range).
# Unless told to keep moto's stock behaviour, the child serves a ranged GET by reading only the range
# from the object's buffer (everything else, headers and errors included, is moto's own code).
_MOTO_RANGE_PATCH = """
import threading
from moto.s3 import models, responses

_ranged = threading.local()
_value = models.FakeKey.value


class _RangeView:
    def __init__(self, key):
        self.key = key

    def __len__(self):
        return self.key.size

    def __getitem__(self, s):
        with self.key.lock:
            self.key._value_buffer.seek(s.start)
            return self.key._value_buffer.read(s.stop - s.start)


def _value_get(self):
    return _RangeView(self) if getattr(_ranged, "on", False) else _value.fget(self)


models.FakeKey.value = property(_value_get, _value.fset)
_get_object = responses.S3Response.get_object


def get_object(self):
    spec = (self.headers.get("range") or "").partition("=")[2]
    _ranged.on = bool(spec) and "," not in spec and not spec.startswith("-")
    try:
        return _get_object(self)
    finally:
        _ranged.on = False


responses.S3Response.get_object = get_object
"""

_MOTO_CHILD = """
import logging
import sys
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)
if sys.argv[2] == "ranges":
    exec(PATCH)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=int(sys.argv[1]), verbose=False)
server.start()
print("ready", flush=True)
sys.stdin.read()  # until the parent closes the pipe (or dies)
server.stop()
"""


@contextlib.contextmanager
def moto_s3(timeout: float = 60, *, stock_ranges: bool = False) -> Iterator[str]:
    """moto's ``ThreadedMotoServer`` on 127.0.0.1, in a child Python process; yields its endpoint URL.

    Ranged GETs read only their range unless ``stock_ranges`` (see ``_MOTO_RANGE_PATCH``).

    A child process, not a thread: like a real S3 endpoint it does not share this process's GIL, so
    neither the method under test nor a baseline pays for the server's Python work. The child exits
    when its stdin closes (this context's exit, or the parent dying); it is killed if it lingers.
    """
    from xtrabackup_provider.core.db.sandbox import free_port

    port = free_port()
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    env["AWS_DEFAULT_REGION"] = S3_REGION
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _MOTO_CHILD.replace("exec(PATCH)", f"exec({_MOTO_RANGE_PATCH!r})"),
            str(port),
            "stock" if stock_ranges else "ranges",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        lines: list[bytes] = []
        reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline() if proc.stdout else b""))
        reader.daemon = True
        reader.start()
        reader.join(timeout)
        if not lines or lines[0].strip() != b"ready":
            raise RuntimeError(f"moto server did not start within {timeout:.0f}s (exit {proc.poll()})")
        yield f"http://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(OSError):
            if proc.stdin:
                proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def checkpoint(server: SandboxServer, timeout: float = 180) -> float:
    """Flush every dirty page and wait for InnoDB to checkpoint; returns the seconds it took.

    MariaDB's page cleaner stays idle while the redo log has room, so on a lightly written server the
    checkpoint can lag minutes behind: an incremental backup then finds almost no changed page on disk
    and carries the changes as copied redo instead. Flushing first models a server whose page cleaner
    has caught up since the last backup, so an incremental holds real page deltas.
    """
    started = time.monotonic()
    old = server.query("SELECT @@innodb_max_dirty_pages_pct, @@innodb_io_capacity, @@innodb_io_capacity_max")[
        0
    ]
    # The page cleaner flushes at innodb_io_capacity pages/s (200 by default): lift it while flushing.
    server.query("SET GLOBAL innodb_io_capacity_max = 1000000")
    server.query("SET GLOBAL innodb_io_capacity = 1000000")
    server.query("SET GLOBAL innodb_max_dirty_pages_pct = 0")
    try:
        while True:
            status = dict(
                server.query(
                    "SHOW GLOBAL STATUS WHERE Variable_name IN"
                    " ('Innodb_buffer_pool_pages_dirty', 'Innodb_checkpoint_age')"
                )
            )
            if (
                int(status["Innodb_buffer_pool_pages_dirty"]) == 0
                and int(status["Innodb_checkpoint_age"]) < MiB
            ):
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"InnoDB did not checkpoint within {timeout:.0f}s: {status}")
            time.sleep(0.2)
    finally:
        server.query(f"SET GLOBAL innodb_max_dirty_pages_pct = {float(old[0])}")
        server.query(f"SET GLOBAL innodb_io_capacity = {int(old[1])}")
        server.query(f"SET GLOBAL innodb_io_capacity_max = {int(old[2])}")
