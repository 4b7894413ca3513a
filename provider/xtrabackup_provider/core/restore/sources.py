"""Restoring from one of several storage targets: the one asked for first, then the others in
the fleet config's order (the first target, then `copies`).

The chain comes from the first target whose manifests resolve it. Each object is then fetched
from the first target that holds it intact: one that is missing, has another size, or turns out
damaged while it streams (sha256, gpg or zstd refuse it) is fetched again from the next target
that has the same backup with the same sha256, after what it extracted is removed; a warning and
the restore report say so. A failure on this worker's side (the extractor, a full disk) is not a
reason to try elsewhere and is raised as it is.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ..catalog.backups import Catalog
from ..catalog.manifest import CatalogError, Manifest
from ..pipeline.process import PipelineError
from ..storage.base import StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Source:
    name: str  # the target's name in the fleet config
    catalog: Catalog


def resolve_chain(
    sources: list[Source], backup_id: str | None, notes: list[str]
) -> tuple[list[Manifest], list[Source]]:
    """The chain to restore and the sources in the order to use them (the one the chain came from
    first). Raises the first source's error when none resolves it."""
    errors: list[CatalogError | StorageError] = []
    for i, source in enumerate(sources):
        try:
            chain = source.catalog.chain(backup_id) if backup_id else source.catalog.latest_chain()
        except (CatalogError, StorageError) as exc:
            errors.append(exc)
            continue
        if i:
            note = (
                f"the chain of {backup_id or 'the newest backup'} does not resolve on target {sources[0].name} "
                f"({errors[0]}); restoring it from target {source.name}"
            )
            log.warning("%s", note)
            notes.append(note)
        return chain, [source, *sources[:i], *sources[i + 1 :]]
    raise errors[0]


def fetch_from_sources(
    sources: list[Source],
    m: Manifest,
    fetch: Callable[[Catalog, Manifest], T],
    clear: Callable[[], None],
    notes: list[str],
) -> T:
    """`fetch(catalog, manifest)` from the first source whose copy of backup `m` is intact (with one
    source, exactly `fetch` on it: its errors are raised as they are)."""
    if len(sources) == 1:
        return fetch(sources[0].catalog, m)
    obj = m.backup_object
    failures: list[str] = []
    for source in sources:
        here = m if source is sources[0] else _same_backup(source, m, failures)
        if here is None:
            continue
        key = here.backup_object.key
        first = here.backup_object.pieces()[0]  # the object, or its first segment (its own size)
        where = f"{source.catalog.store.location}/{key}"
        try:
            info = source.catalog.store.head(key)
        except StorageError as exc:
            failures.append(f"{source.name}: {exc}")
            continue
        if info is None or info.size != first.size:
            found = "missing" if info is None else f"{info.size} bytes, not {first.size}"
            failures.append(f"{source.name}: {where} is {found}")
            continue
        try:
            result = fetch(source.catalog, here)
        except (PipelineError, StorageError) as exc:
            if not _store_side(exc, where):
                raise
            text = str(exc).removeprefix(f"backup {m.backup_id}: {key}: ")  # said once, in front
            failures.append(f"{source.name}: {' '.join(text.split())[:400]}")
            clear()
            continue
        if failures:
            note = f"backup {m.backup_id}: fetched from target {source.name} because " + "; ".join(failures)
            log.warning("%s", note)
            notes.append(note)
        return result
    name = obj.key.rsplit("/", 1)[-1]
    raise NoIntactSource(
        f"backup {m.backup_id}: no storage target holds {name} intact: " + "; ".join(failures)
    )


class NoIntactSource(RuntimeError):
    """No storage target holds an object of the chain intact; the message names each one's problem."""


def _same_backup(source: Source, m: Manifest, failures: list[str]) -> Manifest | None:
    """The source's manifest of backup `m`, if it describes the same bytes."""
    try:
        there = source.catalog.get(m.backup_id)
    except (CatalogError, StorageError) as exc:
        failures.append(f"{source.name}: {exc}")
        return None
    if (there.backup_object.sha256, there.backup_object.size) != (
        m.backup_object.sha256,
        m.backup_object.size,
    ):
        failures.append(f"{source.name}: its {m.backup_id} is another object (sha256 differs)")
        return None
    return there


def _store_side(exc: BaseException, where: str) -> bool:
    """Is this failure about the stored object (missing, unreadable, damaged)? The restore stream
    names its sha256 check and its gpg and zstd stages after the object (core/pipeline/from_store.py);
    the extractor's failures start with the extractor's name. fetch_one re-raises a stage's error
    with the backup and its sha256 verdict in front, so the stage's own error is its cause."""
    if isinstance(exc, StorageError):
        return True
    stage = exc.__cause__ if isinstance(exc.__cause__, PipelineError) else exc
    return str(stage).startswith((where, f"gpg --decrypt of {where}", f"zstd -d of {where}"))


def clear_dir(path: Path) -> Callable[[], None]:
    def clear() -> None:
        for child in path.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)

    return clear
