"""Hand-built xbstream chunks (any path, flag or type, a hostile producer's too) and the real
`mbstream -x` run on them: what the extractor makes of a stream, to compare the framing check with.
No fixtures, no imports of the code under test."""

from __future__ import annotations

import os
import struct
import subprocess
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

CHECKPOINTS = "xtrabackup_checkpoints"
CHECKPOINTS_TEXT = b"backup_type = full-backuped\nfrom_lsn = 0\nto_lsn = 100\n"


def _raw(path: str | bytes) -> bytes:
    return path if isinstance(path, bytes) else path.encode("utf-8", "surrogateescape")


def head(kind: bytes, path: str | bytes, flags: int = 0) -> bytes:
    raw = _raw(path)
    return b"XBSTCK01" + bytes([flags]) + kind + struct.pack("<I", len(raw)) + raw


def payload(
    path: str | bytes,
    data: bytes,
    offset: int = 0,
    flags: int = 0,
    kind: bytes = b"P",
    crc: int | None = None,
) -> bytes:
    """A payload chunk ('P', or any type laid out as one: an ignorable unknown type)."""
    crc = zlib.crc32(data) if crc is None else crc
    return head(kind, path, flags) + struct.pack("<QQI", len(data), offset, crc) + data


def end(path: str | bytes, flags: int = 0) -> bytes:
    return head(b"E", path, flags)


def seek(path: str | bytes, offset: int, flags: int = 0) -> bytes:
    """MariaDB's 'S': the file's next write position."""
    return head(b"S", path, flags) + struct.pack("<Q", offset)


def remove(path: str | bytes, flags: int = 0) -> bytes:
    return head(b"D", path, flags)


def rename(old: str | bytes, new: str | bytes, flags: int = 0) -> bytes:
    raw = _raw(new)
    return head(b"R", old, flags) + struct.pack("<I", len(raw)) + raw


def whole_file(path: str | bytes, data: bytes, flags: int = 0) -> bytes:
    return payload(path, data, flags=flags) + end(path)


def checkpoints() -> bytes:
    return whole_file(CHECKPOINTS, CHECKPOINTS_TEXT)


@dataclass(frozen=True)
class Extracted:
    """What `mbstream -x` did: its exit status, what it said, and the tree it left."""

    returncode: int
    stderr: str
    files: dict[str, bytes]
    dirs: frozenset[str]

    @property
    def ok(self) -> bool:
        """A restore accepts an extraction only with exit status 0 and nothing said (mbstream says
        "File exists" or "invalid filename", stops and exits 0)."""
        return self.returncode == 0 and not self.stderr

    @property
    def sizes(self) -> dict[str, int]:
        return {path: len(data) for path, data in self.files.items()}


def read_tree(root: Path) -> tuple[dict[str, bytes], frozenset[str]]:
    files, dirs = {}, set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        prefix = "" if rel == "." else rel + "/"
        dirs.update(prefix + name for name in dirnames)
        for name in filenames:
            files[prefix + name] = Path(dirpath, name).read_bytes()
    return files, frozenset(dirs)


def extract_at_once(streams: list[bytes], into: Path) -> list[tuple[int, str]]:
    """Run one `mbstream -x -C into` per stream, all at once (as a K-part restore runs its data
    parts); their exit statuses and stderr."""
    procs = [
        subprocess.Popen(
            ["mbstream", "-x", "-C", str(into)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in streams
    ]
    results = []
    for proc, data in zip(procs, streams, strict=True):
        try:
            _, err = proc.communicate(data)
        except BrokenPipeError:  # it stopped reading at an error
            err = proc.stderr.read() if proc.stderr else b""
            proc.wait()
        results.append((proc.returncode, err.decode(errors="replace")))
    return results


def mbstream_x(streams: list[bytes] | bytes, then: bytes | None = None) -> Extracted:
    """Extract `streams` at once into a fresh directory, then `then` (a K-part backup's tail) after
    them; the first failure, or the tree. The directory sits two levels below a private one, so
    a stream that climbs out of it (a rename to ../x) stays inside the sandbox (and shows)."""
    streams = [streams] if isinstance(streams, bytes) else streams
    with tempfile.TemporaryDirectory(prefix="mbstream-") as sandbox:
        target = Path(sandbox, "a", "target")
        target.mkdir(parents=True)
        results = extract_at_once(streams, target)
        if then is not None and all(rc == 0 and not err for rc, err in results):
            results += extract_at_once([then], target)
        bad = [(rc, err) for rc, err in results if rc != 0 or err]
        rc, err = bad[0] if bad else (0, "")
        escaped, _ = read_tree(Path(sandbox))
        outside = {p for p in escaped if not p.startswith("a/target/")}
        files, dirs = read_tree(target)
        if outside:
            err += f"\nwrote outside the target: {sorted(outside)}"
        return Extracted(rc, err, files, dirs)
