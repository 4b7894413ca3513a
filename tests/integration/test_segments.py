"""Streams stored as segments (core/storage/partplan.py, segments.py; the S3 writer in s3.py):
real MariaDB, mariabackup, mbstream, gpg, and S3 through moto's HTTP server.

A store with tiny segments (PartLimits(max_parts=2) of 5 MiB parts: 10 MiB per object, where the
default holds 2.44 TiB) stands in for a 50 TB stream: a backup stored as several segments restores
row for row (one stream and K parts) and passes its restore test, verify --deep passes, a copy copies every segment, a missing
or altered segment is refused by its key, retention removes every segment (every version).
"""

from __future__ import annotations

import hashlib
import os
from datetime import timedelta

import pytest

from helpers import (
    deep_verify,
    restore_with,
    restored_checksums,
    retention_apply_keep_last_chain,
    seed_database,
    take_backup,
    unique_name,
)
from xtrabackup_provider.core.backup.copies import CopyTarget, copy_host
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.restore.chain import RestoreError
from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test
from xtrabackup_provider.core.restore.verify import VerifyRequest, verify
from xtrabackup_provider.core.storage.base import MiB, PutOptions, StorageError
from xtrabackup_provider.core.storage.local import LocalStore
from xtrabackup_provider.core.storage.partplan import S3_MIN_PART_SIZE, PartLimits, summarize
from xtrabackup_provider.core.storage.s3 import S3Store

TINY = PartLimits(memory=2 * S3_MIN_PART_SIZE, min_part=S3_MIN_PART_SIZE, max_parts=2)


def _write(store: S3Store, key: str, data: bytes, expected: int | None = None):
    writer = store.open_writer(key, PutOptions(expected_size=expected))
    for start in range(0, len(data), MiB):
        writer.write(data[start : start + MiB])
    return writer


def _keys(client, bucket: str, prefix: str) -> list[str]:
    return [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]


def test_mixed_part_sizes_complete_and_read_back_byte_identical(s3_server, bucket):
    # Size unknown: the part doubles every 2 parts, 5 -> 10 -> 20 MiB (the bound's cap).
    limits = PartLimits(memory=4 * S3_MIN_PART_SIZE, min_part=S3_MIN_PART_SIZE, grow_every=2)
    store = S3Store(s3_server.client(), bucket, part_limits=limits)
    data = os.urandom(61 * MiB + 123)
    writer = _write(store, "mixed/object", data)
    assert writer.commit() == len(data)
    assert writer.segments == []  # one object
    assert b"".join(store.read_chunks("mixed/object")) == data
    plan = summarize(len(data), None, limits)
    head = store.client.head_object(Bucket=bucket, Key="mixed/object")
    print(
        f"parts {plan.parts}, sizes {plan.smallest_part // MiB}..{plan.largest_part // MiB} MiB, ETag {head['ETag']}"
    )
    assert (plan.smallest_part, plan.largest_part) == (5 * MiB, 10 * MiB)
    assert head["ETag"].strip('"').endswith(f"-{plan.parts[0]}")
    assert writer.peak_held <= limits.memory


def test_a_stream_rolls_over_into_segments_visible_only_after_commit_and_abort_leaves_nothing(
    s3_server, bucket
):
    client = s3_server.client()
    store = S3Store(client, bucket, part_limits=TINY)
    data = os.urandom(27 * MiB + 5)
    writer = _write(store, "seg/object", data)
    assert _keys(client, bucket, "seg/") == []  # nothing visible before commit
    writer.commit()
    keys = [s.key for s in writer.segments]
    assert keys == ["seg/object", "seg/object.s001", "seg/object.s002"]
    assert _keys(client, bucket, "seg/") == keys
    assert b"".join(b"".join(store.read_chunks(k)) for k in keys) == data
    at = 0
    for seg in writer.segments:
        assert hashlib.sha256(data[at : at + seg.size]).hexdigest() == seg.sha256
        at += seg.size
    assert at == len(data) and writer.peak_held <= TINY.memory

    aborted = _write(store, "gone/object", data)
    aborted.abort()
    assert _keys(client, bucket, "gone/") == []
    assert store.open_multipart_uploads("gone/") == []

    # A run that died mid-stream leaves one open upload per segment: the stale-upload abort takes all.
    _write(store, "dead/object", data)
    assert sorted(store.open_multipart_uploads("dead/")) == keys_of("dead/object", 3)
    assert sorted(store.abort_stale_uploads("dead/", timedelta(0))) == keys_of("dead/object", 3)
    assert store.open_multipart_uploads("dead/") == [] and _keys(client, bucket, "dead/") == []


def keys_of(key: str, segments: int) -> list[str]:
    return [key] + [f"{key}.s{i:03d}" for i in range(1, segments)]


def _add_random_rows(server: SandboxServer, db: str, rows: int, first: int = 1) -> None:
    # Incompressible bytes, so that the stored stream is several 10 MiB segments long.
    server.execute_script(
        f"CREATE TABLE IF NOT EXISTS {db}.noise (id INT PRIMARY KEY, b VARBINARY(1024)) ENGINE=InnoDB;\n"
        f"INSERT INTO {db}.noise SELECT seq, RANDOM_BYTES(1024) FROM seq_{first}_to_{first + rows - 1};\n"
        f"ANALYZE TABLE {db}.noise;\n",  # the sizes the backup records as the source's shape
        database=db,
    )


def test_a_backup_stored_as_segments_restores_verifies_copies_and_a_bad_segment_is_refused_by_name(
    mariadb, gpg_keys, s3_server, bucket, tmp_path
):
    db = unique_name("seg")
    seed_database(mariadb, db, rows=2000)
    _add_random_rows(mariadb, db, 24_000)
    client = s3_server.client()
    catalog = Catalog(S3Store(client, bucket, part_limits=TINY), "backups", "c1", "db1")
    full = take_backup(mariadb, catalog, gpg_keys, "full")
    _add_random_rows(mariadb, db, 24_000, first=24_001)
    inc = take_backup(mariadb, catalog, gpg_keys, "incremental", parts=2)
    expected = table_checksums(mariadb, [db])

    stream = full.objects[0]
    assert stream.segments and len(stream.segments) >= 3, stream
    assert inc.format_version == 2 and inc.objects[0].segments, inc.objects
    for m in (full, inc):
        for obj in m.objects:
            for piece in obj.pieces():
                assert client.head_object(Bucket=bucket, Key=piece.key)["ContentLength"] == piece.size
        report = deep_verify(catalog, gpg_keys, m.backup_id)
        assert report.ok, report.problems
    print(
        f"full: {len(stream.segments)} segments {[s.size for s in stream.segments]}; inc parts: "
        f"{[len(o.segments or [0]) for o in inc.objects]}"
    )

    target = tmp_path / "r1" / "data"
    restore_with(catalog, gpg_keys, target)
    assert restored_checksums(target, tmp_path / "r1", [db]) == expected

    tested = run_restore_test(
        RestoreTestRequest(
            catalog,
            tmp_path / "rt",
            inc.backup_id,
            private_key=gpg_keys.private_key,
            passphrase=gpg_keys.passphrase,
        )
    )
    assert tested.verdict == "pass", tested.reasons

    # A copy to a second bucket copies every segment (the target segments by its own plan).
    second = s3_server.make_bucket(f"xbp-seg2-{unique_name('b')[2:]}")
    report = copy_host(
        catalog, CopyTarget("offsite", S3Store(client, second, part_limits=TINY), prefix="far")
    )
    assert report.error is None, report
    far = Catalog(S3Store(client, second), "far", "c1", "db1")
    copied = far.get(full.backup_id).objects[0]
    assert [p.size for p in copied.pieces()] == [p.size for p in stream.pieces()]
    assert set(_keys(client, second, "far/")) >= {
        k for m in (full, inc) for o in far.get(m.backup_id).objects for k in o.keys
    }
    target = tmp_path / "r2" / "data"
    restore_with(far, gpg_keys, target)
    assert restored_checksums(target, tmp_path / "r2", [db], server_id=901) == expected
    # To a directory: one file holds the whole stream (no segments there), the same bytes.
    assert copy_host(catalog, CopyTarget("vault", LocalStore(tmp_path / "vault"))).error is None
    in_vault = Catalog(LocalStore(tmp_path / "vault"), "backups", "c1", "db1").get(full.backup_id).objects[0]
    assert in_vault.segments is None and (in_vault.size, in_vault.sha256) == (stream.size, stream.sha256)
    assert hashlib.sha256((tmp_path / "vault" / in_vault.key).read_bytes()).hexdigest() == stream.sha256

    # An altered segment: same size, one byte flipped.
    seg1 = stream.pieces()[1]
    original = b"".join(catalog.store.read_chunks(seg1.key))
    damaged = bytearray(original)
    damaged[len(damaged) // 2] ^= 0x01
    client.put_object(Bucket=bucket, Key=seg1.key, Body=bytes(damaged))
    deep = deep_verify(catalog, gpg_keys, full.backup_id)
    print("altered:", deep.problems)
    assert not deep.ok and any(seg1.key + " " in p or f"segment {seg1.key}" in p for p in deep.problems)
    with pytest.raises((RestoreError, StorageError, RuntimeError), match=rf"segment {seg1.key} "):
        restore_with(catalog, gpg_keys, tmp_path / "r3" / "data")

    # A missing segment: refused before anything is downloaded, by its key.
    client.delete_object(Bucket=bucket, Key=seg1.key)
    [quick] = verify(VerifyRequest(catalog, [full.backup_id]))
    print("missing:", quick.problems)
    assert quick.problems == [f"{seg1.key}: missing (segment of a {len(stream.segments)}-segment stream)"]
    with pytest.raises(RestoreError, match=rf"backup {full.backup_id}: object {seg1.key} is missing"):
        restore_with(catalog, gpg_keys, tmp_path / "r4" / "data")


def _versions(client, bucket: str, prefix: str) -> list[str]:
    out = []
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        out += [v["Key"] for v in page.get("Versions", [])] + [
            d["Key"] for d in page.get("DeleteMarkers", [])
        ]
    return out


def test_retention_removes_every_segment_and_every_version_of_a_deletedtake_backup(
    mariadb, gpg_keys, s3_server, tmp_path
):
    bucket = s3_server.make_bucket(f"xbp-segv-{unique_name('b')[2:]}", versioning=True)
    client = s3_server.client()
    db = unique_name("segret")
    seed_database(mariadb, db, rows=500)
    _add_random_rows(mariadb, db, 16_000)
    catalog = Catalog(S3Store(client, bucket, part_limits=TINY), "backups", "c1", "db1")
    old = take_backup(mariadb, catalog, gpg_keys, "full")
    new = take_backup(mariadb, catalog, gpg_keys, "full")
    doomed = old.objects[0].keys
    assert len(doomed) >= 2 and set(doomed) <= set(_versions(client, bucket, "backups/"))

    proc = retention_apply_keep_last_chain(tmp_path, s3_server.endpoint_url, bucket)
    assert proc.returncode == 0, proc.stderr
    left = _versions(client, bucket, "backups/")
    assert not [k for k in left if f"/{old.backup_id}/" in k], left
    assert catalog.backup_ids() == [new.backup_id]
    assert set(new.objects[0].keys) <= set(left)
