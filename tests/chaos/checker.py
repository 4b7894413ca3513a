"""The chaos run's checker, during the run and at the end: the invariants over every host on both
stores, the checker's own restore of sampled backups (at least the newest of each chain) and the
product's point-in-time restores, each compared with the cluster's reference replica stopped at
the same GTID (START SLAVE UNTIL master_gtid_pos). The reference only moves forward, so targets
are checked in GTID order; one already passed is skipped and counted as such.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fleet import BACKUP_HOST, CHECKED_DBS, Cluster, Fleet
from invariants import orphans, registered, stale_holds
from restorer import decrypting_home, restore_chain
from storeview import HostView, StoreReader

from helpers import RUN, parse_gtid_pos, replay_until, restored_checksums
from xtrabackup_provider.core.db.sandbox import table_checksums


@dataclass
class Checker:
    fleet: Fleet
    rng: random.Random
    violations: list[str] = field(default_factory=list)
    restores: int = 0
    pitr_points: int = 0
    skipped: int = 0
    checked_chains: set[tuple[str, str]] = field(default_factory=set)
    at: dict[str, int] = field(default_factory=dict)  # cluster -> the reference's domain-0 seq

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
        print(f"VIOLATION: {text}", flush=True)
        self.violations.append(text)

    # -- invariants ---------------------------------------------------------------------------------

    def sweep(self, final: bool) -> None:
        for (store, c), (reader, view) in self.views().items():
            for v in registered(view):
                self.violation(f"{store} {c}: {v}")
            if not final:
                continue
            strays = orphans(view)
            unnamed = set(strays) - self.debris_named(c, store) - {"binlogs"}
            for bid in sorted(unnamed):
                self.violation(f"{store} {c}: {bid} has no manifest and retention does not name it")
            if "binlogs" in strays:
                self.violation(f"{store} {c}: binlog objects without a manifest: {strays['binlogs'][:3]}")
            for v in stale_holds(reader, view):
                self.violation(f"{store} {c}: {v}")

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The product's CLI on the direct endpoints (the checker is not the one under faults)."""
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "PATH": "/usr/bin:/bin",
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

    # -- restores -----------------------------------------------------------------------------------

    def backup_targets(self) -> list[tuple[str, int, str, str]]:
        """(cluster, seq, gtid, backup id) of the newest backup of each chain not checked yet."""
        targets = []
        for (store, c), (_reader, view) in self.views().items():
            if store != "primary":
                continue
            for bid, m in view.manifests.items():
                key = (c, m.get("chain_root", bid))
                newer = [
                    o
                    for o in view.manifests.values()
                    if o.get("chain_root") == key[1] and o["backup_id"] > bid
                ]
                if key not in self.checked_chains and not newer and m.get("gtid"):
                    targets.append((c, _seq(m["gtid"]), m["gtid"], bid))
        return sorted(targets, key=lambda t: (t[1], t[0]))

    def restore_backups(self, limit: int = 2) -> None:
        for target in self.backup_targets()[:limit]:
            self.check_backup(*target)

    def check_backup(self, c: str, seq: int, gtid: str, bid: str) -> None:
        """The checker's own restore of `bid` against the reference stopped at its GTID."""
        if not self.advance(c, gtid, seq):
            return
        expected = table_checksums(self.fleet.clusters[c].reference, CHECKED_DBS)
        reader, view = self.views()[("primary", c)]
        work = Path(self.fleet.root) / f"chk-{bid}"
        try:
            with decrypting_home(self.fleet.keys.private_key, self.fleet.keys.passphrase) as gpg:
                datadir = restore_chain(reader, view.chain(bid), gpg, work)
            got = restored_checksums(datadir, work / "sb", CHECKED_DBS, server_id=990)
        except Exception as exc:  # noqa: BLE001 - a backup that does not restore is a violation
            self.violation(f"{c} {bid} does not restore: {exc}")
            return
        finally:
            shutil.rmtree(work, ignore_errors=True)
        self.checked_chains.add((c, view.manifests[bid].get("chain_root", bid)))
        self.restores += 1
        if got != expected:
            self.violation(f"{c} {bid} restored differs from the source at {gtid}: {_diff(got, expected)}")
        print(f"restore check {c} {bid} at {gtid}: {'ok' if got == expected else 'DIFFERS'}", flush=True)

    def final(self, points: int) -> None:
        """Every unchecked chain's newest backup and `points` PITR points per cluster, in GTID order
        per cluster (the reference only moves forward)."""
        todo = [(c, seq, "backup", gtid, bid) for c, seq, gtid, bid in self.backup_targets()]
        todo += [(c, seq, "pitr", gtid, "") for c, seq, gtid in self.pitr_targets(points)]
        for c, seq, kind, gtid, bid in sorted(todo):
            if kind == "backup":
                self.check_backup(c, seq, gtid, bid)
            else:
                self.check_pitr(self.fleet.clusters[c], seq, gtid)

    def advance(self, cluster: str, gtid: str, seq: int) -> bool:
        ref = self.fleet.clusters[cluster].reference
        if seq < self.at.get(cluster, 0):
            self.skipped += 1
            return False
        replay_until(ref, _domain0(gtid), timeout=600)
        self.at[cluster] = seq
        return True

    def pitr_targets(self, points: int) -> list[tuple[str, int, str]]:
        """`points` random GTIDs per cluster between its oldest backup and its newest shipped binlog."""
        targets = []
        for (store, c), (_reader, view) in self.views().items():
            if store != "primary" or not view.manifests or not view.binlogs:
                continue
            low = min(_seq(m["gtid"]) for m in view.manifests.values() if m.get("gtid"))
            high = max(_seq(b.get("gtid_last") or "0-0-0") for b in view.binlogs.values())
            low = max(low, self.at.get(c, 0)) + 1
            server_id = int(str(self.fleet.clusters[c].source.query("SELECT @@server_id")[0][0]))
            for seq in sorted(self.rng.sample(range(low, high + 1), min(points, max(0, high - low + 1)))):
                targets.append((c, seq, f"0-{server_id}-{seq}"))
        return targets

    def check_pitr(self, cluster: Cluster, seq: int, gtid: str) -> None:
        if not self.advance(cluster.name, gtid, seq):
            return
        expected = table_checksums(cluster.reference, CHECKED_DBS)
        work = Path(self.fleet.root) / f"pitr-{cluster.name}-{seq}"
        work.mkdir()
        try:
            proc = self.cli("restore", "--cluster", cluster.name, "--host", BACKUP_HOST,
                            "--target-datadir", str(work / "data"), "--to-gtid", gtid)  # fmt: skip
            if proc.returncode != 0:
                self.violation(f"PITR of {cluster.name} to {gtid} failed: {proc.stderr.strip()[-600:]}")
                return
            got = restored_checksums(work / "data", work / "sb", CHECKED_DBS, server_id=991)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        self.pitr_points += 1
        if got != expected:
            self.violation(
                f"PITR of {cluster.name} to {gtid} differs from the source there: {_diff(got, expected)}"
            )
        print(f"PITR check {cluster.name} {gtid}: {'ok' if got == expected else 'DIFFERS'}", flush=True)


def _domain0(gtid: str) -> str:
    return next(g for g in gtid.split(",") if g.strip().startswith("0-")).strip()


def _seq(gtid: str) -> int:
    return parse_gtid_pos(gtid).get(0, 0)


def _diff(got: dict[str, int], expected: dict[str, int]) -> str:
    keys = sorted(set(got) | set(expected))
    return ", ".join(
        f"{k}: {got.get(k)} != {expected.get(k)}" for k in keys if got.get(k) != expected.get(k)
    )[:600]


def wait(seconds: float) -> None:
    time.sleep(max(0.0, seconds))
