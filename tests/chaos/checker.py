"""The chaos run's checker, during the run and at the end: the invariants over every host on both
stores, the checker's own restore of sampled backups (the newest of each chain) and the product's
point-in-time restores, each compared with the cluster's reference replica stopped at the same
GTID (START SLAVE UNTIL master_gtid_pos).

PITR windows: a chain's window runs from its full backup's GTID to the next full's (closed), and
the newest chain's from its full to the newest shipped GTID, counting the open binlog's partial
manifest (what continuous shipping has stored of it). `points` random GTIDs are drawn in each
window once it is closed and shipped (during the run), the newest at the end. The reference only
moves forward, so every target of a cluster (backups and points) is checked in GTID order; one
already passed is skipped and counted as such.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fleet import BACKUP_HOST, CHECKED_DBS, Cluster, Fleet
from invariants import digests, intact_binlogs, orphans, registered, stale_holds
from ledger import (
    CUTS_HISTORY,
    SHIP_BOUND,
    STOPS_SHIPPING,
    FaultSeen,
    Finding,
    Ledger,
    LoadWriter,
    acked_at,
    backup_of,
    blame,
    lag,
    recoverable,
    retention_floor,
    sha256_of,
    span_of,
    stall_to_judge,
    unrecoverable,
)
from restorer import decrypting_home, fetch_binlog, restore_chain
from sampling import (
    Binlog,
    as_positions,
    candidates,
    compare_rows,
    expected_rows,
    rows_until,
    select,
    time_points,
    transaction_ends,
)
from storeview import HostView, StoreReader, window_binlogs

from helpers import RUN, parse_gtid_pos, replay_until, restored_checksums
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums


@dataclass(frozen=True, order=True)
class Target:
    cluster: str
    seq: int
    kind: str  # "backup" (the checker's own restore), "standby" (restore --from-standby) or "pitr"
    gtid: str
    backup_id: str = ""  # the backup; for a PITR point, the full its window starts at
    newest_event: float = 0.0  # a PITR point: the newest event time of the binlog holding it
    how: str = "gtid"  # a PITR point: --to-gtid, --to-time or --to-position (sampling.py)
    why: str = ""  # the edge that drew it (sampling.py), or which backup of a chain
    store: str = "primary"  # "offsite": that store's copy; "standby": from the standby (PITR too)
    at: int = 0  # a --to-time point: the epoch second (seq is then the least it must reach)


@dataclass
class Checker:
    fleet: Fleet
    rng: random.Random
    points: int = 10  # PITR points per window
    takeover: timedelta = timedelta(0)  # how long a dead holder's lock or lease may wait for the next run
    pitr_window: timedelta = timedelta(0)  # retention's PITR window (older points may be gone)
    violations: list[str] = field(default_factory=list)
    restores: int = 0
    pitr_points: int = 0
    skipped: int = 0
    windows: int = 0
    checked_chains: set[tuple[str, str]] = field(default_factory=set)
    sampled: set[tuple[str, str]] = field(default_factory=set)  # (cluster, full id) of windows drawn
    pending: list[Target] = field(default_factory=list)
    at: dict[str, int] = field(default_factory=dict)  # cluster -> the reference's domain-0 seq
    mutex: threading.Lock = field(default_factory=threading.Lock)
    ledger: Ledger | None = None  # the checker's own books (tests/chaos/ledger.py)
    faults: Callable[[], list[FaultSeen]] = list  # the faults that ended so far
    running_since: Callable[[], float] = lambda: float("inf")  # when the oldest running fault began
    # The fault that explains a finding naming an object it damaged (faults.py Injector.excuse).
    excused: Callable[[str], str | None] = lambda text: None
    deferred: list[tuple[Finding, frozenset[str], float]] = field(default_factory=list)
    digest_cache: dict[tuple[str, int, str], str] = field(default_factory=dict)
    violation_log: list[tuple[float, str]] = field(default_factory=list)  # (when, text)
    restores_by: Counter[str] = field(default_factory=Counter)  # kind of restore -> checked
    pitr_by: Counter[str] = field(default_factory=Counter)  # kind of PITR point -> checked
    pitr_why: Counter[str] = field(default_factory=Counter)  # the edge that drew a checked point -> n
    standby_planned: set[str] = field(default_factory=set)  # clusters whose standby is a target
    backups_lost: set[str] = field(default_factory=set)
    transactions_lost: int = 0
    stalled: dict[str, float] = field(
        default_factory=dict
    )  # cluster -> until when its ongoing stall was judged
    history: dict[str, list[tuple[float, float, float]]] = field(
        default_factory=dict
    )  # cluster -> (t, lag, rpo age)
    explained: list[Finding] = field(default_factory=list)  # findings a fault predicts
    shipped_at: dict[str, list[tuple[float, int]]] = field(
        default_factory=dict
    )  # cluster -> (t, shipped seq)

    def readers(self) -> dict[str, tuple[StoreReader, str]]:
        p, o = self.fleet.endpoints["primary"], self.fleet.endpoints["offsite"]
        return {"primary": (StoreReader(p.client(), p.bucket), "backups"),
                "offsite": (StoreReader(o.client(), o.bucket), "backups")}  # fmt: skip

    def views(self) -> dict[tuple[str, str], tuple[StoreReader, HostView]]:
        out = {}
        for store, (reader, prefix) in self.readers().items():
            for c in self.fleet.clusters:
                out[(store, c)] = (reader, reader.host(f"{prefix}/{c}/{BACKUP_HOST}"))
        return out

    def violation(self, text: str) -> None:
        if why := self.excused(text):
            say(f"checker: {text} (explained by {why})")
            return
        with self.mutex:
            if text in self.violations:
                return  # the same, seen again by a later sweep
            self.violations.append(text)
            self.violation_log.append((time.time(), text))
        say(f"VIOLATION: {text}")

    # -- invariants ---------------------------------------------------------------------------------

    def sweep(self, final: bool) -> None:
        """Every registered backup whole; no lock or lease held past its lease and the time the next
        run takes to take it over; at the end, every orphan is debris retention names."""
        for (store, c), (reader, view) in self.views().items():
            for v in registered(view):
                self.violation(f"{store} {c}: {v}")
            for v in digests(reader, view, self.digest_cache):
                self.violation(f"{store} {c}: {v}")
            self.books(store, c, reader, view)
            for v in stale_holds(reader, view, takeover=self.takeover):
                self.violation(f"{store} {c}: {v}")
            if not final:
                continue
            strays = orphans(view)
            named = self.debris_named(c, store)
            for bid in unnamed_strays(strays, named, orphans(reader.host(view.prefix))):
                self.violation(f"{store} {c}: {bid} has no manifest and retention does not name it")
            if "binlogs" in strays:
                self.violation(f"{store} {c}: binlog objects without a manifest: {strays['binlogs'][:3]}")
        if self.ledger is not None:
            self.judge_deferred()

    # -- the ledger -----------------------------------------------------------------------------------

    def books(self, store: str, c: str, reader: StoreReader, view: HostView) -> None:
        """Every manifest seen into the ledger (with the sha256 of its bytes), what vanished judged
        against the retention floor, and on the primary the shipping lag and the RPO from it."""
        if self.ledger is None:
            return
        now = time.time()
        for bid, m in view.manifests.items():
            if (store, c, bid) not in self.ledger.backups and m.get("finished_at"):
                key = f"{view.prefix}/backups/{bid}/manifest.json"
                self.ledger.saw_backup(store, c, m, key, self._sha_of(reader, key), now)
        for partial, group in ((False, view.binlogs), (True, view.partials)):
            for m in group.values():
                key = f"{view.prefix}/binlogs/{m.get('server_uuid')}/{m.get('name')}" + (
                    ".partial.json" if partial else ".json"
                )
                self.ledger.saw_binlog(store, c, m, key, self._sha_of(reader, key), now)
        for f in self.ledger.vanished(store, c, set(view.manifests), set(view.binlogs), now):
            if f.what == "backup lost":
                self.backups_lost.add(f.subject)
            self.violation(f"{f.what}: {f.text}")
        if store == "primary":
            self.watch_rpo(c, view, now)

    def lag_floor(self, c: str, t: float) -> float:
        """The least the shipping lag of `c` can have been at `t`, between two sweeps: shipping only
        moves forward, so what the next sweep found shipped bounds what was shipped at `t`."""
        if self.ledger is None:
            return 0.0
        after = [seq for when, seq in self.shipped_at.get(c, []) if when >= t]
        return lag(self.ledger.acked(c), after[0], t) if after else 0.0

    def _sha_of(self, reader: StoreReader, key: str) -> str:
        try:
            return sha256_of(reader.get_bytes(key))
        except Exception:  # noqa: BLE001 - deleted since the listing
            return ""

    def watch_rpo(self, c: str, view: HostView, now: float) -> None:
        """The shipping lag and the newest backup's age, from the ledger: shipping behind the
        acknowledged transactions past SHIP_BOUND is named (its fault, or a violation)."""
        assert self.ledger is not None
        tx = self.ledger.acked(c)
        spans = [span_of(m) for m in (*view.binlogs.values(), *view.partials.values())]
        shipped = max((s.last for s in spans), default=0)
        behind = lag(tx, shipped, now) if tx else 0.0
        finished = [backup_of(m).finished for m in view.manifests.values() if m.get("finished_at")]
        age = now - max(finished) if finished else 0.0
        self.history.setdefault(c, []).append((now, behind, age))
        self.shipped_at.setdefault(c, []).append((now, shipped))
        self.ledger.write({"type": "rpo", "cluster": c, "t": now, "shipped_seq": shipped, "acked_seq": acked_at(tx, now),
                           "lag_s": round(behind, 1), "backup_age_s": round(age, 1),
                           "recoverable": recoverable(restore_points(view), spans)})  # fmt: skip
        since = stall_to_judge(self.stalled.get(c), behind, now)
        if behind <= SHIP_BOUND:
            self.stalled.pop(c, None)
        if since is None:
            return
        still = "still " if c in self.stalled else ""
        self.stalled[c] = now
        text = (f"{c}: shipping {still}stopped: shipped up to seq {shipped}, the source acknowledged seq {shipped + 1} "
                f"{behind:.0f} s ago (bound {SHIP_BOUND:.0f} s)")  # fmt: skip
        self._judge(Finding("shipping stopped", c, text, t=since), STOPS_SHIPPING, now)

    def _judge(self, f: Finding, kinds: frozenset[str], until: float) -> None:
        """A ledger finding over [f.t, until]: explained by a fault of `kinds` on its cluster that
        predicts it, or a violation. Judged once every fault that began by `until` has ended (a
        running fault's clusters and effect are not known yet)."""
        if until >= self.running_since():
            self.deferred.append((f, kinds, until))
            return
        f.cause = blame(f.cluster, f.t, until, self.faults(), kinds)
        self._record(f)

    def judge_deferred(self) -> None:
        waiting, self.deferred = self.deferred, []
        for f, kinds, until in waiting:
            self._judge(f, kinds, until)

    def _record(self, f: Finding) -> None:
        assert self.ledger is not None
        self.ledger.finding(f)
        if f.cause == "lost":
            self.violation(f"{f.what}: {f.text}")
        else:
            self.explained.append(f)
            say(f"checker: {f.what} (explained by {f.cause}): {f.text}")

    def final_books(self) -> None:
        """At the end: every range of the acknowledged transactions, from the oldest backup the
        floor keeps to what the source acknowledged SHIP_BOUND ago, the store cannot restore."""
        if self.ledger is None:
            return
        now = time.time()
        views = self.views()
        for c in self.fleet.clusters:
            reader, view = views[("primary", c)]
            seen = self.ledger.chains("primary", c)
            floor = retention_floor(seen, now, self.ledger.policies["primary"])
            seqs = [b.seq for b in seen if b.id in floor and b.seq]
            tx = self.ledger.acked(c)
            if not seqs or not tx:
                continue
            spans = [span_of(m) for m in intact_binlogs(reader, view, self.digest_cache)]
            have = recoverable(restore_points(view), spans)
            end = acked_at(tx, now - SHIP_BOUND)
            say(f"checker: {c} recoverable {have}; required seq {min(seqs)}..{end}")
            gone = not any(b.seq == min(seqs) and b.id in view.manifests for b in seen if b.id in floor)
            for f in unrecoverable(c, tx, min(seqs), end, have, self.faults(), start_gone=gone):
                if f.cause == "lost":
                    self.transactions_lost += f.transactions
                self._record(f)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The product's CLI on the direct endpoints (the checker is not the one under faults)."""
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "PATH": "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "XTRABACKUP_GPG_PASSPHRASE": self.fleet.keys.passphrase, "HOME": str(self.fleet.work)}  # fmt: skip
        return subprocess.run([sys.executable, "-c", RUN, *args, "--config", str(self.fleet.cli_config)],
                              capture_output=True, text=True, env=env, timeout=1800)  # fmt: skip

    def debris_named(self, cluster: str, store: str) -> set[str]:
        at = (datetime.now(UTC) + timedelta(days=8)).strftime("%Y-%m-%dT%H:%M:%SZ")
        extra = ["--target-store", "offsite"] if store == "offsite" else []
        proc = self.cli(
            "retention", "plan", "--json", "--at", at, "--cluster", cluster, "--host", BACKUP_HOST, *extra
        )
        if proc.returncode not in (0, 1):
            self.violation(f"retention plan of {store} {cluster} failed: {proc.stderr[-500:]}")
            return set()
        return {i["name"] for i in json.loads(proc.stdout)["items"] if i["kind"] == "debris"}

    # -- what to check ------------------------------------------------------------------------------

    def plan(self, final: bool) -> None:
        """Add the targets that became checkable: of each chain that is closed (a newer full exists;
        at the end, every chain) its newest backup, one older one and the offsite copy of the
        newest; `points` PITR points of each window that is closed and shipped (at the end, the
        newest one too: sampling.py says where); at the end, the standby, alone and rolled forward."""
        views = self.views()
        for c in self.fleet.clusters:
            _reader, view = views[("primary", c)]
            offsite = views[("offsite", c)][1]
            fulls = sorted(b for b, m in view.manifests.items() if m.get("kind") == "full" and m.get("gtid"))
            for i, full in enumerate(fulls):
                nxt = fulls[i + 1] if i + 1 < len(fulls) else None
                # A window's binlogs are its full's server's: a re-seeded replica's history ends there.
                server = view.manifests[full].get("server_uuid")
                high, times = shipped(view, view.manifests[full])
                nxt_seq = _seq(view.manifests[nxt]["gtid"]) if nxt else high
                end = min(nxt_seq, high)
                closed = nxt is not None and (
                    high >= nxt_seq or view.manifests[nxt].get("server_uuid") != server
                )
                if closed or final:
                    self._chain_target(c, view, full, nxt, offsite)
                if (c, full) not in self.sampled and (closed or final):
                    self._draw(c, view, full, end, times, closed, offsite)
            if final and fulls and c not in self.standby_planned:
                self.standby_planned.add(c)
                self._standby(c, shipped(view, view.manifests[fulls[-1]])[0])

    def _chain_target(self, c: str, view: HostView, full: str, nxt: str | None, offsite: HostView) -> None:
        chain = [
            b
            for b, m in view.manifests.items()
            if m.get("chain_root", b) == full and (nxt is None or b < nxt)
        ]
        newest = max(chain)
        m = view.manifests[newest]
        if (c, full) in self.checked_chains or not m.get("gtid"):
            return
        self.checked_chains.add((c, full))
        self.pending.append(Target(c, _seq(m["gtid"]), "backup", m["gtid"], newest, why="newest of a chain"))
        older = sorted(b for b in chain if b != newest and view.manifests[b].get("gtid"))
        if older:
            b = self.rng.choice(older)
            gtid = view.manifests[b]["gtid"]
            self.pending.append(Target(c, _seq(gtid), "backup", gtid, b, why="older in a chain"))
        if newest in offsite.manifests:  # copied already (the copy follows the backup)
            self.pending.append(Target(c, _seq(m["gtid"]), "backup", m["gtid"], newest, why="offsite copy",
                                       store="offsite"))  # fmt: skip

    def _standby(self, c: str, high: int) -> None:
        """The standby (the backed-up host's `standby_dir`) restored as it is (its GTID from the
        tool's own file in its base), then rolled forward (_standby_forward). Checked after every
        other target up to `high` (the newest shipped): a refresh may hand it a newer backup than
        the file says now, and the reference, moved there, would pass the window's last points."""
        gtid = self.standby_gtid(c)
        if gtid is None:
            self.violation(
                f"{c}: the standby {self.standby_dir(c)} holds no prepared base with its GTID at the end"
            )
            return
        self.pending.append(Target(c, max(_seq(gtid), high), "standby", gtid, why="standby", store="standby"))

    def standby_gtid(self, c: str) -> str | None:
        """The GTID the standby's prepared base is at, from the tool's own file in it; None while
        it is being rebuilt (or holds none)."""
        base = self.standby_dir(c) / "base"
        try:
            info = sorted(base.glob("*_binlog_info")) if base.is_dir() else []
            fields = info[0].read_text().split() if info else []
        except OSError:  # being rebuilt
            fields = []
        return _domain0(fields[2]) if len(fields) >= 3 else None

    def _standby_forward(self, c: str, seq: int) -> None:
        """After the standby restored as it is (at `seq`): rolled forward to the newest transaction
        shipped now (the standby may hold a backup newer than the plan saw)."""
        _reader, view = self.views()[("primary", c)]
        fulls = sorted(b for b, m in view.manifests.items() if m.get("kind") == "full" and m.get("gtid"))
        high = shipped_whole(view, view.manifests[fulls[-1]]) if fulls else 0
        if high > seq:
            self.pending.append(Target(c, high, "pitr", f"0-{self.source_id(c)}-{high}", fulls[-1], time.time(),
                                       why="standby, newest shipped", store="standby"))  # fmt: skip

    def standby_dir(self, c: str) -> Path:
        return Path(self.fleet.root) / "standby" / c

    def source_id(self, c: str) -> int:
        return int(str(self.fleet.clusters[c].source.query("SELECT @@server_id")[0][0]))

    def moments(self, c: str) -> list[tuple[float, str]]:
        """When a server of `c` went down and came back, and when its backed-up replica was
        re-seeded (the fault log: faults.jsonl, written as each fault ends)."""
        log = self.fleet.work / "faults.jsonl"
        out = []
        for line in log.read_text().splitlines() if log.exists() else []:
            try:
                f = json.loads(line)
            except ValueError:
                continue  # a line being written
            if f["kind"] not in ("restart_db", "reseed_replica"):
                continue
            if not (str(f.get("target", "")).startswith(f"{c}-") or c in f.get("clusters", [])):
                continue
            why = "restart" if f["kind"] == "restart_db" else "re-seed"
            out += [(float(f["t0"]), why), (float(f.get("t1") or f["t0"]), why)]
        return out

    def _draw(self, c: str, view: HostView, full: str, end: int, times: list[tuple[int, int, float]],
              closed: bool, offsite: HostView) -> None:  # fmt: skip
        self.sampled.add((c, full))
        start = _seq(view.manifests[full]["gtid"])
        began = backup_of(view.manifests[full]).finished
        # The newest window at the end may not be shipped past its full yet (within SHIP_BOUND).
        if end < start and self.ledger is not None and (closed or time.time() - began > SHIP_BOUND):
            text = (f"{c}: the PITR window from {full} (seq {start}) ends at seq {end}, before its start: "
                    "its server shipped nothing a replay from it reads past it")  # fmt: skip
            self._judge(Finding("window", c, text, t=began), CUTS_HISTORY | STOPS_SHIPPING, time.time())
        low = max(start, self.at.get(c, 0))
        if end < low or (end == low and low > start):
            if end >= start:
                self.skipped += 1  # the reference replica has passed it (checked in GTID order)
            return
        self.windows += 1
        # Only the binlogs a replay from the full reads: a re-seeded server's restarted .000001 is not.
        partials = {id(m) for m in view.partials.values()}
        binlogs = [Binlog(str(m.get("name")), _seq(m.get("gtid_first")), _seq(m.get("gtid_last")), id(m) in partials)
                   for m in window_binlogs(view, view.manifests[full])]  # fmt: skip
        moments = self.moments(c)
        tx = self.ledger.acked(c) if self.ledger else []
        edges = candidates(low, end, binlogs, [(acked_at(tx, t), why) for t, why in moments if tx])
        n_time = max(1, self.points // 4) if self.points >= 2 and self.ledger else 0
        points = as_positions(self.rng, select(self.rng, edges, low, end, self.points - n_time), 0.25)
        if self.ledger:
            points += time_points(
                self.rng, self.ledger.rows_of(c), low, end, moments, n_time, not_before=began
            )
        # One --to-gtid point restored from the offsite copy, where that store holds the window.
        reach = shipped(offsite, offsite.manifests[full])[0] if full in offsite.manifests else 0
        there = [i for i, p in enumerate(points) if p.kind == "gtid" and p.seq <= reach]
        from_offsite = self.rng.choice(there) if there else -1
        say(f"checker: PITR window of {c} from {full} to seq {end}: {len(points)} point(s) "
            f"({', '.join(f'{p.seq} {p.kind} {p.why}' for p in points)})")  # fmt: skip
        server_id = self.source_id(c)
        for i, p in enumerate(points):
            newest = max((t for lo, hi, t in times if lo <= p.seq <= hi), default=time.time())
            self.pending.append(Target(c, p.seq, "pitr", f"0-{server_id}-{p.seq}", full, newest, how=p.kind,
                                       why=p.why, store="offsite" if i == from_offsite else "primary", at=p.at))  # fmt: skip

    def work(self, until: float) -> None:
        """Check pending targets in GTID order per cluster until `until` (epoch seconds)."""
        while self.pending and time.time() < until:
            self.pending.sort(key=lambda t: (t.seq, t.cluster))
            target = self.pending.pop(0)
            if target.kind == "backup":
                self.check_backup(target)
            else:
                self.check_pitr(target)  # a PITR point, or the standby restored as it is

    # -- restores -----------------------------------------------------------------------------------

    def check_backup(self, t: Target) -> None:
        """The checker's own restore of the backup against the reference stopped at its GTID."""
        if not self.advance(t.cluster, t.gtid, t.seq):
            return
        expected = table_checksums(self.fleet.clusters[t.cluster].reference, CHECKED_DBS)
        reader, view = self.views()[(t.store, t.cluster)]
        if t.backup_id not in view.manifests:
            self.skipped += 1  # retention removed it before its turn: the ledger judges whether it might
            self.books(t.store, t.cluster, reader, view)
            return
        work = Path(self.fleet.root) / f"chk-{t.store}-{t.backup_id}"
        try:
            with decrypting_home(self.fleet.keys.private_key, self.fleet.keys.passphrase) as gpg:
                datadir = restore_chain(reader, view.chain(t.backup_id), gpg, work)
            got = restored_checksums(datadir, work / "sb", CHECKED_DBS, server_id=990)
        except Exception as exc:  # noqa: BLE001 - a backup that does not restore is a violation
            self.violation(f"{t.store} {t.cluster} {t.backup_id} ({t.why}) does not restore: {exc}")
            return
        finally:
            shutil.rmtree(work, ignore_errors=True)
        self.restores += 1
        self.restores_by[f"own restore, {t.why}"] += 1
        if got != expected:
            self.violation(f"{t.store} {t.cluster} {t.backup_id} ({t.why}) restored differs from the source at "
                           f"{t.gtid}: {_diff(got, expected)}")  # fmt: skip
        say(
            f"restore check {t.cluster} {t.backup_id} ({t.why}) at {t.gtid}: {'ok' if got == expected else 'DIFFERS'}"
        )

    def advance(self, cluster: str, gtid: str, seq: int) -> bool:
        ref = self.fleet.clusters[cluster].reference
        if seq < self.at.get(cluster, 0):
            self.skipped += 1
            return False
        replay_until(ref, _domain0(gtid), timeout=600)
        self.at[cluster] = seq
        return True

    def check_pitr(self, t: Target) -> None:
        """The product's restore of a PITR point (or of the standby alone) against the reference
        stopped where it must stop, and its ledger table against what the ledger says was
        acknowledged by then. A --to-time point and the standby are restored first: where they
        stop (the GTID the product reports) is then checked by the reference and the ledger."""
        cluster = self.fleet.clusters[t.cluster]
        if t.seq < self.at.get(t.cluster, 0):
            self.skipped += 1
            return
        fixed = t.how != "time" and t.kind != "standby"
        if fixed and not self.advance(t.cluster, t.gtid, t.seq):
            return
        label = self.label(t)
        work = Path(self.fleet.root) / f"pitr-{t.cluster}-{t.seq}-{t.how}-{t.store}"
        work.mkdir()
        try:
            args = self.restore_args(t, work)
            if args is None:
                return
            proc = self.cli("restore", "--cluster", t.cluster, "--host", BACKUP_HOST,
                            "--target-datadir", str(work / "data"), "--json", *args)  # fmt: skip
            if proc.returncode != 0:
                log = self.fleet.work / "checker" / f"{work.name}.log"
                log.parent.mkdir(exist_ok=True)
                log.write_text(f"{args}\n{proc.stdout}{proc.stderr}")
                errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
                self._pitr_failed(
                    t, cluster, f"{label}: {' '.join(errors) or proc.stderr.strip()[-300:]} ({log})"
                )
                return
            report = _json_report(proc.stdout)
            got, rows = restored_state(work / "data", work / "sb", server_id=991)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        reached = str(report.get("reached_gtid") or report.get("gtid") or "") if not fixed else t.gtid
        what = f"{label} of {t.cluster} to {t.gtid if fixed else reached} ({t.why})"
        wrong = self.ledger_rows(t, reached, rows)
        seq = _seq(reached)
        if t.how == "time" and t.kind != "standby" and seq < t.seq:  # the standby's seq orders it only
            wrong.append(f"stopped at {reached or 'no GTID'}, before seq {t.seq}")
        elif not fixed and not seq:
            wrong.append("reports no GTID reached")
        elif not fixed and seq < self.at.get(t.cluster, 0):
            say(f"checker: {what}: the reference passed seq {seq} meanwhile; the ledger's rows alone checked")
        elif fixed or self.advance(t.cluster, _domain0(reached), seq):
            expected = table_checksums(cluster.reference, CHECKED_DBS)
            if got != expected:
                wrong.append(f"differs from the source there: {_diff(got, expected)}")
        if t.kind == "standby":
            self.restores += 1
            self.restores_by["restore --from-standby"] += 1
            if not wrong:
                self._standby_forward(t.cluster, seq)
        else:
            self.pitr_points += 1
            self.pitr_by[label] += 1
            self.pitr_why[t.why] += 1
        for w in wrong:
            self.violation(f"{what}: {w}")
        say(f"PITR check {what}: {'ok' if not wrong else 'WRONG'}")

    def label(self, t: Target) -> str:
        if t.kind == "standby":
            return "restore --from-standby"
        flag = {"gtid": "--to-gtid", "time": "--to-time", "position": "--to-position"}[t.how]
        return flag if t.store == "primary" else f"{t.store} {flag}"

    def restore_args(self, t: Target, work: Path) -> list[str] | None:
        """The CLI's arguments for the target; a --to-position point's position is the end of its
        transaction in the binlog holding it, read from that binlog by `mariadb-binlog` (the
        product's catalog is not asked). No binlog holds it (a full before its server's first
        binlog): checked by --to-gtid instead."""
        store = {"offsite": ["--target-store", "offsite"], "standby": ["--from-standby", str(self.standby_dir(t.cluster))],
                 "primary": []}[t.store]  # fmt: skip
        if t.kind == "standby":
            return [*store, "--allow-older-standby"]
        if t.how == "time":
            return [*store, "--to-time", datetime.fromtimestamp(t.at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")]
        if t.how == "position":
            position = self.position_of(t, work)
            if position:
                return [*store, "--to-position", position, "--backup-id", t.backup_id]
            say(
                f"checker: no shipped binlog holds seq {t.seq} of {t.cluster}: --to-gtid instead of --to-position"
            )
        return [*store, "--to-gtid", t.gtid]

    def position_of(self, t: Target, work: Path) -> str | None:
        reader, view = self.views()[("primary", t.cluster)]
        full = view.manifests.get(t.backup_id)
        holding = [m for m in (window_binlogs(view, full) if full else [])
                   if span_of(m).first <= t.seq <= span_of(m).last]  # fmt: skip
        if not holding:
            return None
        m = holding[0]
        raw = work / str(m["name"])
        try:
            with decrypting_home(self.fleet.keys.private_key, self.fleet.keys.passphrase) as gpg:
                fetch_binlog(reader, m, gpg, raw)
        except Exception as exc:  # noqa: BLE001 - e.g. deleted by retention since the listing
            say(f"checker: {m['name']} of {t.cluster} could not be read for a position: {exc}"[:300])
            return None
        listing = subprocess.run(["mariadb-binlog", str(raw)], capture_output=True, text=True, timeout=600)
        raw.unlink()
        end = transaction_ends(listing.stdout).get(t.seq)
        return f"{m['name']}:{end}" if end else None

    def ledger_rows(self, t: Target, reached: str, rows: dict[int, str] | None) -> list[str]:
        """The restored ledger table against the ledger: a --to-time point holds every row
        acknowledged before its second and none started at or after it; any other, every row
        up to the GTID it reached and none after."""
        if self.ledger is None:
            return []
        if rows is None:
            return ["the restored server has no ledger table (chaos.ledger)"]
        known = self.ledger.rows_of(t.cluster)
        must, must_not = (
            expected_rows(known, t.at)
            if t.how == "time" and t.kind != "standby"
            else rows_until(known, _seq(reached))
        )
        return [f"the ledger's rows: {w}" for w in compare_rows(rows, must, must_not)]

    def _pitr_failed(self, t: Target, cluster: Cluster, error: str) -> None:
        """A refusal is right only for a point retention was allowed to drop: its window's full is
        gone, and the ledger's retention floor (what retention must keep now) no longer holds it
        (without a ledger: every event of the binlog holding it is older than the PITR window).
        Binlogs are kept from the oldest kept backup on, so a point past a full the floor holds
        must restore; one before the oldest need not (its base is gone, its binlogs may stay)."""
        store = "primary" if t.store == "standby" else t.store
        reader, view = self.views()[(store, cluster.name)]
        if self.ledger is not None:
            self.books(store, cluster.name, reader, view)  # the ledger sees the newest backups first
            now = time.time()
            floor = retention_floor(self.ledger.chains(store, cluster.name), now, self.ledger.policies[store])
            allowed = t.backup_id not in floor
        else:
            allowed = time.time() - t.newest_event > self.pitr_window.total_seconds()
        if t.kind != "standby" and t.backup_id not in view.manifests and allowed:
            self.skipped += 1
            say(f"PITR check {t.cluster} {t.gtid}: skipped, retention dropped its window ({error[-160:]})")
            return
        if t.store == "standby" and standby_passed(error, self.standby_gtid(cluster.name), t.seq):
            self.skipped += 1  # rightly refused: a refresh moved the standby past the point meanwhile
            say(
                f"PITR check {t.cluster} {t.gtid} from the standby: skipped, it was refreshed past it ({error[-200:]})"
            )
            return
        self.violation(f"PITR of {t.cluster} to {t.gtid} ({t.why}) failed: {error}")


def standby_passed(error: str, standby_gtid: str | None, seq: int) -> bool:
    """Whether a roll-forward from the standby to `seq` was refused because the standby now holds a
    backup taken after it (a refresh between the checker's draw and its run): the product's refusal
    `... was taken after GTID ...; pick an older one`, and the standby's base past `seq` now."""
    return "was taken after GTID" in error and standby_gtid is not None and _seq(standby_gtid) > seq


def _json_report(stdout: str) -> dict[str, Any]:
    """The CLI's --json report: the JSON object its output ends with."""
    start = 0 if stdout.startswith("{") else stdout.find("\n{") + 1
    try:
        data = json.loads(stdout[start:])
    except ValueError:
        return {}  # said by the caller: no GTID reached
    return data if isinstance(data, dict) else {}


def restored_state(
    datadir: Path, basedir: Path, server_id: int
) -> tuple[dict[str, int], dict[int, str] | None]:
    """A sandbox on a restored datadir: its per-table checksums and the ledger's table (n -> v)."""
    with SandboxServer.on_datadir(datadir, basedir, server_id=server_id) as restored:
        restored.start()
        sums = table_checksums(restored, CHECKED_DBS)
        try:
            rows = {int(n): str(v) for n, v in restored.query(f"SELECT n, v FROM {LoadWriter.TABLE}")}
        except Exception:  # noqa: BLE001 - no such table: said by the caller
            rows = None
        return sums, rows


def restore_points(view: HostView) -> list[tuple[int, str]]:
    """(domain-0 seq, server) of every backup whose chain resolves to a full."""
    points = []
    for bid, m in view.manifests.items():
        try:
            view.chain(bid)
        except AssertionError:
            continue
        if m.get("finished_at"):
            points.append((backup_of(m).seq, str(m.get("server_uuid"))))
    return points


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


def shipped(view: HostView, full: dict[str, Any]) -> tuple[int, list[tuple[int, int, float]]]:
    """The newest domain-0 sequence a PITR from `full` reaches (storeview.window_binlogs: its
    server's binlogs from its own on, without a hole), and (first seq, last seq, newest event time)
    of each of those binlogs."""
    spans = []
    for m in window_binlogs(view, full):
        first, last = _seq(m.get("gtid_first") or ""), _seq(m.get("gtid_last") or "")
        newest = m.get("covers_until") or m.get("last_event_time") or m.get("shipped_at")
        spans.append((first, last, _epoch(newest)))
    return max((hi for _lo, hi, _t in spans), default=0), spans


def shipped_whole(view: HostView, full: dict[str, Any]) -> int:
    """The newest domain-0 sequence a PITR from `full` holds whole. The open binlog is stored as the
    server sent it: its partial manifest's last GTID may be a transaction stored in part, which the
    product refuses to restore to (`only in part`), rightly; so that one counts from the one before
    (seed 120534: the standby's roll-forward to the partial's last GTID was drawn and refused)."""
    partials = {id(m) for m in view.partials.values()}
    return max(
        (_seq(m.get("gtid_last") or "") - (id(m) in partials) for m in window_binlogs(view, full)), default=0
    )


def _epoch(value: Any) -> float:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time()


def _domain0(gtid: str) -> str:
    return next(g for g in gtid.split(",") if g.strip().startswith("0-")).strip()


def _seq(gtid: str) -> int:
    return parse_gtid_pos(gtid).get(0, 0)


def _diff(got: dict[str, int], expected: dict[str, int]) -> str:
    keys = sorted(set(got) | set(expected))
    return ", ".join(
        f"{k}: {got.get(k)} != {expected.get(k)}" for k in keys if got.get(k) != expected.get(k)
    )[:600]


def unnamed_strays(strays: dict[str, list[str]], named: set[str], after: dict[str, list[str]]) -> list[str]:
    """The backup directories without a manifest that retention's plan does not name as debris.
    `after`: the strays of a listing taken after the plan. One gone from it was deleted meanwhile
    (seed 120504: the last scheduled backup run's retention deleted 20261205T113041Z-inc at
    12:33:48, between the final sweep's listing and its plan, which no longer named it)."""
    return sorted((set(strays) - named - {"binlogs"}) & set(after))
