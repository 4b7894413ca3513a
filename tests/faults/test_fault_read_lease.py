"""A restore in progress holds a read lease on its chain: retention keeps (and names) every backup
under a live lease, so it never deletes what a running restore still has to download.

Real components: a MariaDB sandbox, mariabackup, gpg, moto over HTTP, and a real HTTP proxy in
front of moto that holds the restore's downloads until retention has run (a slow endpoint).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from faultkit import S3Proxy, s3_catalog, target, wait_next_second

from helpers import add_orders, restore_with, restored_checksums, wait_for
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.lease import ReadLease, live_leases
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.retention.apply import apply_plan, plan_host
from xtrabackup_provider.core.retention.model import RetentionPolicy


def test_retention_during_a_slow_restore_deletes_nothing_the_restore_needs(
    seeded, s3_server, bucket, gpg_keys, tmp_path
):
    server, db = seeded
    catalog = s3_catalog(s3_server.endpoint_url, bucket)

    def backup(kind: str) -> str:
        manifest = run_backup(
            BackupRequest(
                catalog=catalog, target=target(server), kind=kind, public_keys=[gpg_keys.public_key]
            )
        )
        wait_next_second(manifest.started_at)
        return manifest.backup_id

    old_full = backup("full")
    add_orders(server, db, 300)
    old_inc = backup("incremental")
    expected = table_checksums(server, [db])
    add_orders(server, db, 300)
    new_full = backup("full")

    downloading, go_on = threading.Event(), threading.Event()

    def slow(operation: str, path: str) -> None:
        if operation.startswith("GET ") and "/backup.xbstream" in path:
            downloading.set()
            go_on.wait(120)
        return None

    proxy = S3Proxy(s3_server.endpoint_url, rule=slow)
    proxy.start()
    try:
        slow_catalog = s3_catalog(proxy.endpoint_url, bucket)
        with ThreadPoolExecutor(1) as pool:
            restoring = pool.submit(
                restore_with,
                slow_catalog,
                gpg_keys,
                tmp_path / "restored",
                backup_id=old_inc,
                scratch_dir=tmp_path / "scratch",
            )
            try:
                assert downloading.wait(120), "the restore never started downloading"
                plan = plan_host(catalog, RetentionPolicy(keep_last_chains=1, min_age_days=0))
                applied = apply_plan(catalog, plan, confirm=True)
            finally:
                go_on.set()
            error = restoring.exception(timeout=300)
    finally:
        proxy.stop()

    reasons = {item.name: item.reason for item in plan.items if item.kind == "backup"}
    print("plan:", reasons)
    assert catalog.backup_ids() == [old_full, old_inc, new_full], "retention deleted a chain being restored"
    assert applied.deleted == []
    assert error is None, f"the restore failed: {error}"
    for bid in (old_full, old_inc):
        assert "read lease" in reasons[bid] and "restore" in reasons[bid], reasons[bid]
    assert restored_checksums(tmp_path / "restored", tmp_path / "sb", [db], server_id=992) == expected

    # Once the restore is over its lease is gone and the same policy deletes the old chain.
    after = apply_plan(
        catalog, plan_host(catalog, RetentionPolicy(keep_last_chains=1, min_age_days=0)), confirm=True
    )
    assert sorted(after.deleted) == [old_full, old_inc]
    assert catalog.backup_ids() == [new_full]


HOLD_A_LEASE = """
import sys, time
from datetime import timedelta
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.lease import ReadLease
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client
catalog = Catalog(S3Store(make_s3_client(sys.argv[1], "us-east-1"), sys.argv[2]), "backups", "c1", "db1")
with ReadLease(catalog, "restore", backups=["20260101T000000Z-full"], lease=timedelta(seconds=1)):
    print("held", flush=True)
    time.sleep(600)
"""


def test_retention_removes_the_lease_a_killed_restore_left_and_keeps_live_ones(s3_server, bucket):
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    leases = f"{catalog.host_prefix}/leases/"
    argv = [sys.executable, "-c", HOLD_A_LEASE, s3_server.endpoint_url, bucket]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        os.kill(child.pid, signal.SIGKILL)  # the worker dies: nobody deletes its lease
    finally:
        child.kill()
        child.wait()
    [dead] = [i.key for i in catalog.store.list(leases)]
    wait_for(lambda: not live_leases(catalog), timeout=60, interval=0.5, what="the lease to expire")

    with ReadLease(catalog, "restore", backups=["20260102T000000Z-full"]) as running:
        applied = apply_plan(catalog, plan_host(catalog, RetentionPolicy(keep_last_chains=1)), confirm=True)
        left = [i.key for i in catalog.store.list(leases)]
    assert dead not in left, "the lease of the killed restore is still stored"
    assert left == [running.key], "retention removed a live lease"
    assert applied.expired_leases == [dead]
