"""Local files: a datadir's size, the sha256 of a byte range, durable directory entries, writes in
small pieces."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import BinaryIO

# A file's bytes go to the page cache in pieces of this size, as tar's and gpg's do: on Linux 6.18's
# ext4 a write of 64 KiB or more fills a large page-cache folio, and on a VM whose freed memory the
# host reclaims, filling those took 5-10x the system time of 16 KiB writes (1 GiB: 2.3-6.7 s
# against 0.3-0.6 s, caches dropped, alternated; docs/BENCHMARKS.md).
WRITE_PIECE = 16 << 10


def directory_size(path: str | Path) -> int | None:
    """Bytes under a directory, or None when this worker cannot read it."""
    total = 0
    try:
        for dirpath, _dirs, files in os.walk(path, onerror=_raise):
            for name in files:
                try:
                    total += os.lstat(os.path.join(dirpath, name)).st_size
                except FileNotFoundError:
                    continue
    except OSError:
        return None
    return total


def _raise(exc: OSError) -> None:
    raise exc


def sha256_range(path: Path, offset: int, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        fh.seek(offset)
        left = size
        while left > 0 and (chunk := fh.read(min(left, 4 << 20))):
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()


def write_pieces(fh: BinaryIO, data: bytes | bytearray | memoryview) -> None:
    """Write `data` to `fh` in WRITE_PIECE pieces."""
    view = memoryview(data)
    for at in range(0, len(view), WRITE_PIECE):
        fh.write(view[at : at + WRITE_PIECE])


def fsync_dir(directory: Path) -> None:
    """Make the entries of `directory` (creates, renames, deletions) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(directory: Path) -> None:
    """mkdir -p, with each directory it creates made durable in its parent."""
    missing = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for new in reversed(missing):
        with contextlib.suppress(FileExistsError):
            new.mkdir()
        fsync_dir(new.parent)
