"""The argv of every tool step: streamed backup, prepare sequences per flavour rules, copy-back,
extract. Each tool's first option says which option files it reads: the backup reads only our
0600 defaults file (`--defaults-file`, which also holds the credentials), every other step none
(`--no-defaults`); a host's my.cnf never reaches them (core/common/children.py). A password on a
command line is refused.
"""

from __future__ import annotations

__all__ = ["backup_argv", "prepare_steps", "prepare_argv", "copy_back_argv", "extract_argv"]

import re
from dataclasses import dataclass, field

from . import clone
from .tools import EngineError, ToolVersion

_SECRET_OPTION = re.compile(r"^--(loose-|maximum-)?pass")


@dataclass(frozen=True)
class BackupOptions:
    datadir: str
    lsn_dir: str  # --extra-lsndir: checkpoints/info land here as well as in the stream
    scratch_dir: str  # --target-dir: the tool's temp files while streaming
    incremental_lsn: int | None = None
    parallel: int = 2
    open_files_limit: int | None = None  # --backup keeps every tablespace open
    extra_args: tuple[str, ...] = field(default_factory=tuple)


def backup_argv(tool: ToolVersion, credentials_file: str, opts: BackupOptions) -> list[str]:
    """argv of a streamed backup. The tool reads the 0600 defaults file alone (credentials, address,
    TLS): no other option file. The server's layout (innodb_data_home_dir, the log and undo
    directories, page size) the tool reads from the server it connects to (SHOW VARIABLES), and
    `opts.datadir` is the server's own @@datadir, checked before (core/binlog/identity.py)."""
    argv = [
        tool.binary or tool.flavour,
        f"--defaults-file={credentials_file}",  # the first option, or the tool ignores it
        "--backup",
        "--stream=xbstream",
        f"--datadir={opts.datadir}",
        f"--target-dir={opts.scratch_dir}",
        f"--extra-lsndir={opts.lsn_dir}",
        f"--parallel={opts.parallel}",
    ]
    if opts.incremental_lsn is not None:
        argv.append(f"--incremental-lsn={opts.incremental_lsn}")
    if opts.open_files_limit:
        argv.append(f"--open-files-limit={opts.open_files_limit}")
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
    open_files_limit: int | None = None  # prepare opens the tablespaces too


def prepare_steps(tool: ToolVersion, base_dir: str, incremental_dirs: list[str]) -> list[PrepareStep]:
    """The prepare sequence that makes base + incrementals consistent, per flavour rules.

    XtraBackup: --apply-log-only on the base and every incremental but the last; the last step
    (the last incremental, or the base alone) runs without it and is the final prepare. A
    separate plain --prepare after the apply-log-only steps is never emitted: since 8.0.30 it
    corrupts silently, and before that it is redundant.
    MariaBackup 10.5+: never --apply-log-only; --prepare the base, then each incremental.
    """
    caps = tool.capabilities
    if not caps.prepare:
        return []  # consistent as copied (clone)
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
    if tuning.open_files_limit:
        argv.append(f"--open-files-limit={tuning.open_files_limit}")
    return argv


def copy_back_argv(tool: ToolVersion, prepared_dir: str, datadir: str, *, move: bool = False) -> list[str]:
    if tool.capabilities.own_stream:
        return clone.copy_back_argv(prepared_dir, datadir, move=move)
    action = "--move-back" if move else "--copy-back"
    return [
        tool.binary or tool.flavour,
        "--no-defaults",
        action,
        f"--target-dir={prepared_dir}",
        f"--datadir={datadir}",
    ]


def extract_argv(tool: ToolVersion, dest_dir: str) -> list[str]:
    """xbstream/mbstream (the clone engine: its own extractor) reading a stream on stdin into dest_dir."""
    if tool.capabilities.own_stream:
        return clone.extract_argv(dest_dir)
    return [tool.stream_tool(), "-x", "-C", dest_dir]


def _refuse_secrets(argv: list[str]) -> None:
    for arg in argv:
        # The tools accept --loose- prefixes and unambiguous abbreviations (--pass=...).
        if _SECRET_OPTION.match(arg) or (arg.startswith("-p") and len(arg) > 2):
            raise EngineError("refusing to put a password on a command line; use the defaults file")
