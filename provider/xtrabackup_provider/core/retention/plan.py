"""Chain-aware retention: a pure planner, (manifests, binlog index, policy, now) -> Plan.

Every backup, binlog and leftover object of one host gets one PlanItem, keep or delete, with
its reason. Nothing here does I/O: core/retention/apply.py gathers the inputs and deletes.

A backup is kept when any of these holds (the first that holds is its reason):
  - retention is not configured (`keep_last_chains` unset): everything is kept;
  - one of its objects is under S3 Object Lock (kept until the retain-until date);
  - a running restore, PITR or standby update holds a read lease on it (core/catalog/lease.py);
  - an ancestor has no manifest, or its own manifest is unreadable: kept for a human to look
    at, so that a parent manifest that failed to read never makes its children look like garbage;
  - it is newer than the newest backup that restores (its chain does not validate): kept for a
    human too. Only backups whose chain validates (catalog.validate_chain) fill the slots below;
    an older one whose chain does not validate is deleted with the rest;
  - it is the newest backup that passed a restore test;
  - its chain is one of the newest `keep_last_chains` chains (ordered by their newest restorable
    backup), and it restores: the chain is kept whole;
  - grandfather-father-son: for the newest `daily` days, `weekly` ISO weeks, `monthly` months
    and `yearly` years (UTC, by start time) that hold a restorable backup, the newest restorable
    backup of that period. Periods without a backup do not count, so a pause in backups never
    empties the slots;
  - PITR: it finished inside the last `pitr_days`, or it is the newest restorable backup that
    finished before that window (the base a replay to the window's first second starts from);
  - it is younger than `min_age_days`.
Then the invariant: every ancestor of a kept backup is kept (a kept incremental keeps its chain
back to the full). Everything else is deleted.

Binlogs are kept from the oldest kept backup on: every binlog whose last event is not older
than that backup's start (less BINLOG_CLOCK_SLACK for clock skew between the database and the
worker), and every binlog of that backup's server from its recorded `binlog_file` on, so any
point from the oldest kept backup to now stays reachable. Young or locked binlogs are kept too.

Debris: objects under `backups/<id>/` where `<id>` has no manifest are what a failed or
interrupted run left behind. They are deleted once the newest of them is older than
`debris_grace_days` (a younger directory may be a backup still uploading).

Storage: deleting an object before its class's minimum storage duration is billed as if it
stayed that long. Each deleted item reports that charge, estimated as
remaining days / 30 * size in GiB * the class's price per GB-month (MIN_STORAGE, S3 us-east-1
list prices). The age is counted from the object's upload (listing LastModified, else the
manifest's finish time or the binlog's last event). An object a lifecycle rule moved later has
been in its class for less time, so its real charge can be higher, up to the full minimum.
Deleting early costs the same as waiting, so the planner reports the charge and does not defer.
"""

from __future__ import annotations

import contextlib
import gc
from bisect import bisect_left
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from operator import attrgetter, itemgetter
from typing import Any

from ..catalog.chain import resolve_chain, validate_chain
from ..catalog.manifest import MANIFEST_NAME, CatalogError, Manifest
from ..storage.base import ObjectInfo
from .leftovers import Context, Cut, binlog_items, binlog_seq, debris_items, listing_dirs, unreadable_items
from .model import (
    DAY,
    MIN_STORAGE,
    NOT_CONFIGURED,
    BinlogItem,
    Plan,
    PlanItem,
    RetentionPolicy,
    charge_note,
    early_deletion_usd,
    utc,
)

_MANIFEST_SUFFIX = "/" + MANIFEST_NAME


def plan_retention(
    manifests: Sequence[Manifest],
    binlogs: Sequence[BinlogItem],
    policy: RetentionPolicy,
    now: datetime,
    *,
    verified: Collection[str] = (),
    listing: Sequence[ObjectInfo] = (),
    backups_prefix: str = "",
    locks: Mapping[str, datetime] | None = None,
    leases: Mapping[str, str] | None = None,
) -> Plan:
    """Keep or delete every backup, binlog and leftover object of one host, with a reason.

    `verified`: ids whose restore test passed. `listing`: the objects under `backups_prefix`
    (`<prefix>/<cluster>/<host>/backups/`), for debris and files beside a manifest such as
    restore-report.json. `locks`: Object Lock retain-until per key (from head-object).
    `leases`: item name (backup id, `<server_uuid>/<binlog>`) -> the live read lease keeping it.
    """
    if now.tzinfo is None:
        raise ValueError("plan_retention needs a timezone-aware `now` (UTC)")
    with _gc_paused():
        ctx = Context(
            policy,
            now,
            backups_prefix,
            listing_dirs(listing, backups_prefix),
            dict(locks or {}),
            dict(leases or {}),
        )
        backups = _Backups(manifests, ctx)
        backups.decide(verified)
        items = backups.items()
        items += unreadable_items(ctx, backups.unreadable)
        items += binlog_items(binlogs, ctx, backups.binlog_cut())
        items += debris_items(ctx, backups.by_id.keys() | set(backups.unreadable))
    return Plan(now, policy, items)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Planning allocates a few objects per manifest and makes no reference cycles; a full
    collection over 100,000 live manifests in the middle of it would cost a third of the plan."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# ---------------------------------------------------------------------------------------------


class _Backups:
    """The manifests of one host and the keep reason of each (keyed by backup id).

    Sized for 100,000 manifests in under a second (bench/retention_plan.py): every manifest
    field is read once into plain dictionaries (a pydantic attribute read costs several times a
    dict lookup), only the chains a rule looks at are validated, and each item is built in one pass.
    """

    def __init__(self, manifests: Sequence[Manifest], ctx: Context) -> None:
        self.ctx = ctx
        ids, starts, finishes, parents, roots, objects = _columns(manifests)
        self.ids = ids
        self.by_id: dict[str, Manifest] = dict(zip(ids, manifests, strict=True))
        self.start: dict[str, datetime] = dict(zip(ids, starts, strict=True))
        self.finish: dict[str, datetime] = dict(zip(ids, finishes, strict=True))
        self.parent: dict[str, str | None] = dict(zip(ids, parents, strict=True))
        self.root: dict[str, str] = dict(zip(ids, roots, strict=True))
        self.lock_known: dict[str, list[datetime]] = {}  # lock dates the manifests record
        self.stored = self._stored_all(manifests, objects)
        self.reason: dict[str, str] = {}
        self.depth, self.orphans = _structure(self.by_id, self.parent)
        self.errors: dict[str, str | None] = {}  # filled by error(), for the backups a rule looks at
        # Newest first: by start time, ties by id (two stable sorts, no tuple per backup).
        self.newest_first = sorted(sorted(ids, reverse=True), key=self.start.__getitem__, reverse=True)
        self.unreadable = sorted(  # directories holding a manifest.json the caller could not read
            bid
            for bid, infos in ctx.dirs.items()
            if bid and bid not in self.by_id and any(i.key.endswith(_MANIFEST_SUFFIX) for i in infos)
        )

    def _stored_all(self, manifests: Sequence[Manifest], objects: Sequence[list[Any]]) -> dict[str, _Stored]:
        ids, finishes = self.ids, self.finish.values()
        mains = list(map(_MAIN_FIELDS, map(_FIRST, objects)))  # (key, size, class, lock) of each first object
        listed = self.ctx.prefix or self.ctx.dirs
        if not listed and max(map(len, objects), default=1) == 1 and not any(map(_FOURTH, mains)):
            # One object each, no lock, nothing listed (what the benchmark plans): the keys follow.
            return {
                bid: ((key[: key.rindex("/")] + _MANIFEST_SUFFIX, key), size, klass, _aged(klass, size, fin))
                for bid, (key, size, klass, _lock), fin in zip(ids, mains, finishes, strict=True)
            }
        for bid, objs in zip(ids, objects, strict=True):
            if known := [o.object_lock_until for o in objs if o.object_lock_until]:
                self.lock_known[bid] = known
        return {bid: self._stored(m, fin) for bid, m, fin in zip(ids, manifests, finishes, strict=True)}

    def _stored(self, m: Manifest, finished: datetime) -> _Stored:
        """Keys (manifest first, then its objects, then anything else in its directory), bytes,
        storage class, and (class, size, upload time) of the objects a minimum storage duration
        applies to. The listing says what is stored now (a lifecycle rule may have moved an
        object); the manifest fills in what the listing lacks."""
        bid, objects, prefix = m.backup_id, m.objects, self.ctx.prefix
        key, klass = objects[0].key, objects[0].storage_class
        directory = key[: key.rindex("/")]
        if prefix and directory != prefix + bid:
            raise ValueError(f"manifest {bid} names {key}, outside {prefix}")
        pieces = [(p, o.storage_class) for o in objects for p in o.pieces()]  # every segment's object
        keys = [directory + _MANIFEST_SUFFIX, *(p.key for p, _ in pieces)]
        declared = set(keys)
        size, aged, extra, unlisted = 0, [], [], {p.key: (p, k) for p, k in pieces}
        for info in self.ctx.dirs.get(bid, ()):  # one pass: this runs for every backup of a real plan
            size += info.size
            if info.key == key:
                klass = info.storage_class
            if info.key not in declared:
                extra.append(info.key)
            unlisted.pop(info.key, None)
            if info.storage_class in MIN_STORAGE:
                aged.append((info.storage_class, info.size, utc(info.last_modified or finished)))
        for p, storage_class in unlisted.values():  # not listed: as the manifest says
            size += p.size
            if storage_class in MIN_STORAGE:
                aged.append((storage_class, p.size, finished))
        return tuple(keys + sorted(extra)), size, klass, aged

    def keep(self, bid: str, reason: str) -> None:
        self.reason.setdefault(bid, reason)

    def decide(self, verified: Collection[str]) -> None:
        policy = self.ctx.policy
        if not policy.configured:
            for bid in self.by_id:
                self.keep(bid, NOT_CONFIGURED)
            return
        self._locked()
        for bid in self.ctx.leases.keys() & self.by_id.keys():
            self.keep(bid, self.ctx.leases[bid])
        self._broken()
        if newest := max((b for b in verified if b in self.by_id), default=None, key=self._start_key):
            self.keep(newest, "newest backup that passed a restore test")
        self._newest_chains(policy.keep_last_chains or 0)
        self._gfs()
        self._pitr(policy.pitr_days)
        young = self.ctx.now - policy.min_age_days * DAY
        for bid, finished in self.finish.items():
            if finished > young:
                self.keep(bid, f"younger than min_age_days ({policy.min_age_days:g})")
        self._close_over_parents()

    def _start_key(self, bid: str) -> tuple[datetime, str]:
        return self.start[bid], bid

    def error(self, bid: str) -> str | None:
        """Why the chain up to `bid` does not validate (None: it restores), from the manifests
        (catalog.validate_chain). Checked when a rule first looks at `bid`, not for every backup:
        validating 100,000 manifests costs more than the rest of the plan."""
        if bid in self.errors:
            return self.errors[bid]
        path = [bid]
        while (up := self.parent[path[-1]]) and up in self.by_id and len(path) <= len(self.by_id):
            path.append(up)
        path.reverse()
        try:
            if bid in self.orphans:  # a missing parent or a loop: resolve_chain names it
                resolve_chain(self.by_id, bid)
            validate_chain([self.by_id[i] for i in path])
        except CatalogError as exc:
            self.errors[bid] = str(exc)
            return self.errors[bid]
        self.errors.update(dict.fromkeys(path))
        return None

    def _broken(self) -> None:
        """Kept for a human: a backup whose ancestor has no manifest (one that failed to read must
        not make its children look like garbage), and the backups newer than the newest one that
        restores. Older backups whose chain does not validate are deleted with the rest."""
        for bid in (b for b in self.ids if b in self.orphans):
            self.keep(bid, f"chain does not validate, kept for a human to check: {self.error(bid)}")
        for bid in self.newest_first:
            if (error := self.error(bid)) is None:
                break
            self.keep(bid, f"newer than the newest backup that restores, kept for a human to check: {error}")

    def _locked(self) -> None:
        """Backups with an object under Object Lock: recorded in the manifest, or found by head-object."""
        candidates = set(self.lock_known)
        for key in self.ctx.locks:
            if self.ctx.prefix:  # <prefix><id>/...
                candidates.add(key[len(self.ctx.prefix) :].split("/", 1)[0])
            else:  # .../<id>/<name>
                candidates.add(key.rpartition("/")[0].rpartition("/")[2])
        for bid in candidates & self.by_id.keys():
            if reason := self.ctx.locked(self.stored[bid][0], self.lock_known.get(bid, ())):
                self.keep(bid, reason)

    def _newest_chains(self, count: int) -> None:
        kept: dict[str, int] = {}  # chain root -> rank, newest chain first
        for bid in self.newest_first:
            if len(kept) >= count:
                break
            if self.root[bid] not in kept and self.error(bid) is None:
                kept[self.root[bid]] = len(kept) + 1
        for bid in self.newest_first:
            if (rank := kept.get(self.root[bid])) is not None and self.error(bid) is None:
                self.keep(bid, f"in the newest {count} chain(s) (#{rank})")

    def _gfs(self) -> None:
        """The newest restorable backup of each of the newest `count` periods that have one:
        from the newest backup, jump (binary search) to the newest one before its period."""
        policy = self.ctx.policy
        oldest_first = self.newest_first[::-1]
        starts = [self.start[bid] for bid in oldest_first]
        for name, count, period_start in (
            ("daily", policy.daily, _day),
            ("weekly", policy.weekly, _iso_week),
            ("monthly", policy.monthly, _month),
            ("yearly", policy.yearly, _year),
        ):
            i, slot = len(oldest_first) - 1, 0
            while i >= 0 and slot < count:
                begins = period_start(starts[i].astimezone(UTC))
                while i >= 0 and starts[i] >= begins and self.error(oldest_first[i]) is not None:
                    i -= 1  # a period counts only with a backup that restores
                if i >= 0 and starts[i] >= begins:
                    slot += 1
                    self.keep(oldest_first[i], f"{name} slot {slot}/{count}")
                i = bisect_left(starts, begins) - 1

    def _pitr(self, days: float) -> None:
        if days <= 0:
            return
        start = self.ctx.now - days * DAY
        for bid, finished in self.finish.items():
            if finished >= start:
                self.keep(bid, f"inside the {days:g}-day PITR window")
        base = next((b for b in self.newest_first if self.finish[b] < start and self.error(b) is None), None)
        if base is not None:
            self.keep(base, f"base of the {days:g}-day PITR window")

    def _close_over_parents(self) -> None:
        for bid in list(self.reason):
            parent = self.parent[bid]
            while parent in self.by_id and parent not in self.reason:
                self.reason[parent] = f"needed by kept {bid}"
                parent = self.parent[parent]

    # -- output ---------------------------------------------------------------------------------

    def items(self) -> list[PlanItem]:
        now, count, depth, reasons = self.ctx.now, self.ctx.policy.keep_last_chains, self.depth, self.reason
        outside: dict[str, str] = {}  # chain root -> why its members go (one string per chain)
        items: list[PlanItem] = []
        append = items.append
        columns = zip(self.ids, self.finish.values(), self.root.values(), self.stored.values(), strict=True)
        for bid, finished, root, (keys, size, klass, aged) in columns:
            if (reason := reasons.get(bid)) is not None:
                append(PlanItem("backup", bid, "keep", reason, keys, size, klass, finished, 1, depth[bid]))
                continue
            if (reason := outside.get(root)) is None:
                reason = outside[root] = (
                    f"outside the policy: chain {root} is not among the newest {count}, "
                    "has no GFS slot, PITR window or young backup"
                )
            charge = sum(early_deletion_usd(c, n, t, now) for c, n, t in aged) if aged else 0.0
            if charge >= 0.005:
                reason += charge_note(charge)
            append(
                PlanItem("backup", bid, "delete", reason, keys, size, klass, finished, 1, depth[bid], charge)
            )
        return items

    def binlog_cut(self) -> Cut:
        kept = sorted(self.reason, key=self._start_key)  # oldest first
        cut = Cut(kept=bool(kept) or bool(self.unreadable))
        if kept:
            cut.time, cut.backup_id = self.start[kept[0]], kept[0]
        for bid in reversed(kept):  # the oldest kept backup of each server wins
            m = self.by_id[bid]
            if m.binlog_file and (seq := binlog_seq(m.binlog_file)):
                cut.files[(m.server_uuid, seq[0])] = (seq[1], bid)
        for bid in self.unreadable:
            times = [i.last_modified for i in self.ctx.dirs[bid]]
            first = None if any(t is None for t in times) else min(utc(t) for t in times if t)
            if first is None or cut.time is None or first < cut.time:
                cut.time, cut.backup_id = first, bid
                if first is None:
                    break
        return cut


def _structure(by_id: dict[str, Manifest], parent: dict[str, str | None]) -> tuple[dict[str, int], set[str]]:
    """Each backup's depth in its chain (0 = the full; counted from the oldest ancestor that
    exists), and the orphans: backups with an ancestor that has no manifest, or in a loop."""
    depth: dict[str, int] = {}
    broken: set[str] = set()
    for bid in by_id:
        up = parent[bid]
        if up is None:
            depth[bid] = 0
            continue
        if (above := depth.get(up)) is not None and up not in broken:  # manifests come oldest first
            depth[bid] = above + 1
            continue
        path: list[str] = []
        cur: str | None = bid
        while cur in by_id and cur not in depth and len(path) <= len(by_id):
            path.append(cur)
            cur = parent[cur]
        missing = cur is not None and (cur not in by_id or len(path) > len(by_id) or cur in broken)
        base = depth.get(cur, -1) if cur is not None else -1
        for n, node in enumerate(reversed(path), start=1):
            depth[node] = base + n
        if missing:
            broken.update(path)
    return depth, broken


def _columns(manifests: Sequence[Manifest]) -> tuple[tuple[Any, ...], ...]:
    """(ids, starts, finishes, parents, roots, objects), every field read once in C by
    operator.attrgetter: a Python loop reading them costs several times more at 100,000."""
    rows = list(map(_FIELDS, manifests))
    ids, starts, finishes, parents, roots, objects = zip(*rows, strict=True) if rows else ((),) * 6
    if len(set(ids)) != len(ids):
        twice = sorted(bid for bid, n in Counter(ids).items() if n > 1)
        raise ValueError(f"the manifests name backup ids more than once: {twice[:5]}")
    if not all(map(_TZINFO, starts)) or not all(map(_TZINFO, finishes)):
        starts, finishes = tuple(map(utc, starts)), tuple(map(utc, finishes))
    return ids, starts, finishes, parents, roots, objects


_Stored = tuple[tuple[str, ...], int, str, Sequence[tuple[str, int, datetime]]]
_FIELDS = attrgetter("backup_id", "started_at", "finished_at", "parent_id", "chain_root", "objects")
_MAIN_FIELDS = attrgetter("key", "size", "storage_class", "object_lock_until")
_FIRST = itemgetter(0)
_FOURTH = itemgetter(3)
_TZINFO = attrgetter("tzinfo")


def _aged(klass: str, size: int, uploaded: datetime) -> Sequence[tuple[str, int, datetime]]:
    return [(klass, size, uploaded)] if klass in MIN_STORAGE else ()


def _day(when: datetime) -> datetime:
    return when.replace(hour=0, minute=0, second=0, microsecond=0)


def _iso_week(when: datetime) -> datetime:
    return _day(when) - timedelta(days=when.weekday())  # ISO weeks start on Monday


def _month(when: datetime) -> datetime:
    return _day(when).replace(day=1)


def _year(when: datetime) -> datetime:
    return _day(when).replace(month=1, day=1)
