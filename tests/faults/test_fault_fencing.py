"""Fencing of the host lock: a run that lost its lock registers nothing, a store that ignores
conditional writes is refused, and a lease's expiry is judged by the store's own clock.

Real components: a MariaDB sandbox, mariabackup, gpg, moto over HTTP, and a real HTTP proxy in
front of moto that drops the If-None-Match / If-Match headers (an S3-compatible store that
ignores them).
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from faultkit import S3Proxy, open_uploads, s3_catalog, snapshot, target

from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.lock import LOCK_NAME, HostLock, HostLockBusy
from xtrabackup_provider.core.storage.base import StorageError

PREFIX = "backups/c1/db1/"


def _holder(expires: datetime, **over: object) -> bytes:
    """A lock body as another worker writes it."""
    body = {
        "token": "f" * 32,
        "owner": "xtrabackup-provider backup of c1/db1",
        "hostname": "worker-9.example.internal",
        "pid": 9999,
        "pid_start": 1,
        "acquired_at": (expires - timedelta(minutes=2)).isoformat(),
        "expires_at": expires.isoformat(),
        **over,
    }
    return json.dumps(body).encode()


def test_a_run_whose_lock_was_taken_over_mid_backup_registers_nothing_and_says_so(
    seeded, s3_server, bucket, gpg_keys
):
    server, _db = seeded
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    lock_key = f"{PREFIX}{LOCK_NAME}"
    streaming, finish = threading.Event(), threading.Event()

    def hold(raw_bytes: int) -> None:  # the run pauses mid-stream while another run takes the lock
        streaming.set()
        finish.wait(60)

    request = BackupRequest(
        catalog=catalog, target=target(server), public_keys=[gpg_keys.public_key], progress=hold
    )
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_backup, request)
        assert streaming.wait(60), "the backup never started streaming"
        # What a takeover does: the lock object now belongs to another run.
        catalog.store.put_bytes(lock_key, _holder(datetime.now(UTC) + timedelta(minutes=2)))
        finish.set()
        with pytest.raises(Exception) as excinfo:
            running.result(timeout=180)
    message = str(excinfo.value)
    print("error:", message)
    assert "lost the host lock" in message and lock_key in message, message
    assert "worker-9.example.internal (pid 9999)" in message, message
    assert "nothing was registered" in message, message
    assert catalog.backup_ids() == [], "a run that lost its lock registered a backup"
    assert json.loads(catalog.store.get_bytes(lock_key))["hostname"] == "worker-9.example.internal", (
        "the fenced run released (deleted) the lock of the run that took it over"
    )
    assert open_uploads(s3_server.client(), bucket) == []


def test_a_lock_lost_to_the_renewal_thread_stays_lost_even_once_the_object_is_gone(s3_server, bucket):
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    key = f"{PREFIX}{LOCK_NAME}"
    lock = HostLock(catalog, lease=timedelta(seconds=0.9))
    lock.acquire()
    try:
        catalog.store.put_bytes(key, _holder(datetime.now(UTC) + timedelta(minutes=2)))
        deadline = time.monotonic() + 30
        while lock.lost is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lock.lost is not None, "the renewal thread did not notice that the lock was taken"
        catalog.store.delete([key])  # the other run is over and released it
        with pytest.raises(HostLockBusy, match="lost the host lock"):
            lock.confirm("registering a backup")
    finally:
        lock.release()


def test_a_store_that_ignores_conditional_writes_is_refused_naming_the_endpoint(
    seeded, s3_server, bucket, gpg_keys
):
    server, _db = seeded
    proxy = S3Proxy(s3_server.endpoint_url, drop_headers=("If-None-Match", "If-Match"))
    proxy.start()
    try:
        catalog = s3_catalog(proxy.endpoint_url, bucket)
        with pytest.raises(StorageError) as excinfo:
            HostLock(catalog).acquire()
        message = str(excinfo.value)
        print("error:", message)
        assert f"s3://{bucket} at {proxy.endpoint_url}" in message, message
        assert "If-None-Match" in message and "conditional writes" in message, message
        # A backup through that endpoint is refused before it touches the server or the bucket.
        with pytest.raises(StorageError, match="conditional writes"):
            run_backup(
                BackupRequest(catalog=catalog, target=target(server), public_keys=[gpg_keys.public_key])
            )
        assert snapshot(s3_server.client(), bucket) == {}
    finally:
        proxy.stop()


def test_a_fresh_lock_whose_holder_clock_is_an_hour_behind_is_not_taken_over(s3_server, bucket):
    """The holder wrote `expires_at` with a clock an hour slow: by that date its lease ran out long
    ago, but by the store's clock the object was written a moment ago, so the holder is live."""
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    key = f"{PREFIX}{LOCK_NAME}"
    behind = datetime.now(UTC) - timedelta(hours=1)
    catalog.store.put_bytes(key, _holder(behind + timedelta(minutes=2), lease_seconds=120))
    with pytest.raises(HostLockBusy, match="worker-9.example.internal"):
        HostLock(catalog).acquire()
    assert json.loads(catalog.store.get_bytes(key))["hostname"] == "worker-9.example.internal"


def test_an_old_lock_whose_holder_clock_is_an_hour_ahead_is_taken_over(s3_server, bucket):
    """The holder's `expires_at` is an hour in the future (its clock is fast), but by the store's
    clock it has not renewed its one-second lease for several seconds: it is gone."""
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    key = f"{PREFIX}{LOCK_NAME}"
    catalog.store.put_bytes(key, _holder(datetime.now(UTC) + timedelta(hours=1), lease_seconds=1))
    time.sleep(4.2)  # lease (1 s) + the store-clock margin (2 s) + the clock's one-second resolution
    with HostLock(Catalog(catalog.store, "backups", "c1", "db1")) as lock:
        assert json.loads(catalog.store.get_bytes(key))["token"] == lock.token
