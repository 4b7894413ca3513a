"""Fetching one stored object when several storage targets hold it (core/catalog/targets.py says
which targets, and in what order: the one the plan came from first).

Each object (a backup's stream, a binlog's segment) is fetched from the first usable target that
holds the same object (the same sha256 in that target's own manifest) at its size. The fetch falls
back to the next target when the failure is about the stored object, whichever stage noticed
first: it is missing or has another size, reading it failed, or the stream failed and re-reading
the object showed its sha256 is not the manifest's (StoredObjectDamaged: gpg's "message has been
manipulated", zstd, mbstream's "invalid checksum", a short read are all the same verdict). What
the failed fetch wrote is removed first, and one note says where the object came from and why. A
failure with the object intact (the extractor, a full disk, the key) is raised as it is: another
copy of the same bytes would fail the same way.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from ..catalog.manifest import CatalogError, Manifest, StoredObject
from ..catalog.targets import Source, Targets, one_line
from ..pipeline.process import ChecksumMismatch
from ..storage.base import StorageError
from .verify import StoredObjectDamaged

T = TypeVar("T")
R = TypeVar("R")

# What says the stored object (not this worker) is the problem: try the next target's copy.
STORE_SIDE = (StoredObjectDamaged, ChecksumMismatch, StorageError)


class NoIntactSource(RuntimeError):
    """No storage target holds an object intact; the message names each one's problem."""


class NotHere(Exception):
    """This target does not hold the object as the plan describes it (the message says how)."""


@dataclass(frozen=True)
class Located(Generic[T]):
    item: T  # what `fetch` takes: this target's manifest of the backup, its binlog segment...
    obj: StoredObject  # its stored object, HEAD'ed (first piece) before the fetch


def fetch_with_fallback(
    targets: Targets,
    what: str,
    locate: Callable[[Source], Located[T]],
    fetch: Callable[[Source, T], R],
    clear: Callable[[], None],
) -> R:
    """`fetch(source, item)` from the first usable target whose copy is intact. `what` names the
    object in notes and errors ("backup X", "binlog N"). With one usable target, exactly `fetch`
    on it: its errors are raised as they are."""
    usable = targets.usable()
    if len(usable) == 1:
        return fetch(usable[0], locate(usable[0]).item)
    failures: list[str] = []
    name = ""
    damaged: dict[str, None] = {}  # the objects the fetches failed on, in order (a backup has several)
    for source in usable:
        try:
            here = locate(source)
            name = name or here.obj.key.rsplit("/", 1)[-1]
            first = here.obj.pieces()[0]  # the object, or its first segment (its own size)
            info = source.catalog.store.head(first.key)
        except NotHere as exc:
            failures.append(f"{source.name}: {exc}")
            continue
        except (StorageError, CatalogError) as exc:
            if isinstance(exc, StorageError):
                source.down = source.down or exc  # said in this note: skip the target from now on
            failures.append(f"{source.name}: {one_line(exc)}")
            continue
        if info is None or info.size != first.size:
            found = "missing" if info is None else f"{info.size} bytes, not {first.size}"
            failures.append(f"{source.name}: {source.catalog.store.location}/{first.key} is {found}")
            continue
        try:
            result = fetch(source, here.item)
        except STORE_SIDE as exc:
            key = getattr(exc, "object_key", "") or here.obj.key
            damaged[key.rsplit("/", 1)[-1]] = None
            text = one_line(exc).removeprefix(f"{what}: {key}: ")  # said once, in front
            failures.append(f"{source.name}: {text[:600]}")
            clear()
            continue
        if failures:
            targets.note(f"{what}: fetched from target {source.name} because " + "; ".join(failures))
        return result
    named = " and ".join(damaged) or name or "it"
    raise NoIntactSource(f"{what}: no storage target holds {named} intact: " + "; ".join(failures))


def backup_on(origin: Source, m: Manifest) -> Callable[[Source], Located[Manifest]]:
    """`locate` for backup `m` (read from `origin`): each target's own manifest of it, when it
    describes the same streams (sha256 and size)."""

    def locate(source: Source) -> Located[Manifest]:
        if source is origin:
            return Located(m, m.backup_object)
        there = source.catalog.get(m.backup_id)
        if _streams(there) != _streams(m):
            raise NotHere(f"its {m.backup_id} is another object (sha256 differs)")
        return Located(there, there.backup_object)

    return locate


def _streams(m: Manifest) -> list[tuple[str, int]]:
    return [(o.sha256, o.size) for o in m.streams]


def clear_dir(path: Path) -> Callable[[], None]:
    def clear() -> None:
        for child in path.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)

    return clear
