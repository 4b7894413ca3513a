"""Faults during a backup lose nothing: a clear failure or a retry that succeeds, never a manifest
over partial data, never an open multipart upload, never a kept backup touched.

Real components: a MariaDB sandbox, mariabackup, gpg, and moto over HTTP, reached through a real
HTTP proxy that can answer 500 or stop listening. The only code we break on purpose is our own
(a worker killed right before it writes the manifest).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from faultkit import (
    ProcScanner,
    open_uploads,
    s3_catalog,
    short_retry_client,
    snapshot,
    target,
    wait_next_second,
)

from helpers import (
    add_orders,
    cli,
    restore_with,
    restored_checksums,
    seed_database,
    unique_name,
    wait_for,
)
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.lock import LOCK_NAME, HostLock, HostLockBusy
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.pipeline.gpg import GpgError
from xtrabackup_provider.core.pipeline.process import PipelineError
from xtrabackup_provider.core.storage.base import StorageError
from xtrabackup_provider.core.storage.local import LocalStore

PREFIX = "backups/c1/db1/"


def _request(catalog: Catalog, server: SandboxServer, gpg_keys, **kw) -> BackupRequest:
    return BackupRequest(catalog=catalog, target=target(server), public_keys=[gpg_keys.public_key], **kw)


def _kept(catalog: Catalog, server: SandboxServer, gpg_keys) -> Manifest:
    """A good backup taken before the fault: it must come out of the fault untouched."""
    return run_backup(_request(catalog, server, gpg_keys, kind="full"))


def _assert_untouched(s3_server, bucket: str, before: dict, kept: Manifest) -> None:
    after = snapshot(s3_server.client(), bucket, f"{PREFIX}backups/{kept.backup_id}/")
    assert after == before, f"the kept backup {kept.backup_id} was modified: {before} -> {after}"


def _assert_restores(catalog: Catalog, gpg_keys, tmp_path: Path, expected: dict[str, int], db: str) -> None:
    """The newest backup restores to exactly the data it was taken from."""
    target_dir = tmp_path / "restored" / "data"
    restore_with(catalog, gpg_keys, target_dir)
    assert restored_checksums(target_dir, tmp_path / "sb", [db], server_id=950) == expected


def _assert_stored_as_recorded(catalog: Catalog, manifest: Manifest) -> None:
    """The registered object is exactly what the manifest says (size and sha256), read back over HTTP."""
    import hashlib

    data = catalog.store.get_bytes(manifest.backup_object.key)
    assert len(data) == manifest.backup_object.size
    assert hashlib.sha256(data).hexdigest() == manifest.backup_object.sha256


def _proc_argvs() -> list[tuple[int, list[bytes]]]:
    """argv of our own descendants: other test runs on this machine are never touched."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and ProcScanner.descends_from(int(pid), os.getpid()):
            try:
                out.append((int(pid), Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")))
            except OSError:
                continue
    return out


def _kill_when_streaming(match: Callable[[list[bytes]], bool]) -> Callable[[int], None]:
    """A progress callback that SIGKILLs the first process matching `match` once bytes flow."""
    fired = threading.Event()

    def progress(raw_bytes: int) -> None:
        if fired.is_set() or raw_bytes < 256 * 1024:
            return
        for pid, argv in _proc_argvs():
            if match(argv):
                os.kill(pid, signal.SIGKILL)
                fired.set()
                return

    progress.fired = fired  # type: ignore[attr-defined]
    return progress


# -- a stage of the stream dies -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stage", "match", "error"),
    [
        (
            "backup tool",
            lambda argv: argv[0].endswith(b"mariabackup") and b"--backup" in argv,
            r"mariabackup --backup failed \(killed by signal 9\)",
        ),
        (
            "gpg",
            lambda argv: argv[0].endswith(b"gpg") and b"--encrypt" in argv and b"--recipient" in argv,
            r"gpg --encrypt failed \(killed by signal 9\)",
        ),
    ],
)
def test_a_stage_killed_mid_stream_registers_nothing_and_a_retry_succeeds(
    stage, match, error, seeded, s3_server, bucket, gpg_keys, tmp_path
):
    server, db = seeded
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    kept = _kept(catalog, server, gpg_keys)
    kept_objects = snapshot(s3_server.client(), bucket, f"{PREFIX}backups/{kept.backup_id}/")
    everything = snapshot(s3_server.client(), bucket)
    add_orders(server, db, 2000)

    wait_next_second(kept.started_at)
    progress = _kill_when_streaming(match)
    with pytest.raises(PipelineError, match=error):
        run_backup(_request(catalog, server, gpg_keys, progress=progress))
    assert progress.fired.is_set(), f"the {stage} was never killed; the test proved nothing"

    assert catalog.backup_ids() == [kept.backup_id], "a backup was registered over a killed stream"
    assert open_uploads(s3_server.client(), bucket) == []
    assert snapshot(s3_server.client(), bucket) == everything, "the failed run left objects behind"
    _assert_untouched(s3_server, bucket, kept_objects, kept)

    retry = run_backup(_request(catalog, server, gpg_keys))
    assert retry.kind == "incremental" and retry.parent_id == kept.backup_id
    _assert_stored_as_recorded(catalog, retry)
    _assert_untouched(s3_server, bucket, kept_objects, kept)


def test_a_recipient_check_killed_by_a_signal_is_named_as_that_not_as_an_unusable_key(
    seeded, s3_server, bucket, gpg_keys, tmp_path, monkeypatch
):
    """The gpg that proves the recipient key usable before a backup starts is killed (the OOM
    killer, a kill -9): the error names gpg and the signal, not an unusable key (found by the chaos
    run, seed 3902: kill_tool hit that gpg in a backup task, whose log said 'recipient key unusable
    (<fingerprint>): (no output)', sending the DBA to a key that was fine). Nothing is registered,
    and the run again succeeds. The first gpg on PATH is the real one, killed by SIGKILL when asked
    for the probe (an --encrypt without the stream's --compress-algo)."""
    server, _db = seeded
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real = shutil.which("gpg")
    (bin_dir / "gpg").write_text(
        '#!/bin/sh\ncase " $* " in *" --compress-algo "*) ;; *" --encrypt "*) kill -9 $$;; esac\n'
        f'exec {real} "$@"\n'
    )
    (bin_dir / "gpg").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(GpgError) as excinfo:
        run_backup(_request(catalog, server, gpg_keys, kind="full"))
    message = str(excinfo.value)
    assert "gpg" in message and "killed by signal 9" in message, message
    assert "unusable" not in message, message
    assert catalog.backup_ids() == [], "a backup was registered after the recipient check failed"

    monkeypatch.undo()
    again = run_backup(_request(catalog, server, gpg_keys, kind="full"))
    _assert_stored_as_recorded(catalog, again)


# -- the S3 endpoint misbehaves ------------------------------------------------------------------------


def test_s3_answering_500_for_a_while_then_recovering_still_gives_a_good_backup(
    seeded, s3_server, bucket, gpg_keys, proxy, tmp_path
):
    server, db = seeded
    catalog = s3_catalog(proxy.endpoint_url, bucket)  # the product's client: botocore standard retries
    kept = _kept(catalog, server, gpg_keys)
    kept_objects = snapshot(s3_server.client(), bucket, f"{PREFIX}backups/{kept.backup_id}/")
    add_orders(server, db, 1000)

    budget = {"UploadPart": 2, "CompleteMultipartUpload": 1, "manifest": 1}

    def rule(op: str, path: str) -> int | None:
        name = "manifest" if op == "PutObject" and path.split("?")[0].endswith("/manifest.json") else op
        if budget.get(name, 0) > 0:
            budget[name] -= 1
            return 500
        return None

    proxy.rule = rule
    wait_next_second(kept.started_at)
    manifest = run_backup(_request(catalog, server, gpg_keys))

    assert budget == {"UploadPart": 0, "CompleteMultipartUpload": 0, "manifest": 0}, (
        "not every 500 was served"
    )
    assert proxy.count("UploadPart", 500) == 2 and proxy.count("UploadPart", 200) >= 1
    assert proxy.count("CompleteMultipartUpload", 500) == 1
    assert catalog.backup_ids() == [kept.backup_id, manifest.backup_id]
    assert open_uploads(s3_server.client(), bucket) == []
    _assert_stored_as_recorded(catalog, manifest)
    _assert_untouched(s3_server, bucket, kept_objects, kept)
    assert manifest.parent_id == kept.backup_id and manifest.raw_bytes > 0


def test_s3_failing_every_part_upload_is_a_clear_failure_that_leaves_nothing(
    seeded, s3_server, bucket, gpg_keys, proxy
):
    server, _db = seeded
    catalog = s3_catalog(proxy.endpoint_url, bucket)
    kept = _kept(catalog, server, gpg_keys)
    kept_objects = snapshot(s3_server.client(), bucket, f"{PREFIX}backups/{kept.backup_id}/")
    everything = snapshot(s3_server.client(), bucket)

    proxy.rule = lambda op, path: 500 if op == "UploadPart" else None
    failing = s3_catalog(proxy.endpoint_url, bucket, client=short_retry_client(proxy.endpoint_url))
    wait_next_second(kept.started_at)
    with pytest.raises(StorageError) as excinfo:
        run_backup(_request(failing, server, gpg_keys))
    message = str(excinfo.value)
    assert f"s3://{bucket}/{PREFIX}backups/" in message and "upload part 1 failed" in message, message
    assert "InternalError" in message or "500" in message, message

    # The endpoint still answers everything but part uploads, so the abort went through.
    assert proxy.count("AbortMultipartUpload", 204) == 1
    assert open_uploads(s3_server.client(), bucket) == []
    assert catalog.backup_ids() == [kept.backup_id]
    assert snapshot(s3_server.client(), bucket) == everything
    _assert_untouched(s3_server, bucket, kept_objects, kept)


def test_s3_endpoint_stopped_mid_upload_and_back_soon_the_backup_still_succeeds(
    seeded, s3_server, bucket, gpg_keys, proxy
):
    server, _db = seeded
    catalog = s3_catalog(proxy.endpoint_url, bucket)
    kept = _kept(catalog, server, gpg_keys)
    outage = {"done": False}

    def rule(op: str, path: str) -> str | None:
        if op == "UploadPart" and not outage["done"]:
            outage["done"] = True
            threading.Timer(1.5, proxy.start).start()  # the endpoint comes back on the same port
            return "stop"
        return None

    proxy.rule = rule
    wait_next_second(kept.started_at)
    manifest = run_backup(_request(catalog, server, gpg_keys))

    assert outage["done"], "the endpoint never went down; the test proved nothing"
    assert proxy.count("UploadPart", 0) == 1 and proxy.count("UploadPart", 200) >= 1
    assert catalog.backup_ids() == [kept.backup_id, manifest.backup_id]
    assert open_uploads(s3_server.client(), bucket) == []
    _assert_stored_as_recorded(catalog, manifest)


def test_s3_endpoint_down_past_the_retries_fails_clearly_and_the_next_run_cleans_up(
    seeded, s3_server, bucket, gpg_keys, proxy
):
    server, db = seeded
    catalog = s3_catalog(proxy.endpoint_url, bucket)
    kept = _kept(catalog, server, gpg_keys)
    kept_objects = snapshot(s3_server.client(), bucket, f"{PREFIX}backups/{kept.backup_id}/")

    proxy.rule = lambda op, path: "stop" if op == "UploadPart" else None
    failing = s3_catalog(proxy.endpoint_url, bucket, client=short_retry_client(proxy.endpoint_url))
    wait_next_second(kept.started_at)
    with pytest.raises(StorageError, match=r"upload part 1 failed: .*(connect|Connection)") as excinfo:
        run_backup(_request(failing, server, gpg_keys))
    assert f"s3://{bucket}/{PREFIX}backups/" in str(excinfo.value)
    assert not proxy.running

    # While the endpoint is down nothing can be aborted: the upload stays open, invisible, unregistered.
    stranded = open_uploads(s3_server.client(), bucket)
    assert len(stranded) == 1 and stranded[0].startswith(f"{PREFIX}backups/"), stranded
    assert s3_catalog(s3_server.endpoint_url, bucket).backup_ids() == [kept.backup_id]

    proxy.rule = lambda op, path: None
    proxy.start()
    add_orders(server, db, 500)
    retry = run_backup(_request(catalog, server, gpg_keys))
    assert retry.parent_id == kept.backup_id
    assert open_uploads(s3_server.client(), bucket) == [], "the next run did not clean the stranded upload"
    assert catalog.backup_ids() == [kept.backup_id, retry.backup_id]
    assert not [k for k in snapshot(s3_server.client(), bucket) if k.endswith(LOCK_NAME)]
    _assert_stored_as_recorded(catalog, retry)
    _assert_untouched(s3_server, bucket, kept_objects, kept)


# -- the worker dies between the upload and the manifest ------------------------------------------------

_KILLED_WORKER = """
import json, os, signal, sys
from xtrabackup_provider.core.catalog import backups as cat
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client

args = json.loads(sys.stdin.read())

def die(self, manifest):
    # The object is uploaded; the worker is killed before the commit marker is written.
    print(json.dumps({"backup_id": manifest.backup_id, "key": manifest.backup_object.key}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

def die_streaming(raw_bytes):
    if raw_bytes >= 256 * 1024:
        os.kill(os.getpid(), signal.SIGKILL)

extra = {}
if args["where"] == "before_manifest":
    cat.Catalog.write = die
else:
    extra["progress"] = die_streaming
store = S3Store(make_s3_client(args["endpoint"], "us-east-1"), args["bucket"])
run_backup(BackupRequest(
    catalog=cat.Catalog(store, "backups", "c1", "db1"),
    target=MySQLTarget(socket=args["socket"], password=args["password"]),
    public_keys=[args["public_key"]],
    **extra,
))
"""


def _private_dirs(pid: int, tmpdir: Path) -> set[Path]:
    """What worker `pid` left in its temp dir (its own: nothing else uses it) and its GPG homes."""
    return set(tmpdir.iterdir()) | set(Path("/tmp").glob(f"xbp-gpg-{pid}-*"))


def _kill_worker(
    where: str, s3_server, bucket: str, server: SandboxServer, gpg_keys, tmpdir: Path
) -> tuple[int, str]:
    """Run a backup in a child worker process (temp dir `tmpdir`) that SIGKILLs itself at `where`;
    its pid and stdout."""
    args = {
        "where": where,
        "endpoint": s3_server.endpoint_url,
        "bucket": bucket,
        "socket": str(server.socket),
        "password": server.root_password,  # on stdin, never argv
        "public_key": gpg_keys.public_key,
    }
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WORKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        text=True,
        env={**os.environ, "TMPDIR": str(tmpdir)},
    )
    try:
        out, err = child.communicate(json.dumps(args), timeout=180)
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)  # whatever the dead worker started
        except ProcessLookupError:
            pass
    assert child.returncode == -signal.SIGKILL, f"the worker did not die where intended: {err[-2000:]}"
    return child.pid, out


@pytest.mark.parametrize("where", ["before_manifest", "mid_stream"])
def test_worker_killed_leaves_no_backup_and_a_retry_succeeds(
    where, seeded, s3_server, bucket, gpg_keys, tmp_path, monkeypatch
):
    server, db = seeded
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    kept = _kept(catalog, server, gpg_keys)
    kept_objects = snapshot(s3_server.client(), bucket, f"{PREFIX}backups/{kept.backup_id}/")
    add_orders(server, db, 1000)
    wait_next_second(kept.started_at)

    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    pid, out = _kill_worker(where, s3_server, bucket, server, gpg_keys, tmpdir)
    assert catalog.backup_ids() == [kept.backup_id], "a killed worker registered a backup"
    assert open_uploads(s3_server.client(), bucket) == []
    assert catalog.store.head(f"{PREFIX}{LOCK_NAME}") is not None, "the dead worker's lock should be left"
    _assert_untouched(s3_server, bucket, kept_objects, kept)
    left = _private_dirs(pid, tmpdir)
    if where == "before_manifest":
        # The object is stored, but without a manifest it is debris: not a backup, not a parent.
        died = json.loads(out.strip().splitlines()[-1])
        assert catalog.store.head(died["key"]) is not None
    else:
        # Killed mid-stream: its credential file, GPG home, work directory (the tool's scratch,
        # the LSN files) and its children's empty HOME could not be removed, but stay private.
        # The GPG home is in the shared /tmp (a short path for gpg-agent's socket), where any
        # process that makes one first removes those of dead processes: a concurrent run may
        # already have (seen in CI, nine suites side by side).
        kinds = {p.name.split("-")[1] for p in left}
        assert kinds - {"gpg"} == {"cred", "backup", "home"} and kinds <= {"cred", "gpg", "backup", "home"}, (
            left
        )
        for path in left:
            assert path.stat().st_mode & 0o777 == 0o700, f"{path} is open to others"
        for cnf in (f for p in left for f in p.glob("*.cnf")):
            assert cnf.stat().st_mode & 0o777 == 0o600, f"{cnf} is readable by others"

    expected = table_checksums(server, [db])
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))  # the next run on that worker
    retry = run_backup(_request(catalog, server, gpg_keys))  # the lock of a dead process is taken over
    assert retry.kind == "incremental" and retry.parent_id == kept.backup_id
    assert catalog.backup_ids() == [kept.backup_id, retry.backup_id]
    assert catalog.store.head(f"{PREFIX}{LOCK_NAME}") is None
    assert [p for p in left if p.exists()] == [], "the dead worker's private files are still on disk"
    _assert_untouched(s3_server, bucket, kept_objects, kept)
    if where == "before_manifest":
        _assert_restores(catalog, gpg_keys, tmp_path, expected, db)
    else:
        _assert_stored_as_recorded(catalog, retry)


# -- two runs for one host at once ----------------------------------------------------------------------


def test_two_runs_for_one_host_at_once_one_runs_the_other_fails_clearly(
    seeded, s3_server, bucket, gpg_keys, tmp_path
):
    server, db = seeded
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    streaming, finish = threading.Event(), threading.Event()

    def hold(raw_bytes: int) -> None:  # the first run pauses mid-stream until the second has tried
        streaming.set()
        finish.wait(60)

    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(run_backup, _request(catalog, server, gpg_keys, progress=hold))
        assert streaming.wait(60), "the first run never started streaming"
        during = snapshot(s3_server.client(), bucket)
        try:
            with pytest.raises(HostLockBusy) as excinfo:
                run_backup(_request(s3_catalog(s3_server.endpoint_url, bucket), server, gpg_keys))
            # The loser wrote nothing: no object, no upload, no manifest.
            assert snapshot(s3_server.client(), bucket) == during
        finally:
            finish.set()
        manifest = first.result(timeout=120)
    message = str(excinfo.value)
    assert "another backup of c1/db1 is running" in message, message
    assert f"pid {os.getpid()}" in message and "lease" in message, message

    assert catalog.backup_ids() == [manifest.backup_id]
    assert open_uploads(s3_server.client(), bucket) == []
    _assert_stored_as_recorded(catalog, manifest)

    # Once the first run is over, the host is free again.
    add_orders(server, db, 500)
    wait_next_second(manifest.started_at)
    nxt = run_backup(_request(catalog, server, gpg_keys))
    assert nxt.parent_id == manifest.backup_id
    assert not [k for k in snapshot(s3_server.client(), bucket) if k.endswith(LOCK_NAME)]


def _foreign_lock(catalog: Catalog, expires: datetime, lease_seconds: float = 120) -> str:
    """A lock left by a run on another machine (the format the product writes)."""
    key = f"{catalog.host_prefix}/{LOCK_NAME}"
    body = {
        "token": "0" * 32,
        "owner": "xtrabackup-provider backup of c1/db1",
        "hostname": "worker-7.example.internal",
        "pid": 4242,
        "pid_start": 1,
        "acquired_at": (expires - timedelta(minutes=2)).isoformat(),
        "expires_at": expires.isoformat(),
        "lease_seconds": lease_seconds,
    }
    catalog.store.put_bytes(key, json.dumps(body).encode())
    return key


def test_a_live_lock_of_another_worker_blocks_and_an_expired_one_is_taken_over(
    seeded, s3_server, bucket, gpg_keys
):
    server, _db = seeded
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    key = _foreign_lock(catalog, datetime.now(UTC) + timedelta(minutes=5))
    with pytest.raises(HostLockBusy) as excinfo:
        run_backup(_request(catalog, server, gpg_keys))
    message = str(excinfo.value)
    assert "worker-7.example.internal" in message and "pid 4242" in message, message
    assert key in message, "the error must say which object to remove if that run is really gone"
    assert catalog.backup_ids() == [] and catalog.store.head(key) is not None

    # Expired by the store's clock: not renewed for longer than its (one-second) lease + 2 s.
    _foreign_lock(catalog, datetime.now(UTC) - timedelta(seconds=1), lease_seconds=1)
    time.sleep(4.2)
    manifest = run_backup(_request(catalog, server, gpg_keys))
    assert catalog.backup_ids() == [manifest.backup_id]
    assert catalog.store.head(key) is None, "the taken-over lock was not released"


def test_a_directory_store_gets_the_same_host_lock(tmp_path):
    """The CLI's --local-path store: a second holder is refused, a dead holder's lock is taken over."""
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    busy = rf"another backup of c1/db1 is running: .*pid {os.getpid()}"
    with HostLock(catalog), pytest.raises(HostLockBusy, match=busy):
        HostLock(catalog).acquire()
    assert not (tmp_path / "store" / PREFIX / LOCK_NAME).exists(), "the lock was not released"

    # A lock left by a process of this machine that is gone is taken over at once.
    dead = subprocess.run(
        [sys.executable, "-c", _HOLD_AND_DIE, str(tmp_path / "store")], capture_output=True, text=True
    )
    assert dead.returncode == -signal.SIGKILL, dead.stderr
    assert (tmp_path / "store" / PREFIX / LOCK_NAME).exists()
    with HostLock(catalog):
        pass
    assert not (tmp_path / "store" / PREFIX / LOCK_NAME).exists()


_HOLD_AND_DIE = """
import os, signal, sys
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.lock import HostLock
from xtrabackup_provider.core.storage.local import LocalStore
HostLock(Catalog(LocalStore(sys.argv[1]), "backups", "c1", "db1")).acquire()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_lease_is_renewed_while_the_run_lives_and_released_after(s3_server, bucket):
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    key = f"{PREFIX}{LOCK_NAME}"

    def expires() -> str:
        return json.loads(catalog.store.get_bytes(key))["expires_at"]

    with HostLock(catalog, lease=timedelta(seconds=0.6)):
        first = expires()
        wait_for(lambda: expires() > first, timeout=20, what="a renewed lease")
    # Release deletes the lock only while it holds the current version: renewals kept track of it.
    assert catalog.store.head(key) is None, "a renewed lock was not released"


# -- the tool fails: its own error comes first ----------------------------------------------------------


def test_a_corrupted_page_fails_the_backup_with_the_cause_first_and_no_binary_garbage(mariadb, tmp_path):
    """mariabackup retries a corrupted page ten times, then dumps it in hex and raw bytes before
    its last words; the error must start with the cause and stay readable."""
    db = unique_name("corrupt")
    seed_database(mariadb, db, rows=3000)
    mariadb.query(f"FLUSH TABLES `{db}`.orders FOR EXPORT")  # its pages are on disk, none dirty
    with open(mariadb.datadir / db / "orders.ibd", "r+b") as fh:
        fh.seek(4 * 16384 + 200)
        fh.write(os.urandom(2000))
    catalog = Catalog(LocalStore(str(tmp_path / "store")), "backups", "c1", "db1")
    with pytest.raises(PipelineError) as excinfo:
        run_backup(BackupRequest(catalog=catalog, target=target(mariadb), allow_unencrypted=True))
    message = str(excinfo.value)
    assert message.startswith("mariabackup --backup failed (exit status 1): "), message[:300]
    assert f"File ./{db}/orders.ibd seems to be corrupted" in message[:300], message[:300]
    assert message.isprintable() and " hex " not in message and len(message) < 1500, repr(message[-500:])
    assert catalog.backup_ids() == []


# -- open files ------------------------------------------------------------------------------------------

MANY_TABLES = 1500


@pytest.fixture(scope="module")
def many_tables(mariadb_factory) -> Iterator[tuple[SandboxServer, str]]:
    """A server with 1,500 InnoDB tables, one tablespace each: mariabackup --backup opens them all."""
    server = mariadb_factory("nofile", root_password=secrets.token_urlsafe(16))
    db = unique_name("many")
    server.execute_script(
        f"CREATE DATABASE `{db}`; USE `{db}`;\n"
        + "".join(f"CREATE TABLE t{n:04d} (id INT PRIMARY KEY) ENGINE=InnoDB;\n" for n in range(MANY_TABLES))
        + "INSERT INTO t0000 VALUES (1), (2), (3);\n"
    )
    # A clean restart writes every page, as on a server that has run a while: mariabackup keeps a
    # tablespace open once its first page is on disk (brand-new ones it may look at later).
    server.stop()
    server.start()
    try:
        yield server, db
    finally:
        mariadb_factory.discard(server)


def _nofile(soft: int, hard: int | None = None) -> Callable[[], None]:
    """preexec_fn: start the child like a worker with `ulimit -Sn soft` (and `-Hn hard`)."""
    import resource

    def limit() -> None:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (soft, hard or resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        )

    return limit


def test_1500_tables_back_up_and_restore_under_the_usual_soft_limit_of_1024(many_tables, tmp_path):
    server, db = many_tables
    import resource

    assert resource.getrlimit(resource.RLIMIT_NOFILE)[1] > MANY_TABLES + 200, (
        "this host's hard limit is too low"
    )
    flags = ["--local-path", str(tmp_path / "store"), "--cluster", "c1", "--host", "db1"]
    creds = str(server.write_client_defaults(tmp_path / "client.cnf"))
    backup = cli("backup", *flags, "--defaults-file", creds, "--no-encrypt", preexec_fn=_nofile(1024))
    assert backup.returncode == 0, backup.stderr[-3000:]
    target_dir = tmp_path / "restored"
    restore = cli("restore", *flags, "--target-datadir", str(target_dir), preexec_fn=_nofile(1024))
    assert restore.returncode == 0, restore.stderr[-3000:]
    with SandboxServer.on_datadir(target_dir, tmp_path / "sb", server_id=951) as restored:
        restored.start()
        tables = restored.query(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s", (db,)
        )
        assert tables[0][0] == MANY_TABLES
        assert restored.query(f"SELECT COUNT(*) FROM `{db}`.t0000")[0][0] == 3


def test_too_many_tablespaces_for_the_hard_limit_fail_before_anything_is_streamed(many_tables, tmp_path):
    server, _db = many_tables
    store = tmp_path / "store"
    flags = ["--local-path", str(store), "--cluster", "c1", "--host", "db1"]
    creds = str(server.write_client_defaults(tmp_path / "client.cnf"))
    with ProcScanner({}) as scan:
        proc = cli("backup", *flags, "--defaults-file", creds, "--no-encrypt", preexec_fn=_nofile(1024, 1024))
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr[-3000:]
    found = re.match(
        r"error: too many open files: (\d+) tablespaces, limit 1024; raise LimitNOFILE", errors[0]
    )
    assert found and int(found[1]) >= MANY_TABLES, errors[0]
    assert not scan.processes(lambda argv: "--backup" in argv), "the backup tool was started"
    assert not [p for p in store.rglob("*") if p.is_file()], "something was stored"
