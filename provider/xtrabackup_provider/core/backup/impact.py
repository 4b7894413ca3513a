"""Gentle on production, and what the backup cost it.

The bounds a host's backups run under (ImpactSettings): the tool's own `--throttle` and
`--parallel`, `nice`/`ionice` for the tool, `nice` for gpg and the zstd threads, and a cap on the
upload rate to the first storage target. A bound that cannot be applied (a throttle value the
installed tool rejects, `ionice` missing) gives one warning line and the backup runs without that
bound, never slower than asked; the manifest records what was applied and the warnings.

What it cost: the locks the tool took, read from its own log as it prints it (LockWatch, the
phases in LOCK_RULES): how long production could not commit, run DDL or write to non-transactional
tables. Both go into the manifest's `impact` record (core/catalog/records.py).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..catalog.records import BLOCKED, BackupImpact, Blocked, LockPhase
from ..common import children
from ..engine.tools import ToolVersion
from ..storage.base import UPLOAD_CAP_MIB_RANGE, ObjectWriter, WrittenSegment

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ImpactSettings:
    """The bounds of one host's backups (the fleet config's `policy.impact` / `hosts[].impact`)."""

    throttle: int | None = None  # the tool's --throttle (I/O operations per second)
    parallel: int | None = None  # the tool's --parallel; None: the request's `parallel`
    nice: int | None = None  # 0..19 for the tool, gpg and the zstd threads
    ionice: str | None = None  # "idle" | "best-effort" for the tool
    ionice_level: int = 7
    max_upload_bytes_per_second: int | None = None
    # Exact row counts of the smallest InnoDB tables at the backup's point (core/db/rowcounts.py):
    # at most this many seconds of COUNT(*) on the server; 0 counts nothing.
    row_count_seconds: float = 1.0

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ImpactSettings:
        """From the config's field names (max_upload_mib_per_second in MiB/s)."""
        data = dict(data or {})
        mib = data.pop("max_upload_mib_per_second", None)
        if mib:
            low, high = UPLOAD_CAP_MIB_RANGE
            if not low <= float(mib) <= high:  # a cap that rounds to 0 bytes/s would be none; .inf overflows
                raise ValueError(
                    f"max_upload_mib_per_second {mib!r}: a cap is {low!r} (1 KiB/s) to {high:.0f} MiB/s; "
                    "leave it unset for none"
                )
            data["max_upload_bytes_per_second"] = int(float(mib) * 1024 * 1024)
        if data.get("row_count_seconds") is None:
            data.pop("row_count_seconds", None)
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class AppliedImpact:
    """What a run actually applies: the settings less what could not be applied, and why."""

    settings: ImpactSettings
    parallel: int
    throttle: int | None = None
    warnings: list[str] = field(default_factory=list)
    nice_argv: list[str] = field(default_factory=list)  # prefix of the gpg argv
    tool_prefix: list[str] = field(default_factory=list)  # prefix of the tool's argv (ionice, nice)
    capped: CappedWriter | None = None  # the upload writer, when its rate is capped

    def tool_args(self) -> list[str]:
        return [f"--throttle={self.throttle}"] if self.throttle else []

    def wrap_tool(self, argv: list[str]) -> list[str]:
        return [*self.tool_prefix, *argv]

    def wrap_gpg(self, argv: list[str] | None) -> list[str] | None:
        return [*self.nice_argv, *argv] if argv and self.nice_argv else argv

    def compress_setup(self) -> Callable[[], None] | None:
        """For the zstd stage's thread: lower its priority before it starts the compressor's
        worker threads, which inherit it (Linux niceness is per thread)."""
        nice = self.settings.nice
        if not nice:
            return None
        return lambda: lower_thread_priority(nice)

    def cap_upload(self, writer: ObjectWriter) -> ObjectWriter:
        rate = self.settings.max_upload_bytes_per_second
        if not rate:
            return writer
        self.capped = CappedWriter(writer, rate)
        return self.capped

    def record(self, phases: list[LockPhase]) -> BackupImpact:
        s = self.settings
        ionice = s.ionice if s.ionice != "best-effort" else f"best-effort:{s.ionice_level}"
        return BackupImpact(
            throttle=self.throttle,
            parallel=self.parallel,
            nice=s.nice if self.nice_argv else None,
            ionice=ionice if s.ionice and self.tool_prefix[:1] == ["ionice"] else None,
            max_upload_bytes_per_second=s.max_upload_bytes_per_second,
            upload_wait_seconds=round(self.capped.waited, 3) if self.capped else 0.0,
            locks=phases,
            blocked_seconds=blocked_seconds(phases),
            warnings=self.warnings[:32],
        )


def apply_settings(
    settings: ImpactSettings, tool: ToolVersion, default_parallel: int, where: str
) -> AppliedImpact:
    """Check each bound against this worker (the installed tool, nice, ionice) before the backup
    starts; one that cannot be applied is dropped with a warning naming the host and the setting."""
    applied = AppliedImpact(settings, settings.parallel or default_parallel)
    if settings.throttle is not None:
        problem = throttle_problem(tool, settings.throttle)
        if problem:
            applied.warnings.append(
                f"{where}: {tool.flavour} {tool.text} rejects --throttle={settings.throttle} ({problem}); "
                "the backup runs without --throttle: set impact.throttle to a whole number of I/O "
                "operations per second that the tool accepts"
            )
        else:
            applied.throttle = settings.throttle
    if settings.ionice:
        if shutil.which("ionice"):
            cls = ["-c", "3"] if settings.ionice == "idle" else ["-c", "2", "-n", str(settings.ionice_level)]
            applied.tool_prefix += ["ionice", *cls]
        else:
            applied.warnings.append(
                f"{where}: `ionice` is not installed on this worker; impact.ionice ignored"
            )
    if settings.nice:
        if shutil.which("nice"):
            applied.nice_argv = ["nice", "-n", str(settings.nice)]
            applied.tool_prefix += applied.nice_argv
        else:
            applied.warnings.append(f"{where}: `nice` is not installed on this worker; impact.nice ignored")
    for warning in applied.warnings:
        log.warning("%s", warning)
    return applied


_OPTION_ERROR = re.compile(
    r"(Error while setting value.*|Unknown suffix.*|.*out of range.*|.*adjusted to.*|unknown option.*)",
    re.IGNORECASE,
)


def throttle_problem(tool: ToolVersion, throttle: int) -> str | None:
    """What the installed tool says about `--throttle=<throttle>`, or None if it takes it as given.

    Both tools parse options with MySQL's my_getopt: a value it cannot take is an "Error while
    setting value" line, and one it clamps ("signed value -1 adjusted to 0": no throttle at all)
    a warning; both exit 0 with --version, so the lines are what tells."""
    argv = [tool.binary or tool.flavour, "--no-defaults", f"--throttle={throttle}", "--version"]
    try:
        proc = children.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not run {argv[0]}: {exc}"
    lines = [m.group(1).strip() for line in proc.stderr.splitlines() if (m := _OPTION_ERROR.search(line))]
    if lines or proc.returncode != 0:
        return "; ".join(dict.fromkeys(lines)) or f"exit status {proc.returncode}"
    return None


def lower_thread_priority(nice: int) -> None:
    """Make the calling thread (and threads it starts afterwards) at least `nice` nice."""
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        if nice > current:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
    except OSError as exc:  # never fail a backup for its niceness
        log.warning("could not lower the compressor thread's priority to nice %d: %s", nice, exc)


class CappedWriter:
    """An ObjectWriter that writes at most `rate` bytes per second on average (the stream behind it
    waits: every stage's queue is bounded, so the tool slows down too). An S3 writer sends whole
    parts, so the rate on the wire comes in bursts of one part."""

    def __init__(self, writer: ObjectWriter, rate: int) -> None:
        self.writer, self.rate = writer, rate
        self.started: float | None = None
        self.sent = 0
        self.waited = 0.0

    def write(self, data: bytes) -> None:
        now = time.monotonic()
        if self.started is None:
            self.started = now
        self.sent += len(data)
        delay = self.started + self.sent / self.rate - now
        if delay > 0:
            time.sleep(delay)
            self.waited += delay
        self.writer.write(data)

    def commit(self) -> int:
        return self.writer.commit()

    @property
    def segments(self) -> list[WrittenSegment]:
        return self.writer.segments

    def abort(self) -> None:
        self.writer.abort()


# ---------------------------------------------------------------------------------------------
# the locks, from the tool's log


@dataclass(frozen=True)
class LockRule:
    """A lock phase as the tool logs it: the line that asks for it, the one that says it is granted
    (None: the next line), the lines that release it, and what it blocks."""

    name: str
    request: re.Pattern[str]
    granted: re.Pattern[str] | None
    release: re.Pattern[str]
    blocks: tuple[Blocked, ...]


_MB_END = re.compile(r"Executing BACKUP STAGE END|All tables unlocked")
_UNLOCK_TABLES = re.compile(r"Executing UNLOCK TABLES|All tables unlocked")


def _stage(stage: str, blocks: tuple[Blocked, ...]) -> LockRule:
    # mariabackup logs "Starting BACKUP STAGE FLUSH" but "Started BACKUP STAGE BLOCK_DDL".
    return LockRule(
        f"BACKUP STAGE {stage}",
        re.compile(rf"Start(?:ing|ed) BACKUP STAGE {stage}\b"),
        re.compile(rf"Acquired locks for BACKUP STAGE {stage}\b"),
        _MB_END,
        blocks,
    )


LOCK_RULES: dict[str, tuple[LockRule, ...]] = {
    # MariaDB: every stage's lock is held until BACKUP STAGE END (the union of the phases counts).
    "mariabackup": (
        _stage("START", ()),
        _stage("FLUSH", ("non_transactional_writes",)),
        _stage("BLOCK_DDL", ("ddl",)),
        _stage("BLOCK_COMMIT", ("commits",)),
    ),
    # Percona XtraBackup 8.0 (and 2.4 on Percona Server), as its log spells the statements it runs.
    "xtrabackup": (
        LockRule(
            "LOCK INSTANCE FOR BACKUP",
            re.compile(r"Executing LOCK INSTANCE FOR BACKUP"),
            None,
            re.compile(r"Executing UNLOCK INSTANCE"),
            ("ddl",),
        ),
        LockRule(
            "LOCK TABLES FOR BACKUP",
            re.compile(r"Executing LOCK TABLES FOR BACKUP"),
            None,
            _UNLOCK_TABLES,
            ("non_transactional_writes", "ddl"),
        ),
        LockRule(
            "FLUSH TABLES WITH READ LOCK",
            re.compile(r"Executing FLUSH TABLES WITH READ LOCK"),
            None,
            _UNLOCK_TABLES,
            ("commits", "ddl", "non_transactional_writes"),
        ),
        LockRule(
            "LOCK BINLOG FOR BACKUP",
            re.compile(r"Executing LOCK BINLOG FOR BACKUP"),
            None,
            re.compile(r"Executing UNLOCK BINLOG|All tables unlocked"),
            ("commits",),
        ),
    ),
}

# "[00] 2026-12-01 11:52:24 Starting BACKUP STAGE START" / xtrabackup "2026-12-01T11:52:24.123456+00:00 0 [Note] ..."
_TOOL_TIME = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2}(?:\.\d+)?)")


@dataclass(frozen=True)
class LogLine:
    at: float  # when this process read it (time.time(); finer than the tool's whole seconds)
    text: str


def lock_phases(flavour: str, lines: list[LogLine]) -> list[LockPhase]:
    """The lock phases in a tool's log, in the order they were asked for. A phase still held at
    the end of the log (the tool died) ends with the last line."""
    rules = LOCK_RULES.get(flavour, ())
    held: dict[str, list[Any]] = {}  # name -> [rule, requested, granted or None]
    done: list[LockPhase] = []
    awaiting_next: list[str] = []  # phases granted by whatever line comes next

    def close(name: str, at: float) -> None:
        rule, requested, granted = held.pop(name)
        granted = requested if granted is None else granted
        done.append(
            LockPhase(
                name=rule.name,
                blocks=list(rule.blocks),
                started_at=datetime.fromtimestamp(requested, UTC),
                waited_seconds=round(max(granted - requested, 0.0), 3),
                held_seconds=round(max(at - granted, 0.0), 3),
            )
        )

    for line in lines:
        for name in awaiting_next:
            if name in held:
                held[name][2] = line.at
        awaiting_next = []
        for name in [n for n, (rule, *_rest) in held.items() if rule.release.search(line.text)]:
            close(name, line.at)
        for rule in rules:
            if rule.name not in held and rule.request.search(line.text):
                held[rule.name] = [rule, line.at, None]
                if rule.granted is None:
                    awaiting_next.append(rule.name)
            elif rule.granted is not None and rule.name in held and rule.granted.search(line.text):
                held[rule.name][2] = line.at
    if lines:
        for name in list(held):
            close(name, lines[-1].at)
    return sorted(done, key=lambda p: p.started_at or datetime.min.replace(tzinfo=UTC))


def blocked_seconds(phases: list[LockPhase]) -> dict[Blocked, float]:
    """Per thing production could not do: the seconds covered by the phases that block it (a
    requested lock counts from the request: a pending lock queues what comes after it)."""
    out: dict[Blocked, float] = {}
    for what in BLOCKED:
        spans = sorted(
            (start, start + p.waited_seconds + p.held_seconds)
            for p in phases
            if what in p.blocks and (start := p.started_at.timestamp() if p.started_at else None) is not None
        )
        total, end = 0.0, float("-inf")
        for start, stop in spans:
            if stop > end:
                total += stop - max(start, end)
                end = stop
        if spans:
            out[what] = round(total, 3)
    return out


def lines_from_log(text: str) -> list[LogLine]:
    """A saved log's lines stamped with the tool's own timestamps (whole seconds for mariabackup;
    a line without one takes the previous line's)."""
    out, at = [], 0.0
    for raw in text.splitlines():
        if (when := _tool_time(raw)) is not None:
            at = when.timestamp()
        out.append(LogLine(at, raw))
    return out


def _tool_time(text: str) -> datetime | None:
    m = _TOOL_TIME.search(text)
    if not m:
        return None
    try:
        when = datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}")
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


class LockWatch:
    """Reads the tool's stderr file while the tool writes it, stamping each line with the time it
    was read; `phases()` after the tool ended. Reads with pread: the tool shares the file's offset.
    `on_line` sees each line as it is read (core/db/rowcounts.py opens its snapshot on one).
    `refuse(line)` names a line that means the tool is not doing what it was asked (core/engine/
    warnings.py): the tool is killed at once, and `refused` says why (with the lines that follow it
    in the same write: the values the warning compares)."""

    POLL = 0.05

    def __init__(
        self,
        flavour: str,
        on_line: Callable[[str], None] | None = None,
        refuse: Callable[[str], str | None] | None = None,
    ) -> None:
        self.flavour = flavour
        self.on_line = on_line
        self.lines: list[LogLine] = []
        self.refused: str | None = None
        self._refuse = refuse
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def attach(self, proc: Any) -> None:
        """stream_to_store's `producer_watch`: called with the tool's Proc once it runs."""
        fd = os.dup(proc.stderr.fileno())  # ours: the Proc closes its own when the stream ends
        self._thread = threading.Thread(
            target=self._follow, args=(fd, proc.popen), name="lockwatch", daemon=True
        )
        self._thread.start()

    def _follow(self, fd: int, popen: Any) -> None:
        offset, pending = 0, b""
        try:
            while True:
                exited = popen.poll() is not None or self._stop.is_set()
                while chunk := os.pread(fd, 1 << 16, offset):
                    offset += len(chunk)
                    now = time.time()
                    *complete, pending = (pending + chunk).split(b"\n")
                    new = [LogLine(now, c.decode(errors="replace")) for c in complete]
                    for line in new:
                        self._read(line)
                    self._check(new, popen)
                if exited:
                    if pending:
                        self.lines.append(LogLine(time.time(), pending.decode(errors="replace")))
                    return
                time.sleep(self.POLL)
        finally:
            os.close(fd)

    def _read(self, line: LogLine) -> None:
        self.lines.append(line)
        if self.on_line is not None:
            self.on_line(line.text)

    def _check(self, new: list[LogLine], popen: Any) -> None:
        if self._refuse is None or self.refused is not None:
            return
        for n, line in enumerate(new):
            if why := self._refuse(line.text):
                follow = [x.text.strip() for x in new[n + 1 : n + 3] if x.text[:1].isspace()]
                self.refused = " ".join([why, *follow])
                if popen.poll() is None:
                    popen.kill()  # before it copies anything more
                return

    def phases(self) -> list[LockPhase]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
        phases = lock_phases(self.flavour, self.lines)
        for phase in phases:
            log.info(
                "lock %s (blocks %s): waited %.2fs, held %.2fs",
                phase.name,
                ", ".join(phase.blocks) or "nothing",
                phase.waited_seconds,
                phase.held_seconds,
            )
        return phases
