"""Private temporary directories that outlive a killed run are swept by the next one.

A worker killed with SIGKILL (the OOM killer, a lost task) cannot remove its 0600 credential
file, its GPG home, a backup's work directory, a restore's scratch copy or a PITR's decrypted
binlogs. Each directory the product makes for itself carries the pid of the process that made it
(`xbp-<kind>-<pid>-...`, or `.xbp-<kind>-<pid>-...` beside a restore target), and every new one
first removes those of its kind in the same place whose process is gone, so such leftovers stay on
disk only until the next run of that kind there.
"""

from __future__ import annotations

__all__ = ["private_dir"]

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

Sweeper = Callable[[Path], object]
HOME = (
    "home"  # the empty HOME of a process's children  # stops what a dead owner left running in its directory
)


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
    root = str(root or tempfile.gettempdir())
    sweep(kind, root, on_sweep)
    if kind != HOME:
        sweep(HOME, root)  # a process makes its children's HOME once (core/common/children.py)
    prefix = f"{'.' if hidden else ''}xbp-{kind}-{os.getpid()}-" + (f"{label}-" if label else "")
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root))  # mkdtemp makes it 0700


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
    removed = []
    for pattern in (f"xbp-{kind}-*-*", f".xbp-{kind}-*-*"):
        for path in Path(root).glob(pattern):
            pid = path.name.lstrip(".").split("-")[2]
            if not pid.isdigit() or _alive(int(pid)) or path.is_symlink() or not path.is_dir():
                continue
            if on_sweep:
                on_sweep(path)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
