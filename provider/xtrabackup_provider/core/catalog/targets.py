"""One host read from several storage targets: `storage:` first, then `copies:` in order (or the
one target `--target-store NAME` names, alone). Every read path goes through this.

`Targets.read(what, fn)` runs a catalog-level read (a chain, a PITR plan, a binlog index) on the
first target where it succeeds; that target becomes the first for the rest of the run, so the
objects are fetched from where the plan came from first (core/restore/sources.py falls back per
object). A target whose store cannot answer (a StorageError: endpoint down, bucket gone, access
denied) is marked down on its `Source`, and every later read and fetch of the same `Targets` (and
of others built from the same `Source` objects) skips it: an endpoint that is down costs its
retries once. Each fallback says why in one note (logged as a warning, and kept for the command's
output).

With one target, `read` is exactly `fn` on it: its errors are raised as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..storage.base import StorageError
from .backups import Catalog
from .manifest import CatalogError, manifest_summary

log = logging.getLogger(__name__)

T = TypeVar("T")
READ_ERRORS: tuple[type[Exception], ...] = (StorageError, CatalogError)


@dataclass(eq=False)
class Source:
    """A storage target's catalog of the host, by the target's name in the fleet config."""

    name: str
    catalog: Catalog
    down: StorageError | None = field(default=None, repr=False)  # set once its store failed


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class Targets:
    """The sources a read tries, in order, and the notes its fallbacks left."""

    def __init__(self, sources: Sequence[Source]) -> None:
        if not sources:
            raise ValueError("no storage target to read from")
        self.sources = list(sources)
        self.notes: list[str] = []

    @classmethod
    def of(cls, catalog: Catalog, name: str = "primary", fallbacks: Sequence[Source] = ()) -> Targets:
        """`catalog` (the target called `name`) first, then `fallbacks` (the requests' fields)."""
        return cls([Source(name, catalog), *fallbacks])

    @property
    def first(self) -> Source:
        return self.sources[0]

    @property
    def many(self) -> bool:
        return len(self.sources) > 1

    def usable(self) -> list[Source]:
        return [s for s in self.sources if s.down is None]

    def note(self, text: str) -> None:
        if text not in self.notes:
            log.warning("%s", text)
            self.notes.append(text)

    def mark_down(self, source: Source, exc: StorageError) -> None:
        """Skip `source` from now on (with one note, when other targets can stand in)."""
        if source.down is None:
            source.down = exc
            if self.many:
                self.note(
                    f"storage target {source.name} cannot be read ({one_line(exc)}); reading the others"
                )

    def read(
        self, what: str, fn: Callable[[Catalog], T], errors: tuple[type[Exception], ...] = READ_ERRORS
    ) -> T:
        """`fn(catalog)` on the first usable target where it succeeds, which becomes the first.
        Raises the first target's error when none succeeds."""
        if not self.many:
            return fn(self.first.catalog)
        failed: list[tuple[Source, Exception]] = []
        for source in self.usable():
            try:
                result = fn(source.catalog)
            except errors as exc:
                if isinstance(exc, StorageError):
                    self.mark_down(source, exc)
                else:
                    failed.append((source, exc))
                continue
            self._promote(source)
            if failed:
                why = "; ".join(f"{s.name}: {one_line(e)}" for s, e in failed)
                self.note(f"{what}: read from target {source.name} because {why}")
            return result
        raise self._first_error(failed)

    def each(
        self,
        fn: Callable[[Catalog], T],
        problems: list[str],
        errors: dict[str, str] | None = None,
        *,
        one: bool = True,
    ) -> list[tuple[Source, T]]:
        """`fn(catalog)` on every target (listings: each target says what it holds); one that
        cannot be read is a problem, named, and left out (`errors`: its name -> the error). When
        none can be read, `one` raises the first one's error (a listing of nothing is no answer)."""
        out: list[tuple[Source, T]] = []
        failed: list[tuple[Source, Exception]] = []
        for source in self.sources:
            if source.down is None:
                try:
                    out.append((source, fn(source.catalog)))
                    continue
                except READ_ERRORS as exc:
                    if isinstance(exc, StorageError):
                        source.down = exc
                    error: Exception = exc
            else:
                error = source.down
            failed.append((source, error))
            problems.append(f"storage target {source.name} cannot be read: {one_line(error)}")
            if errors is not None:
                errors[source.name] = one_line(error)
        if one and not out:
            raise self._first_error(failed)
        return out

    def _promote(self, source: Source) -> None:
        self.sources = [source, *(s for s in self.sources if s is not source)]

    def _first_error(self, failed: list[tuple[Source, Exception]]) -> Exception:
        """What to raise when no target answered: the error of the first in order."""
        order = {id(s): i for i, s in enumerate(self.sources)}
        errors = [(order[id(s)], e) for s, e in failed]
        errors += [(order[id(s)], s.down) for s in self.sources if s.down is not None]
        return min(errors, key=lambda item: item[0])[1]


def read_fields(sources: Sequence[Source]) -> dict[str, Any]:
    """A read path's request fields (`catalog`, `source_name`, `fallbacks`) for `sources`, the
    first first: what the CLI's `--target-store` / config and the operators' targets both give."""
    first, *rest = sources
    return {"catalog": first.catalog, "source_name": first.name, "fallbacks": rest}


def choose(sources: Sequence[Source], only: str | None) -> list[Source]:
    """`sources`, or the one named `only` alone (a `--target-store`); an unknown name is refused
    naming the targets there are."""
    if not only:
        return list(sources)
    found = [s for s in sources if s.name == only]
    if not found:
        raise ValueError(f"no storage target {only!r}; targets are {[s.name for s in sources]}")
    return found


def list_backups(targets: Targets, problems: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every backup on any of the targets, oldest first: its row (manifest_summary) from the first
    target that has it, with `targets` naming each target that does; and per target its location
    and number of backups, or the error reading it. Unreadable targets and manifests: `problems`."""
    rows: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    held = dict(targets.each(lambda catalog: catalog.backup_ids(), problems, errors))
    for source, ids in held.items():
        new = [bid for bid in ids if bid not in rows]  # the others were read from an earlier target
        for row in manifest_summary(source.catalog.manifests(problems, new) if new else []):
            rows[row["backup_id"]] = row | {"targets": []}
        for bid in ids:
            if bid in rows:
                rows[bid]["targets"].append(source.name)
    found: dict[str, Any] = {}
    for source in targets.sources:
        where = {"location": source.catalog.describe()}
        found[source.name] = where | (
            {"backups": len(held[source])} if source in held else {"error": errors[source.name]}
        )
    return sorted(rows.values(), key=lambda r: r["backup_id"]), found
