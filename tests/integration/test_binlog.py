"""Binlog shipping on real components: a MariaDB sandbox, mariadb-binlog over the replication
protocol, zstd + gpg, and S3 through moto's HTTP server."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time

import pytest
import zstandard

from helpers import gpg_home, purge_binlogs_to, run_gpg, unique_name, wait_for
from xtrabackup_provider.cli import main as cli_main
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog, BinlogError, BinlogGapError
from xtrabackup_provider.core.binlog.events import event_frames, summarize
from xtrabackup_provider.core.binlog.follow import ship_continuous
from xtrabackup_provider.core.binlog.listing import XID_EVENT
from xtrabackup_provider.core.binlog.ship import (
    BinlogShipper,
    ShipReport,
    ShipRequest,
    is_shipped,
    lag_target,
    ship_binlogs,
)
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.db.server import MySQLTarget, server_facts
from xtrabackup_provider.core.pitr.plan import PitrError, PitrTarget, make_plan
from xtrabackup_provider.core.pitr.recover import PitrRequest, fetch_binlogs, point_in_time_restore
from xtrabackup_provider.core.retention.apply import retention_items
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client


def _catalog(s3_server, bucket: str) -> Catalog:
    return Catalog(
        S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket), "backups", "c1", "db1"
    )


def _target(server) -> MySQLTarget:
    return MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)


def _request(server, catalog, gpg_keys, **kw) -> ShipRequest:
    return ShipRequest(catalog=catalog, target=_target(server), public_keys=[gpg_keys.public_key], **kw)


def _write(server, db: str, rows: int, flush: bool = False) -> str:
    """Insert `rows` rows in one transaction each; returns the GTID of the last one."""
    conn = server.connect()
    try:
        cur = conn.cursor()
        for _ in range(rows):
            cur.execute(f"INSERT INTO `{db}`.t (v) VALUES (REPEAT('x', 100))")
        cur.execute("SELECT @@last_gtid")
        gtid = cur.fetchone()[0]
        if flush:
            cur.execute("FLUSH BINARY LOGS")
        return str(gtid)
    finally:
        conn.close()


def _table(server) -> str:
    db = unique_name("bl")
    server.query(f"CREATE DATABASE `{db}`")
    server.query(f"CREATE TABLE `{db}`.t (id INT AUTO_INCREMENT PRIMARY KEY, v TEXT) ENGINE=InnoDB")
    return db


def _decrypt(data: bytes, gpg_keys) -> bytes:
    with gpg_home() as home:
        (home / "key.asc").write_text(gpg_keys.private_key)
        run_gpg(home, "--import", str(home / "key.asc"), passphrase=gpg_keys.passphrase)
        (home / "obj.gpg").write_bytes(data)
        run_gpg(
            home,
            "--output",
            str(home / "obj"),
            "--decrypt",
            str(home / "obj.gpg"),
            passphrase=gpg_keys.passphrase,
        )
        compressed = (home / "obj").read_bytes()
    return zstandard.ZstdDecompressor().stream_reader(compressed).read()


def _listing(s3_server, bucket: str) -> dict[str, tuple[str, int]]:
    client = make_s3_client(s3_server.endpoint_url, "us-east-1")
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {o["Key"]: (o["ETag"], o["Size"]) for page in pages for o in page.get("Contents", [])}


def test_closed_binlogs_ship_encrypted_byte_for_byte_and_a_second_run_ships_nothing(
    mariadb, s3_server, bucket, gpg_keys
):
    db = _table(mariadb)
    first_gtid = _write(mariadb, db, 3, flush=True)
    last_gtid = _write(mariadb, db, 5, flush=True)
    _write(mariadb, db, 2)  # stays in the open binlog
    catalog = _catalog(s3_server, bucket)

    report = ship_binlogs(_request(mariadb, catalog, gpg_keys))
    server_logs = [r[0] for r in mariadb.query("SHOW BINARY LOGS")]
    assert report.shipped == server_logs[:-1], "every closed binlog, and only those, is shipped"
    assert report.open_binlog == server_logs[-1]

    uuid = server_facts(_target(mariadb)).server_uuid
    index = BinlogCatalog(catalog, uuid).index()
    for name in report.shipped:
        manifest = index.complete[name]
        original = (mariadb.datadir / name).read_bytes()
        assert manifest.size == len(original) and manifest.sha256 == hashlib.sha256(original).hexdigest()
        key = manifest.segments[0].object.key
        assert key.startswith(f"backups/c1/db1/binlogs/{uuid}/{name}.") and key.endswith(".zst.gpg")
        stored = catalog.store.get_bytes(key)
        assert b"REPEAT" not in stored and b"\xfebin" not in stored, "the stored object is not encrypted"
        assert _decrypt(stored, gpg_keys) == original
        assert manifest.segments[0].object.recipients == [gpg_keys.fingerprint]
        assert manifest.first_event_time and manifest.last_event_time
    # The GTID ranges in the manifests are the transactions written.
    shipped_last = [index.complete[n].gtid_last for n in report.shipped]
    assert first_gtid in shipped_last and last_gtid in shipped_last

    # Retention sees each shipped binlog with its manifest as the marker it deletes first.
    items = {i.name: i for i in retention_items(catalog)}
    assert sorted(items) == report.shipped
    listed = _listing(s3_server, bucket)
    assert all(i.key in listed and set(i.marker_keys) <= set(listed) for i in items.values())

    before = _listing(s3_server, bucket)
    again = ship_binlogs(_request(mariadb, catalog, gpg_keys))
    assert again.shipped == [] and again.already_shipped == len(report.shipped)
    assert _listing(s3_server, bucket) == before, "a second run must not upload or rewrite anything"

    # flush=True closes the open binlog first, so it ships too.
    flushed = ship_binlogs(_request(mariadb, catalog, gpg_keys, flush=True))
    assert flushed.shipped == [server_logs[-1]]


def test_purged_binlog_is_detected_recorded_and_pitr_refuses_to_cross_it(
    mariadb, s3_server, bucket, gpg_keys
):
    db = _table(mariadb)
    catalog = _catalog(s3_server, bucket)
    _write(mariadb, db, 2, flush=True)
    ship_binlogs(_request(mariadb, catalog, gpg_keys))
    run_backup(BackupRequest(catalog=catalog, target=_target(mariadb), allow_unencrypted=True, kind="full"))
    lost = [_write(mariadb, db, 2, flush=True) for _ in range(2)]
    logs = [r[0] for r in mariadb.query("SHOW BINARY LOGS")]
    purged = purge_binlogs_to(mariadb, logs[-1])  # nothing after the backup was shipped
    missing = [n for n in logs[1:] if n in purged]
    assert missing, "the purge removed nothing: the test would prove nothing"

    with pytest.raises(BinlogGapError) as info:
        ship_binlogs(_request(mariadb, catalog, gpg_keys))
    message = str(info.value)
    assert f"{missing[0]}..{missing[-1]}" in message and "purged" in message and "full backup" in message
    index = BinlogCatalog(catalog, server_facts(_target(mariadb)).server_uuid).index()
    assert [(g.first_missing, g.last_missing) for g in index.gaps] == [(missing[0], missing[-1])]

    # The next run knows the gap: it ships what is new and does not fail again.
    _write(mariadb, db, 1, flush=True)
    assert ship_binlogs(_request(mariadb, catalog, gpg_keys)).shipped == [logs[-1]]

    with pytest.raises(PitrError, match="gap") as pitr:
        make_plan(catalog, PitrTarget.at_gtid(lost[-1]))
    assert missing[0] in str(pitr.value)


def test_the_binlog_a_crashed_server_was_writing_ships_once_it_is_back(mariadb, s3_server, bucket, gpg_keys):
    """A server killed (SIGKILL, an OOM kill) leaves the binlog it was writing without a rotate or
    stop event; restarted, it lists that binlog closed at its size. It ships as it is, and a
    point-in-time recovery reaches through it (found by the chaos run: shipping refused it forever)."""
    db = _table(mariadb)
    catalog = _catalog(s3_server, bucket)
    run_backup(BackupRequest(catalog=catalog, target=_target(mariadb), allow_unencrypted=True, kind="full"))
    before_crash = _write(mariadb, db, 5)
    crashed = str(mariadb.query("SHOW MASTER STATUS")[0][0])
    mariadb.kill()
    mariadb.start()
    after_crash = _write(mariadb, db, 3, flush=True)

    report = ship_binlogs(_request(mariadb, catalog, gpg_keys))
    assert crashed in report.shipped
    index = BinlogCatalog(catalog, server_facts(_target(mariadb)).server_uuid).index()
    assert index.complete[crashed].gtid_last == before_crash
    assert index.complete[crashed].size == (mariadb.datadir / crashed).stat().st_size
    plan = make_plan(catalog, PitrTarget.at_gtid(after_crash))
    assert crashed in [m.name for m in plan.binlogs] and plan.binlogs[-1].gtid_last == after_crash


def test_continuous_mode_ships_the_open_binlog_within_seconds_and_resumes(
    mariadb, s3_server, bucket, gpg_keys, tmp_path
):
    db = _table(mariadb)
    catalog = _catalog(s3_server, bucket)
    target = _target(mariadb)
    stop = threading.Event()
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["report"] = ship_continuous(
                _request(mariadb, catalog, gpg_keys), duration=120, progress_interval=0.5, stop=stop
            )
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertions below
            result["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    try:
        gtid = _write(mariadb, db, 3)
        point = lag_target(target)
        wait_for(lambda: is_shipped(catalog, point) or "error" in result, 30, 0.2, "progress upload")
        assert "error" not in result, result
        assert is_shipped(catalog, lag_target(target, gtid))
        open_name = point.file
        assert open_name is not None
        uuid = point.server_uuid
        partial = BinlogCatalog(catalog, uuid).index().partial[open_name]
        assert not partial.complete and partial.size >= point.position

        mariadb.query("FLUSH BINARY LOGS")  # closes it: shipped whole, segments dropped
        wait_for(lambda: open_name in BinlogCatalog(catalog, uuid).index().complete, 30, 0.2, "rotation")
        _write(mariadb, db, 2)
        resumed_from = lag_target(target)
        wait_for(lambda: is_shipped(catalog, resumed_from), 30, 0.2, "progress of the new binlog")
    finally:
        stop.set()
        worker.join(60)
    assert "error" not in result, result
    index = BinlogCatalog(catalog, uuid).index()
    assert open_name in index.complete and open_name not in index.partial
    keys = {i.key for i in catalog.store.list(f"backups/c1/db1/binlogs/{uuid}/{open_name}.partial")}
    assert not keys, f"segments of a binlog shipped whole are removed: {keys}"
    assert (
        index.complete[open_name].sha256
        == hashlib.sha256((mariadb.datadir / open_name).read_bytes()).hexdigest()
    )

    # A second run adopts the stored segments of the open binlog and only adds what is new.
    current = resumed_from.file
    assert current is not None
    before = [s.object.key for s in index.partial[current].segments]
    gtid = _write(mariadb, db, 2)
    # Followed until its progress is stored, however long the machine takes to get there.
    again: dict[str, object] = {}
    second = threading.Event()

    def resume() -> None:
        try:
            again["report"] = ship_continuous(
                _request(mariadb, catalog, gpg_keys), duration=120, progress_interval=0.2, stop=second
            )
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertions below
            again["error"] = exc

    follower = threading.Thread(target=resume)
    follower.start()
    try:
        wanted = lag_target(target, gtid)
        wait_for(lambda: is_shipped(catalog, wanted) or "error" in again, 60, 0.2, "the resumed progress")
    finally:
        second.set()
        follower.join(60)
    assert "error" not in again, again
    report = again["report"]
    assert isinstance(report, ShipReport)
    after = BinlogCatalog(catalog, uuid).index().partial[current]
    assert [s.object.key for s in after.segments][: len(before)] == before
    assert len(after.segments) > len(before) and report.open_binlog == current
    assert is_shipped(catalog, lag_target(target, gtid))

    # The segments, fetched and decrypted as PITR does, are the server's binlog up to that size.
    request = PitrRequest(
        catalog,
        tmp_path / "unused",
        PitrTarget.at_gtid(gtid),
        private_key=gpg_keys.private_key,
        passphrase=gpg_keys.passphrase,
    )
    (copy,) = fetch_binlogs(request, [after], tmp_path / "fetched")
    # The server sends an open binlog with its "in use" flag (byte 21, in the format event) cleared.
    fetched, original = copy.read_bytes(), (mariadb.datadir / current).read_bytes()[: after.size]
    assert original[21] == 1 and fetched[21] == 0
    assert fetched[:21] + fetched[22:] == original[:21] + original[22:]


def test_a_point_in_time_restore_reaches_into_the_open_binlog_continuous_shipping_stored(
    mariadb, s3_server, bucket, gpg_keys, tmp_path
):
    """Continuous shipping stores the open binlog as segments under a partial manifest: a point in
    time inside it is restorable (found by the chaos run: the read lease's check took that binlog
    for deleted by retention, since it has no complete manifest yet)."""
    db = _table(mariadb)
    catalog = _catalog(s3_server, bucket)
    run_backup(BackupRequest(catalog=catalog, target=_target(mariadb), allow_unencrypted=True, kind="full"))
    _write(mariadb, db, 3)
    gtid = _write(mariadb, db, 2)
    _write(mariadb, db, 4)  # after the target: not restored
    ship_continuous(_request(mariadb, catalog, gpg_keys), duration=1.5, progress_interval=0.2)
    open_name = str(mariadb.query("SHOW MASTER STATUS")[0][0])
    index = BinlogCatalog(catalog, server_facts(_target(mariadb)).server_uuid).index()
    assert open_name in index.partial and open_name not in index.complete

    datadir = tmp_path / "restored" / "data"
    report = point_in_time_restore(
        PitrRequest(
            catalog,
            datadir,
            PitrTarget.at_gtid(gtid),
            private_key=gpg_keys.private_key,
            passphrase=gpg_keys.passphrase,
        )  # fmt: skip
    )
    assert report.reached_gtid == gtid
    with SandboxServer.on_datadir(datadir, tmp_path / "sb", server_id=977) as restored:
        restored.start()
        assert restored.query(f"SELECT COUNT(*) FROM `{db}`.t")[0][0] == 5


def test_a_gtid_the_open_binlog_holds_only_in_part_is_refused_not_restored_short(
    mariadb, s3_server, bucket, gpg_keys, tmp_path
):
    """Continuous shipping stores the open binlog as the server sends it, so its partial manifest
    can end inside a transaction (its GTID event stored, its commit not yet): a point-in-time
    restore to that GTID must say so, not stop quietly before it."""
    db = _table(mariadb)
    catalog = _catalog(s3_server, bucket)
    run_backup(BackupRequest(catalog=catalog, target=_target(mariadb), allow_unencrypted=True, kind="full"))
    _write(mariadb, db, 2)
    target = _write(mariadb, db, 1)
    name = str(mariadb.query("SHOW MASTER STATUS")[0][0])
    copy = tmp_path / name
    shutil.copyfile(mariadb.datadir / name, copy)
    with open(copy, "rb") as fh:
        frames = list(event_frames(fh, 0, str(copy), {}))
    last_commit = max(i for i, frame in enumerate(frames) if frame[3] == XID_EVENT)
    os.truncate(copy, frames[last_commit][0])  # the target's transaction without its commit
    with BinlogShipper(_request(mariadb, catalog, gpg_keys)) as shipper:
        partial = shipper.ship_progress(copy, name, summarize(copy), None, None)
    assert partial.gtid_last == target and not partial.complete

    datadir = tmp_path / "restored" / "data"
    with pytest.raises(PitrError) as info:
        point_in_time_restore(
            PitrRequest(
                catalog,
                datadir,
                PitrTarget.at_gtid(target),
                private_key=gpg_keys.private_key,
                passphrase=gpg_keys.passphrase,
            )  # fmt: skip
        )
    assert target in str(info.value) and name in str(info.value), info.value
    assert not datadir.exists() or not any(datadir.iterdir())


def _reset_history(server, db: str) -> None:
    """The server starts a new binlog history under the old names (RESET MASTER here; in the chaos
    run a replica re-seeded from another one's backup, whose datadir holds no binlogs)."""
    time.sleep(1.1)  # a file created in another second: its format event's time differs
    server.query("RESET MASTER")
    for _ in range(3):
        _write(server, db, 40)


@pytest.mark.parametrize("mode", ["continuous", "batch"])
def test_a_new_binlog_history_under_the_old_names_is_refused_and_the_stored_one_kept(
    mariadb, s3_server, bucket, gpg_keys, mode
):
    """The open binlog of the old history is stored as a partial manifest; the server then writes
    another mysql-bin.000001. Shipping it would overwrite the old history that earlier backups'
    point-in-time recovery reads (found by the chaos run: after a re-seed, PITR to a point before
    it failed with 'Could not parse relay log event entry')."""
    db = _table(mariadb)
    catalog = _catalog(s3_server, bucket)
    _write(mariadb, db, 5)
    ship_continuous(_request(mariadb, catalog, gpg_keys), duration=1.5, progress_interval=0.2)
    bcat = BinlogCatalog(catalog, server_facts(_target(mariadb)).server_uuid)
    (name,) = bcat.index().partial
    stored = catalog.store.get_bytes(bcat.manifest_key(name, partial=True))
    _reset_history(mariadb, db)
    info = _refused_after_reset(mariadb, catalog, gpg_keys, mode)
    assert name in str(info.value), info.value
    assert catalog.store.get_bytes(bcat.manifest_key(name, partial=True)) == stored
    assert name not in bcat.index().complete
    for seg in bcat.index().partial[name].segments:
        assert catalog.store.head(seg.object.key) is not None, "a segment of the old history was deleted"


def _refused_after_reset(mariadb, catalog, gpg_keys, mode: str) -> pytest.ExceptionInfo[BinlogError]:
    """Ship (batch or continuous) after the reset: refused as a reset."""
    if mode == "batch":
        mariadb.query("FLUSH BINARY LOGS")  # the new mysql-bin.000001 is closed: batch ships closed ones
    with pytest.raises(BinlogError, match="reset") as info:
        if mode == "batch":
            ship_binlogs(_request(mariadb, catalog, gpg_keys))
        else:
            ship_continuous(_request(mariadb, catalog, gpg_keys), duration=3, progress_interval=0.2)
    return info


@pytest.mark.parametrize(
    ("mode", "backup_at"),
    [("continuous", "a later binlog"), ("batch", "further into mysql-bin.000001")],
)
def test_a_reset_before_anything_was_shipped_is_refused_against_the_servers_backup(
    mariadb, s3_server, bucket, gpg_keys, mode, backup_at
):
    """The server's backup names a binlog position; none of its binlogs is shipped yet; then its
    binlogs restart at .000001 (RESET MASTER here). The new files are no binlogs of the backup's
    history: stored under the server's name, a point-in-time recovery from the backup would read
    them from the backup's position once they reach it. Refused, naming the backup, and nothing
    stored. Found by the chaos run (seed 120503): a replica re-seeded a second time under the
    server_id its full of 3 minutes before was taken with (its unshipped binlogs went with the
    datadir) shipped its new mysql-bin.000001 under the old server's name for 10 minutes."""
    db = _table(mariadb)
    catalog = _catalog(s3_server, bucket)
    if backup_at == "a later binlog":
        _write(mariadb, db, 5, flush=True)
        _write(mariadb, db, 5, flush=True)
    else:  # the backup far into .000001, past where the new .000001 ends
        mariadb.query("RESET MASTER")
        _write(mariadb, db, 600)
    run_backup(BackupRequest(catalog=catalog, target=_target(mariadb), allow_unencrypted=True, kind="full"))
    (backup,) = catalog.manifests()
    _write(mariadb, db, 5)  # never shipped
    _reset_history(mariadb, db)
    info = _refused_after_reset(mariadb, catalog, gpg_keys, mode)
    assert backup.backup_id in str(info.value) and f"{backup.binlog_file}" in str(info.value), info.value
    index = BinlogCatalog(catalog, server_facts(_target(mariadb)).server_uuid).index()
    assert not index.complete and not index.partial, "the new history was stored under the server's name"


def test_cli_ships_and_lists_binlogs_without_airflow(mariadb, tmp_path, capsys):
    db = _table(mariadb)
    _write(mariadb, db, 2, flush=True)
    defaults = mariadb.write_client_defaults(tmp_path / "client.cnf")
    common = ["--cluster", "c1", "--host", "db1", "--local-path", str(tmp_path / "store")]
    ship = ["binlogs", "ship", *common, "--defaults-file", str(defaults), "--no-encrypt", "--flush"]
    assert cli_main(ship) == 0
    capsys.readouterr()
    assert cli_main(["binlogs", "list", *common, "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    names = [b["name"] for s in listing["servers"] for b in s["binlogs"]]
    assert names == [r[0] for r in mariadb.query("SHOW BINARY LOGS")][:-1]
    assert all(b["complete"] for s in listing["servers"] for b in s["binlogs"])


def test_after_a_server_id_change_the_binlogs_the_old_id_wrote_are_skipped_and_the_new_ones_shipped(
    mariadb, s3_server, bucket, gpg_keys, caplog
):
    """The DBA gives a server a server_id of its own (as the refusal of a new binlog history says):
    its binlog list still starts with files the old server_id wrote and this one never shipped.
    They are that server's history, not this one's: skipped with a warning naming them, and the
    new server's own binlogs shipped (found by the chaos run: after a re-seed and a new server_id,
    shipping refused 'the copy of mysql-bin.000001 was written by server_id 202' on every run,
    never shipped a binlog of the new server, and point-in-time restores from its backups failed
    with 'mysql-bin.000002 is not shipped')."""
    db = _table(mariadb)
    catalog = _catalog(s3_server, bucket)
    _write(mariadb, db, 5)  # written by the old server_id, never shipped
    old_id = mariadb.server_id
    mariadb.stop()
    mariadb.server_id = old_id + 1000
    mariadb.start()  # a new binlog, written by the new server_id
    gtid = _write(mariadb, db, 5, flush=True)

    with caplog.at_level("WARNING"):
        report = ship_binlogs(_request(mariadb, catalog, gpg_keys, accept_new_server=True))
    old_logs = [name for name, *_ in mariadb.query("SHOW BINARY LOGS")[: len(report.not_ours)]]
    assert report.not_ours and report.not_ours == old_logs, report
    assert report.shipped, "no binlog of the new server was shipped"
    assert any(
        name in r.getMessage() and str(old_id) in r.getMessage() for r in caplog.records for name in old_logs
    )
    index = BinlogCatalog(catalog, server_facts(_target(mariadb)).server_uuid).index()
    assert set(index.complete) == set(report.shipped) and not set(index.complete) & set(report.not_ours)
    assert any(m.gtid_last == gtid for m in index.complete.values()), (
        "the new server's writes are not shipped"
    )


def test_the_old_server_ids_binlogs_stay_skipped_once_the_new_server_has_shipped(
    mariadb, s3_server, bucket, gpg_keys
):
    """The runs after the first that shipped the new server_id's binlogs: the old id's files are
    still on the server, below the new server's first shipped binlog, and stay its history (chaos
    seed 120503: c1-r1, re-seeded and given server_id 211, shipped its mysql-bin.000002 at 11:15,
    then every run from 11:20 refused 'the copy of mysql-bin.000001 was written by server_id 202',
    and nothing of c1 was shipped for 26 minutes)."""
    db = _table(mariadb)
    catalog = _catalog(s3_server, bucket)
    _write(mariadb, db, 5)  # written by the old server_id, never shipped
    mariadb.stop()
    mariadb.server_id += 1000
    mariadb.start()
    _write(mariadb, db, 5, flush=True)
    first = ship_binlogs(_request(mariadb, catalog, gpg_keys, accept_new_server=True))
    assert first.not_ours and first.shipped, first

    gtid = _write(mariadb, db, 5, flush=True)
    second = ship_binlogs(_request(mariadb, catalog, gpg_keys))
    assert second.not_ours == first.not_ours and second.shipped, second
    index = BinlogCatalog(catalog, server_facts(_target(mariadb)).server_uuid).index()
    assert any(m.gtid_last == gtid for m in index.complete.values()), "the new writes are not shipped"
    assert not set(index.complete) & set(first.not_ours)


def test_a_reset_below_the_binlog_shipped_in_part_is_refused(mariadb, s3_server, bucket, gpg_keys):
    """Continuous shipping stored the open mysql-bin.000002 in part (nothing complete: the server had
    purged .000001); the server's binlogs then restart at .000001 (RESET MASTER, a re-seeded
    datadir). The new .000001 is not the next binlog of the stored history: shipping it beside the
    old .000002 would let a point-in-time recovery run from one history into the other. Found by
    the chaos run: a replica re-seeded a second time shipped its new history beside the old one."""
    db = _table(mariadb)
    catalog = _catalog(s3_server, bucket)
    _write(mariadb, db, 5, flush=True)
    (first, *_rest, last) = [r[0] for r in mariadb.query("SHOW BINARY LOGS")]

    def purged() -> bool:  # MariaDB keeps a binlog until its binlog checkpoint has passed it
        mariadb.query(f"PURGE BINARY LOGS TO '{last}'")
        return [r[0] for r in mariadb.query("SHOW BINARY LOGS")] == [last]

    wait_for(purged, timeout=60, interval=0.5, what=f"the purge of the binlogs before {last}")
    _write(mariadb, db, 5)
    ship_continuous(_request(mariadb, catalog, gpg_keys), duration=1.5, progress_interval=0.2)
    bcat = BinlogCatalog(catalog, server_facts(_target(mariadb)).server_uuid)
    assert list(bcat.index().partial) == [last] and list(bcat.index().complete) == []
    _reset_history(mariadb, db)

    with pytest.raises(BinlogError, match="reset") as info:
        ship_continuous(_request(mariadb, catalog, gpg_keys), duration=3, progress_interval=0.2)
    assert last in str(info.value) and first in str(info.value), info.value
    assert list(bcat.index().partial) == [last], "the new history was stored beside the old one"
