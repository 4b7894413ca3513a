"""Running prepare steps, sized for memory: the redo decides how much buffer pool prepare needs."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..common import children
from ..engine.argv import PrepareStep, PrepareTuning, prepare_argv, prepare_steps
from ..engine.metadata import CHECKPOINT_FILES, find_metadata, read_checkpoints, read_info
from ..engine.tools import ToolVersion

log = logging.getLogger(__name__)

MiB = 1024 * 1024
DEFAULT_USE_MEMORY = 100 * MiB  # the tools' own default, what an unsized prepare gets
REDO_FILES = ("ib_logfile0", "xtrabackup_logfile")


class PrepareError(RuntimeError):
    """A prepare step failed; the message names the step and carries the tool's stderr."""


def redo_bytes(directory: Path) -> int:
    """Copied redo in a backup directory, from the redo file or xtrabackup's own estimate."""
    info = read_info(directory).fields
    for field in ("redo_memory", "redo_frames"):
        if info.get(field, "").isdigit() and int(info[field]) > 0:
            return int(info[field]) * (16 * 1024 if field == "redo_frames" else 1)
    return max((os.path.getsize(directory / n) for n in REDO_FILES if (directory / n).is_file()), default=0)


def available_memory() -> int:
    """MemAvailable from /proc/meminfo (bytes); 1 GiB if unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1024 * MiB


def size_use_memory(redo: int, free: int, max_free_pct: int = 50) -> int:
    """Enough buffer pool to apply the redo in one batch (about twice the redo, 128 MiB at least),
    capped at `max_free_pct` of free memory so prepare never pushes the host into swap."""
    wanted = max(128 * MiB, 2 * redo + 64 * MiB)
    cap = max(DEFAULT_USE_MEMORY, free * max_free_pct // 100)
    return int(min(wanted, cap))


@dataclass(frozen=True)
class PrepareReport:
    argv: list[str]
    seconds: float


def tuning_for(
    tool: ToolVersion,
    dirs: list[Path],
    *,
    max_free_pct: int = 50,
    parallel: int = 4,
    estimated: bool = False,
    use_memory: int | None = None,
) -> PrepareTuning:
    """Memory, parallelism and open files for a chain's prepare; the memory choice is logged."""
    if not tool.capabilities.prepare:
        return PrepareTuning()  # consistent as copied (clone): nothing runs
    files = children.raise_open_files_limit()
    if estimated and tool.capabilities.estimate_memory:
        tuning = PrepareTuning(use_free_memory_pct=max_free_pct, parallel=parallel, open_files_limit=files)
    else:
        redo = max((redo_bytes(d) for d in dirs), default=0)
        memory = use_memory or size_use_memory(redo, available_memory(), max_free_pct)
        tuning = PrepareTuning(use_memory_bytes=memory, parallel=parallel, open_files_limit=files)
        log.info("prepare memory: redo %d MiB -> --use-memory=%d MiB", redo // MiB, memory // MiB)
    return tuning


def check_step_safe(tool: ToolVersion, step: PrepareStep) -> None:
    """Refuse a lone plain --prepare on a base already prepared with --apply-log-only (8.0.30+):
    XtraBackup accepts it and silently corrupts the data."""
    if tool.flavour != "xtrabackup" or step.incremental_dir or step.apply_log_only:
        return
    if tool.capabilities.plain_prepare_after_apply_log_only:
        return
    target = Path(step.target_dir)
    if find_metadata(target, CHECKPOINT_FILES) is None:
        return
    if read_checkpoints(target).backup_type == "log-applied":
        raise PrepareError(
            f"{target} was prepared with --apply-log-only; on XtraBackup {tool.text} a separate plain --prepare "
            "after that corrupts data. Apply the last incremental without --apply-log-only instead"
        )


def run_step(tool: ToolVersion, step: PrepareStep, tuning: PrepareTuning) -> PrepareReport:
    import time

    check_step_safe(tool, step)
    argv = prepare_argv(tool, step, tuning)
    what = f"{Path(argv[0]).name} --prepare of {step.target_dir}" + (
        f" with {step.incremental_dir}" if step.incremental_dir else ""
    )
    log.info("running %s", " ".join(argv))
    t0 = time.monotonic()
    proc = children.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PrepareError(
            f"{what} failed ({children.how_ended(proc.returncode)}): {children.summarize_stderr(proc.stderr)}"
        )
    return PrepareReport(argv, time.monotonic() - t0)


def run_chain(
    tool: ToolVersion,
    base: Path,
    incrementals: list[Path],
    tuning: PrepareTuning,
    *,
    applied: Callable[[PrepareStep], object] | None = None,
) -> list[PrepareReport]:
    """Every prepare step in order; `applied(step)` runs after each step that succeeded (a restore
    uses it to discard an incremental directory as soon as it has been applied). An engine whose
    copy is consistent as taken (clone) has no steps: its prepare is a no-op."""
    steps = prepare_steps(tool, str(base), [str(d) for d in incrementals])
    reports = []
    for step in steps:
        reports.append(run_step(tool, step, tuning))
        if applied:
            applied(step)
    return reports
