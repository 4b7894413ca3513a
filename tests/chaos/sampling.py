"""Where the chaos checker restores to (issue 39 item 2): pure choices, no I/O, unit-tested.

A PITR window of a cluster is a chain's span of the source's domain-0 sequence numbers, from its
full's GTID to the next full's (the newest: to what is shipped). Bugs live at its edges, so the
candidates are, besides uniform ones:

- the window's ends (the full's own GTID, the one after it, the last two);
- the first and last transaction of each binlog shipped in it, and of the open binlog (what its
  partial manifest holds so far);
- the transactions around each moment the ledger or the fault log knows of: a restart of a
  server, a re-seed (the last transaction acknowledged before it and the next one).

`select` keeps `budget` of them, one of each reason in turn (so a small budget still meets every
kind of edge), uniform ones last. Some become `--to-position` points (the end of that transaction
in its binlog, found by the checker from the binlog itself) and `--to-time` points are drawn from
the ledger's acknowledged rows: a whole second that no acknowledged transaction straddles, so what
must be restored follows from the ledger alone (binlogs stamp whole seconds and `--to-time T`
stops before the first event stamped at or after T: every row acknowledged before T is in, every
row started at or after T is out).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace


@dataclass(frozen=True, order=True)
class Point:
    seq: int  # domain-0 sequence number the restore must stop at (a --to-time point: the least)
    why: str  # "window start", "binlog first", "restart", "uniform", ...
    kind: str = "gtid"  # "gtid", "position" or "time"
    at: int = 0  # a --to-time point: the epoch second


@dataclass(frozen=True)
class Row:
    """One acknowledged transaction of the ledger's own load."""

    started: float  # before the INSERT was sent (the row's own `t`)
    acked: float  # COMMIT returned
    seq: int
    n: int
    v: str


@dataclass(frozen=True)
class Binlog:
    name: str
    first: int
    last: int
    open: bool = False  # the open binlog: its partial manifest


def candidates(
    low: int, end: int, binlogs: Iterable[Binlog], moments: Iterable[tuple[int, str]]
) -> list[Point]:
    """Every edge of the window [low, end] (low: its full's seq, or past where the reference stands)."""
    if end < low:
        return []
    out = [Point(low, "window start"), Point(low + 1, "window start"), Point(end - 1, "window end"),
           Point(end, "window end")]  # fmt: skip
    for b in binlogs:
        tag = "open binlog" if b.open else "binlog"
        out += [Point(b.first, f"{tag} first"), Point(b.last, f"{tag} last")]
    for seq, why in moments:
        out += [Point(seq, why), Point(seq + 1, why)]
    return sorted({p for p in out if low <= p.seq <= end})


def select(rng: random.Random, edges: Sequence[Point], low: int, end: int, budget: int) -> list[Point]:
    """`budget` points: round robin over the reasons (in a random order each round, a random point
    of each), then uniform points for what is left; no seq twice."""
    if end < low or budget <= 0:
        return []
    groups: dict[str, list[Point]] = {}
    for p in (p for p in edges if low <= p.seq <= end):
        groups.setdefault(p.why, []).append(p)
    chosen: dict[int, Point] = {}
    while len(chosen) < budget and any(groups.values()):
        met: set[str] = set()  # the reasons a point of this round stands for (an end may be a binlog's)
        for why in rng.sample(sorted(groups), len(groups)):
            groups[why] = [q for q in groups[why] if q.seq not in chosen]
            if why in met or not groups[why] or len(chosen) >= budget:
                continue
            p = rng.choice(groups[why])
            chosen[p.seq] = p
            met |= {w for w, members in groups.items() if any(q.seq == p.seq for q in members)}
    free = [s for s in range(low, end + 1) if s not in chosen] if end - low < 100_000 else []
    for s in rng.sample(free, min(len(free), budget - len(chosen))):
        chosen[s] = Point(s, "uniform")
    return sorted(chosen.values())


def as_positions(rng: random.Random, points: Sequence[Point], share: float) -> list[Point]:
    """About `share` of the points (at least one when there are two or more) checked by position."""
    if len(points) < 2:
        return list(points)
    k = max(1, round(len(points) * share))
    pick = set(rng.sample(range(len(points)), k))
    return [replace(p, kind="position") if i in pick else p for i, p in enumerate(points)]


def clean_second(rows: Sequence[Row], t: float) -> int | None:
    """The whole second nearest `t` (after it first) that no acknowledged row straddles (started
    before it, acknowledged at or after it): every row's outcome is certain. None within 30 s."""
    for step in range(0, 31):
        for at in (math.ceil(t) + step, math.ceil(t) - step - 1):
            if not any(r.started < at <= r.acked for r in rows):
                return at
    return None


def time_points(rng: random.Random, rows: Sequence[Row], low: int, end: int,
                moments: Iterable[tuple[float, str]], count: int, not_before: float = 0.0) -> list[Point]:  # fmt: skip
    """`count` --to-time points whose outcome lies in the window [low, end]: the moments first (a
    restart, a re-seed), then uniform times. A point's seq is the newest acknowledged row before it;
    the first row after it must lie within `end` (all it needs is shipped). No point lies before
    `not_before`, the window's full's end: a --to-time PITR starts from a backup finished by then."""
    inside = [r for r in rows if low <= r.seq <= end]
    if count <= 0 or len(inside) < 2:
        return []
    t0, t1 = max(inside[0].acked, not_before), inside[-1].started
    wanted = [(t, why) for t, why in moments if t0 < t < t1]
    rng.shuffle(wanted)
    wanted += [(rng.uniform(t0, t1), "uniform") for _ in range(count)]
    out: dict[int, Point] = {}
    for t, why in wanted:
        at = clean_second(rows, t)
        if at is None or at < not_before or at in {p.at for p in out.values()}:
            continue
        before, after = expected_rows(rows, at)
        if not before or not after or before[-1].seq < low or after[0].seq > end:
            continue
        out.setdefault(before[-1].seq, Point(before[-1].seq, why, "time", at))
        if len(out) == count:
            break
    return sorted(out.values())


def expected_rows(rows: Sequence[Row], at: int) -> tuple[list[Row], list[Row]]:
    """The rows a `--to-time at` restore must hold (acknowledged before `at`) and must not (started
    at or after it); a row straddling `at` is in neither."""
    return [r for r in rows if r.acked < at], [r for r in rows if r.started >= at]


def rows_until(rows: Sequence[Row], seq: int) -> tuple[list[Row], list[Row]]:
    """The rows a restore to `seq` must hold and must not."""
    return [r for r in rows if r.seq <= seq], [r for r in rows if r.seq > seq]


def compare_rows(got: dict[int, str], must: Sequence[Row], must_not: Sequence[Row]) -> list[str]:
    """What the restored ledger table gets wrong: a row missing or changed, a row it must not hold.
    A row the ledger never saw acknowledged (its COMMIT's answer was lost) may be there or not."""
    out = []
    missing = [r.n for r in must if r.n not in got]
    changed = [r.n for r in must if r.n in got and got[r.n] != r.v]
    extra = [r.n for r in must_not if r.n in got]
    if missing:
        out.append(f"{len(missing)} acknowledged row(s) missing (n {missing[:3]}...)")
    if changed:
        out.append(f"{len(changed)} row(s) changed (n {changed[:3]}...)")
    if extra:
        out.append(f"{len(extra)} row(s) from after the point (n {extra[:3]}...)")
    return out


_HEADER = re.compile(r"^#\d{6}\s+\S+\s+server id \d+\s+end_log_pos (\d+)\s.*?\t(\S+)(?: (\S+))?")
_AT = re.compile(r"^# at (\d+)$")
# Events of the file, not of a transaction ("Gtid list", "Binlog checkpoint", "Rotate to ...", "Stop").
_NOT_IN_A_TRANSACTION = ("Rotate", "Stop", "Binlog", "Gtid", "Start:", "Format_desc")


def transaction_ends(listing: str) -> dict[int, int]:
    """`mariadb-binlog` text of one binlog -> {domain-0 seq: the position right after its last
    event} (events before it: the transaction and all before it)."""
    ends: dict[int, int] = {}
    current: int | None = None
    for line in listing.splitlines():
        m = _HEADER.match(line)
        if not m:
            continue
        end, kind, arg = int(m.group(1)), m.group(2), m.group(3) or ""
        if kind == "GTID":
            domain, _server, seq = arg.split("-")
            current = int(seq) if domain == "0" else None
            if current is not None:
                ends[current] = end
        elif current is not None and not kind.startswith(_NOT_IN_A_TRANSACTION):
            ends[current] = max(ends[current], end)
    return ends
