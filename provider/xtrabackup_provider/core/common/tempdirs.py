"""Private temporary directories that outlive a killed run are swept by the next one.

A worker killed with SIGKILL (the OOM killer, a lost task) cannot remove its 0600 credential
file or its GPG home. Each directory's name carries the pid of the process that made it
(`xbp-<kind>-<pid>-XXXXXXXX`), and every new one first removes those of its kind whose process
is gone, so such leftovers stay on disk only until the next run on that machine.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def private_dir(kind: str, root: str | None = None, on_sweep: Callable[[Path], None] | None = None) -> Path:
    """A new 0700 directory for this process; dead processes' directories of `kind` are removed first."""
    root = root or tempfile.gettempdir()
    sweep(kind, root, on_sweep)
    return Path(tempfile.mkdtemp(prefix=f"xbp-{kind}-{os.getpid()}-", dir=root))  # mkdtemp makes it 0700


def sweep(kind: str, root: str, on_sweep: Callable[[Path], None] | None = None) -> list[Path]:
    removed = []
    for path in Path(root).glob(f"xbp-{kind}-*-*"):
        pid = path.name.split("-")[2]
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
