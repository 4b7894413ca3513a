"""Chain-aware retention: a pure planner, (manifests, binlog index, policy, now) -> Plan.

Every backup, binlog and leftover object of one host gets one PlanItem, keep or delete, with
its reason. Nothing here does I/O: core/retention_apply.py gathers the inputs and deletes.

A backup is kept when any of these holds (the first that holds is its reason):
  - retention is not configured (`keep_last_chains` unset): everything is kept;
  - one of its objects is under S3 Object Lock (kept until the retain-until date);
  - its chain does not validate, or its manifest is unreadable: kept for a human to look at,
    so that a parent manifest that failed to read never makes its children look like garbage;
  - it is the newest backup that passed a restore test;
  - its chain is one of the newest `keep_last_chains` chains (ordered by their newest restorable
    backup; kept whole);
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

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .catalog import MANIFEST_NAME, CatalogError, Manifest, resolve_chain
from .storage import GiB, ObjectInfo

DAY = timedelta(days=1)
BINLOG_CLOCK_SLACK = timedelta(hours=1)
# storage class -> (minimum storage days, USD per GB-month): S3 us-east-1 list prices.
MIN_STORAGE: dict[str, tuple[int, float]] = {
    "STANDARD_IA": (30, 0.0125),
    "ONEZONE_IA": (30, 0.01),
    "GLACIER_IR": (90, 0.004),
    "GLACIER": (90, 0.0036),
    "DEEP_ARCHIVE": (180, 0.00099),
}
LEGAL_HOLD = datetime.max.replace(tzinfo=UTC)  # an Object Lock legal hold: retained until released
_MANIFEST_SUFFIX = "/" + MANIFEST_NAME
NOT_CONFIGURED = "retention is not configured (set retention.keep_last_chains): keeping everything"


class RetentionPolicy(BaseModel):
    """What to keep. The default (nothing set) keeps everything."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keep_last_chains: int | None = Field(None, ge=1, le=1_000_000)
    daily: int = Field(0, ge=0, le=1_000_000)
    weekly: int = Field(0, ge=0, le=1_000_000)
    monthly: int = Field(0, ge=0, le=1_000_000)
    yearly: int = Field(0, ge=0, le=1_000_000)
    min_age_days: float = Field(1.0, ge=0, le=36_500, allow_inf_nan=False)
    pitr_days: float = Field(0.0, ge=0, le=36_500, allow_inf_nan=False)
    # At least an hour: a younger directory without a manifest may be a backup still uploading.
    debris_grace_days: float = Field(7.0, ge=1 / 24, le=36_500, allow_inf_nan=False)

    @property
    def configured(self) -> bool:
        return self.keep_last_chains is not None


def parse_policy(data: Mapping[str, Any], source: str) -> RetentionPolicy:
    """A policy from JSON-like data; a bad value raises ValueError naming `source` and the field."""
    try:
        return RetentionPolicy.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"{source}: invalid retention policy: {problems}") from None


@dataclass(frozen=True, slots=True)
class BinlogItem:
    """One shipped binlog file as retention sees it; adapt the binlog index to this.

    `name` is the server's file name (mysql-bin.000042): files of one server with the same base
    name are ordered by the numeric suffix. Times are UTC. `marker_keys` are deleted before
    `key` and `segment_keys` (put the binlog's manifest or index entry there, so an interrupted
    run never leaves an entry naming a deleted file); `segment_keys` are further data objects of
    the same binlog. `lock_until` is its Object Lock retain-until, if known.
    """

    server_uuid: str
    name: str
    first_event_time: datetime
    last_event_time: datetime
    size: int
    storage_class: str
    key: str
    marker_keys: tuple[str, ...] = ()
    lock_until: datetime | None = None
    segment_keys: tuple[str, ...] = ()


Action = Literal["keep", "delete"]
Kind = Literal["backup", "binlog", "debris", "other"]


@dataclass(slots=True)
class PlanItem:
    kind: Kind
    name: str  # backup id, "<server_uuid>/<binlog name>", or the debris directory
    action: Action
    reason: str
    keys: tuple[str, ...] = ()  # deletion order: the first `markers` keys are commit markers
    size: int = 0
    storage_class: str = ""
    created: datetime | None = None
    markers: int = 0
    depth: int = 0  # position in its chain (0 = the full): deeper manifests are deleted first
    early_delete_usd: float = 0.0


@dataclass
class Plan:
    now: datetime
    policy: RetentionPolicy
    items: list[PlanItem]
    problems: list[str] = field(default_factory=list)  # unreadable manifests, from the caller

    @property
    def deletes(self) -> list[PlanItem]:
        return [i for i in self.items if i.action == "delete"]

    @property
    def keeps(self) -> list[PlanItem]:
        return [i for i in self.items if i.action == "keep"]

    def summary(self) -> dict[str, Any]:
        """Small, JSON-able totals (for XCom and logs)."""
        counts: dict[str, int] = defaultdict(int)
        for item in self.items:
            counts[f"{item.action}_{item.kind}"] += 1
        deletes = self.deletes
        return {
            "now": self.now.isoformat(),
            "counts": dict(sorted(counts.items())),
            "delete_bytes": sum(i.size for i in deletes),
            "keep_bytes": sum(i.size for i in self.items if i.action == "keep"),
            "early_delete_usd": round(sum(i.early_delete_usd for i in deletes), 2),
            "problems": len(self.problems),
        }


def early_deletion_usd(storage_class: str, size: int, created: datetime | None, now: datetime) -> float:
    """What deleting now adds for the class's minimum storage duration (see the module doc)."""
    rule = MIN_STORAGE.get(storage_class)
    if rule is None or created is None:
        return 0.0
    min_days, price = rule
    remaining = min(min_days, min_days - (now - created) / DAY)
    return size / GiB * price * remaining / 30 if remaining > 0 else 0.0


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
) -> Plan:
    """Keep or delete every backup, binlog and leftover object of one host, with a reason.

    `verified`: ids whose restore test passed. `listing`: the objects under `backups_prefix`
    (`<prefix>/<cluster>/<host>/backups/`), for debris and files beside a manifest such as
    restore-report.json. `locks`: Object Lock retain-until per key (from head-object).
    """
    if now.tzinfo is None:
        raise ValueError("plan_retention needs a timezone-aware `now` (UTC)")
    ctx = _Context(policy, now, backups_prefix, _listing_dirs(listing, backups_prefix), dict(locks or {}))
    backups = _Backups(manifests, ctx)
    backups.decide(verified)
    items = backups.items()
    items += _unreadable_items(ctx, backups)
    items += _binlog_items(binlogs, ctx, backups.binlog_cut())
    items += _debris_items(ctx, backups)
    return Plan(now, policy, items)


# ---------------------------------------------------------------------------------------------


@dataclass
class _Context:
    policy: RetentionPolicy
    now: datetime
    prefix: str  # <prefix>/<cluster>/<host>/backups/
    dirs: dict[str, list[ObjectInfo]]  # backup id -> objects listed in its directory
    locks: dict[str, datetime]

    def locked(self, keys: Sequence[str], known: Sequence[datetime | None] = ()) -> str | None:
        """The Object Lock reason if any key (or a known retain-until) is still retained."""
        dates = [self.locks.get(k) for k in keys] if self.locks else []
        until = [_utc(d) for d in (*dates, *known) if d is not None and _utc(d) > self.now]
        if not until:
            return None
        if max(until) == LEGAL_HOLD:
            return "Object Lock legal hold: kept until the hold is released"
        return f"Object Lock retains it until {max(until):%Y-%m-%d %H:%M}Z"

    def age_days(self, when: datetime | None) -> float | None:
        return None if when is None else (self.now - _utc(when)) / DAY


def _listing_dirs(listing: Sequence[ObjectInfo], prefix: str) -> dict[str, list[ObjectInfo]]:
    dirs: dict[str, list[ObjectInfo]] = defaultdict(list)
    for info in listing:
        if not prefix or not info.key.startswith(prefix):
            raise ValueError(f"listed object {info.key!r} is not under the backups prefix {prefix!r}")
        bid, sep, _name = info.key[len(prefix) :].partition("/")
        dirs[bid if sep else ""].append(info)  # "" holds objects outside any backup directory
    return dirs


class _Backups:
    """The manifests of one host and the keep reason of each (keyed by backup id).

    Sized for 100,000 manifests in under a second (bench/retention_plan.py): every manifest
    field is read once into plain dictionaries (a pydantic attribute read costs several times a
    dict lookup), chains are validated once each, and each item is built in a single pass.
    """

    def __init__(self, manifests: Sequence[Manifest], ctx: _Context) -> None:
        self.ctx = ctx
        self.by_id: dict[str, Manifest] = {}
        self.start: dict[str, datetime] = {}
        self.finish: dict[str, datetime] = {}
        self.parent: dict[str, str | None] = {}
        self.root: dict[str, str] = {}
        self.lock_known: dict[str, list[datetime]] = {}  # lock dates the manifests record
        self.stored: dict[str, _Stored] = {}
        by_id, start, finish, parent, root = self.by_id, self.start, self.finish, self.parent, self.root
        stored, dirs, prefix = self.stored, ctx.dirs, ctx.prefix
        for m in manifests:
            bid, started, finished, objects = m.backup_id, m.started_at, m.finished_at, m.objects
            by_id[bid], parent[bid], root[bid] = m, m.parent_id, m.chain_root
            start[bid] = started if started.tzinfo else started.replace(tzinfo=UTC)
            finish[bid] = finished = finished if finished.tzinfo else finished.replace(tzinfo=UTC)
            main = objects[0]
            if len(objects) > 1 or main.object_lock_until or bid in dirs or prefix:
                stored[bid] = self._stored(m, finished)
                if known := [o.object_lock_until for o in objects if o.object_lock_until]:
                    self.lock_known[bid] = known
            else:  # the usual case, inline: one object, nothing listed
                key, size, klass = main.key, main.size, main.storage_class
                keys = (key[: key.rindex("/")] + _MANIFEST_SUFFIX, key)
                stored[bid] = keys, size, klass, [(klass, size, finished)] if klass in MIN_STORAGE else []
        self.reason: dict[str, str] = {}
        self.errors, self.depth = _chain_info(self.by_id, self.parent)
        # Newest first: by start time, ties by id (two stable sorts, no tuple per backup).
        restorable = sorted((bid for bid, error in self.errors.items() if error is None), reverse=True)
        self.restorable = sorted(restorable, key=self.start.__getitem__, reverse=True)
        self.unreadable = sorted(  # directories holding a manifest.json the caller could not read
            bid
            for bid, infos in ctx.dirs.items()
            if bid and bid not in self.by_id and any(i.key.endswith("/" + MANIFEST_NAME) for i in infos)
        )

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
        listed = self.ctx.dirs.get(bid)
        keys = [directory + _MANIFEST_SUFFIX, *(o.key for o in objects)]
        size, aged, seen = 0, [], set()
        for info in listed or ():
            seen.add(info.key)
            size += info.size
            if info.key == key:
                klass = info.storage_class
            if info.storage_class in MIN_STORAGE:
                aged.append((info.storage_class, info.size, _utc(info.last_modified or finished)))
        for o in objects:
            if o.key not in seen:  # not listed: as the manifest says
                size += o.size
                if o.storage_class in MIN_STORAGE:
                    aged.append((o.storage_class, o.size, finished))
        if extra := seen.difference(keys):
            keys += sorted(extra)
        return tuple(keys), size, klass, aged

    def keep(self, bid: str, reason: str) -> None:
        self.reason.setdefault(bid, reason)

    def decide(self, verified: Collection[str]) -> None:
        policy = self.ctx.policy
        if not policy.configured:
            for bid in self.by_id:
                self.keep(bid, NOT_CONFIGURED)
            return
        self._locked()
        for bid, error in self.errors.items():
            if error:
                self.keep(bid, f"chain does not validate, kept for a human to check: {error}")
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

    def _locked(self) -> None:
        """Backups with an object under Object Lock: recorded in the manifest, or found by head-object."""
        candidates = set(self.lock_known)
        for key in self.ctx.locks:
            rest = key[len(self.ctx.prefix) :] if self.ctx.prefix else key.rsplit("/", 2)[-2]
            candidates.add(rest.split("/", 1)[0])
        for bid in candidates & self.by_id.keys():
            if reason := self.ctx.locked(self.stored[bid][0], self.lock_known.get(bid, ())):
                self.keep(bid, reason)

    def _newest_chains(self, count: int) -> None:
        kept: dict[str, int] = {}  # chain root -> rank, newest chain first
        for bid in self.restorable:
            if len(kept) >= count:
                break
            kept.setdefault(self.root[bid], len(kept) + 1)
        for bid in self.restorable:
            if (rank := kept.get(self.root[bid])) is not None:
                self.keep(bid, f"in the newest {count} chain(s) (#{rank})")

    def _gfs(self) -> None:
        """The newest restorable backup of each of the newest `count` periods that have one:
        from the newest backup, jump (binary search) to the newest one before its period."""
        policy = self.ctx.policy
        oldest_first = self.restorable[::-1]
        starts = [self.start[bid] for bid in oldest_first]
        for name, count, period_start in (
            ("daily", policy.daily, _day),
            ("weekly", policy.weekly, _iso_week),
            ("monthly", policy.monthly, _month),
            ("yearly", policy.yearly, _year),
        ):
            i = len(oldest_first) - 1
            for slot in range(1, count + 1):
                if i < 0:
                    break
                self.keep(oldest_first[i], f"{name} slot {slot}/{count}")
                i = bisect_left(starts, period_start(starts[i].astimezone(UTC))) - 1

    def _pitr(self, days: float) -> None:
        if days <= 0:
            return
        start = self.ctx.now - days * DAY
        for bid, finished in self.finish.items():
            if finished >= start:
                self.keep(bid, f"inside the {days:g}-day PITR window")
        base = next((bid for bid in self.restorable if self.finish[bid] < start), None)
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
        now, count, depth, finish = self.ctx.now, self.ctx.policy.keep_last_chains, self.depth, self.finish
        reasons, roots, stored = self.reason, self.root, self.stored
        outside: dict[str, str] = {}  # chain root -> why its members go (one string per chain)
        items: list[PlanItem] = []
        append = items.append
        for bid in self.by_id:
            keys, size, klass, aged = stored[bid]
            reason = reasons.get(bid)
            if reason is not None:
                append(PlanItem("backup", bid, "keep", reason, keys, size, klass, finish[bid], 1, depth[bid]))
                continue
            if (reason := outside.get(roots[bid])) is None:
                reason = outside[roots[bid]] = (
                    f"outside the policy: chain {roots[bid]} is not among the newest {count}, "
                    "has no GFS slot, PITR window or young backup"
                )
            charge = sum(early_deletion_usd(c, n, t, now) for c, n, t in aged) if aged else 0.0
            if charge >= 0.005:
                reason += _charge_note(charge)
            append(
                PlanItem(
                    "backup", bid, "delete", reason, keys, size, klass, finish[bid], 1, depth[bid], charge
                )
            )
        return items

    def binlog_cut(self) -> _Cut:
        kept = sorted(self.reason, key=self._start_key)  # oldest first
        cut = _Cut(kept=bool(kept) or bool(self.unreadable))
        if kept:
            cut.time, cut.backup_id = self.start[kept[0]], kept[0]
        for bid in reversed(kept):  # the oldest kept backup of each server wins
            m = self.by_id[bid]
            if m.binlog_file and (seq := _binlog_seq(m.binlog_file)):
                cut.files[(m.server_uuid, seq[0])] = (seq[1], bid)
        for bid in self.unreadable:
            times = [i.last_modified for i in self.ctx.dirs[bid]]
            first = None if any(t is None for t in times) else min(_utc(t) for t in times if t)
            if first is None or cut.time is None or first < cut.time:
                cut.time, cut.backup_id = first, bid
                if first is None:
                    break
        return cut


def _chain_info(
    by_id: dict[str, Manifest], parent: dict[str, str | None]
) -> tuple[dict[str, str | None], dict[str, int]]:
    """backup id -> None when its chain validates (catalog.resolve_chain), else why not; and its
    depth in its chain. Each chain is validated once, from its newest member; the members of a
    broken chain are then checked on their own."""
    has_child = set(parent.values())
    errors: dict[str, str | None] = {}
    depth: dict[str, int] = {}
    for bid in [*(b for b in by_id if b not in has_child), *by_id]:
        if bid in errors:
            continue
        try:
            chain = resolve_chain(by_id, bid)
        except CatalogError as exc:
            errors[bid] = str(exc)
            continue
        ids = [m.backup_id for m in chain]
        errors.update(dict.fromkeys(ids))
        depth.update(zip(ids, range(len(ids)), strict=True))
    for bid in [b for b in by_id if b not in depth]:  # broken chains: count the links that exist
        path: list[str] = []
        cur: str | None = bid
        while cur in by_id and cur not in depth and len(path) <= len(by_id):
            path.append(cur)
            cur = parent[cur]
        base = depth.get(cur, -1) if cur is not None else -1
        for n, node in enumerate(reversed(path), start=1):
            depth[node] = base + n
    return errors, depth


_Stored = tuple[tuple[str, ...], int, str, list[tuple[str, int, datetime]]]


def _day(when: datetime) -> datetime:
    return when.replace(hour=0, minute=0, second=0, microsecond=0)


def _iso_week(when: datetime) -> datetime:
    return _day(when) - timedelta(days=when.weekday())  # ISO weeks start on Monday


def _month(when: datetime) -> datetime:
    return _day(when).replace(day=1)


def _year(when: datetime) -> datetime:
    return _day(when).replace(month=1, day=1)


@dataclass
class _Cut:
    """Where the binlogs that must stay begin."""

    kept: bool  # is any backup kept at all?
    time: datetime | None = None  # the oldest kept backup's start; None with kept: unknown, keep all
    backup_id: str = ""
    files: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)  # (uuid, base) -> (seq, id)


def _binlog_seq(name: str) -> tuple[str, int] | None:
    base, _, number = name.rpartition(".")
    return (base, int(number)) if base and number.isdigit() else None


def _unreadable_items(ctx: _Context, backups: _Backups) -> list[PlanItem]:
    items = []
    for bid in backups.unreadable:
        infos = ctx.dirs[bid]
        reason = "its manifest.json cannot be read: fix or remove it by hand"
        if ctx.policy.configured and (lock := ctx.locked([i.key for i in infos])):
            reason = lock
        items.append(_dir_item("backup", bid, reason, infos))
    return items


def _binlog_items(binlogs: Sequence[BinlogItem], ctx: _Context, cut: _Cut) -> list[PlanItem]:
    items = []
    for b in binlogs:
        keys = (*b.marker_keys, b.key, *b.segment_keys)
        item = PlanItem("binlog", f"{b.server_uuid}/{b.name}", "keep", "", keys, b.size, b.storage_class)
        item.created, item.markers = _utc(b.last_event_time), len(b.marker_keys)
        item.reason = _binlog_keep_reason(b, ctx, cut) or ""
        if not item.reason:
            item.action = "delete"
            item.early_delete_usd = early_deletion_usd(b.storage_class, b.size, item.created, ctx.now)
            item.reason = (
                f"ends {item.created:%Y-%m-%d %H:%M}Z, before the oldest kept backup {cut.backup_id} "
                f"started: not needed for PITR" + _charge_note(item.early_delete_usd)
            )
        items.append(item)
    return items


def _binlog_keep_reason(b: BinlogItem, ctx: _Context, cut: _Cut) -> str | None:
    policy = ctx.policy
    if not policy.configured:
        return NOT_CONFIGURED
    if lock := ctx.locked([b.key, *b.marker_keys, *b.segment_keys], [b.lock_until]):
        return lock
    if (ctx.age_days(b.last_event_time) or 0.0) < policy.min_age_days:
        return f"younger than min_age_days ({policy.min_age_days:g})"
    if not cut.kept:
        return "no backup is kept to replay it onto; kept until one is"
    if cut.time is None:
        return f"kept backup {cut.backup_id} has an unreadable manifest: every binlog is kept"
    if _utc(b.last_event_time) >= cut.time - BINLOG_CLOCK_SLACK:
        return f"needed for PITR from {cut.backup_id} to now"
    seq = _binlog_seq(b.name)
    start = cut.files.get((b.server_uuid, seq[0])) if seq else None
    if seq and start and seq[1] >= start[0]:
        return f"needed for PITR from {start[1]} (its binlog position is in or before this file)"
    return None


def _debris_items(ctx: _Context, backups: _Backups) -> list[PlanItem]:
    items = []
    unreadable = set(backups.unreadable)
    for bid, infos in sorted(ctx.dirs.items()):
        if bid in backups.by_id or bid in unreadable:
            continue
        if not bid:
            items += [
                _dir_item("other", i.key, "not inside a backup directory; left alone", [i]) for i in infos
            ]
            continue
        item = _dir_item("debris", bid, "", infos)
        item.reason = _debris_keep_reason(ctx, infos, item.created) or ""
        if not item.reason:
            item.action = "delete"
            item.early_delete_usd = sum(
                early_deletion_usd(i.storage_class, i.size, _utc_or_none(i.last_modified), ctx.now)
                for i in infos
            )
            item.reason = (
                f"no manifest: left by a failed or interrupted run, last written "
                f"{ctx.age_days(item.created) or 0:.1f} days ago" + _charge_note(item.early_delete_usd)
            )
        items.append(item)
    return items


def _debris_keep_reason(ctx: _Context, infos: list[ObjectInfo], newest: datetime | None) -> str | None:
    policy = ctx.policy
    if not policy.configured:
        return NOT_CONFIGURED
    if lock := ctx.locked([i.key for i in infos]):
        return lock
    if newest is None or (ctx.age_days(newest) or 0.0) < policy.debris_grace_days:
        return f"no manifest, but younger than debris_grace_days ({policy.debris_grace_days:g}): may be uploading"
    return None


def _dir_item(kind: Kind, name: str, reason: str, infos: list[ObjectInfo]) -> PlanItem:
    """An item for listed objects; `created` is the newest upload (None if any is unknown)."""
    times = [i.last_modified for i in infos]
    newest = None if any(t is None for t in times) else max(_utc(t) for t in times if t)
    classes = sorted({i.storage_class for i in infos})
    keys = tuple(sorted(i.key for i in infos))
    return PlanItem(kind, name, "keep", reason, keys, sum(i.size for i in infos), ",".join(classes), newest)


def _charge_note(usd: float) -> str:
    return f"; early deletion charge about ${usd:.2f}" if usd >= 0.005 else ""


def _utc(when: datetime) -> datetime:
    """Manifests and listings carry UTC; a naive time is taken as UTC."""
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _utc_or_none(when: datetime | None) -> datetime | None:
    return None if when is None else _utc(when)


def plan_table(plan: Plan, limit: int = 500) -> str:
    """The plan as a text table: deletions first, then what is kept; at most `limit` rows."""
    rows = sorted(plan.items, key=lambda i: (i.action != "delete", i.kind, i.name))
    header = (
        f"{'ACTION':6} {'KIND':6} {'NAME':52} {'SIZE':>14} {'CLASS':12} {'AGE d':>7} {'EARLY $':>8}  REASON"
    )
    lines = [header]
    for item in rows[:limit]:
        age = f"{(plan.now - item.created) / DAY:.1f}" if item.created else "?"
        lines.append(
            f"{item.action:6} {item.kind:6} {item.name:52} {item.size:>14,} {item.storage_class:12} "
            f"{age:>7} {item.early_delete_usd:>8.2f}  {item.reason}"
        )
    if len(rows) > limit:
        lines.append(f"... {len(rows) - limit} more row(s) not shown")
    s = plan.summary()
    lines.append(
        f"total: {s['counts']}; delete {s['delete_bytes']:,} bytes, keep {s['keep_bytes']:,} bytes; "
        f"early deletion charges about ${s['early_delete_usd']:.2f}"
    )
    return "\n".join(lines)
