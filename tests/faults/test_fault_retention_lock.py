"""Retention and backups of one host never interleave: retention deletes under the host's backup lock.

Real components: a MariaDB sandbox, mariabackup, gpg and moto over HTTP. A backup is paused
mid-stream (its progress callback waits) while retention tries to apply a plan: retention must
fail naming the host and the running backup, and delete nothing. Once the backup is over the same
plan applies.
"""

from __future__ import annotations

import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from faultkit import open_uploads, s3_catalog, snapshot, target, wait_next_second

from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.lock import LOCK_NAME, HostLock, HostLockBusy
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.retention.apply import apply_plan, plan_host
from xtrabackup_provider.core.retention.model import RetentionPolicy

PREFIX = "backups/c1/db1/"


def _backup(catalog: Catalog, server: SandboxServer, gpg_keys, after: Manifest | None, **kw) -> Manifest:
    if after is not None:
        wait_next_second(after.started_at)
    return run_backup(
        BackupRequest(catalog=catalog, target=target(server), public_keys=[gpg_keys.public_key], **kw)
    )


def test_retention_refuses_while_a_backup_runs_deletes_nothing_and_applies_once_it_is_over(
    seeded, s3_server, bucket, gpg_keys
):
    server, _db = seeded
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    old_full = _backup(catalog, server, gpg_keys, None, kind="full")
    old_inc = _backup(catalog, server, gpg_keys, old_full, kind="incremental")
    newest = _backup(catalog, server, gpg_keys, old_inc, kind="full")
    plan = plan_host(catalog, RetentionPolicy(keep_last_chains=1, min_age_days=0))
    assert sorted(i.name for i in plan.deletes) == [old_full.backup_id, old_inc.backup_id]

    streaming, finish = threading.Event(), threading.Event()

    def hold(raw_bytes: int) -> None:  # the backup pauses mid-stream until retention has tried
        streaming.set()
        finish.wait(60)

    wait_next_second(newest.started_at)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(
            run_backup,
            BackupRequest(
                catalog=catalog, target=target(server), public_keys=[gpg_keys.public_key], progress=hold
            ),
        )
        assert streaming.wait(60), "the backup never started streaming"
        before = snapshot(s3_server.client(), bucket, f"{PREFIX}backups/")
        try:
            with pytest.raises(HostLockBusy) as excinfo:
                apply_plan(s3_catalog(s3_server.endpoint_url, bucket), plan, confirm=True)
            assert snapshot(s3_server.client(), bucket, f"{PREFIX}backups/") == before, (
                "retention deleted something while a backup of the host was running"
            )
        finally:
            finish.set()
        manifest = running.result(timeout=120)
    message = str(excinfo.value)
    assert "retention of c1/db1 cannot start: another backup of c1/db1 is running" in message, message
    assert socket.gethostname() in message and f"pid {os.getpid()}" in message, message
    assert "Nothing was deleted" in message, message
    assert manifest.parent_id == newest.backup_id, "the running backup continued the newest chain"

    # The lock is free again: the same plan applies, and the new incremental keeps its chain.
    report = apply_plan(catalog, plan, confirm=True)
    assert sorted(report.deleted) == [old_full.backup_id, old_inc.backup_id]
    assert catalog.backup_ids() == [newest.backup_id, manifest.backup_id]
    assert [m.backup_id for m in catalog.chain(manifest.backup_id)] == [newest.backup_id, manifest.backup_id]
    left = snapshot(s3_server.client(), bucket)
    assert not [k for k in left if old_full.backup_id in k or old_inc.backup_id in k], left
    assert not [k for k in left if k.endswith(LOCK_NAME)], "retention did not release the host lock"
    assert open_uploads(s3_server.client(), bucket) == []


def test_a_backup_refuses_while_retention_holds_the_host_lock(seeded, s3_server, bucket, gpg_keys):
    server, _db = seeded
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    with HostLock(catalog, purpose="retention"), pytest.raises(HostLockBusy) as excinfo:
        _backup(catalog, server, gpg_keys, None)
    message = str(excinfo.value)
    assert "backup of c1/db1 cannot start: another retention of c1/db1 is running" in message, message
    assert catalog.backup_ids() == [] and snapshot(s3_server.client(), bucket) == {}
    assert open_uploads(s3_server.client(), bucket) == []
