"""Local files: a datadir's size, the sha256 of a byte range, durable directory entries."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path


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
