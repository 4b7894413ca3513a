"""Archived backups against the moto endpoint: restore refuses them, `glacier-restore --wait`
requests and waits, then the restore works; the trigger polls asynchronously and fires once."""

from __future__ import annotations

import asyncio
import importlib
import json
from datetime import UTC, datetime

import pytest

from glacier_helpers import finish_restores, restore_header, slow_restores
from helpers import restored_checksums, seed_database, unique_name
from xtrabackup_provider import cli
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.restore.chain import RestoreError, RestoreRequest, restore
from xtrabackup_provider.core.storage.glacier import (
    GlacierError,
    key_states,
    parse_restore_header,
    request_restores,
)
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client
from xtrabackup_provider.triggers.glacier import GlacierRestoreTrigger


def _catalog(s3_server, bucket: str) -> Catalog:
    return Catalog(
        S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket), "backups", "c1", "db1"
    )


def test_restore_header_parsing():
    assert parse_restore_header(None) == (None, None)
    assert parse_restore_header('ongoing-request="true"') == (True, None)
    ongoing, expiry = parse_restore_header(
        'ongoing-request="false", expiry-date="Fri, 23 Dec 2026 00:00:00 GMT"'
    )
    assert ongoing is False and expiry == datetime(2026, 12, 23, tzinfo=UTC)


def test_archived_backup_is_refused_then_glacier_restore_waits_and_it_restores(
    mariadb, s3_server, bucket, gpg_keys, tmp_path, capsys
):
    db = unique_name("ice")
    seed_database(mariadb, db, rows=300)
    catalog = _catalog(s3_server, bucket)
    manifest = run_backup(
        BackupRequest(
            catalog=catalog,
            target=MySQLTarget(socket=str(mariadb.socket), user="root", password=mariadb.root_password),
            public_keys=[gpg_keys.public_key],
            storage_classes={"full": "GLACIER", "incremental": "STANDARD"},
        )
    )
    key = manifest.backup_object.key
    client = s3_server.client()
    assert client.head_object(Bucket=bucket, Key=key)["StorageClass"] == "GLACIER"
    assert manifest.backup_object.storage_class == "GLACIER"
    expected = table_checksums(mariadb, [db])

    target = tmp_path / "restored" / "data"
    request = RestoreRequest(
        catalog=catalog,
        target_datadir=target,
        private_key=gpg_keys.private_key,
        passphrase=gpg_keys.passphrase,
    )
    with pytest.raises(RestoreError, match="GLACIER.*glacier-restore"):
        restore(request)
    assert not target.exists() or not any(target.iterdir())

    argv = ["glacier-restore", "--cluster", "c1", "--host", "db1", "--bucket", bucket]
    argv += ["--endpoint-url", s3_server.endpoint_url, "--tier", "Bulk", "--wait", "--poll-interval", "0.05"]
    with slow_restores(s3_server.endpoint_url, client, bucket, [key], reads=6):
        assert cli.main([*argv, "--json"]) == 0
    out = capsys.readouterr()
    rows = json.loads(out.out)
    assert [(r["key"], r["state"]) for r in rows] == [(key, "restored")]
    assert "still being restored" in out.err, "the CLI never saw the restore in progress: it did not wait"
    assert 'ongoing-request="false"' in restore_header(client, bucket, key)

    restore(request)
    assert restored_checksums(target, tmp_path / "sb", [db], server_id=931) == expected


def test_trigger_serializes_waits_while_restoring_and_fires_when_restored(s3_server, bucket):
    client = s3_server.client()
    keys = [f"backups/c1/db1/backups/20260101T000000Z-full/part{n}" for n in range(2)]
    for key in keys:
        client.put_object(Bucket=bucket, Key=key, Body=b"cold", StorageClass="DEEP_ARCHIVE")
    store = S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket)
    with slow_restores(s3_server.endpoint_url, client, bucket, keys, reads=40):
        states = request_restores(store, key_states(store, keys), "Bulk", 1)
        assert {s.state for s in states} == {"restoring"}
        classpath, kwargs = GlacierRestoreTrigger(bucket, keys, "aws_test", poll_interval=0.05).serialize()
        assert json.loads(json.dumps(kwargs)) == kwargs, "trigger kwargs must be JSON primitives"
        module, _, name = classpath.rpartition(".")
        trigger = getattr(importlib.import_module(module), name)(**kwargs)

        async def watch() -> tuple[bool, dict]:
            first = asyncio.ensure_future(anext(trigger.run()))
            await asyncio.sleep(0.5)  # several polls while the restores are still running
            fired_early = first.done()
            finish_restores(s3_server.endpoint_url)
            return fired_early, (await first).payload

        fired_early, event = asyncio.run(watch())
    assert not fired_early, "the trigger fired while the restores were still in progress"
    assert event["status"] == "restored", event
    assert [r["state"] for r in event["states"]] == ["restored", "restored"]


def test_trigger_fails_fast_when_no_restore_was_requested(s3_server, bucket):
    client = s3_server.client()
    key = "backups/c1/db1/backups/20260101T000000Z-full/cold"
    client.put_object(Bucket=bucket, Key=key, Body=b"cold", StorageClass="GLACIER")

    async def first() -> dict:
        return (
            await anext(GlacierRestoreTrigger(bucket, [key], "aws_test", poll_interval=0.05).run())
        ).payload

    event = asyncio.run(first())
    assert event["status"] == "failed" and key in event["message"]


def test_deep_archive_has_no_expedited_tier(s3_server, bucket):
    client = s3_server.client()
    key = "backups/c1/db1/backups/20260101T000000Z-full/deep"
    client.put_object(Bucket=bucket, Key=key, Body=b"cold", StorageClass="DEEP_ARCHIVE")
    store = S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket)
    with pytest.raises(GlacierError, match="DEEP_ARCHIVE.*no Expedited"):
        request_restores(store, key_states(store, [key]), "Expedited", 1)
    assert restore_header(client, bucket, key) is None, "nothing may be requested after a refusal"
