"""One writer per standby directory: an exclusive flock on `<dir>/standby.lock`, held for the whole
of an update (the standby task, `standby refresh`) and of a restore from the standby.

The lock file is never removed (removing it would let a third run lock a new file while the
second still holds the old one), and a rebuild empties the directory around it instead of
removing the directory. The holder writes who it is into the file, so a run that waited in vain
can say whose run holds it. flock is released by the kernel when its holder dies: a killed run
never leaves the directory locked.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from .chain import RestoreError

LOCK_FILE = "standby.lock"
DEFAULT_WAIT_SECONDS = 60.0
POLL_SECONDS = 0.2


class StandbyBusy(RestoreError):
    """Another run holds the standby directory (the message names it and its holder)."""


@contextmanager
def standby_lock(directory: Path, purpose: str, wait_seconds: float = DEFAULT_WAIT_SECONDS) -> Iterator[None]:
    """Hold `directory`'s standby lock for `purpose`; wait up to `wait_seconds`, then StandbyBusy."""
    path = directory / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        _acquire(fd, path, wait_seconds)
        os.ftruncate(fd, 0)
        holder = f"{purpose} by {socket.gethostname()} pid {os.getpid()} since {datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}\n"
        os.pwrite(fd, holder.encode(), 0)
        yield
    finally:
        os.close(fd)  # also releases the flock


def _acquire(fd: int, path: Path, wait_seconds: float) -> None:
    deadline = time.monotonic() + max(0.0, wait_seconds)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise StandbyBusy(
                    f"standby directory {path.parent} is in use: {_holder(path)} holds {path} "
                    f"(waited {wait_seconds:.0f}s); run again when it has finished"
                ) from None
            time.sleep(POLL_SECONDS)


def _holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return f"the {text}" if text else "another run"
