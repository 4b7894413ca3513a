"""A full backup streamed encrypted to the S3 endpoint, restored into a running server.

Real components only: a MariaDB sandbox, mariabackup/mbstream, gpg, and moto over HTTP.
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from helpers import add_orders, restore_with, root_target, seed_database, unique_name
from manifest_factory import CLUSTER, HOST, PREFIX, make_manifest
from xtrabackup_provider.core.backup.run import BackupError, BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import new_backup_id
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.db.server import MySQLTarget, server_facts
from xtrabackup_provider.core.pipeline.gpg import GpgError
from xtrabackup_provider.core.pipeline.process import PipelineError
from xtrabackup_provider.core.restore.chain import RestoreError, RestoreRequest, restore
from xtrabackup_provider.core.storage.local import LocalStore
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client


def _catalog(s3_server, bucket: str, host: str = "db1") -> Catalog:
    store = S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket)
    return Catalog(store, "backups", "c1", host)


def _target(server: SandboxServer) -> MySQLTarget:
    return MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)


def _with_blobs(server: SandboxServer, db: str, rows: int = 200) -> None:
    server.execute_script(
        f"USE `{db}`; CREATE TABLE files (id INT PRIMARY KEY, body LONGBLOB) ENGINE=InnoDB;"
        f" INSERT INTO files SELECT seq, RANDOM_BYTES(1024) FROM seq_1_to_{rows};"
    )


@pytest.fixture
def seeded(mariadb: SandboxServer) -> tuple[SandboxServer, str]:
    db = unique_name("shop")
    seed_database(mariadb, db, rows=10_000)
    _with_blobs(mariadb, db)
    return mariadb, db


def _start_restored(datadir: Path, basedir: Path) -> SandboxServer:
    server = SandboxServer.on_datadir(datadir, basedir, server_id=900)
    server.start()
    return server


def test_full_backup_is_encrypted_and_restores_identical_data(seeded, s3_server, bucket, gpg_keys, tmp_path):
    server, db = seeded
    catalog = _catalog(s3_server, bucket)
    manifest = run_backup(
        BackupRequest(catalog=catalog, target=_target(server), public_keys=[gpg_keys.public_key])
    )
    expected = table_checksums(server, [db])

    stored = catalog.store.get_bytes(manifest.backup_object.key)
    assert b"XBSTCK01" not in stored, "the stored object leaks the xbstream framing: it is not encrypted"
    assert b"customer 1" not in stored and b"example.com" not in stored, "row text is readable in the object"
    assert hashlib.sha256(stored).hexdigest() == manifest.backup_object.sha256
    assert manifest.backup_object.recipients == [gpg_keys.fingerprint]
    assert manifest.kind == "full" and manifest.from_lsn == 0 and manifest.to_lsn > 0
    assert manifest.gtid and manifest.binlog_file

    target = tmp_path / "restored" / "data"
    report = restore_with(catalog, gpg_keys, target)
    assert report.chain == [manifest.backup_id]
    assert not list((tmp_path / "restored").glob(".xbp-restore-*")), "scratch left behind"
    with _start_restored(target, tmp_path / "sb") as restored:
        assert table_checksums(restored, [db]) == expected
        assert restored.query(f"SELECT COUNT(*) FROM `{db}`.orders")[0][0] == 10_000


def test_restore_without_private_key_fails_clearly_and_leaves_target_empty(
    seeded, s3_server, bucket, gpg_keys, tmp_path
):
    server, _db = seeded
    catalog = _catalog(s3_server, bucket)
    run_backup(BackupRequest(catalog=catalog, target=_target(server), public_keys=[gpg_keys.public_key]))
    target = tmp_path / "data"
    target.mkdir()
    with pytest.raises(RestoreError, match="supply the private key"):
        restore(RestoreRequest(catalog=catalog, target_datadir=target))
    assert list(target.iterdir()) == []


def test_restore_with_the_wrong_private_key_names_the_recipients(
    seeded, s3_server, bucket, gpg_keys, other_gpg_keys, tmp_path
):
    server, _db = seeded
    catalog = _catalog(s3_server, bucket)
    run_backup(BackupRequest(catalog=catalog, target=_target(server), public_keys=[gpg_keys.public_key]))
    target = tmp_path / "data"
    with pytest.raises(GpgError, match=gpg_keys.fingerprint):
        restore_with(catalog, other_gpg_keys, target)
    assert not target.exists() or list(target.iterdir()) == []


def test_tampered_object_is_refused_before_prepare(seeded, s3_server, bucket, gpg_keys, tmp_path):
    server, _db = seeded
    catalog = _catalog(s3_server, bucket)
    manifest = run_backup(
        BackupRequest(catalog=catalog, target=_target(server), public_keys=[gpg_keys.public_key])
    )
    key = manifest.backup_object.key
    data = bytearray(catalog.store.get_bytes(key))
    data[len(data) // 2] ^= 0x01
    catalog.store.put_bytes(key, bytes(data))
    target = tmp_path / "data"
    with pytest.raises(PipelineError, match="sha256|gpg|decompress"):
        restore_with(catalog, gpg_keys, target)
    assert not target.exists() or list(target.iterdir()) == []


def _kill_backup_tool_once(datadir: Path) -> callable:
    """A progress callback that SIGKILLs the running mariabackup for `datadir` after the first bytes."""
    fired = threading.Event()

    def progress(raw_bytes: int) -> None:
        if fired.is_set() or raw_bytes < 256 * 1024:
            return
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            wanted = f"--datadir={datadir}".encode()
            if (
                argv[0].endswith(b"mariabackup")
                and b"--backup" in argv
                and any(a.startswith(wanted) for a in argv)
            ):
                os.kill(int(pid), signal.SIGKILL)
                fired.set()

    progress.fired = fired  # type: ignore[attr-defined]
    return progress


def test_killed_backup_tool_writes_no_manifest_and_no_open_upload(seeded, s3_server, bucket, gpg_keys):
    server, db = seeded
    add_orders(server, db, 50_000)  # enough data that the stream is still running when we strike
    catalog = _catalog(s3_server, bucket)
    progress = _kill_backup_tool_once(server.datadir)
    with pytest.raises(PipelineError, match=r"mariabackup --backup failed \(killed by signal 9\)"):
        run_backup(
            BackupRequest(
                catalog=catalog, target=_target(server), public_keys=[gpg_keys.public_key], progress=progress
            )
        )
    assert progress.fired.is_set(), "the backup finished before it could be killed; the test proved nothing"
    assert catalog.backup_ids() == []
    assert not [o.key for o in catalog.store.list("backups/") if o.key.endswith("manifest.json")]
    assert catalog.store.open_multipart_uploads("backups/") == []
    assert list(catalog.store.list("backups/")) == [], (
        "debris of the killed run was stored as a visible object"
    )


def test_backup_ids_follow_each_other_in_time(mariadb, gpg_keys, tmp_path):
    """Ids have one-second resolution and sort in the order backups were taken: a run that follows
    one that took under a second waits for the next second; a newest id ahead of this worker's
    clock (skew) is refused with what to fix, writing nothing."""
    catalog = Catalog(LocalStore(tmp_path / "store"), PREFIX, CLUSTER, HOST)
    request = BackupRequest(
        catalog=catalog, target=root_target(mariadb), kind="full", public_keys=[gpg_keys.public_key]
    )

    # as if this server's backup had just been taken in this second
    server = {"server_uuid": server_facts(root_target(mariadb)).server_uuid}
    this_second = new_backup_id("full")
    _register(catalog, make_manifest(this_second, **server))
    taken = run_backup(request)
    assert taken.backup_id[:16] > this_second[:16]
    assert catalog.backup_ids() == [this_second, taken.backup_id]

    ahead = new_backup_id("full", datetime.now(UTC) + timedelta(hours=1))
    _register(catalog, make_manifest(ahead, **server))
    with pytest.raises(BackupError, match=rf"{ahead}.*later than this worker's clock.*NTP"):
        run_backup(request)
    assert catalog.backup_ids() == [this_second, taken.backup_id, ahead]


def _register(catalog: Catalog, manifest) -> None:
    """A manifest with its (dummy) object, as a finished run leaves them."""
    catalog.store.put_bytes(manifest.backup_object.key, b"x" * manifest.backup_object.size)
    catalog.write(manifest)
