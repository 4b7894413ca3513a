"""Copies on further storage targets: each backup and each shipped binlog, once registered on the
first target, is streamed from there to every further target (`copies:` in the fleet config).

A copy is a backup of its own on that target: every object is streamed through sha256 and checked
against the source manifest before it is committed, then the target gets its own manifest (the
same backup, its keys under the target's prefix, the target's storage class / SSE / Object Lock,
and `copy_of` naming the source), written last as on the first target. So `list`, `verify`,
retention and `restore` work on a copy exactly as on the first target.

What is copied: every backup of the source newer than the oldest one on the target (all of them
when the target is empty), so a target whose own retention keeps fewer backups is not refilled
with what it deleted; closed binlogs and gap markers likewise, and the timeline records of promoted
servers. An incremental is copied only after its parent. An object that is damaged on the source is not
copied and is named with both sha256s (`CopyReport.damaged`): the copy task then fails, since the
backup it was asked to protect is not restorable where it stands. A target that cannot be reached is retried `attempts` times, then left
behind with one line; the next run catches up, oldest first. Nothing here ever fails the backup
on the first target: it is registered before a copy starts.

A re-seed (`copy --from offsite --to primary`, `refill=True`) fills any target from any other after it
lost its data: every backup and closed binlog the source holds and the target lacks, what the
target's own retention deleted included, and a backup registered there whose objects are missing
or short (HEAD; with `deep`, whose bytes' sha256 is not the manifest's, backups and binlogs) is
copied again; the same sha256 checks, manifests last, under the target's host lock. Run again, it
copies nothing.
"""

from __future__ import annotations

__all__ = ["copy_host"]

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from ..binlog.catalog import BinlogCatalog, BinlogError, BinlogIndex, BinlogManifest, server_uuids
from ..binlog.timeline import read_timeline, timelines, write_timeline
from ..catalog.backups import Catalog
from ..catalog.lock import HostLock, HostLockBusy
from ..catalog.manifest import CatalogError, Manifest, Segment, StoredObject, read_stored, stored_segments
from ..catalog.records import CopyOrigin
from ..catalog.reports import REPORT_NAME
from ..common.crashpoints import crash_point
from ..common.values import binlog_number
from ..storage.base import ARCHIVE_TAGGING, ObjectStore, PutOptions, StorageError, WrittenSegment, segment_key

log = logging.getLogger(__name__)

What = Literal["all", "backups", "binlogs"]


class CopyError(RuntimeError):
    """An object cannot be copied as it is (damaged on the source); the message names it."""


class DamagedSource(CopyError):
    """An object's bytes on the source are not what its manifest says (object and both sha256s named)."""


@dataclass
class CopyTarget:
    """A further storage target, as the copy needs it (the fleet config's `copies[]`)."""

    name: str
    store: ObjectStore
    prefix: str = "backups"
    storage_classes: dict[str, str] = field(default_factory=dict)  # per backup kind; default STANDARD
    sse: str | None = None
    kms_key_id: str | None = None
    object_lock_mode: str | None = None
    object_lock_days: int | None = None
    binlogs: bool = True
    attempts: int = 3
    retry_seconds: float = 20.0

    def catalog(self, cluster: str, host: str) -> Catalog:
        return Catalog(self.store, self.prefix, cluster, host)

    def put_options(self, storage_class: str, size: int, *, archive: bool) -> PutOptions:
        until = None
        if self.object_lock_mode and self.object_lock_days and self.store.supports_object_lock:
            until = datetime.now(UTC) + timedelta(days=self.object_lock_days)
        return PutOptions(
            storage_class,
            self.sse,
            self.kms_key_id if self.sse == "aws:kms" else None,
            size,
            lock_mode=self.object_lock_mode if until else None,
            lock_until=until,
            tagging=ARCHIVE_TAGGING if archive else None,
        )


@dataclass
class CopyReport:
    target: str
    location: str
    copied: list[str] = field(default_factory=list)  # backup ids
    binlogs: list[str] = field(default_factory=list)  # binlog names
    reports: int = 0  # restore reports copied
    bytes: int = 0
    seconds: float = 0.0
    attempts: int = 0
    behind: list[str] = field(default_factory=list)  # backups on the source, not (yet) here
    binlogs_behind: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # damaged on the source, parent missing...
    damaged: list[str] = field(default_factory=list)  # objects damaged on the source (also in problems)
    error: str | None = None  # the target (or the source) could not be reached: left behind
    newest: str | None = None  # the source's newest backup (named when the target cannot be listed)
    refill: bool = False  # a re-seed (copy_host's `refill`)
    deep: bool = False  # a re-seed that re-reads what the target has (copy_host's `deep`)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.behind and not self.binlogs_behind

    def line(self) -> str:
        """One line for the log and the CLI."""
        done = f"copied {len(self.copied)} backup(s), {len(self.binlogs)} binlog(s), {self.bytes} bytes"
        if self.refill:
            stopped = f"; stopped: {self.error}; run it again once that is fixed" if self.error else ""
            return f"re-seed of {self.target} ({self.location}): {done} in {self.seconds:.1f}s{stopped}"
        if self.error:
            behind = f"{len(self.behind)} backup(s) and {len(self.binlogs_behind)} binlog(s) behind"
            if not self.behind and self.newest:  # the target could not even be listed
                behind = f"not copied: {self.newest} (and whatever else is new there)"
            return (
                f"copy target {self.target} ({self.location}): {self.error}; {behind}; {done} before it "
                f"failed ({self.attempts} attempt(s)); the next run retries"
            )
        behind = f"; {len(self.behind)} backup(s) behind" if self.behind else ""
        damaged = f"; NOT COPIED, damaged on the source: {'; '.join(self.damaged)}" if self.damaged else ""
        return f"copy target {self.target} ({self.location}): {done} in {self.seconds:.1f}s{behind}{damaged}"

    def summary(self) -> dict[str, Any]:
        """Small metadata for XCom and `--json`."""
        return {
            "target": self.target,
            "location": self.location,
            "copied": self.copied[-20:],
            "copied_count": len(self.copied),
            "binlogs_copied": len(self.binlogs),
            "reports_copied": self.reports,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "behind": self.behind[-20:],
            "behind_count": len(self.behind),
            "binlogs_behind": len(self.binlogs_behind),
            "problems": self.problems[:20],
            "damaged": self.damaged[:20],
            "error": self.error,
        }


def copy_host(
    source: Catalog,
    target: CopyTarget,
    *,
    source_name: str = "primary",
    what: What = "all",
    sleep: Callable[[float], None] = time.sleep,
    refill: bool = False,
    deep: bool = False,
) -> CopyReport:
    """Bring `target` up to date with the host's backups and binlogs on `source` (`refill`: a
    re-seed, everything it lacks; `deep`: and what it holds with other bytes); never raises for a
    target (or source) that cannot be reached: the report says what is left behind."""
    dest = target.catalog(source.cluster, source.host)
    report = CopyReport(target.name, dest.describe(), refill=refill, deep=deep and refill)
    started = time.monotonic()
    for attempt in range(1, target.attempts + 1):
        report.attempts = attempt
        try:
            # The target's host lock: its own retention (or another copy) never interleaves with this.
            with HostLock(dest, purpose="re-seed" if refill else "copy") as lock:
                if what in ("all", "backups"):
                    _copy_backups(source, dest, target, source_name, report, lock)
                if what in ("all", "binlogs") and target.binlogs:
                    _copy_binlogs(source, dest, target, report)
            report.error = None
            break
        except HostLockBusy as exc:  # retention of the target is running: the next run copies
            report.error = _one_line(exc)
            break
        except (StorageError, CatalogError, BinlogError, OSError) as exc:
            report.error = _one_line(exc)
            if attempt < target.attempts:
                log.info(
                    "copy to %s failed (attempt %d of %d): %s; retrying in %.0fs",
                    target.name,
                    attempt,
                    target.attempts,
                    report.error,
                    target.retry_seconds,
                )
                sleep(target.retry_seconds)
    report.seconds = time.monotonic() - started
    _fill_behind(source, dest, target, report, what)
    (log.warning if report.error or report.problems else log.info)("%s", report.line())
    for problem in report.problems:
        log.warning("copy target %s: %s", target.name, problem)
    return report


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# ---------------------------------------------------------------------------------------------
# backups


def pending_backups(source_ids: list[str], target_ids: list[str], refill: bool = False) -> list[str]:
    """Source backups the target should get: those newer than its oldest (all when it has none),
    so what the target's own retention deleted is not copied again (`refill`: every one it lacks).
    Oldest first."""
    have = set(target_ids)
    oldest = min(target_ids) if target_ids and not refill else ""
    return [bid for bid in sorted(source_ids) if bid not in have and bid > oldest]


def _copy_backups(
    src: Catalog, dest: Catalog, target: CopyTarget, source_name: str, report: CopyReport, lock: HostLock
) -> None:
    problems: list[str] = []
    by_id = {m.backup_id: m for m in src.manifests(problems)}
    dest_ids = dest.backup_ids()
    if report.refill:  # registered there, but an object is missing, short or altered: copy it again
        dest_ids = [bid for bid in dest_ids if bid not in by_id or _intact(dest, by_id[bid], report)]
    present = set(dest_ids)
    for bid in pending_backups(list(by_id), dest_ids, report.refill):
        m = by_id[bid]
        if m.parent_id and m.parent_id not in present:
            _problem(report, f"backup {bid}: its parent {m.parent_id} is not on {target.name}; not copied")
            continue
        try:
            report.bytes += copy_backup(src, dest, m, target, source_name, lock.confirm)
        except CopyError as exc:
            _problem(report, str(exc), isinstance(exc, DamagedSource))
            continue
        present.add(bid)
        report.copied.append(bid)
        log.info("copied %s to %s", bid, dest.describe(bid))
    report.reports += _copy_reports(src, dest, present)


def _intact(dest: Catalog, m: Manifest, report: CopyReport) -> bool:
    """Is backup `m` registered on `dest` as the same backup with every object at its size? Another
    backup under the same id is a problem, left as it is (True)."""
    try:
        there = dest.get(m.backup_id)
    except CatalogError as exc:
        log.warning(
            "backup %s: its manifest on %s is unusable (%s): copying it again",
            m.backup_id,
            dest.describe(),
            exc,
        )
        return False
    if [(o.sha256, o.size) for o in there.streams] != [(o.sha256, o.size) for o in m.streams]:
        _problem(
            report,
            f"backup {m.backup_id}: {dest.describe(m.backup_id)} holds another backup under this id; left as it is",
        )
        return True
    for piece in (p for obj in there.stored_objects for p in obj.pieces()):
        if not _holds(dest.store, piece, report.deep):
            log.warning(
                "backup %s: %s is missing or damaged on %s: copying it again",
                m.backup_id,
                piece.key,
                dest.describe(),
            )
            return False
    return True


def _holds(store: ObjectStore, piece: WrittenSegment, deep: bool) -> bool:
    """Is `piece` stored at its size (and, `deep`, with its sha256)?"""
    info = store.head(piece.key)
    if info is None or info.size != piece.size:
        return False
    if not deep:
        return True
    digest = hashlib.sha256()
    for chunk in store.read_chunks(piece.key):
        digest.update(chunk)
    return digest.hexdigest() == piece.sha256


def _problem(report: CopyReport, text: str, damaged: bool = False) -> None:
    if text not in report.problems:
        report.problems.append(text)
    if damaged and text not in report.damaged:
        report.damaged.append(text)


def copy_backup(
    src: Catalog,
    dest: Catalog,
    m: Manifest,
    target: CopyTarget,
    source_name: str,
    confirm: Callable[[str], None] | None = None,
) -> int:
    """Copy one backup's objects (sha256 checked), then write the target's manifest last (after
    `confirm`, the target's host lock's fencing check, when given)."""
    storage_class = target.storage_classes.get(m.kind, "STANDARD")
    copied = 0

    def copy(obj: StoredObject, archive: bool) -> StoredObject:
        nonlocal copied
        key = _rekey(obj.key, src.backup_dir(m.backup_id), dest.backup_dir(m.backup_id))
        klass = storage_class if archive else "STANDARD"
        options = target.put_options(klass, obj.size, archive=archive)
        size, segments = copy_object(src.store, obj, dest.store, key, options, f"backup {m.backup_id}")
        copied += size
        return obj.model_copy(
            update={
                "key": key,
                "segments": segments,  # as the target stored it (its own part plan)
                "storage_class": klass,
                "sse": options.sse,
                "kms_key_id": options.kms_key_id,
                "object_lock_mode": options.lock_mode,
                "object_lock_until": options.lock_until,
            }
        )

    objects = [copy(obj, archive=True) for obj in m.objects]
    side = None
    if m.option_files is not None:
        side = m.option_files.model_copy(update={"object": copy(m.option_files.object, archive=False)})
    origin = CopyOrigin(target=source_name, location=src.store.location, copied_at=datetime.now(UTC))
    data = m.model_dump() | {"objects": objects, "option_files": side, "copy_of": origin}
    crash_point("copy.after_objects")
    if confirm:
        confirm(f"registering the copy of {m.backup_id}")
    dest.write(Manifest.model_validate(data))
    crash_point("copy.after_manifest")
    return copied


def _rekey(key: str, src_dir: str, dest_dir: str) -> str:
    if not key.startswith(src_dir + "/"):
        raise CopyError(f"{key} is outside {src_dir}/; not copied")
    return dest_dir + key[len(src_dir) :]


def copy_object(
    src: ObjectStore, obj: StoredObject, dest: ObjectStore, key: str, options: PutOptions, what: str
) -> tuple[int, list[Segment] | None]:
    """Stream one object (every segment of it) from `src` to `dest`; commit only if its bytes have
    the manifest's size and sha256 (otherwise CopyError naming it: it is damaged on the source).
    Returns the size and the segments `dest` stored it as (None: one object)."""
    writer = dest.open_writer(key, options)
    digest, size = hashlib.sha256(), 0
    try:
        for chunk in read_stored(src, obj):
            digest.update(chunk)
            size += len(chunk)
            writer.write(chunk)
        if size != obj.size or digest.hexdigest() != obj.sha256:
            raise DamagedSource(
                f"{what}: {src.location}/{obj.key} is damaged on the source ({size} bytes, sha256 "
                f"{digest.hexdigest()}; the manifest says {obj.size} bytes, {obj.sha256}); not copied. "
                "Run `verify --deep` on it"
            )
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    return size, stored_segments(writer)


def _copy_reports(src: Catalog, dest: Catalog, present: set[str]) -> int:
    """Restore reports of backups the target has, when the target lacks them (small JSON files)."""
    copied = 0
    for bid in sorted(_reported(src) & present - _reported(dest)):
        key = src.object_key(bid, REPORT_NAME)
        dest.store.put_bytes(dest.object_key(bid, REPORT_NAME), src.store.get_bytes(key))
        crash_point("copy.after_report")
        copied += 1
    return copied


def _reported(catalog: Catalog) -> set[str]:
    base = f"{catalog.host_prefix}/backups/"
    found = set()
    for info in catalog.store.list(base):
        rest = info.key[len(base) :]
        if rest.count("/") == 1 and rest.endswith("/" + REPORT_NAME):
            found.add(rest.split("/")[0])
    return found


# ---------------------------------------------------------------------------------------------
# binlogs


def _copy_binlogs(src: Catalog, dest: Catalog, target: CopyTarget, report: CopyReport) -> None:
    # Timeline records first (core/binlog/timeline.py): promote and PITR on the target must know
    # which identity continues which, as on the source.
    try:
        records = timelines(src)
    except BinlogError as exc:
        _problem(report, f"timeline records: {exc}; not copied")
        records = []
    for record in records:
        if read_timeline(dest, record.server_uuid) is None:
            write_timeline(dest, record)
    for uuid in server_uuids(src):
        s_cat, d_cat = BinlogCatalog(src, uuid), BinlogCatalog(dest, uuid)
        s_index, d_index = s_cat.index(), d_cat.index()
        known = {(g.first_missing, g.last_missing) for g in d_index.gaps}
        for gap in s_index.gaps:  # first: PITR on the target must never cross what the source knows is lost
            if (gap.first_missing, gap.last_missing) not in known:
                d_cat.write_gap(gap)
        have = list(d_index.complete)
        if report.deep:  # registered there, but its object is missing or altered: copy it again
            have = [n for n in have if n not in s_index.complete or _binlog_held(d_index, n, d_cat.store)]
        for name in pending_binlogs(list(s_index.complete), have, report.refill):
            try:
                m = s_index.complete[name]
            except BinlogError as exc:
                _problem(report, f"binlog {name}: {exc}; not copied")
                continue
            try:
                report.bytes += copy_binlog(s_cat, d_cat, m, target)
            except CopyError as exc:
                _problem(report, str(exc), isinstance(exc, DamagedSource))
                continue
            report.binlogs.append(name)


def _binlog_held(index: BinlogIndex, name: str, store: ObjectStore) -> bool:
    """Is binlog `name` registered in `index` with every object stored with its sha256?"""
    try:
        m = index.complete[name]
    except BinlogError:
        return False  # its manifest is unusable: copy it again
    held = all(_holds(store, piece, deep=True) for seg in m.segments for piece in seg.object.pieces())
    if not held:
        log.warning("binlog %s is missing or damaged on %s: copying it again", name, store.location)
    return held


def pending_binlogs(source: list[str], target: list[str], refill: bool = False) -> list[str]:
    """Closed binlogs the target should get: after its oldest one (all when it has none; `refill`:
    every one it lacks), in order."""
    have = set(target)
    oldest = None if refill else min((binlog_number(n) for n in target), default=None)
    todo = [n for n in source if n not in have and (oldest is None or binlog_number(n) > oldest)]
    return sorted(todo, key=binlog_number)


def copy_binlog(src: BinlogCatalog, dest: BinlogCatalog, m: BinlogManifest, target: CopyTarget) -> int:
    """Copy one closed binlog's object (sha256 checked), then its manifest, in the source's storage class."""
    copied = 0
    segments = []
    for seg in m.segments:
        obj = seg.object
        if not obj.key.startswith(src.prefix + "/"):
            raise CopyError(f"binlog {m.name}: {obj.key} is outside {src.prefix}/; not copied")
        key = dest.prefix + obj.key[len(src.prefix) :]
        options = target.put_options(obj.storage_class, obj.size, archive=False)
        size, pieces = copy_object(src.store, obj, dest.store, key, options, f"binlog {m.name}")
        if pieces:  # a binlog object is recorded as one object: never keep its first segment alone
            dest.store.delete([segment_key(key, i) for i in range(len(pieces))])
            raise CopyError(
                f"binlog {m.name}: {dest.store.location} stored {key} as {len(pieces)} segments; binlog "
                "objects must fit one object: raise the target's upload memory"
            )
        copied += size
        stored: dict[str, Any] = {"key": key, "sse": options.sse, "kms_key_id": options.kms_key_id}
        stored |= {"object_lock_mode": options.lock_mode, "object_lock_until": options.lock_until}
        segments.append(seg.model_copy(update={"object": obj.model_copy(update=stored)}))
    dest.write_manifest(BinlogManifest.model_validate(m.model_dump() | {"segments": segments}))
    return copied


# ---------------------------------------------------------------------------------------------
# what is behind


def _fill_behind(src: Catalog, dest: Catalog, target: CopyTarget, report: CopyReport, what: What) -> None:
    """What the source has that the target should have and does not (best effort: a store that
    cannot be listed leaves the lists as the copy left them)."""
    try:
        if what in ("all", "backups"):
            ids = src.backup_ids()
            report.newest = ids[-1] if ids else None
            report.behind = pending_backups(ids, dest.backup_ids(), report.refill)
        if what in ("all", "binlogs") and target.binlogs:
            report.binlogs_behind = binlogs_behind(src, dest, report.refill)
    except (StorageError, CatalogError, BinlogError, OSError) as exc:
        if report.error is None:
            report.error = _one_line(exc)


def binlogs_behind(src: Catalog, dest: Catalog, refill: bool = False) -> list[str]:
    behind = []
    for uuid in server_uuids(src):
        s_names = list(BinlogCatalog(src, uuid).index().complete)
        d_names = list(BinlogCatalog(dest, uuid).index().complete)
        behind += [f"{uuid}/{n}" for n in pending_binlogs(s_names, d_names, refill)]
    return behind


@dataclass(frozen=True)
class CopyState:
    """One target's state for a host, from the catalogs alone (for check and report)."""

    target: str
    location: str
    backups: int  # registered there
    behind: list[tuple[str, datetime]]  # (backup id, finished on the source) not there yet
    binlogs_behind: int
    error: str | None = None
    held: list[str] = field(default_factory=list)  # the backup ids registered there

    def oldest_behind(self) -> datetime | None:
        return min((when for _, when in self.behind), default=None)


def copy_state(source: Catalog, source_manifests: list[Manifest], name: str, dest: Catalog) -> CopyState:
    """What `dest` lacks of `source` (the source's manifests already read by the caller)."""
    try:
        ids = dest.backup_ids()
        finished = {m.backup_id: m.finished_at for m in source_manifests}
        behind = [(b, finished[b]) for b in pending_backups(list(finished), ids)]
        binlogs = len(binlogs_behind(source, dest))
    except (StorageError, CatalogError, BinlogError, OSError) as exc:
        return CopyState(name, dest.describe(), 0, [], 0, _one_line(exc))
    return CopyState(name, dest.describe(), len(ids), behind, binlogs, held=list(ids))
