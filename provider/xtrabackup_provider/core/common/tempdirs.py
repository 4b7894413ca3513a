"""Private temporary directories that outlive a killed run are swept by the next one.

A worker killed with SIGKILL (the OOM killer, a lost task) cannot remove its 0600 credential
file, its GPG home, a backup's work directory, a restore's scratch copy or a PITR's decrypted
binlogs. Each directory the product makes for itself is named after the process that made it
(`xbp-<kind>-<pid>-...`, or `.xbp-<kind>-<pid>-...` beside a restore target) and holds an owner
record (`.xbp-owner`): the machine and PID namespace, the pid and the process's start time, as the
host lock records its holder (core/common/processes.py). Every new one first removes those of its
kind in the same place whose owner is proven dead: it ran in this PID namespace on this machine,
and no process with its pid and start time is left (a reused pid is another process).

Anything else proves nothing and is kept: a directory of another container sharing /tmp or a
restore target's parent (another PID namespace: its pid means nothing here), of another machine
sharing a mount, of another user (its record cannot be read), or of an older release (no record).
"""

from __future__ import annotations

__all__ = ["private_dir"]

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .processes import process_gone, this_process

Sweeper = Callable[[Path], object]  # stops what a dead owner left running in its directory
HOME = "home"  # the empty HOME of a process's children
OWNER = ".xbp-owner"


def private_dir(
    kind: str,
    root: str | Path | None = None,
    on_sweep: Sweeper | None = None,
    *,
    label: str = "",
    hidden: bool = False,
) -> Path:
    """A new 0700 directory for this process; dead processes' directories of `kind` are removed first.

    `label` (a backup id) makes the name say what it holds; `hidden` starts it with a dot, for a
    directory beside a user's own (a restore target)."""
    if "-" in kind:
        raise ValueError(f"a temp dir kind has no '-': {kind!r}")
    # A TMPDIR the user set is the one used: Python's own choice would move on to /tmp, silently,
    # when it is full.
    root = str(root or os.environ.get("TMPDIR") or tempfile.gettempdir())
    sweep(kind, root, on_sweep)
    if kind != HOME:
        sweep(HOME, root)  # a process makes its children's HOME once (core/common/children.py)
    prefix = f"{'.' if hidden else ''}xbp-{kind}-{os.getpid()}-" + (f"{label}-" if label else "")
    try:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=root))  # mkdtemp makes it 0700
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, root) from exc  # the one line names the directory
    # Until the record is written the directory proves nothing and no sweep touches it.
    try:
        fd = os.open(path / OWNER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(this_process(), fh)
    except OSError as exc:  # a full filesystem: no sweep could ever prove this one dead
        shutil.rmtree(path, ignore_errors=True)
        raise OSError(exc.errno, exc.strerror, root) from exc
    return path


@contextmanager
def private_workdir(
    kind: str, root: str | Path | None = None, on_sweep: Sweeper | None = None, *, label: str = ""
) -> Iterator[Path]:
    """`private_dir()` for the length of a `with` block, removed afterwards."""
    path = private_dir(kind, root, on_sweep, label=label)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def sweep(kind: str, root: str | Path, on_sweep: Sweeper | None = None) -> list[Path]:
    """Remove the directories of `kind` in `root` whose owner is proven dead; return them."""
    removed = []
    for pattern in (f"xbp-{kind}-*-*", f".xbp-{kind}-*-*"):
        for path in Path(root).glob(pattern):
            if path.is_symlink() or not path.is_dir() or not _owner_dead(path):
                continue
            if on_sweep:
                on_sweep(path)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _owner_dead(path: Path) -> bool:
    """Whether the directory's owner record proves its process dead (core/common/processes.py)."""
    try:
        fd = os.open(path / OWNER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            owner = json.loads(fh.read(4096))
    except (OSError, ValueError):  # none yet, an older release's, another user's, a torn write
        return False
    if not isinstance(owner, dict):
        return False
    return process_gone(owner.get("machine"), owner.get("pid"), owner.get("pid_start"))
