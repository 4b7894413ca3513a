"""A K-part backup commits all or nothing: when part j's commit fails, the parts committed before
it are deleted (or named, when Object Lock keeps them), no manifest is written, no upload is left
open, and the next run registers a whole backup. In a restore, a part that fails stops the
download of the others.

Real components: a MariaDB sandbox, mariabackup, gpg, moto over HTTP behind faultkit's S3 proxy,
which answers 500 to the CompleteMultipartUpload of one part.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from faultkit import open_uploads, s3_catalog, short_retry_client, snapshot, target

from helpers import restore_with, restored_checksums, unique_name
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.pipeline.process import PipelineError
from xtrabackup_provider.core.storage.base import StorageError
from xtrabackup_provider.core.storage.s3 import S3Store

PREFIX = "backups/c1/db1/backups/"


def _request(catalog, server, gpg_keys, **kw) -> BackupRequest:
    return BackupRequest(
        catalog=catalog,
        target=target(server),
        kind="full",
        public_keys=[gpg_keys.public_key],
        max_parts=2,
        part_min_bytes=0,
        **kw,
    )


def _fail_commit_of(name: str):
    return lambda op, path: 500 if op == "CompleteMultipartUpload" and name in path else None


@pytest.mark.parametrize("failing", [".p1of2.", ".tail."])
def test_part_j_failing_to_commit_removes_the_committed_parts_and_registers_nothing(
    seeded, s3_server, bucket, gpg_keys, proxy, tmp_path, failing
):
    server, db = seeded
    proxy.rule = _fail_commit_of(failing)
    catalog = s3_catalog(proxy.endpoint_url, bucket, client=short_retry_client(proxy.endpoint_url))
    with pytest.raises(PipelineError) as excinfo:
        run_backup(_request(catalog, server, gpg_keys))
    message = str(excinfo.value)
    print("error:", message)
    assert "could not be committed" in message and "were removed" in message, message
    assert proxy.count("CompleteMultipartUpload", 200) >= 1, "no part was committed before the failure"
    left = [k for k in snapshot(s3_server.client(), bucket, PREFIX) if "/lock" not in k]
    assert left == [], f"objects of the failed backup are left: {left}"
    assert open_uploads(s3_server.client(), bucket) == []
    assert catalog.backup_ids() == []

    proxy.rule = lambda op, path: None  # the endpoint is well again: the next run is whole
    manifest = run_backup(_request(catalog, server, gpg_keys))
    assert len(manifest.streams) == 3, manifest.streams
    expected = table_checksums(server, [db])
    restore_with(catalog, gpg_keys, tmp_path / "restored" / "data")
    assert (
        restored_checksums(tmp_path / "restored" / "data", tmp_path / "sb", [db], server_id=951) == expected
    )


def test_parts_that_object_lock_keeps_are_named_in_the_error(seeded, s3_server, gpg_keys, proxy):
    server, _db = seeded
    bucket = s3_server.make_bucket(f"xbp-lock-{uuid.uuid4().hex[:12]}", object_lock=True)
    proxy.rule = _fail_commit_of(".tail.")
    catalog = s3_catalog(proxy.endpoint_url, bucket, client=short_retry_client(proxy.endpoint_url))
    with pytest.raises(PipelineError) as excinfo:
        run_backup(_request(catalog, server, gpg_keys, object_lock_mode="COMPLIANCE", object_lock_days=1))
    message = str(excinfo.value)
    print("error:", message)
    kept = [k for k in snapshot(s3_server.client(), bucket, PREFIX) if ".p0of2." in k or ".p1of2." in k]
    assert kept, "Object Lock kept nothing: the test tests nothing"
    assert "Object Lock keeps" in message and all(k.rsplit("/", 1)[-1] in message for k in kept), message
    assert catalog.backup_ids() == []


def _incompressible(server, database: str, mib: int) -> None:
    """A table of `mib` MiB that zstd cannot shrink (its own .ibd: one part of the backup holds it)."""
    row = "CONCAT(" + ", ".join(f"UNHEX(SHA2(CONCAT(seq, '-{i}'), 512))" for i in range(16)) + ")"
    server.execute_script(
        f"""
        CREATE DATABASE `{database}`;
        USE `{database}`;
        CREATE TABLE `{database}`.noise (id INT PRIMARY KEY, b BLOB) ENGINE=InnoDB;
        INSERT INTO `{database}`.noise SELECT seq, {row} FROM seq_1_to_{mib * 1024};
        """
    )


def test_a_part_failing_in_a_restore_stops_the_other_downloads(
    seeded, s3_server, bucket, gpg_keys, proxy, tmp_path
):
    server, _db = seeded
    _incompressible(server, unique_name("noise"), 4)
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    manifest = run_backup(_request(catalog, server, gpg_keys))
    big, small = sorted((o for o in manifest.streams if o.role == "part"), key=lambda o: -o.size)
    chunk = 64 * 1024
    ranges = -(-big.size // chunk)
    assert ranges >= 12, f"the largest part is {big.size} bytes: too small to see its download stop"

    # The small part's every GET fails; the big part's GETs wait until the small one has failed
    # for good (both attempts of one range), then go on: what the big part fetches after that is
    # what nothing stopped.
    failed_for_good = threading.Event()
    attempts: dict[str, int] = {}

    def rule(op: str, path: str) -> int | None:
        if not op.startswith("GET "):
            return None
        if small.key in path:
            attempts[path] = attempts.get(path, 0) + 1
            if attempts[path] >= 2:
                failed_for_good.set()
            return 500
        if big.key in path:
            failed_for_good.wait(60)
        return None

    proxy.rule = rule
    store = S3Store(short_retry_client(proxy.endpoint_url), bucket, read_chunk=chunk)
    target_dir = tmp_path / "restored" / "data"
    with pytest.raises((PipelineError, StorageError)) as excinfo:
        restore_with(Catalog(store, "backups", "c1", "db1"), gpg_keys, target_dir)
    message = str(excinfo.value)
    print("error:", message)
    assert small.key in message and "stopped" not in message, message
    fetched = proxy.count(f"GET /{bucket}/{big.key}")
    print(f"the big part: {fetched} of {ranges} ranges fetched")
    assert fetched < ranges, (
        f"the big part was downloaded whole ({fetched} ranges) after the small one failed"
    )
    assert not target_dir.exists() or not any(target_dir.iterdir())
