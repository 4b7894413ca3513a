"""XtraBackup / MariaBackup flavours: version -> capabilities, argv builders, metadata parsers.

Everything here is pure (no process is started) except `detect_tool`, so the argv rules for
both flavours are unit-testable without the tools installed.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Flavour = Literal["mariabackup", "xtrabackup"]
FLAVOURS: tuple[Flavour, ...] = ("mariabackup", "xtrabackup")

# Percona versions read "8.0.35-33": the part after the dash is the Percona build.
_XB_VERSION = re.compile(r"xtrabackup version (\d+)\.(\d+)\.(\d+)(?:-(\d+))?")
_SECRET_OPTION = re.compile(r"^--(loose-|maximum-)?pass")
_MB_VERSION = re.compile(r"(?:based on MariaDB server|mariabackup.*?Ver) (\d+)\.(\d+)\.(\d+)")


class EngineError(RuntimeError):
    """The backup tool is missing, unsupported, or its metadata is unreadable."""


@dataclass(frozen=True)
class ToolVersion:
    flavour: Flavour
    version: tuple[int, int, int, int]  # major, minor, patch, percona build (0 for MariaDB)
    binary: str = ""

    @property
    def text(self) -> str:
        major, minor, patch, build = self.version
        base = f"{major}.{minor}.{patch}"
        return f"{base}-{build}" if self.flavour == "xtrabackup" else base

    @property
    def major(self) -> str:
        """Series a chain must stay within, e.g. '8.0' or '10.11'."""
        return f"{self.version[0]}.{self.version[1]}"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities.for_version(self)

    def stream_tool(self) -> str:
        """The extractor for this flavour's xbstream format."""
        return "mbstream" if self.flavour == "mariabackup" else "xbstream"


@dataclass(frozen=True)
class Capabilities:
    apply_log_only: bool  # prepare steps may (and for chains must) use --apply-log-only
    plain_prepare_after_apply_log_only: bool  # safe to run a lone --prepare after one (pre 8.0.30)
    prepare_parallel: bool  # --parallel honoured at --prepare (8.0.35-33+)
    estimate_memory: bool  # --estimate-memory at backup, --use-free-memory-pct at prepare
    prepared_base_accepts_incrementals: bool  # MariaBackup 10.5+: a fully prepared base can go on

    @classmethod
    def for_version(cls, tool: ToolVersion) -> Capabilities:
        v = tool.version
        if tool.flavour == "mariabackup":
            modern = v[:2] >= (10, 5)
            return cls(
                apply_log_only=not modern,
                plain_prepare_after_apply_log_only=not modern,
                prepare_parallel=False,
                estimate_memory=False,
                prepared_base_accepts_incrementals=modern,
            )
        return cls(
            apply_log_only=True,
            plain_prepare_after_apply_log_only=v[:3] < (8, 0, 30),
            prepare_parallel=v >= (8, 0, 35, 33),
            estimate_memory=v >= (8, 0, 32, 26),
            prepared_base_accepts_incrementals=False,
        )


def parse_tool_version(output: str) -> ToolVersion:
    """Parse `xtrabackup --version` / `mariabackup --version` output (tools print to stderr)."""
    if m := _XB_VERSION.search(output):
        major, minor, patch, build = (int(g) if g else 0 for g in m.groups())
        return ToolVersion("xtrabackup", (major, minor, patch, build))
    if m := _MB_VERSION.search(output):
        major, minor, patch = (int(g) for g in m.groups())
        return ToolVersion("mariabackup", (major, minor, patch, 0))
    raise EngineError(f"cannot read a backup tool version from: {output.strip()[:200]!r}")


def detect_tool(flavour: Flavour, binary: str | None = None) -> ToolVersion:
    """Run `<tool> --version` and return its flavour, version and binary path."""
    binary = binary or flavour
    try:
        proc = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    except FileNotFoundError as exc:
        raise EngineError(
            f"backup tool {binary!r} not found on this worker; install {flavour} "
            f"or set the host's `binary` to its path"
        ) from exc
    tool = parse_tool_version(proc.stdout + proc.stderr)
    if tool.flavour != flavour:
        raise EngineError(
            f"{binary!r} is {tool.flavour} {tool.text}, but the host is configured as {flavour}"
        )
    return ToolVersion(tool.flavour, tool.version, binary)


# ---------------------------------------------------------------------------------------------
# argv builders


@dataclass(frozen=True)
class BackupOptions:
    datadir: str
    lsn_dir: str  # --extra-lsndir: checkpoints/info land here as well as in the stream
    scratch_dir: str  # --target-dir: the tool's temp files while streaming
    incremental_lsn: int | None = None
    parallel: int = 2
    host_defaults_file: str | None = None  # the server's my.cnf, if the tool should read it
    extra_args: tuple[str, ...] = field(default_factory=tuple)


def backup_argv(tool: ToolVersion, credentials_file: str, opts: BackupOptions) -> list[str]:
    """argv of a streamed backup. Credentials only ever come from the 0600 defaults file."""
    argv = [tool.binary or tool.flavour]
    # Option-file options must come first or the tools ignore them.
    if opts.host_defaults_file:
        argv.append(f"--defaults-file={opts.host_defaults_file}")
    argv += [
        f"--defaults-extra-file={credentials_file}",
        "--backup",
        "--stream=xbstream",
        f"--datadir={opts.datadir}",
        f"--target-dir={opts.scratch_dir}",
        f"--extra-lsndir={opts.lsn_dir}",
        f"--parallel={opts.parallel}",
    ]
    if opts.incremental_lsn is not None:
        argv.append(f"--incremental-lsn={opts.incremental_lsn}")
    if tool.capabilities.estimate_memory:
        argv.append("--estimate-memory=ON")
    argv += list(opts.extra_args)
    _refuse_secrets(argv)
    return argv


@dataclass(frozen=True)
class PrepareStep:
    """One prepare invocation on the base directory."""

    target_dir: str
    incremental_dir: str | None
    apply_log_only: bool

    @property
    def is_final(self) -> bool:
        return not self.apply_log_only


@dataclass(frozen=True)
class PrepareTuning:
    use_memory_bytes: int | None = None
    use_free_memory_pct: int | None = None  # only with a backup taken with --estimate-memory
    parallel: int | None = None


def prepare_steps(tool: ToolVersion, base_dir: str, incremental_dirs: list[str]) -> list[PrepareStep]:
    """The prepare sequence that makes base + incrementals consistent, per flavour rules.

    XtraBackup: --apply-log-only on the base and every incremental but the last; the last step
    (the last incremental, or the base alone) runs without it and is the final prepare. A
    separate plain --prepare after the apply-log-only steps is never emitted: since 8.0.30 it
    corrupts silently, and before that it is redundant.
    MariaBackup 10.5+: never --apply-log-only; --prepare the base, then each incremental.
    """
    caps = tool.capabilities
    if not incremental_dirs:
        return [PrepareStep(base_dir, None, apply_log_only=False)]
    if tool.flavour == "mariabackup" and not caps.apply_log_only:
        return [PrepareStep(base_dir, None, False)] + [
            PrepareStep(base_dir, d, False) for d in incremental_dirs
        ]
    steps = [PrepareStep(base_dir, None, apply_log_only=True)]
    steps += [PrepareStep(base_dir, d, apply_log_only=True) for d in incremental_dirs[:-1]]
    steps.append(PrepareStep(base_dir, incremental_dirs[-1], apply_log_only=False))
    return steps


def prepare_argv(tool: ToolVersion, step: PrepareStep, tuning: PrepareTuning | None = None) -> list[str]:
    caps = tool.capabilities
    if step.apply_log_only and not caps.apply_log_only:
        raise EngineError(f"{tool.flavour} {tool.text} has no --apply-log-only; refusing to build that step")
    # --no-defaults: prepare works on a copy and must not pick up a server's my.cnf settings.
    argv = [tool.binary or tool.flavour, "--no-defaults", "--prepare", f"--target-dir={step.target_dir}"]
    if step.apply_log_only:
        argv.append("--apply-log-only")
    if step.incremental_dir:
        argv.append(f"--incremental-dir={step.incremental_dir}")
    tuning = tuning or PrepareTuning()
    if tuning.use_free_memory_pct and caps.estimate_memory:
        argv.append(f"--use-free-memory-pct={tuning.use_free_memory_pct}")
    elif tuning.use_memory_bytes:
        argv.append(f"--use-memory={tuning.use_memory_bytes}")
    if tuning.parallel and caps.prepare_parallel:
        argv.append(f"--parallel={tuning.parallel}")
    return argv


def copy_back_argv(tool: ToolVersion, prepared_dir: str, datadir: str, *, move: bool = False) -> list[str]:
    action = "--move-back" if move else "--copy-back"
    return [
        tool.binary or tool.flavour,
        "--no-defaults",
        action,
        f"--target-dir={prepared_dir}",
        f"--datadir={datadir}",
    ]


def extract_argv(tool: ToolVersion, dest_dir: str) -> list[str]:
    """xbstream/mbstream reading a stream on stdin into dest_dir."""
    return [tool.stream_tool(), "-x", "-C", dest_dir]


def _refuse_secrets(argv: list[str]) -> None:
    for arg in argv:
        # The tools accept --loose- prefixes and unambiguous abbreviations (--pass=...).
        if _SECRET_OPTION.match(arg) or (arg.startswith("-p") and len(arg) > 2):
            raise EngineError("refusing to put a password on a command line; use the defaults file")


# ---------------------------------------------------------------------------------------------
# metadata parsers (tolerant: unknown keys kept, blank lines and comments ignored)


def parse_key_values(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class Checkpoints:
    backup_type: str
    from_lsn: int
    to_lsn: int
    last_lsn: int
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def incremental(self) -> bool:
        return self.from_lsn != 0


def parse_checkpoints(text: str, source: str = "xtrabackup_checkpoints") -> Checkpoints:
    kv = parse_key_values(text)
    try:
        return Checkpoints(
            backup_type=kv.get("backup_type", ""),
            from_lsn=int(kv["from_lsn"]),
            to_lsn=int(kv["to_lsn"]),
            last_lsn=int(kv.get("last_lsn", kv["to_lsn"])),
            extra={k: v for k, v in kv.items() if k not in {"backup_type", "from_lsn", "to_lsn", "last_lsn"}},
        )
    except (KeyError, ValueError) as exc:
        raise EngineError(
            f"{source}: missing or non-numeric LSN field ({exc}); content: {text[:200]!r}"
        ) from exc


@dataclass(frozen=True)
class BinlogPosition:
    file: str | None = None
    position: int | None = None
    gtid: str | None = None


_BINLOG_POS_INFO = re.compile(
    r"filename '(?P<file>[^']*)', position '(?P<pos>\d+)'(?:, GTID of the last change '(?P<gtid>[^']*)')?"
)


def parse_binlog_info(text: str) -> BinlogPosition:
    """xtrabackup_binlog_info: `<file>\\t<position>[\\t<gtid set>]`; the GTID set may wrap lines."""
    parts = text.strip().split(None, 2)
    if len(parts) < 2 or not parts[1].isdigit():
        return BinlogPosition()
    gtid = "".join(parts[2].split()) if len(parts) == 3 else None
    return BinlogPosition(parts[0], int(parts[1]), gtid or None)


def parse_binlog_pos(value: str) -> BinlogPosition:
    """The `binlog_pos` value of xtrabackup_info."""
    m = _BINLOG_POS_INFO.search(value)
    if not m:
        return BinlogPosition()
    return BinlogPosition(m["file"], int(m["pos"]), m["gtid"] or None)


@dataclass(frozen=True)
class BackupInfo:
    fields: dict[str, str]

    @property
    def server_version(self) -> str:
        return self.fields.get("server_version", "")

    @property
    def tool_version(self) -> str:
        return self.fields.get("tool_version", "")

    @property
    def binlog(self) -> BinlogPosition:
        return parse_binlog_pos(self.fields.get("binlog_pos", ""))

    @property
    def start_time(self) -> str:
        return self.fields.get("start_time", "")

    @property
    def end_time(self) -> str:
        return self.fields.get("end_time", "")


def parse_info(text: str) -> BackupInfo:
    return BackupInfo(parse_key_values(text))


# Tools older than MariaDB 11.x write xtrabackup_*; newer MariaDB writes mariadb_backup_*.
CHECKPOINT_FILES = ("xtrabackup_checkpoints", "mariadb_backup_checkpoints")
INFO_FILES = ("xtrabackup_info", "mariadb_backup_info")
BINLOG_INFO_FILES = ("xtrabackup_binlog_info", "mariadb_backup_binlog_info")


def find_metadata(directory: Path, names: tuple[str, ...]) -> Path | None:
    for name in names:
        if (directory / name).is_file():
            return directory / name
    return None


def read_checkpoints(directory: Path) -> Checkpoints:
    path = find_metadata(directory, CHECKPOINT_FILES)
    if path is None:
        raise EngineError(
            f"no {' or '.join(CHECKPOINT_FILES)} in {directory}: the backup tool did not finish"
        )
    return parse_checkpoints(path.read_text(), str(path))


def read_info(directory: Path) -> BackupInfo:
    path = find_metadata(directory, INFO_FILES)
    return parse_info(path.read_text()) if path else BackupInfo({})


def read_binlog_position(directory: Path) -> BinlogPosition:
    path = find_metadata(directory, BINLOG_INFO_FILES)
    if path:
        pos = parse_binlog_info(path.read_text())
        if pos.file:
            return pos
    return read_info(directory).binlog
