"""S3 features against the moto endpoint over HTTP: storage class, SSE, Object Lock and the archive
tag on real backups; lifecycle rules; the encrypt + upload path; transient faults on uploads.

Backups under endpoint faults are in tests/faults/test_fault_backup.py; these cover the upload
path with a multi-part object, throttling, and the abort that only works once the endpoint is back.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from faults.faultkit import S3Proxy
from helpers import gpg_home, run_gpg, seed_database, unique_name
from xtrabackup_provider.core.backup.files import UploadManifest, UploadRequest, upload
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.restore.verify import VerifyRequest, verify
from xtrabackup_provider.core.storage import lifecycle
from xtrabackup_provider.core.storage.base import ARCHIVE_TAG, PutOptions, StorageError
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client

MiB = 1024 * 1024
KMS_KEY = "arn:aws:kms:us-east-1:123456789012:key/0b5e3a1c-xbp-test"


def _tags(client, bucket: str, key: str) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in client.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]}


def _open_uploads(client, bucket: str) -> list[str]:
    return [u["Key"] for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


def _keys(client, bucket: str, prefix: str = "") -> list[str]:
    return [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]


def test_backup_lands_with_storage_class_kms_sse_object_lock_and_archive_tag(mariadb, s3_server, gpg_keys):
    bucket = s3_server.make_bucket(f"xbp-lock-{uuid.uuid4().hex[:12]}", object_lock=True)
    seed_database(mariadb, unique_name("lk"), rows=200)
    catalog = Catalog(
        S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket), "backups", "c1", "db1"
    )
    before = datetime.now(UTC)
    manifest = run_backup(
        BackupRequest(
            catalog=catalog,
            target=MySQLTarget(socket=str(mariadb.socket), user="root", password=mariadb.root_password),
            public_keys=[gpg_keys.public_key],
            storage_classes={"full": "STANDARD_IA", "incremental": "STANDARD"},
            sse="aws:kms",
            kms_key_id=KMS_KEY,
            object_lock_mode="GOVERNANCE",
            object_lock_days=2,
        )
    )
    obj = manifest.backup_object
    client = s3_server.client()
    head = client.head_object(Bucket=bucket, Key=obj.key)
    assert head["StorageClass"] == "STANDARD_IA"
    assert head["ServerSideEncryption"] == "aws:kms" and head["SSEKMSKeyId"] == KMS_KEY
    assert head["ObjectLockMode"] == "GOVERNANCE"
    assert head["ObjectLockRetainUntilDate"] >= obj.object_lock_until.replace(microsecond=0)
    assert before + timedelta(days=2) <= obj.object_lock_until <= datetime.now(UTC) + timedelta(days=2)
    assert (obj.storage_class, obj.sse, obj.kms_key_id, obj.object_lock_mode) == (
        "STANDARD_IA",
        "aws:kms",
        KMS_KEY,
        "GOVERNANCE",
    )
    assert _tags(client, bucket, obj.key) == {ARCHIVE_TAG[0]: ARCHIVE_TAG[1]}
    # The manifest stays untagged in STANDARD: lifecycle transitions never make it unreadable.
    manifest_key = catalog.manifest_key(manifest.backup_id)
    assert _tags(client, bucket, manifest_key) == {}
    assert client.head_object(Bucket=bucket, Key=manifest_key).get("StorageClass", "STANDARD") == "STANDARD"
    # The lock is real: the locked version cannot be deleted.
    with pytest.raises(client.exceptions.ClientError, match="AccessDenied"):
        client.delete_object(Bucket=bucket, Key=obj.key, VersionId=head["VersionId"])
    [report] = verify(VerifyRequest(catalog))
    assert report.ok, report.problems


def test_quick_verify_flags_a_lock_or_sse_the_object_does_not_have(s3_server, bucket, tmp_path):
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(1000))
    store = S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket)
    prefix = "backups/c1/db1/backups/20260101T000000Z-full"
    manifest = upload(UploadRequest(store, src, prefix, PutOptions("STANDARD", "AES256")))
    from xtrabackup_provider.core.restore.verify import quick_problems

    obj = manifest.objects[0]
    assert quick_problems(obj, store.head(obj.key)) == []
    claimed = obj.model_copy(update={"sse": "aws:kms", "object_lock_mode": "COMPLIANCE"})
    claimed = claimed.model_copy(update={"object_lock_until": datetime.now(UTC) + timedelta(days=1)})
    problems = quick_problems(claimed, store.head(obj.key))
    assert any("server-side encryption is AES256" in p for p in problems), problems
    assert any("Object Lock is off" in p for p in problems), problems


def test_lifecycle_rules_round_trip_idempotently_and_keep_unrelated_rules(s3_server, bucket):
    from xtrabackup_provider.operators.lifecycle import BucketLifecycleOperator

    client = s3_server.client()
    theirs = [
        {"ID": "logs-expiry", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 30}},
        {"ID": "legacy", "Status": "Disabled", "Prefix": "old/", "Expiration": {"Days": 7}},
    ]
    client.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": theirs})
    before = client.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    rules = [
        {
            "id": "xbp-main",
            "prefix": "backups/main/",
            "transitions": [
                {"days": 30, "storage_class": "GLACIER_IR"},
                {"days": 120, "storage_class": "DEEP_ARCHIVE"},
            ],
            "abort_incomplete_multipart_days": 2,
        }
    ]
    op = BucketLifecycleOperator(task_id="lc", bucket=bucket, rules=rules, aws_conn_id="aws_test")
    first = op.execute({})
    assert first["written"] and first["added"] == ["xbp-main", "xbp-main-abort-mpu"]
    assert first["kept"] == ["logs-expiry", "legacy"]
    after = {r["ID"]: r for r in client.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]}
    for rule in before:
        assert after[rule["ID"]] == rule, "an unrelated rule was changed"
    assert after["xbp-main"]["Filter"] == {
        "And": {"Prefix": "backups/main/", "Tags": [{"Key": ARCHIVE_TAG[0], "Value": ARCHIVE_TAG[1]}]}
    }
    assert [(t["Days"], t["StorageClass"]) for t in after["xbp-main"]["Transitions"]] == [
        (30, "GLACIER_IR"),
        (120, "DEEP_ARCHIVE"),
    ]
    assert after["xbp-main-abort-mpu"]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 2}

    second = op.execute({})
    assert not second["written"] and second["unchanged"] == ["xbp-main", "xbp-main-abort-mpu"]
    BucketLifecycleOperator(
        task_id="chk", bucket=bucket, rules=rules, aws_conn_id="aws_test", check_only=True
    ).execute({})

    rules[0]["transitions"][1]["days"] = 365
    third = op.execute({})
    assert third["updated"] == ["xbp-main"] and third["unchanged"] == ["xbp-main-abort-mpu"]
    final = {r["ID"]: r for r in client.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]}
    assert final["xbp-main"]["Transitions"][1]["Days"] == 365
    assert {k: final[k] for k in ("logs-expiry", "legacy")} == {r["ID"]: r for r in before}

    stale = dict(rules[0], transitions=[{"days": 60, "storage_class": "GLACIER"}])
    assert any("xbp-main differs" in p for p in lifecycle.check(client, bucket, [stale]))
    with pytest.raises(lifecycle.LifecycleError, match="STANDARD_IA needs at least 30 days"):
        BucketLifecycleOperator(
            task_id="bad",
            bucket=bucket,
            rules=[{"id": "x", "transitions": [{"days": 5, "storage_class": "STANDARD_IA"}]}],
            aws_conn_id="aws_test",
        ).execute({})


def test_gpg_encrypt_then_upload_a_directory_with_a_sha256_manifest(
    s3_server, bucket, gpg_keys, tmp_path, monkeypatch
):
    from xtrabackup_provider.operators.files import BackupUploadOperator, GpgEncryptOperator

    monkeypatch.setenv(
        "AIRFLOW_CONN_XBP_UPLOAD_GPG",
        json.dumps({"conn_type": "gpgkeys", "extra": {"public_keys": [gpg_keys.public_key]}}),
    )
    outbox = tmp_path / "outbox"
    (outbox / "binlogs").mkdir(parents=True)
    secret = b"INSERT INTO t VALUES ('row that must not be readable');\n" * 2000
    (outbox / "binlogs" / "mysql-bin.000042").write_bytes(secret)
    (outbox / "notes.txt").write_text("taken by our own tool\n")
    enc = GpgEncryptOperator(
        task_id="enc",
        source_path=str(outbox / "binlogs" / "mysql-bin.000042"),
        gpg_conn_id="xbp_upload_gpg",
        remove_source=True,
    ).execute({})
    assert enc["path"].endswith("mysql-bin.000042.gpg") and enc["recipients"] == [gpg_keys.fingerprint]
    assert not (outbox / "binlogs" / "mysql-bin.000042").exists()

    out = BackupUploadOperator(
        task_id="up",
        source_path=str(outbox),
        dest_prefix="backups/c1/db1/uploads/20260101",
        bucket=bucket,
        aws_conn_id="aws_test",
        storage_class="GLACIER_IR",
        sse="AES256",
    ).execute({})
    client = s3_server.client()
    prefix = "backups/c1/db1/uploads/20260101"
    assert sorted(out["objects"]) == [f"{prefix}/binlogs/mysql-bin.000042.gpg", f"{prefix}/notes.txt"]
    manifest = UploadManifest.model_validate_json(
        client.get_object(Bucket=bucket, Key=f"{prefix}/manifest.json")["Body"].read()
    )
    for obj in manifest.objects:
        body = client.get_object(Bucket=bucket, Key=obj.key)["Body"].read()
        head = client.head_object(Bucket=bucket, Key=obj.key)
        assert hashlib.sha256(body).hexdigest() == obj.sha256 and len(body) == obj.size
        assert head["StorageClass"] == "GLACIER_IR" and head["ServerSideEncryption"] == "AES256"
        assert (obj.storage_class, obj.sse) == ("GLACIER_IR", "AES256")
    [gpg_obj] = [o for o in manifest.objects if o.key.endswith(".gpg")]
    assert gpg_obj.encryption == "gpg" and enc["sha256"] == gpg_obj.sha256
    stored = client.get_object(Bucket=bucket, Key=gpg_obj.key)["Body"].read()
    assert b"must not be readable" not in stored
    with gpg_home() as home:
        key_file = home / "k.asc"
        key_file.write_text(gpg_keys.private_key)
        run_gpg(home, "--import", str(key_file), passphrase=gpg_keys.passphrase)
        enc_file = home / "m.gpg"
        enc_file.write_bytes(stored)
        plain = run_gpg(home, "--decrypt", str(enc_file), passphrase=gpg_keys.passphrase).stdout
    assert plain == secret
    with pytest.raises(RuntimeError, match="already uploaded"):
        upload(
            UploadRequest(
                S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket), outbox, prefix
            )
        )


# -- transient faults on the upload path ------------------------------------------------------------------


def _big_file(tmp_path: Path, size: int = 20 * MiB) -> Path:
    path = tmp_path / "big.bin"
    path.write_bytes(os.urandom(size))
    return path


def test_5xx_and_throttling_are_retried_with_backoff(s3_server, bucket, tmp_path):
    budget = {"CreateMultipartUpload": [500], "UploadPart": [500, 503, 500], "CompleteMultipartUpload": [503]}
    budget["manifest"] = [500]

    def rule(op: str, path: str) -> int | None:
        name = "manifest" if op == "PutObject" and path.split("?")[0].endswith("/manifest.json") else op
        return budget[name].pop(0) if budget.get(name) else None

    proxy = S3Proxy(s3_server.endpoint_url, rule)
    proxy.start()
    try:
        store = S3Store(make_s3_client(proxy.endpoint_url, "us-east-1"), bucket)
        source = _big_file(tmp_path)
        manifest = upload(UploadRequest(store, source, "uploads/retry"))
    finally:
        proxy.stop()
    assert all(not left for left in budget.values()), f"not every fault was served: {budget}"
    assert proxy.count("UploadPart", 500) == 2 and proxy.count("UploadPart", 503) == 1
    assert proxy.count("UploadPart", 200) == 3, "20 MiB in 8 MiB parts is three parts"
    client = s3_server.client()
    [obj] = manifest.objects
    assert (
        hashlib.sha256(client.get_object(Bucket=bucket, Key=obj.key)["Body"].read()).hexdigest() == obj.sha256
    )
    assert obj.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    assert _open_uploads(client, bucket) == []


def _stop_after(s3_server, nbytes: int, then=None):
    state = {"stopped": False}

    def progress(sent: int) -> None:
        if sent >= nbytes and not state["stopped"]:
            state["stopped"] = True
            s3_server.stop()
            if then:
                then()

    return progress, state


def test_endpoint_stopped_mid_upload_and_back_within_the_retry_window(s3_server, bucket, tmp_path):
    progress, state = _stop_after(
        s3_server, 9 * MiB, then=lambda: threading.Timer(1.0, s3_server.start).start()
    )
    store = S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket)  # the product's 8 attempts
    attempts: list[int] = []
    store.client.meta.events.register("before-send.s3.UploadPart", lambda **kw: attempts.append(1))
    try:
        manifest = upload(UploadRequest(store, _big_file(tmp_path), "uploads/outage", progress=progress))
    finally:
        s3_server.start()
    assert state["stopped"], "the endpoint never went down; the test proved nothing"
    assert len(attempts) > 3, "three parts were sent without a single retry: the outage was never met"
    client = s3_server.client()
    assert _keys(client, bucket, "uploads/outage/") == [
        "uploads/outage/big.bin",
        "uploads/outage/manifest.json",
    ]
    assert _open_uploads(client, bucket) == []
    assert manifest.objects[0].size == 20 * MiB


def _short_retries(s3_server, bucket: str) -> S3Store:
    # Two attempts instead of eight: the same outcome once the client gives up, in seconds.
    return S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1", max_attempts=2), bucket)


def test_endpoint_down_mid_upload_the_abort_goes_through_once_it_is_back(s3_server, bucket, tmp_path):
    store = _short_retries(s3_server, bucket)
    aborts = []

    def endpoint_back(**kwargs) -> None:  # the endpoint returns as the run is aborting
        aborts.append(1)
        s3_server.start()

    store.client.meta.events.register("before-send.s3.AbortMultipartUpload", endpoint_back)
    source_dir = tmp_path / "dir"
    source_dir.mkdir()
    (source_dir / "a-small.txt").write_text("first file, uploaded before the outage\n")
    _big_file(source_dir)
    progress, state = _stop_after(s3_server, 9 * MiB)
    try:
        with pytest.raises(StorageError, match=r"uploads/aborted/big.bin: upload part \d failed"):
            upload(UploadRequest(store, source_dir, "uploads/aborted", progress=progress))
    finally:
        s3_server.start()
    assert state["stopped"] and aborts, "the endpoint never went down, or the run never aborted"
    client = s3_server.client()
    assert _open_uploads(client, bucket) == [], "the failed run left an open multipart upload"
    assert _keys(client, bucket) == [], "a failed upload must leave no manifest and no finished objects"


def test_endpoint_down_past_the_abort_the_next_run_cleans_up(s3_server, bucket, tmp_path):
    store = _short_retries(s3_server, bucket)
    source = _big_file(tmp_path)
    progress, state = _stop_after(s3_server, 9 * MiB)
    try:
        with pytest.raises(StorageError, match="upload part"):
            upload(UploadRequest(store, source, "uploads/stranded", progress=progress))
    finally:
        s3_server.start()
    client = s3_server.client()
    # The abort could not reach the endpoint: the upload is still open, and nothing is registered.
    assert _open_uploads(client, bucket) == ["uploads/stranded/big.bin"]
    assert "uploads/stranded/manifest.json" not in _keys(client, bucket)

    manifest = upload(
        UploadRequest(
            S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket), source, "uploads/stranded"
        )
    )
    assert _open_uploads(client, bucket) == [], "the next run did not abort the stranded upload"
    assert manifest.objects[0].sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
