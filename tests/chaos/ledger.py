"""The checker's own books (issue 39): what was written, what must survive, what was lost.

Written by the load generator (LoadWriter: a transaction a second on every source, each
acknowledged one with its GTID, table and what it wrote) and the checker (every backup and binlog
manifest it ever saw, with when it first saw it, the sha256 of the manifest object and of each
object it names; what vanished), as JSON lines in `<run dir>/ledger.jsonl`. Nothing here imports
the product or asks it anything: the judgements below are made from the ledger alone.

- retention_floor(): what retention had to keep at a moment, from the fleet's policy
  (keep_last_chains, the PITR window and min age: fleet.py's `retention`) and every backup the
  ledger saw. It is the least the product may keep: computed with everything seen up to the
  checker's moment, which is at or after any retention run that deleted something, it only
  shrinks as time passes (newer chains push older ones out, the window moves on). A backup gone
  from the store while it was in the floor is "backup lost".
- recoverable(): the GTID ranges (domain-0 sequence numbers of the source) the store can restore:
  from each backup whose chain is whole, on through the binlogs its own server shipped without a
  hole. unrecoverable() is what the source acknowledged, from the oldest backup the floor keeps to
  what it acknowledged `SHIP_BOUND` ago, that is not in it: each range with the fault that
  predicts it (a re-seed cuts the backed-up server's history) or "lost".
- lag(): how long the oldest acknowledged transaction not shipped has waited: shipping that
  stopped (past SHIP_BOUND with no fault on that cluster that can stop it) is named.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sampling import Row

DAY = 86400.0
SHIP_BOUND = 8 * 60.0  # an acknowledged transaction is shipped within this (the fleet alerts at 6 min)
# Fault kinds that can stop a cluster's binlog shipping for a while (the follower's worker, its
# server, its endpoint, its gpg), and those that cut the backed-up server's history (a re-seed:
# what the old server had not shipped is gone with its datadir).
STOPS_SHIPPING = frozenset(
    {
        "kill_worker",
        "kill_tool",
        "restart_db",
        "reseed_replica",
        "s3_partition",
        "restart_s3",
        "pause_shipper",
    }
)
CUTS_HISTORY = frozenset({"reseed_replica"})
# How long after a fault ends its effect on shipping may last: the follower's next scheduled run
# (every 5 minutes, 4 of following) and the bound itself.
AFTER_FAULT = 5 * 60.0 + SHIP_BOUND


@dataclass(frozen=True)
class Policy:
    keep_last_chains: int
    pitr_days: float = 0.0
    min_age_days: float = 0.0

    @classmethod
    def of(cls, retention: dict[str, Any]) -> Policy:
        return cls(int(retention["keep_last_chains"]), float(retention.get("pitr_days") or 0),
                   float(retention.get("min_age_days") or 0))  # fmt: skip


@dataclass(frozen=True)
class Backup:
    id: str
    kind: str
    parent: str | None
    root: str
    seq: int  # domain-0 sequence number of its GTID (0: none recorded)
    server: str
    finished: float  # epoch seconds, the manifest's finished_at


@dataclass(frozen=True)
class Span:
    """One stored binlog (complete or the open one's partial) in domain-0 sequence numbers."""

    server: str
    name: str
    first: int
    last: int


@dataclass(frozen=True)
class FaultSeen:
    kind: str
    clusters: tuple[str, ...]
    t0: float
    t1: float
    effect: bool = True  # it found a victim and its effect showed
    on_shipping: bool = True  # its effect reached the cluster's binlog shipping (stops_shipping())


def stops_shipping(kind: str, target: str, note: str, victims: Iterable[Sequence[str]]) -> bool:
    """Whether a fault's effect reached binlog shipping: a killed worker or tool under a shipping
    task, a restart of the backed-up replica (r1), a partition of the primary endpoint, a re-seed."""
    if kind in ("kill_worker", "kill_tool"):
        return any("binlog_shipping" in v[0] and v[1] == "ship_binlogs" for v in victims if len(v) > 1)
    if kind == "restart_db":
        return target.split(" ")[0].endswith("-r1")
    if kind in ("s3_partition", "restart_s3"):
        return note.split(":")[0] == "primary"
    return kind in STOPS_SHIPPING


@dataclass
class Finding:
    what: str  # "backup lost", "binlog lost", "unrecoverable", "window", "shipping stopped"
    cluster: str
    text: str
    cause: str = "lost"  # the fault that predicts it, or "lost"
    t: float = 0.0
    transactions: int = 0  # how many acknowledged transactions it cost (unrecoverable ranges)
    subject: str = ""  # what it is about: "<store> <cluster> <backup id>" for a backup lost


# -- pure judgements --------------------------------------------------------------------------------


def retention_floor(backups: Iterable[Backup], now: float, policy: Policy) -> set[str]:
    """The ids retention must keep at `now`: the newest keep_last_chains chains whole (ordered by
    their newest backup), every backup finished inside the PITR window and the newest one before
    it, every backup younger than min_age_days, and every ancestor of those."""
    by_id = {b.id: b for b in backups}
    keep: set[str] = set()
    roots: list[str] = []
    for b in sorted(by_id.values(), key=lambda b: b.id, reverse=True):
        if b.root not in roots:
            roots.append(b.root)
    newest = set(roots[: policy.keep_last_chains])
    keep |= {b.id for b in by_id.values() if b.root in newest}
    if policy.pitr_days > 0:
        start = now - policy.pitr_days * DAY
        keep |= {b.id for b in by_id.values() if b.finished >= start}
        before = [b for b in by_id.values() if b.finished < start]
        if before:
            keep.add(max(before, key=lambda b: (b.finished, b.id)).id)
    young = now - policy.min_age_days * DAY
    keep |= {b.id for b in by_id.values() if b.finished > young}
    for bid in list(keep):
        parent = by_id[bid].parent
        while parent and parent in by_id and parent not in keep:
            keep.add(parent)
            parent = by_id[parent].parent
    return keep


def binlogs_needed(floor: Iterable[Backup], spans: Iterable[Span]) -> set[tuple[str, str]]:
    """(server, name) of the binlogs retention must keep with `floor`: every one that holds a
    transaction after the oldest floor backup's GTID (a replay from it to now needs them)."""
    seqs = [b.seq for b in floor if b.seq]
    if not seqs:
        return set()
    low = min(seqs)
    return {(s.server, s.name) for s in spans if s.last > low}


def merge(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, overlapping or adjacent ranges joined."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(r for r in ranges if r[0] <= r[1]):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def recoverable(points: Iterable[tuple[int, str]], spans: Iterable[Span]) -> list[tuple[int, int]]:
    """What the store restores: from each (seq, server) of a backup whose chain is whole, on
    through the binlogs that server shipped without a hole."""
    by_server: dict[str, list[tuple[int, int]]] = {}
    for s in spans:
        if s.first and s.last:
            by_server.setdefault(s.server, []).append((s.first, s.last))
    covered = {server: merge(r) for server, r in by_server.items()}
    out = []
    for seq, server in points:
        if not seq:
            continue
        reach = seq
        for lo, hi in covered.get(server, []):
            if lo <= reach + 1 <= hi + 1 and hi > reach:
                reach = hi
        out.append((seq, reach))
    return merge(out)


def subtract(want: tuple[int, int], have: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    lo, hi = want
    out = []
    for a, b in merge(have):
        if b < lo or a > hi:
            continue
        if a > lo:
            out.append((lo, a - 1))
        lo = max(lo, b + 1)
    if lo <= hi:
        out.append((lo, hi))
    return out


def acked_at(tx: Sequence[tuple[float, int]], t: float) -> int:
    """The newest sequence number the source had acknowledged at `t` (tx: (time, seq), by time)."""
    i = bisect_right([x[0] for x in tx], t)
    return max((s for _t, s in tx[:i]), default=0)


def acked_when(tx: Sequence[tuple[float, int]], seq: int) -> float | None:
    """When the source first acknowledged a transaction at or past `seq`."""
    return next((t for t, s in tx if s >= seq), None)


def lag(tx: Sequence[tuple[float, int]], shipped: int, now: float) -> float:
    """How long the oldest acknowledged transaction past `shipped` has waited at `now` (0: none)."""
    i = bisect_left([x[0] for x in tx], now + 1e-9)
    waiting = next((t for t, s in tx[:i] if s > shipped), None)
    return 0.0 if waiting is None else now - waiting


def stall_to_judge(judged_until: float | None, behind: float, now: float) -> float | None:
    """Where the next judgement of a shipping stall begins, or None while none is due. A stall is
    judged when first seen (from when its oldest unshipped transaction was acknowledged) and again
    every SHIP_BOUND while it lasts, over what came after the last judgement: so a fault explains
    only the part of a stall its effect can reach, and shipping that never resumes after it is
    named, not excused by the fault that began it."""
    if behind <= SHIP_BOUND:
        return None
    if judged_until is None:
        return now - behind
    return judged_until if now - judged_until >= SHIP_BOUND else None


def blame(cluster: str, t0: float, t1: float, faults: Iterable[FaultSeen], kinds: frozenset[str],
          after: float = AFTER_FAULT) -> str:  # fmt: skip
    """The fault of `kinds` on `cluster` that had an effect and overlaps [t0, t1] (its effect lasting
    `after` past its end), named; else "lost". Of several, the latest to begin: the nearest cause
    (seed 120533: three re-seeds overlapped a range, and the first, 15 minutes before it, was named)."""
    for f in sorted(faults, key=lambda f: f.t0, reverse=True):
        if f.kind not in kinds or cluster not in f.clusters or not f.effect:
            continue
        if kinds & STOPS_SHIPPING and f.kind not in CUTS_HISTORY and not f.on_shipping:
            continue  # e.g. a killed worker that ran a restore test: shipping went on
        if f.t0 <= t1 and t0 <= f.t1 + after:
            return f"{f.kind} at {_hms(f.t0)}"
    return "lost"


def unrecoverable(cluster: str, tx: Sequence[tuple[float, int]], start: int, end: int,
                  have: Sequence[tuple[int, int]], faults: Iterable[FaultSeen],
                  start_gone: bool = False) -> list[Finding]:  # fmt: skip
    """Each range of [start, end] the store cannot restore, with its cause or "lost". A re-seed
    predicts a range that begins after the backup it starts from (what the old server had not
    shipped); a range from `start` whose backup is gone (`start_gone`) is lost whatever else
    happened then."""
    out = []
    faults = list(faults)
    for lo, hi in subtract((start, end), have):
        t0, t1 = acked_when(tx, lo) or 0.0, acked_when(tx, hi) or time.time()
        cause = (
            "lost"
            if start_gone and lo == start
            else blame(cluster, t0 - SHIP_BOUND, t1, faults, CUTS_HISTORY)
        )
        out.append(Finding("unrecoverable", cluster, f"{cluster}: seq {lo}..{hi} ({hi - lo + 1} transaction(s), "
                           f"acknowledged {_hms(t0)}..{_hms(t1)}) cannot be restored", cause, t1, hi - lo + 1))  # fmt: skip
    return out


def _hms(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def _epoch(value: Any) -> float:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def _seq(gtid: str | None) -> int:
    for part in (gtid or "").split(","):
        bits = part.strip().split("-")
        if len(bits) == 3 and bits[0] == "0":
            return int(bits[2])
    return 0


def backup_of(m: dict[str, Any]) -> Backup:
    bid = str(m["backup_id"])
    return Backup(bid, str(m.get("kind")), m.get("parent_id"), str(m.get("chain_root") or bid),
                  _seq(m.get("gtid")), str(m.get("server_uuid")), _epoch(m["finished_at"]))  # fmt: skip


def span_of(m: dict[str, Any]) -> Span:
    return Span(
        str(m.get("server_uuid")), str(m.get("name")), _seq(m.get("gtid_first")), _seq(m.get("gtid_last"))
    )


# -- the books --------------------------------------------------------------------------------------


@dataclass
class Ledger:
    """The JSON-lines file and what it holds in memory. Stores are "primary" and "offsite"."""

    path: Path
    policies: dict[str, Policy]  # store -> its retention
    backups: dict[tuple[str, str, str], Backup] = field(default_factory=dict)  # (store, cluster, id)
    spans: dict[tuple[str, str, str], Span] = field(
        default_factory=dict
    )  # (store, cluster, server/name) complete
    gone: set[tuple[str, str, str]] = field(default_factory=set)
    tx: dict[str, list[tuple[float, int]]] = field(default_factory=dict)  # cluster -> (time, seq)
    rows: dict[str, list[Row]] = field(default_factory=dict)  # cluster -> the load's rows, acknowledged
    manifest_sha: dict[str, str] = field(default_factory=dict)  # manifest key -> sha256 last recorded
    findings: list[Finding] = field(default_factory=list)
    mutex: threading.Lock = field(default_factory=threading.Lock)

    def write(self, record: dict[str, Any]) -> None:
        with self.mutex, self.path.open("a") as fh:
            fh.write(json.dumps(record, default=str) + "\n")

    def acknowledged(self, cluster: str, t: float, gtid: str, table: str, wrote: dict[str, Any]) -> None:
        self.write({"type": "tx", "t": t, "cluster": cluster, "gtid": gtid, "table": table, "wrote": wrote})
        with self.mutex:
            self.tx.setdefault(cluster, []).append((t, _seq(gtid)))
            if "t" in wrote:  # the row's own time: when its INSERT was sent (sampling.py's --to-time)
                self.rows.setdefault(cluster, []).append(
                    Row(float(wrote["t"]), t, _seq(gtid), int(wrote["n"]), str(wrote["v"]))
                )

    def rows_of(self, cluster: str) -> list[Row]:
        with self.mutex:
            return list(self.rows.get(cluster, []))

    def acked(self, cluster: str) -> list[tuple[float, int]]:
        with self.mutex:
            return list(self.tx.get(cluster, []))

    def saw_backup(self, store: str, cluster: str, m: dict[str, Any], key: str, sha: str, now: float) -> None:
        b = backup_of(m)
        if (store, cluster, b.id) in self.backups:
            return
        self.backups[(store, cluster, b.id)] = b
        objects = {o["key"]: o.get("sha256") for o in m.get("objects", [])}
        self.write({"type": "backup", "store": store, "cluster": cluster, "first_seen": now, "manifest": key,
                    "manifest_sha256": sha, "objects": objects, **asdict(b)})  # fmt: skip

    def saw_binlog(self, store: str, cluster: str, m: dict[str, Any], key: str, sha: str, now: float) -> None:
        if self.manifest_sha.get(key) == sha:
            return
        self.manifest_sha[key] = sha
        s = span_of(m)
        if m.get("complete"):
            self.spans[(store, cluster, f"{s.server}/{s.name}")] = s
        objects = {seg["object"]["key"]: seg["object"].get("sha256") for seg in m.get("segments", [])}
        self.write({"type": "binlog", "store": store, "cluster": cluster, "first_seen": now, "manifest": key,
                    "manifest_sha256": sha, "complete": bool(m.get("complete")), "objects": objects, **asdict(s)})  # fmt: skip

    def chains(self, store: str, cluster: str) -> list[Backup]:
        return [b for (s, c, _), b in self.backups.items() if s == store and c == cluster]

    def vanished(
        self, store: str, cluster: str, present: set[str], complete: set[str], now: float
    ) -> list[Finding]:
        """What the store no longer holds that the ledger saw: a backup retention had to keep is
        "backup lost", a complete binlog a floor backup needs is "binlog lost"; others were
        retention's to delete (recorded as gone)."""
        out = []
        seen = self.chains(store, cluster)
        floor = retention_floor(seen, now, self.policies[store])
        needed = binlogs_needed([b for b in seen if b.id in floor], self.spans_of(store, cluster))
        for b in seen:
            if b.id in present or (store, cluster, b.id) in self.gone:
                continue
            self.gone.add((store, cluster, b.id))
            lost = b.id in floor
            self.write({"type": "gone", "what": "backup", "store": store, "cluster": cluster, "id": b.id, "t": now,
                        "in_floor": lost})  # fmt: skip
            if lost:
                out.append(Finding("backup lost", cluster, f"{store} {cluster}: backup {b.id} is gone from the store, "
                                   "but retention had to keep it (" + _why(b, seen, now, self.policies[store]) + ")", t=now,
                                   subject=f"{store} {cluster} {b.id}"))  # fmt: skip
        for (s, c, name), span in list(self.spans.items()):
            if s != store or c != cluster or name in complete or (s, c, "binlog:" + name) in self.gone:
                continue
            self.gone.add((s, c, "binlog:" + name))
            lost = (span.server, span.name) in needed
            self.write({"type": "gone", "what": "binlog", "store": store, "cluster": cluster, "id": name, "t": now,
                        "in_floor": lost})  # fmt: skip
            if lost:
                out.append(Finding("binlog lost", cluster, f"{store} {cluster}: binlog {name} (seq {span.first}.."
                                   f"{span.last}) is gone, but a backup retention keeps needs it", t=now))  # fmt: skip
        self._record(out)
        return out

    def spans_of(self, store: str, cluster: str) -> list[Span]:
        return [s for (st, c, _), s in self.spans.items() if st == store and c == cluster]

    def _record(self, found: list[Finding]) -> None:
        for f in found:
            self.findings.append(f)
            self.write({"type": "finding", **asdict(f)})

    def finding(self, f: Finding) -> None:
        self._record([f])


def _why(b: Backup, seen: list[Backup], now: float, policy: Policy) -> str:
    roots = []
    for x in sorted(seen, key=lambda x: x.id, reverse=True):
        if x.root not in roots:
            roots.append(x.root)
    rank = roots.index(b.root) + 1 if b.root in roots else 0
    if rank and rank <= policy.keep_last_chains:
        return f"its chain {b.root} is #{rank} of the newest {policy.keep_last_chains}"
    return f"the PITR window of {policy.pitr_days:g} days or min age {policy.min_age_days:g} days holds it"


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class LoadWriter:
    """The ledger's own load: one transaction a second on each source (`chaos.ledger`), each
    recorded once the source acknowledged it (COMMIT returned), with its GTID (@@last_gtid) and the
    row it wrote. A source that is down acknowledges nothing: nothing is recorded."""

    TABLE = "chaos.ledger"

    def __init__(self, ledger: Ledger, sources: dict[str, Any], every: float = 1.0) -> None:
        self.ledger, self.sources, self.every = ledger, sources, every
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(c,), name=f"ledger-{c}", daemon=True)
                        for c in sources]  # fmt: skip

    def start(self) -> None:
        for server in self.sources.values():
            server.query(f"CREATE TABLE IF NOT EXISTS {self.TABLE} (n BIGINT PRIMARY KEY, v CHAR(64), t DOUBLE) "
                         "ENGINE=InnoDB")  # fmt: skip
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _run(self, cluster: str) -> None:
        server, conn, n = self.sources[cluster], None, int(time.time() * 1000)
        while not self.stop.wait(self.every):
            n += 1
            value = sha256_of(f"{cluster}-{n}".encode())
            try:
                conn = conn or server.connect()
                cur = conn.cursor()
                sent = time.time()
                cur.execute(f"INSERT INTO {self.TABLE} (n, v, t) VALUES (%s, %s, %s)", (n, value, sent))
                conn.commit()
                cur.execute("SELECT @@last_gtid")
                gtid = str(cur.fetchall()[0][0])
            except Exception:  # noqa: BLE001 - not acknowledged (the source is down): nothing recorded
                try:
                    if conn is not None:
                        conn.close()
                except Exception:  # noqa: BLE001
                    pass
                conn = None
                continue
            self.ledger.acknowledged(cluster, time.time(), gtid, self.TABLE, {"n": n, "v": value, "t": sent})
