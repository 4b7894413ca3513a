"""Retention applied on the S3 endpoint (moto over HTTP).

With real backups (MariaDB, mariabackup, gpg): after the plan is applied every kept chain still
validates, the newest one restores and starts, the restore-tested chain survives, and debris is
gone. With a synthetic catalog on an Object Lock bucket: retained objects (found by
head-object, not recorded in any manifest) are never sent to DeleteObjects, and an early
deletion from GLACIER is reported with its charge.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from helpers import add_orders, restore_with, restored_checksums, seed_database, take_backup, unique_name
from manifest_factory import CLUSTER, HOST, PREFIX, make_manifest
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.lock import LOCK_NAME, PROBE_NAME
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test
from xtrabackup_provider.core.retention.apply import apply_plan, plan_host
from xtrabackup_provider.core.retention.model import RetentionPolicy
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client


class RecordingS3Store(S3Store):
    """A real S3Store that records every key sent to DeleteObjects, in order."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.deleted: list[list[str]] = []
        self.client.meta.events.register("before-parameter-build.s3.DeleteObjects", self._on_delete)

    def _on_delete(self, params: dict[str, Any], **_kw: Any) -> None:
        self.deleted.append([o["Key"] for o in params["Delete"]["Objects"]])


def _catalog(s3_server, bucket: str, prefix: str = "backups") -> Catalog:
    store = RecordingS3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket)
    return Catalog(store, prefix, CLUSTER, HOST)


def _keys(catalog: Catalog) -> set[str]:
    return {i.key for i in catalog.store.list(catalog.host_prefix + "/")}


def test_applied_plan_keeps_valid_chains_the_verified_one_and_the_newest_restores(
    mariadb, s3_server, bucket, gpg_keys, tmp_path
):
    db = unique_name("ret")
    seed_database(mariadb, db, rows=2000)
    catalog = _catalog(s3_server, bucket)
    taken: list[Manifest] = []
    for kind in ("full", "incremental") * 3:  # chains A, B, C of a full and an incremental each
        add_orders(mariadb, db, 300)
        taken.append(take_backup(mariadb, catalog, gpg_keys, kind))
    newest_state = table_checksums(mariadb, [db])
    a, b, c = taken[0:2], taken[2:4], taken[4:6]
    verified = run_restore_test(
        RestoreTestRequest(
            catalog=catalog,
            workdir=tmp_path / "rt",
            backup_id=a[1].backup_id,
            private_key=gpg_keys.private_key,
            passphrase=gpg_keys.passphrase,
        )
    )
    assert verified.passed, verified.reasons
    debris = f"{catalog.backup_dir('20261001T000000Z-full')}/backup.xbstream.zst.gpg"
    catalog.store.put_bytes(debris, b"left by a killed run")

    # A week and a day from now: every backup is past min_age and the debris past its grace.
    later = datetime.now(UTC) + timedelta(days=8)
    policy = RetentionPolicy(keep_last_chains=1, debris_grace_days=7)
    plan = plan_host(catalog, policy, later)
    verdicts = {i.name: (i.action, i.reason) for i in plan.items}
    assert verdicts[a[1].backup_id] == ("keep", "newest backup that passed a restore test")
    assert verdicts[a[0].backup_id] == ("keep", f"needed by kept {a[1].backup_id}")
    assert {verdicts[m.backup_id][0] for m in b} == {"delete"}
    assert {verdicts[m.backup_id][0] for m in c} == {"keep"}
    assert verdicts["20261001T000000Z-full"][0] == "delete"

    catalog.store.deleted.clear()  # (the backups released their host lock with a delete)
    report = apply_plan(catalog, plan, confirm=True)
    assert sorted(report.deleted) == sorted([*(m.backup_id for m in b), "20261001T000000Z-full"])
    # DeleteObjects rounds: the incremental's manifest, then the full's, then all the data
    assert catalog.store.deleted[0] == [catalog.manifest_key(b[1].backup_id)]
    assert catalog.store.deleted[1] == [catalog.manifest_key(b[0].backup_id)]
    left = _keys(catalog)
    assert not any(m.backup_id in k for m in b for k in left) and debris not in left
    assert catalog.object_key(a[1].backup_id, "restore-report.json") in left
    assert catalog.backup_ids() == [m.backup_id for m in (*a, *c)]
    for m in (*a, *c):
        assert [x.backup_id for x in catalog.chain(m.backup_id)][0] == m.chain_root
    assert not plan_host(catalog, policy, later).deletes, "a second run has nothing left to delete"

    target = tmp_path / "restored" / "data"
    restored = restore_with(catalog, gpg_keys, target)
    assert restored.chain == [c[0].backup_id, c[1].backup_id]
    assert restored_checksums(target, tmp_path / "sb", [db], server_id=931) == newest_state


def _put(catalog: Catalog, m: Manifest, **extra: Any) -> None:
    """Store a synthetic backup's object (with S3 options) and register its manifest."""
    obj = m.backup_object
    catalog.store.client.put_object(Bucket=catalog.store.bucket, Key=obj.key, Body=b"x" * obj.size, **extra)
    catalog.write(m)


def test_object_lock_found_by_head_object_is_never_deleted_and_glacier_charges_are_reported(s3_server):
    bucket = s3_server.make_bucket(unique_name("xbp-lock").replace("_", "-"), object_lock=True)
    catalog = _catalog(s3_server, bucket, prefix=PREFIX)
    now = datetime.now(UTC)
    day = timedelta(days=1)

    def bid(days_ago: float, kind: str = "full") -> str:
        return (now - days_ago * day).strftime("%Y%m%dT%H%M%SZ") + ("-full" if kind == "full" else "-inc")

    locked_full = make_manifest(bid(60))
    locked_inc = make_manifest(bid(59, "inc"), parent=locked_full)
    held = make_manifest(bid(40))
    archived = make_manifest(bid(30), size=3000, storage_class="GLACIER")
    newest = make_manifest(bid(2))
    _put(catalog, locked_full)
    until = now + 30 * day
    _put(catalog, locked_inc, ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=until)
    _put(catalog, held, ObjectLockLegalHoldStatus="ON")
    _put(catalog, archived, StorageClass="GLACIER")
    _put(catalog, newest)

    plan = plan_host(catalog, RetentionPolicy(keep_last_chains=1), now)
    verdicts = {i.name: (i.action, i.reason) for i in plan.items}
    assert verdicts[locked_inc.backup_id][0] == "keep"
    assert verdicts[locked_inc.backup_id][1].startswith(f"Object Lock retains it until {until:%Y-%m-%d}")
    assert verdicts[locked_full.backup_id] == ("keep", f"needed by kept {locked_inc.backup_id}")
    assert verdicts[held.backup_id] == ("keep", "Object Lock legal hold: kept until the hold is released")
    gone = next(i for i in plan.items if i.name == archived.backup_id)
    assert gone.action == "delete" and gone.storage_class == "GLACIER"
    # uploaded just now: the whole 90-day minimum is still to pay
    assert gone.early_delete_usd == pytest.approx(3000 / 2**30 * 0.0036 * 3, rel=1e-3)
    report = apply_plan(catalog, plan, confirm=True)
    assert report.deleted == [archived.backup_id]
    # (the host lock's first use of this bucket also probed its conditional writes, and removed the probe)
    sent = {k for batch in catalog.store.deleted for k in batch if PROBE_NAME not in k}
    lock = f"{catalog.host_prefix}/{LOCK_NAME}"  # retention deletes under the host lock, then releases it
    assert sent == {catalog.manifest_key(archived.backup_id), archived.backup_object.key, lock}
    assert catalog.store.head(lock) is None
    assert catalog.backup_ids() == sorted(m.backup_id for m in (locked_full, locked_inc, held, newest))
