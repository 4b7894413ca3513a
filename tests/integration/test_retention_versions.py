"""Retention frees what it says it frees on versioned buckets (Object Lock needs versioning).

Deleting a key of a versioned bucket without its VersionId only adds a delete marker: the bytes
stay stored (and billed) as a non-current version. Real components: MariaDB, mariabackup, gpg,
moto over HTTP with versioning on, and the CLI as a DBA runs `retention apply --confirm`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from helpers import add_orders, retention_apply_keep_last_chain, seed_database, unique_name
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.lock import LOCK_NAME
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.storage import lifecycle
from xtrabackup_provider.core.storage.s3 import S3Store


def _versions(client, bucket: str, prefix: str) -> list[tuple[str, str, bool]]:
    """(key, version id, is a delete marker) of everything the bucket still holds under prefix."""
    out = []
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        out += [(v["Key"], v["VersionId"], False) for v in page.get("Versions", [])]
        out += [(d["Key"], d["VersionId"], True) for d in page.get("DeleteMarkers", [])]
    return out


def test_retention_apply_on_a_versioned_bucket_leaves_no_version_of_what_it_deleted(
    mariadb, s3_server, gpg_keys, tmp_path
):
    bucket = s3_server.make_bucket(f"xbp-ver-{unique_name('b')[2:]}", versioning=True)
    client = s3_server.client()
    db = unique_name("ver")
    seed_database(mariadb, db, rows=800)
    catalog = Catalog(S3Store(client, bucket), "backups", "c1", "db1")
    target = MySQLTarget(socket=str(mariadb.socket), user="root", password=mariadb.root_password)

    def backup(kind: str) -> str:
        return run_backup(
            BackupRequest(catalog=catalog, target=target, kind=kind, public_keys=[gpg_keys.public_key])
        ).backup_id

    old_full = backup("full")
    add_orders(mariadb, db, 300)
    old_inc = backup("incremental")
    # A restore test ran twice on the old incremental: its report has a non-current version.
    report = catalog.object_key(old_inc, "restore-report.json")
    catalog.store.put_bytes(report, b'{"verdict": "fail"}')
    catalog.store.put_bytes(report, b'{"verdict": "fail", "again": true}')
    new_full = backup("full")
    doomed = (old_full, old_inc)
    before = _versions(client, bucket, "backups/c1/db1/")
    stored = sum(
        v["Size"]
        for v in client.list_object_versions(Bucket=bucket, Prefix="backups/c1/db1/backups/").get(
            "Versions", []
        )
        if any(f"/{bid}/" in v["Key"] for bid in doomed)
    )
    assert any(old_inc in key for key, _v, _m in before)

    proc = retention_apply_keep_last_chain(tmp_path, s3_server.endpoint_url, bucket)
    print(proc.stdout[-600:], proc.stderr[-600:])
    assert proc.returncode == 0, proc.stderr
    left = _versions(client, bucket, "backups/c1/db1/")
    assert not [v for v in left if any(f"/{bid}/" in v[0] for bid in doomed)], (
        f"versions or delete markers of deleted backups are still stored: {left}"
    )
    assert not [v for v in left if v[0].endswith(LOCK_NAME)], f"the host lock left versions: {left}"
    assert catalog.backup_ids() == [new_full]
    assert all(not marker for _k, _v, marker in left), left
    assert "deleted 2 item(s)" in proc.stdout, proc.stdout
    assert f"freed {stored:,} bytes" in proc.stdout, proc.stdout


def test_a_version_still_under_object_lock_is_kept_visible_and_named(s3_server):
    bucket = s3_server.make_bucket(f"xbp-lock-{unique_name('b')[2:]}", object_lock=True)
    client = s3_server.client()
    store = S3Store(client, bucket)
    until = datetime.now(UTC) + timedelta(days=1)
    locked = client.put_object(
        Bucket=bucket,
        Key="b/c1/db1/backups/x/data",
        Body=b"locked",
        ObjectLockMode="GOVERNANCE",
        ObjectLockRetainUntilDate=until,
    )
    client.put_object(Bucket=bucket, Key="b/c1/db1/backups/x/free", Body=b"free")
    result = store.delete(["b/c1/db1/backups/x/data", "b/c1/db1/backups/x/free"])
    print("retained:", result.retained)
    assert [r for r in result.retained if "b/c1/db1/backups/x/data" in r and locked["VersionId"] in r]
    assert store.head("b/c1/db1/backups/x/data") is not None, (
        "a locked object was hidden behind a delete marker"
    )
    assert _versions(client, bucket, "b/c1/db1/backups/x/free") == []


def test_the_lifecycle_spec_adds_a_noncurrent_version_expiration_rule(s3_server):
    bucket = s3_server.make_bucket(f"xbp-lc-{unique_name('b')[2:]}", versioning=True)
    client = s3_server.client()
    spec = {"id": "xbp-main", "prefix": "backups/main/", "noncurrent_version_days": 3}
    result = lifecycle.install(client, bucket, [spec])
    assert result.added == ["xbp-main-noncurrent"]
    (rule,) = client.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert rule["NoncurrentVersionExpiration"]["NoncurrentDays"] == 3
    assert rule["Expiration"] == {"ExpiredObjectDeleteMarker": True}
    assert rule["Filter"] == {"Prefix": "backups/main/"}
    assert lifecycle.check(client, bucket, [spec]) == []
