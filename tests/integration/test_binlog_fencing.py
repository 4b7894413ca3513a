"""A binlog shipper that lost its shipping lock (another shipper took it over while it was paused
past its lease) on real components: a MariaDB sandbox, mariadb-binlog following it, zstd + gpg,
and S3 through moto's HTTP server. Found by the chaos fault pause_shipper (tests/chaos/
test_pause_shipper.py): the resumed follower uploaded the open binlog's next segment, then its
confirm() refused to register it, and the object stayed under its own upload id, named by no
manifest; no run removes it (its holder is not proven dead, retention names only backups'
debris)."""

from __future__ import annotations

import json
import threading

from helpers import unique_name, wait_for
from xtrabackup_provider.core.binlog.follow import ship_continuous
from xtrabackup_provider.core.binlog.ship import ShipRequest, is_shipped, lag_target
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.lock import SHIP_LOCK_NAME, HostLockBusy
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client


def _write(server, db: str, rows: int) -> None:
    conn = server.connect()
    try:
        cur = conn.cursor()
        for _ in range(rows):
            cur.execute(f"INSERT INTO `{db}`.t (v) VALUES (REPEAT('x', 100))")
    finally:
        conn.close()


def test_a_follower_that_lost_its_lock_leaves_no_object_it_did_not_register(
    mariadb, s3_server, bucket, gpg_keys
):
    db = unique_name("fence")
    mariadb.query(f"CREATE DATABASE `{db}`")
    mariadb.query(f"CREATE TABLE `{db}`.t (id INT AUTO_INCREMENT PRIMARY KEY, v TEXT) ENGINE=InnoDB")
    store = S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket)
    catalog = Catalog(store, "backups", "c1", "db1")
    target = MySQLTarget(socket=str(mariadb.socket), user="root", password=mariadb.root_password)
    req = ShipRequest(catalog=catalog, target=target, public_keys=[gpg_keys.public_key])
    result: dict[str, object] = {}

    def follow() -> None:
        try:
            result["report"] = ship_continuous(req, duration=120, progress_interval=0.2)
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertions below
            result["error"] = exc

    follower = threading.Thread(target=follow)
    follower.start()
    try:
        _write(mariadb, db, 3)
        point = lag_target(target)
        wait_for(lambda: is_shipped(catalog, point) or "error" in result, 60, 0.2, "a progress upload")
        assert "error" not in result, result
        # A shipper on another machine takes the lock over (the follower's lease ran out meanwhile).
        key = f"backups/c1/db1/{SHIP_LOCK_NAME}"
        holder = json.loads(store.get_bytes(key))
        mine = str(holder["token"])[:8]  # core/binlog/ship.py upload_id: the follower's keys carry it
        holder |= {"token": "e" * 32, "hostname": "elsewhere", "machine": "elsewhere/boot", "pid": 1}
        store.put_bytes(key, json.dumps(holder).encode())
        _write(mariadb, db, 3)  # more for the follower to upload
        wait_for(lambda: "error" in result or "report" in result, 60, 0.2, "the follower to stop")
    finally:
        follower.join(180)
    error = result.get("error")
    assert isinstance(error, HostLockBusy), result
    assert "nothing was registered or deleted by this run" in str(error), error
    prefix = "backups/c1/db1/binlogs/"
    named = set()
    for info in store.list(prefix):
        if info.key.endswith(".json") and "/gaps/" not in info.key:
            manifest = json.loads(store.get_bytes(info.key))
            named |= {seg["object"]["key"] for seg in manifest.get("segments", [])}
    left = [i.key for i in store.list(prefix) if f".{mine}." in i.key and i.key not in named]
    assert left == [], f"the fenced follower left objects no manifest names and no run removes: {left}"
    assert store.get_bytes(key) == json.dumps(holder).encode(), "the new holder's lock is untouched"
