"""One writer at a time: an exclusive flock on a lock file, held for the whole of a run.

- A standby directory: `<dir>/standby.lock`, held for the whole of an update (the standby task,
  `standby refresh`) and of a restore from the standby; a second run waits for it a while.
- A restore target: `.<name>.restore.lock` beside the target datadir (inside it, the file would
  make the datadir non-empty), held from the check that the target is empty to the end of the
  restore (chain, point-in-time, also from the standby; a restore from the standby takes it for its
  copy into the target, chain.copy_back); a second run into the same target is refused at once.
  A target whose parent this user may not write is locked itself (an flock on the directory). Two runs that both found the target empty would otherwise both restore into it, and
  the one whose move-back the tool refused ("not an empty directory") emptied the other's restore.

The holder writes who it is into the file (purpose, host, pid, since when), so a run that is
refused can say whose run holds it. flock is released by the kernel when its holder dies: a killed
run never leaves anything locked. The standby's lock file is never removed (the directory is the
standby's own; a rebuild empties it around the file). A target's lock file is removed by its
holder before it lets go, so nothing is left beside a user's datadir; a run that locked a file that
was removed meanwhile sees that the path no longer names its file and locks again.

Within one process a target is held per thread: a restore that already holds its target (the
point-in-time restore, then the chain restore and its move-back inside it) takes it again freely,
while another thread of the process is refused as another process is. A standby's lock is taken
once (a second take waits, even in the thread that holds it).
"""

from __future__ import annotations

import fcntl
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from .errors import RestoreError

LOCK_FILE = "standby.lock"
DEFAULT_WAIT_SECONDS = 60.0
POLL_SECONDS = 0.2


class StandbyBusy(RestoreError):
    """Another run holds the standby directory (the message names it and its holder)."""


class TargetBusy(RestoreError):
    """Another restore holds the target datadir (the message names it and its holder)."""


@contextmanager
def standby_lock(directory: Path, purpose: str, wait_seconds: float = DEFAULT_WAIT_SECONDS) -> Iterator[None]:
    """Hold `directory`'s standby lock for `purpose`; wait up to `wait_seconds`, then StandbyBusy."""
    path = directory / LOCK_FILE

    def busy(holder: str) -> RestoreError:
        return StandbyBusy(
            f"standby directory {directory} is in use: {holder} holds {path} "
            f"(waited {wait_seconds:.0f}s); run again when it has finished"
        )

    with held_lock(path, purpose, wait_seconds, busy):
        yield


def target_lock_path(target: Path) -> Path:
    """The lock file of a restore target: beside it, named after it (symlinks resolved, so that
    two spellings of one directory share one lock)."""
    real = Path(os.path.abspath(target)).resolve()
    return real.parent / f".{real.name}.restore.lock"


@contextmanager
def target_lock(target: Path, purpose: str, what: str = "target datadir") -> Iterator[None]:
    """Hold the restore target `target` (`what`: the target datadir, or a scratch directory given
    by the user) for `purpose` (e.g. "restore"); TargetBusy at once when another restore holds it.
    Creates the target's parent directory if need be."""
    path = target_lock_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(path.parent, os.W_OK) and target.is_dir():
        # The parent is not this user's to write (/var/lib for a worker running as mysql; the
        # default scratch beside the target needs it, a --scratch-dir elsewhere does not): the
        # target directory itself is locked then (no holder's name can be written into it).
        path = Path(os.path.abspath(target)).resolve()

    def busy(holder: str) -> RestoreError:
        return TargetBusy(
            f"{what} {target} is held by another restore ({holder}); nothing was written to it. "
            "Wait for that restore to finish, or restore into another directory"
        )

    with held_lock(path, purpose, 0.0, busy, remove=True, reentrant=True):
        yield


# Lock files held in this process, by the thread holding each, and how many times (re-entry).
_HELD: dict[Path, tuple[int, int]] = {}
_HELD_GUARD = threading.Lock()


@contextmanager
def held_lock(
    path: Path,
    purpose: str,
    wait_seconds: float,
    busy: Callable[[str], RestoreError],
    *,
    remove: bool = False,
    reentrant: bool = False,
) -> Iterator[None]:
    """Hold an exclusive flock on `path` for `purpose`, waiting up to `wait_seconds` (then
    `busy(holder)` is raised); with `remove`, the file is removed again before the lock is let go;
    `reentrant`: the thread that holds it takes it again freely (otherwise it is refused as any)."""
    me = threading.get_ident()
    with _HELD_GUARD:
        owner, depth = _HELD.get(path, (me, 0))
        if reentrant and depth and owner == me:  # this thread holds it already
            _HELD[path] = (me, depth + 1)
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield
        finally:
            _release_one(path)
        return
    directory = path.is_dir()  # a directory locked itself (target_lock) holds no holder's name
    fd = _acquire(path, wait_seconds, busy, directory)
    try:
        if not directory:
            os.ftruncate(fd, 0)
            holder = f"{purpose} by {socket.gethostname()} pid {os.getpid()} since {datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}\n"
            os.pwrite(fd, holder.encode(), 0)
        with _HELD_GUARD:
            _HELD[path] = (me, 1)
        try:
            yield
        finally:
            _release_one(path)
            if remove and not directory:
                path.unlink(missing_ok=True)  # still held: no other run has this file locked
    finally:
        os.close(fd)  # also releases the flock


def _release_one(path: Path) -> None:
    with _HELD_GUARD:
        owner, depth = _HELD[path]
        if depth > 1:
            _HELD[path] = (owner, depth - 1)
        else:
            del _HELD[path]


def _acquire(path: Path, wait_seconds: float, busy: Callable[[str], RestoreError], directory: bool) -> int:
    """An fd of `path` holding its flock: the file the path names when the lock was taken (a holder
    may have removed the file it held; then the new file is locked)."""
    deadline = time.monotonic() + max(0.0, wait_seconds)
    flags = os.O_RDONLY | os.O_DIRECTORY if directory else os.O_RDWR | os.O_CREAT
    while True:
        fd = os.open(path, flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                raise busy(_holder(path)) from None
            time.sleep(POLL_SECONDS)
            continue
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):
            return fd
        os.close(fd)  # removed by its last holder after we opened it: lock the file there now


def _same_file(fd: int, path: Path) -> bool:
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (named.st_dev, named.st_ino)


def _holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return f"the {text}" if text else "another run"
