"""Soak: 50 backup cycles (fulls and incrementals by policy) while sysbench writes to the server,
with retention applied every few cycles; at the end every kept chain's newest backup restores to
exactly the data at its backup point, and every deleted backup is gone without a trace.

Retention runs in a second thread, started as the next backup starts: the two race for the host's
backup lock, and whichever loses gets HostLockBusy and retries (as a scheduler's retry would).
So retention really runs interleaved with backups, and a backup and a retention apply never
overlap. The policy keeps the last 3 chains; its runs land at the start and in the middle of
chains (every 3rd cycle, chains are 5 backups long).

"The data at its backup point" is taken from a replica: it is held stopped during the soak, then
replayed to each backup's GTID (START SLAVE UNTIL) and checksummed there, so the comparison is
exact although the source never stopped writing. `make soak` runs it; XBP_SOAK_CYCLES changes
the number of cycles.
"""

from __future__ import annotations

import os
import queue
import re
import secrets
import shutil
import subprocess
import threading
import time
from datetime import timedelta
from itertools import groupby

import pytest
from faultkit import open_uploads, s3_catalog, snapshot, target, wait_next_second

from helpers import (
    parse_gtid_pos,
    replay_until,
    restore_with,
    restored_checksums,
    start_replication,
    sysbench_argv,
    unique_name,
    wait_caught_up,
)
from xtrabackup_provider.core.backup.decide import ChainPolicy
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.lock import LOCK_NAME, HostLockBusy
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.retention.apply import ApplyReport, apply_plan, plan_host
from xtrabackup_provider.core.retention.model import RetentionPolicy

CYCLES = int(os.environ.get("XBP_SOAK_CYCLES", "50"))
CHAIN_LENGTH = 4  # incrementals per full
RETENTION_EVERY = 3  # cycles between retention runs: not a divisor of the chain, so runs land mid-chain too
KEEP_CHAINS = 3
RETENTION = RetentionPolicy(keep_last_chains=KEEP_CHAINS, min_age_days=0)
BUSY_RETRIES = 3000  # 0.1 s apart: a hang guard only, far beyond any backup or retention run here
SB_DB = "sbtest"
SB_TABLES = 4


class RetentionRuns:
    """Plan + apply retention in a second thread each time `trigger()` is called; a run that finds
    the host lock held by a backup retries until it gets the lock."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.reports: list[ApplyReport] = []
        self.refusals: list[str] = []
        self.error: BaseException | None = None
        self._jobs: queue.Queue[bool] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="soak-retention", daemon=True)
        self._thread.start()

    def trigger(self) -> None:
        self._jobs.put(True)

    def stop(self) -> None:
        """Wait for the triggered runs to end; raises what failed in the thread."""
        self._jobs.put(False)
        self._thread.join(600)
        assert not self._thread.is_alive(), "retention hung"
        if self.error is not None:
            raise self.error

    def _work(self) -> None:
        while self._jobs.get():
            try:
                self.reports.append(self.apply())
            except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread by stop()
                self.error = exc
                return

    def apply(self) -> ApplyReport:
        for _ in range(BUSY_RETRIES):
            plan = plan_host(self.catalog, RETENTION)
            try:
                return apply_plan(self.catalog, plan, confirm=True)
            except HostLockBusy as exc:
                assert re.search(r"cannot start: another (backup|run) of c1/db1", str(exc)), exc
                self.refusals.append(str(exc))
                time.sleep(0.1)
        raise AssertionError(f"retention never got the host lock: {self.refusals[-1]}")


def _backup(request: BackupRequest, refusals: list[str]) -> Manifest:
    """run_backup, retried while a retention run holds the host lock."""
    for _ in range(BUSY_RETRIES):
        try:
            return run_backup(request)
        except HostLockBusy as exc:
            assert re.search(r"cannot start: another (retention|run) of c1/db1", str(exc)), exc
            refusals.append(str(exc))
            time.sleep(0.1)
    raise AssertionError(f"the backup never got the host lock: {refusals[-1]}")


@pytest.mark.slow
def test_soak_backup_and_retention_cycles_under_write_load_and_every_kept_chain_restores(
    mariadb_factory, s3_server, gpg_keys, tmp_path
):
    source = mariadb_factory("soak-src", root_password=secrets.token_urlsafe(16))
    replica = mariadb_factory("soak-rep", root_password=secrets.token_urlsafe(16))
    load: subprocess.Popen[bytes] | None = None
    try:
        sb_password = secrets.token_hex(12)
        source.execute_script(
            f"CREATE DATABASE {SB_DB}; CREATE USER sb@localhost IDENTIFIED BY '{sb_password}';"
            f" GRANT ALL ON {SB_DB}.* TO sb@localhost;"
        )
        subprocess.run(
            sysbench_argv(source, sb_password, SB_DB, SB_TABLES, "prepare"), check=True, capture_output=True
        )
        start_replication(source, replica)
        wait_caught_up(source, replica)
        replica.query("STOP SLAVE")  # held back; replayed to each backup's GTID at the end

        load = subprocess.Popen(
            sysbench_argv(
                source,
                sb_password,
                SB_DB,
                SB_TABLES,
                "run",
                "--threads=2",
                "--rate=30",
                "--time=0",
                "--mysql-ignore-errors=1213,1205,1020",
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        catalog = s3_catalog(
            s3_server.endpoint_url, s3_server.make_bucket(unique_name("xbp-soak").replace("_", "-"))
        )
        policy = ChainPolicy(timedelta(days=7), CHAIN_LENGTH, max_incremental_ratio=100.0)
        manifests: list[Manifest] = []
        backup_refusals: list[str] = []
        retention = RetentionRuns(catalog)
        began = time.monotonic()
        for cycle in range(CYCLES):
            if manifests:
                wait_next_second(manifests[-1].started_at)
            if cycle and cycle % RETENTION_EVERY == 0:
                retention.trigger()  # races this cycle's backup for the host lock
            request = BackupRequest(
                catalog=catalog,
                target=target(source),
                public_keys=[gpg_keys.public_key],
                policy=policy,
                compression_level=1,
            )
            manifests.append(_backup(request, backup_refusals))
            assert load.poll() is None, (
                f"sysbench stopped: {load.stderr.read().decode()[-2000:] if load.stderr else ''}"
            )
        retention.stop()
        soak_seconds = time.monotonic() - began
        during = list(retention.reports)
        final = retention.apply()  # the state to check: what the policy keeps after the last backup
        load.terminate()
        load.wait(30)

        # Fulls and incrementals by policy, one chain per full, every link continuous: retention
        # never took a backup a new incremental needed.
        kinds = [m.kind for m in manifests]
        expected_kinds = (["full"] + ["incremental"] * CHAIN_LENGTH) * (CYCLES // (CHAIN_LENGTH + 1) + 1)
        assert kinds == expected_kinds[:CYCLES]
        seqs = [max(parse_gtid_pos(m.gtid).values()) for m in manifests]
        assert seqs == sorted(seqs) and seqs[-1] - seqs[0] > CYCLES, "the server was not under write load"
        chains = [list(g) for _, g in groupby(manifests, key=lambda m: m.chain_root)]
        assert len(chains) == -(-CYCLES // (CHAIN_LENGTH + 1))

        # Retention ran every RETENTION_EVERY cycles, interleaved with the backups, and deleted
        # exactly the chains older than the last 3, each backup once.
        assert len(during) == (CYCLES - 1) // RETENTION_EVERY, "a triggered retention run did not apply"
        kept_chains = chains[-KEEP_CHAINS:]
        kept = [m for chain in kept_chains for m in chain]
        deleted = [m for chain in chains[: -len(kept_chains)] for m in chain]
        deleted_by_runs = [bid for r in (*during, final) for bid in r.deleted]
        assert sorted(deleted_by_runs) == sorted(m.backup_id for m in deleted)
        if len(chains) > len(kept_chains) + 1:
            assert [bid for r in during for bid in r.deleted], "retention deleted nothing during the soak"

        # Deleted backups are gone: no manifest, no object, no open upload. Kept backups are whole.
        assert catalog.backup_ids() == [m.backup_id for m in kept]
        assert open_uploads(s3_server.client(), catalog.store.bucket) == []
        stored = snapshot(s3_server.client(), catalog.store.bucket)
        registered = {k for m in kept for k in (m.backup_object.key, catalog.manifest_key(m.backup_id))}
        assert set(stored) == registered, (
            f"debris, a deleted backup or a lock left: {set(stored) ^ registered}"
        )
        assert not any(k.endswith(LOCK_NAME) for k in stored)
        for m in kept:
            assert stored[m.backup_object.key][0] == m.backup_object.size, f"{m.backup_id} changed size"

        chain_note = (
            f"soak: {CYCLES} backup cycles in {soak_seconds:.0f} s; {len(chains)} chains, "
            f"{len(kept_chains)} kept ({len(kept)} backups), {len(chains) - len(kept_chains)} deleted "
            f"({len(deleted)} backups); {len(during)} retention runs during the soak + 1 after, "
            f"{len(retention.refusals)} retention attempts refused by a running backup, "
            f"{len(backup_refusals)} backup attempts refused by a running retention"
        )
        print(chain_note)
        for n, chain in enumerate(kept_chains):
            newest = chain[-1]
            assert [m.backup_id for m in catalog.chain(newest.backup_id)] == [m.backup_id for m in chain]
            replay_until(replica, newest.gtid or "")
            expected = table_checksums(replica, [SB_DB])
            datadir = tmp_path / f"chain{n}" / "data"
            restore_with(catalog, gpg_keys, datadir, backup_id=newest.backup_id)
            got = restored_checksums(datadir, tmp_path / f"sb{n}", [SB_DB], server_id=980 + n)
            assert len(got) == SB_TABLES and got == expected, (
                f"chain {n} ({newest.backup_id}) restored other data"
            )
            shutil.rmtree(datadir.parent)
        print(
            f"{chain_note}; {len(kept_chains)} kept chains restored in {time.monotonic() - began:.0f} s total"
        )
    finally:
        if load is not None and load.poll() is None:
            load.kill()
            load.wait()
        mariadb_factory.discard(replica)
        mariadb_factory.discard(source)
