"""Sizes and hashes of local files: a datadir's size, the sha256 of a byte range."""

from __future__ import annotations

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
