"""Retention's inputs and outputs: the policy, binlog items, the plan, storage charges.

The planner that fills a Plan is core/retention/plan.py; applying one is core/retention/apply.py.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..storage.base import GiB

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
    """One backup, binlog or leftover directory: keep or delete, why, and the keys to delete."""

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
    """Every item of one host with its verdict, as of `now` under `policy`."""

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
    """What deleting now adds for the class's minimum storage duration: remaining days / 30 *
    GiB * price per GB-month (core/retention/plan.py's module doc says how good the estimate is)."""
    rule = MIN_STORAGE.get(storage_class)
    if rule is None or created is None:
        return 0.0
    min_days, price = rule
    remaining = min(min_days, min_days - (now - created) / DAY)
    return size / GiB * price * remaining / 30 if remaining > 0 else 0.0


def charge_note(usd: float) -> str:
    return f"; early deletion charge about ${usd:.2f}" if usd >= 0.005 else ""


def utc(when: datetime) -> datetime:
    """Manifests and listings carry UTC; a naive time is taken as UTC."""
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def utc_or_none(when: datetime | None) -> datetime | None:
    return None if when is None else utc(when)


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
