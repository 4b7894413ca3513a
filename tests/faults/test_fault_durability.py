"""LocalStore commits are crash-durable: after a power cut at any moment, a manifest never names a
data file that is missing or incomplete, and a deleted manifest never comes back over deleted data.

A test cannot cut the power, so it records the real system calls of a backup's commit and a
retention's deletion through a directory store (strace on a child process) and replays them
through the POSIX durability rules: a file's bytes survive a crash only once fsync(file) ran after
its last write, and a directory entry (create, rename, mkdir, unlink) survives only once
fsync(directory) ran after it; anything not yet durable may or may not survive. At every crash
point the test asks whether a state that breaks the invariant could survive.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BACKUP = "backups/c1/db1/backups/20261201T000000Z-full"

_SCRIPT = f"""
import sys
from xtrabackup_provider.core.storage.local import LocalStore
store = LocalStore(sys.argv[1])
writer = store.open_writer("{BACKUP}/backup.xbstream.zst")
for _ in range(4):
    writer.write(b"x" * 65536)
writer.commit()                                              # the backup's data object
store.put_bytes("{BACKUP}/manifest.json", b'{{"backup": 1}}')  # then its commit marker
store.delete(["{BACKUP}/manifest.json"])                     # retention: the manifest first
store.delete(["{BACKUP}/backup.xbstream.zst"])               # then the data
"""

_CALL = re.compile(r"^\d+\s+(\w+)\((.*)\)\s+=\s+(-?\d+)")
_FD = re.compile(r"^(-?\d+)<(.*)>$")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _trace(root: Path, out: Path) -> list[tuple[str, str]]:
    if shutil.which("strace") is None:
        pytest.fail("strace is missing: `make setup` installs it (Debian package strace)")
    calls = "openat,write,fsync,fdatasync,rename,renameat,renameat2,mkdir,mkdirat,unlink,unlinkat"
    proc = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-y",
            "-s",
            "0",
            "-e",
            f"trace={calls}",
            "-o",
            str(out),
            sys.executable,
            "-c",
            _SCRIPT,
            str(root),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    events = []
    for line in out.read_text().splitlines():
        if (m := _CALL.match(line)) is None or int(m[3]) < 0:
            continue
        events.append((m[1], m[2]))
    return events


class Disk:
    """What is durable and what could still be lost, from the system calls seen so far."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.dirty: set[str] = set()  # files whose bytes are not all durable
        self.pending: set[str] = set()  # paths whose directory entry change is not durable yet

    def apply(self, name: str, args: str) -> None:
        fd_path = lambda s: _FD.match(s.split(",")[0].strip())  # noqa: E731
        quoted = _QUOTED.findall(args)
        if name in ("write", "pwrite64") and (m := fd_path(args)):
            self.dirty.add(m[2])
        elif name in ("fsync", "fdatasync") and (m := fd_path(args)):
            path = m[2]
            if os.path.isdir(path):  # directories stay after the run (deletions remove files only)
                self.pending = {p for p in self.pending if os.path.dirname(p) != path}
            self.dirty.discard(path)
        elif name.startswith("rename") and len(quoted) == 2:
            src, dst = (self._abs(q) for q in quoted)
            if src in self.dirty:
                self.dirty.discard(src)
                self.dirty.add(dst)
            else:
                self.dirty.discard(dst)
            self.pending |= {src, dst}
        elif (
            name.startswith(("mkdir", "unlink"))
            and quoted
            or name == "openat"
            and quoted
            and "O_CREAT" in args
        ):
            self.pending.add(self._abs(quoted[0]))

    def _abs(self, path: str) -> str:
        return path if path.startswith("/") else os.path.join(self.root, path)

    def durable(self, path: str) -> bool:
        """The file is there after any crash, with all its bytes, and so is every directory above it."""
        if path in self.dirty or path in self.pending:
            return False
        parent = os.path.dirname(path)
        while parent.startswith(self.root) and parent != self.root:
            if parent in self.pending:
                return False
            parent = os.path.dirname(parent)
        return True


def test_a_manifest_can_only_survive_a_crash_with_its_data_and_never_comes_back_over_deleted_data(tmp_path):
    root = (tmp_path / "store").absolute()
    events = _trace(root, tmp_path / "trace.txt")
    data, manifest = f"{root}/{BACKUP}/backup.xbstream.zst", f"{root}/{BACKUP}/manifest.json"
    disk = Disk(root)
    checked = {"commit": False, "delete": False}
    for name, args in events:
        quoted = [disk._abs(q) for q in _QUOTED.findall(args)]
        if name.startswith("rename") and quoted[-1:] == [manifest]:
            # From this call on, the manifest's new entry may reach the disk at any time.
            assert disk.durable(data), (
                "a crash now could keep the manifest and lose its data: "
                f"data bytes durable={data not in disk.dirty}, not yet durable entries={sorted(disk.pending)}"
            )
            assert quoted[0] not in disk.dirty, "a crash now could keep an empty or partial manifest"
            checked["commit"] = True
        if name.startswith("unlink") and quoted[:1] == [data]:
            # The data goes: the manifest's removal must already be durable.
            assert manifest not in disk.pending, (
                "a crash now could bring the deleted manifest back while its data is gone"
            )
            checked["delete"] = True
        disk.apply(name, args)
    assert checked == {"commit": True, "delete": True}, f"the trace missed a step: {events}"
