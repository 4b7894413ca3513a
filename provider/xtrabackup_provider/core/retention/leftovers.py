"""Retention of what is not a backup: binlogs for PITR, debris of failed runs, unreadable
manifests, stray objects (the rules are in core/retention/plan.py's module doc).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ..storage.base import LEGAL_HOLD, ObjectInfo
from .model import (
    BINLOG_CLOCK_SLACK,
    DAY,
    NOT_CONFIGURED,
    BinlogItem,
    Kind,
    PlanItem,
    RetentionPolicy,
    charge_note,
    early_deletion_usd,
    utc,
    utc_or_none,
)


@dataclass
class Context:
    """What every rule reads: the policy, the clock, the listing by directory, known locks."""

    policy: RetentionPolicy
    now: datetime
    prefix: str  # <prefix>/<cluster>/<host>/backups/
    dirs: dict[str, list[ObjectInfo]]  # backup id -> objects listed in its directory
    locks: dict[str, datetime]
    leases: dict[str, str] = field(default_factory=dict)  # item name -> the read lease keeping it

    def locked(self, keys: Sequence[str], known: Sequence[datetime | None] = ()) -> str | None:
        """The Object Lock reason if any key (or a known retain-until) is still retained."""
        dates = [self.locks.get(k) for k in keys] if self.locks else []
        until = [utc(d) for d in (*dates, *known) if d is not None and utc(d) > self.now]
        if not until:
            return None
        if max(until) == LEGAL_HOLD:
            return "Object Lock legal hold: kept until the hold is released"
        return f"Object Lock retains it until {max(until):%Y-%m-%d %H:%M}Z"

    def age_days(self, when: datetime | None) -> float | None:
        return None if when is None else (self.now - utc(when)) / DAY


def listing_dirs(listing: Sequence[ObjectInfo], prefix: str) -> dict[str, list[ObjectInfo]]:
    """Listed objects by backup directory ("" holds those outside any backup directory)."""
    dirs: dict[str, list[ObjectInfo]] = defaultdict(list)
    start = len(prefix)
    for info in listing:
        key = info.key
        if not prefix or not key.startswith(prefix):
            raise ValueError(f"listed object {key!r} is not under the backups prefix {prefix!r}")
        slash = key.find("/", start)
        dirs[key[start:slash] if slash > 0 else ""].append(info)
    return dirs


@dataclass
class Cut:
    """Where the binlogs that must stay begin."""

    kept: bool  # is any backup kept at all?
    time: datetime | None = None  # the oldest kept backup's start; None with kept: unknown, keep all
    backup_id: str = ""
    files: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)  # (uuid, base) -> (seq, id)


def binlog_seq(name: str) -> tuple[str, int] | None:
    base, _, number = name.rpartition(".")
    return (base, int(number)) if base and number.isdigit() else None


def unreadable_items(ctx: Context, unreadable: Sequence[str]) -> list[PlanItem]:
    """Directories whose manifest.json the caller could not read: kept whole."""
    items = []
    for bid in unreadable:
        infos = ctx.dirs[bid]
        reason = "its manifest.json cannot be read: fix or remove it by hand"
        if ctx.policy.configured and (lock := ctx.locked([i.key for i in infos])):
            reason = lock
        items.append(_dir_item("backup", bid, reason, infos))
    return items


def binlog_items(binlogs: Sequence[BinlogItem], ctx: Context, cut: Cut) -> list[PlanItem]:
    rule = _BinlogRule(ctx, cut)
    items = []
    for b in binlogs:
        keys, last = (*b.marker_keys, b.key, *b.segment_keys), utc(b.last_event_time)
        name, markers = f"{b.server_uuid}/{b.name}", len(b.marker_keys)
        if reason := rule.keep_reason(b, keys, last):
            items.append(
                PlanItem("binlog", name, "keep", reason, keys, b.size, b.storage_class, last, markers)
            )
            continue
        charge = early_deletion_usd(b.storage_class, b.size, last, ctx.now)
        reason = rule.delete_reason + charge_note(charge)
        items.append(
            PlanItem(
                "binlog", name, "delete", reason, keys, b.size, b.storage_class, last, markers, 0, charge
            )
        )
    return items


class _BinlogRule:
    """Which binlogs PITR still needs (see core/retention/plan.py); the thresholds are worked out once."""

    def __init__(self, ctx: Context, cut: Cut) -> None:
        self.ctx, self.cut = ctx, cut
        policy = ctx.policy
        self.young_after = ctx.now - policy.min_age_days * DAY
        self.young = f"younger than min_age_days ({policy.min_age_days:g})"
        self.needed_from = cut.time - BINLOG_CLOCK_SLACK if cut.time else None
        self.needed = f"needed for PITR from {cut.backup_id} to now"
        since = f" ({cut.time:%Y-%m-%d %H:%M}Z)" if cut.time else ""
        self.delete_reason = (
            f"ends before the oldest kept backup {cut.backup_id} started{since}: not needed for PITR"
        )

    def keep_reason(self, b: BinlogItem, keys: Sequence[str], last: datetime) -> str | None:
        ctx, cut = self.ctx, self.cut
        if not ctx.policy.configured:
            return NOT_CONFIGURED
        if (ctx.locks or b.lock_until) and (lock := ctx.locked(keys, [b.lock_until])):
            return lock
        if ctx.leases and (leased := ctx.leases.get(f"{b.server_uuid}/{b.name}")):
            return leased
        if last > self.young_after:
            return self.young
        if not cut.kept:
            return "no backup is kept to replay it onto; kept until one is"
        if self.needed_from is None:
            return f"kept backup {cut.backup_id} has an unreadable manifest: every binlog is kept"
        if last >= self.needed_from:
            return self.needed
        seq = binlog_seq(b.name)
        start = cut.files.get((b.server_uuid, seq[0])) if seq else None
        if seq and start and seq[1] >= start[0]:
            return f"needed for PITR from {start[1]} (its binlog position is in or before this file)"
        return None


def debris_items(ctx: Context, registered: Collection[str]) -> list[PlanItem]:
    """Listed directories that are no backup (`registered`: ids with a manifest, read or not)."""
    items = []
    for bid, infos in sorted(ctx.dirs.items()):
        if bid in registered:
            continue
        if not bid:
            items += [
                _dir_item("other", i.key, "not inside a backup directory; left alone", [i]) for i in infos
            ]
            continue
        item = _dir_item("debris", bid, "", infos)
        item.reason = _debris_keep_reason(ctx, bid, infos, item.created) or ""
        if not item.reason:
            item.action = "delete"
            item.early_delete_usd = sum(
                early_deletion_usd(i.storage_class, i.size, utc_or_none(i.last_modified), ctx.now)
                for i in infos
            )
            item.reason = (
                f"no manifest: left by a failed or interrupted run, last written "
                f"{ctx.age_days(item.created) or 0:.1f} days ago" + charge_note(item.early_delete_usd)
            )
        items.append(item)
    return items


def _debris_keep_reason(
    ctx: Context, bid: str, infos: list[ObjectInfo], newest: datetime | None
) -> str | None:
    policy = ctx.policy
    if not policy.configured:
        return NOT_CONFIGURED
    if lock := ctx.locked([i.key for i in infos]):
        return lock
    if leased := ctx.leases.get(bid):
        return leased  # the data of a backup whose manifest went after a restore leased it
    if newest is None or (ctx.age_days(newest) or 0.0) < policy.debris_grace_days:
        return f"no manifest, but younger than debris_grace_days ({policy.debris_grace_days:g}): may be uploading"
    return None


def _dir_item(kind: Kind, name: str, reason: str, infos: list[ObjectInfo]) -> PlanItem:
    """An item for listed objects; `created` is the newest upload (None if any is unknown)."""
    times = [i.last_modified for i in infos]
    newest = None if any(t is None for t in times) else max(utc(t) for t in times if t)
    classes = sorted({i.storage_class for i in infos})
    keys = tuple(sorted(i.key for i in infos))
    return PlanItem(kind, name, "keep", reason, keys, sum(i.size for i in infos), ",".join(classes), newest)
