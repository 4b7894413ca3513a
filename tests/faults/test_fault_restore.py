"""Faults during a restore: a clear error, the target left empty, scratch removed, the backup intact.

Real components: a MariaDB sandbox, mariabackup/mbstream, gpg, moto over HTTP, and real small
filesystems (tmpfs) that fill up.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from faultkit import (
    ProcScanner,
    copy_bucket,
    s3_catalog,
    snapshot,
    target,
    tmpfs,
    tree_bytes,
    wait_next_second,
)

from helpers import RUN, add_orders, restore_with, wait_for
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.pipeline.gpg import GpgError
from xtrabackup_provider.core.pipeline.process import PipelineError
from xtrabackup_provider.core.restore.chain import RestoreError, RestoreRequest, restore
from xtrabackup_provider.core.restore.prepare import PrepareError


@pytest.fixture(scope="module")
def backed_up(seeded, s3_server, gpg_keys) -> tuple[Catalog, Manifest, str]:
    """One encrypted full backup shared by the module (restores only read it)."""
    server, db = seeded
    bucket = s3_server.make_bucket(f"xbp-restore-faults-{os.getpid()}")
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    manifest = run_backup(
        BackupRequest(catalog=catalog, target=target(server), public_keys=[gpg_keys.public_key])
    )
    return catalog, manifest, db


def _own_gpg_homes() -> set[Path]:
    return set(Path("/tmp").glob(f"xbp-gpg-{os.getpid()}-*"))


def test_scratch_filesystem_full_is_a_clear_error_and_a_retry_with_room_restores(
    backed_up, s3_server, gpg_keys, tmp_path
):
    catalog, manifest, db = backed_up
    stored = snapshot(s3_server.client(), catalog.store.bucket)
    assert manifest.raw_bytes > 8 * 1024 * 1024, "the backup must not fit in the small scratch"
    target_dir = tmp_path / "restore" / "data"
    with tmpfs(tmp_path / "small", "4m") as small:
        with pytest.raises(PipelineError) as excinfo:
            restore_with(catalog, gpg_keys, target_dir, scratch_dir=small / "work")
        message = str(excinfo.value)
        assert "No space left on device" in message, message
        assert str(small / "work") in message, "the error must name the directory that filled up"
        assert tree_bytes(small) == 0 and not (small / "work").exists(), "scratch was left behind"
    assert not target_dir.exists(), "the target was created although the restore failed"
    assert snapshot(s3_server.client(), catalog.store.bucket) == stored

    restore_with(
        catalog, gpg_keys, target_dir
    )  # with room, the same backup restores (sha256 checked, prepared)
    assert (target_dir / "ibdata1").is_file() and (target_dir / db).is_dir()


def test_target_filesystem_full_during_move_back_empties_the_target_again(backed_up, gpg_keys, tmp_path):
    catalog, _manifest, _db = backed_up
    scratch = tmp_path / "scratch"
    with tmpfs(tmp_path / "small", "6m") as small:
        target_dir = small / "data"
        with pytest.raises(RestoreError) as excinfo:
            restore_with(catalog, gpg_keys, target_dir, scratch_dir=scratch)
        message = str(excinfo.value)
        assert "move-back into" in message and str(target_dir) in message, message
        assert "emptied again" in message, message
        assert tree_bytes(small) == 0, f"partial data left in the target: {list(small.rglob('*'))[:10]}"
    assert not scratch.exists(), "scratch was left behind"


def test_damaged_zstd_stream_fails_in_the_zstd_stage_naming_the_object(seeded, s3_server, bucket, tmp_path):
    server, _db = seeded
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    manifest = run_backup(BackupRequest(catalog=catalog, target=target(server), allow_unencrypted=True))
    key = manifest.backup_object.key
    data = bytearray(catalog.store.get_bytes(key))
    data[:4] = b"\0\0\0\0"  # the zstd frame magic: nothing but zstd looks at it
    catalog.store.put_bytes(key, bytes(data))

    target_dir = tmp_path / "restore" / "data"
    with pytest.raises(PipelineError) as excinfo:
        restore(RestoreRequest(catalog=catalog, target_datadir=target_dir))
    message = str(excinfo.value)
    assert "zstd could not decompress" in message and key in message, message
    assert not target_dir.exists()
    assert not list((tmp_path / "restore").glob(".xbp-restore-*")), "scratch was left behind"


def test_wrong_passphrase_is_a_clear_error_and_writes_nothing(backed_up, gpg_keys, tmp_path):
    catalog, manifest, _db = backed_up
    homes = _own_gpg_homes()
    target_dir = tmp_path / "restore" / "data"
    with pytest.raises(GpgError) as excinfo:
        restore(
            RestoreRequest(
                catalog=catalog,
                target_datadir=target_dir,
                private_key=gpg_keys.private_key,
                passphrase="not-" + gpg_keys.passphrase,
            )
        )
    message = str(excinfo.value)
    assert "passphrase given does not unlock private key" in message, message
    assert gpg_keys.fingerprint in message, message
    assert gpg_keys.passphrase not in message
    assert not target_dir.exists()
    assert not list((tmp_path / "restore").glob(".xbp-restore-*")), "scratch was left behind"
    assert _own_gpg_homes() == homes, "the GPG home holding the private key was not wiped"


def test_a_passphrase_check_killed_by_a_signal_is_named_as_that_not_as_a_wrong_passphrase(
    backed_up, gpg_keys, tmp_path, monkeypatch
):
    """The gpg that checks the passphrase before anything is downloaded is killed (the OOM killer,
    a kill -9): the error names gpg and the signal; it does not tell the user that the right
    passphrase is wrong (found by the chaos run: kill_tool hit that gpg in a restore test, whose
    log said 'the passphrase given does not unlock private key ...'). The first gpg on PATH is
    the real one, killed by SIGKILL when it is asked to decrypt."""
    catalog, _manifest, _db = backed_up
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real = shutil.which("gpg")
    (bin_dir / "gpg").write_text(
        f'#!/bin/sh\ncase " $* " in *" --decrypt "*) kill -9 $$;; esac\nexec {real} "$@"\n'
    )
    (bin_dir / "gpg").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    target_dir = tmp_path / "restore" / "data"
    with pytest.raises(GpgError) as excinfo:
        restore_with(catalog, gpg_keys, target_dir)
    message = str(excinfo.value)
    assert "gpg" in message and "killed by signal 9" in message, message
    assert "passphrase given does not unlock" not in message, message
    assert not target_dir.exists()


# -- a damaged object: the error names it and says whether its sha256 matches the manifest -------------


@pytest.fixture(scope="module")
def chain_of_two(seeded, s3_server, gpg_keys) -> dict[str, tuple[str, Manifest]]:
    """An encrypted full and incremental, and an unencrypted full (where zstd or mbstream notices
    damage first), each in a bucket of its own: each test damages a copy."""
    server, db = seeded
    bucket = s3_server.make_bucket(f"xbp-damage-{os.getpid()}")
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    keys = [gpg_keys.public_key]
    full = run_backup(BackupRequest(catalog=catalog, target=target(server), kind="full", public_keys=keys))
    add_orders(server, db, 2000)
    wait_next_second(full.started_at)
    inc = run_backup(
        BackupRequest(catalog=catalog, target=target(server), kind="incremental", public_keys=keys)
    )
    plain_bucket = s3_server.make_bucket(f"xbp-damage-plain-{os.getpid()}")
    plain = run_backup(
        BackupRequest(
            catalog=s3_catalog(s3_server.endpoint_url, plain_bucket),
            target=target(server),
            allow_unencrypted=True,
        )
    )
    return {"incremental": (bucket, inc), "plain": (plain_bucket, plain)}


@pytest.mark.parametrize(
    ("which", "where"),
    [("incremental", 0.5), ("incremental", 1.0), ("plain", 0.5)],
    ids=["encrypted incremental, middle", "encrypted incremental, last byte", "unencrypted full, middle"],
)
def test_a_flipped_byte_in_a_stored_object_is_named_with_its_sha256_against_the_manifest(
    which, where, chain_of_two, s3_server, gpg_keys, tmp_path
):
    """Whatever stage notices first (gpg, zstd or mbstream), the error names the object and says
    that its sha256 is not the manifest's: it was altered after the backup stored it."""
    bucket, damaged = chain_of_two[which]
    catalog = s3_catalog(s3_server.endpoint_url, copy_bucket(s3_server, bucket))
    key = damaged.backup_object.key
    data = bytearray(catalog.store.get_bytes(key))
    data[min(len(data) - 1, int(len(data) * where))] ^= 0x01
    catalog.store.put_bytes(key, bytes(data))

    target_dir = tmp_path / "restore" / "data"
    with pytest.raises((PipelineError, RestoreError)) as excinfo:
        restore_with(catalog, gpg_keys, target_dir)
    message = str(excinfo.value)
    assert key in message, message
    assert "differs from the manifest's" in message and "altered" in message, message
    assert not target_dir.exists() and not list((tmp_path / "restore").glob("*")), "debris left behind"


def test_a_manifest_whose_sha256_alone_was_edited_is_named_as_disagreeing_with_its_object(
    chain_of_two, s3_server, gpg_keys, tmp_path
):
    bucket, inc = chain_of_two["incremental"]
    catalog = s3_catalog(s3_server.endpoint_url, copy_bucket(s3_server, bucket))
    body = json.loads(catalog.store.get_bytes(catalog.manifest_key(inc.backup_id)))
    body["objects"][0]["sha256"] = "0" * 64
    catalog.store.put_bytes(catalog.manifest_key(inc.backup_id), json.dumps(body).encode())

    target_dir = tmp_path / "restore" / "data"
    with pytest.raises((PipelineError, RestoreError)) as excinfo:
        restore_with(catalog, gpg_keys, target_dir)
    message = str(excinfo.value)
    assert inc.backup_object.key in message, message
    assert "the manifest and the object disagree" in message, message
    assert not target_dir.exists()


# -- a killed restore leaves its scratch; the next one removes it -----------------------------------------


def _extractor_running(owner: int) -> bool:
    """An mbstream started by `owner` (or its children) is running."""
    running = False
    for pid in os.listdir("/proc"):
        if pid.isdigit() and ProcScanner.descends_from(int(pid), owner):
            with contextlib.suppress(OSError):
                running |= b"mbstream" in Path(f"/proc/{pid}/cmdline").read_bytes()
    return running


def test_a_restore_killed_mid_fetch_leaves_a_scratch_that_the_next_restore_removes(
    backed_up, proxy, gpg_keys, tmp_path
):
    """The backup's download is held halfway by the proxy while the extractor waits for it, and
    the restore is killed then: the kill lands mid-fetch however fast or loaded the machine is (a
    small backup once restored between two looks at /proc on a loaded CI machine)."""
    catalog, _manifest, db = backed_up
    downloading = threading.Event()

    def stall_first_download(operation: str, path: str) -> str | None:
        if operation.startswith("GET ") and "/backup.xbstream" in path and not downloading.is_set():
            downloading.set()
            return "stall"
        return None

    proxy.rule = stall_first_download
    key = tmp_path / "private.asc"
    key.write_text(gpg_keys.private_key)
    parent = tmp_path / "restore"
    parent.mkdir()
    flags = ["--cluster", "c1", "--host", "db1", "--bucket", catalog.store.bucket]
    argv = [sys.executable, "-c", RUN, "restore", *flags, "--endpoint-url", proxy.endpoint_url]
    argv += ["--private-key-file", str(key), "--target-datadir", str(parent / "data")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env["XTRABACKUP_GPG_PASSPHRASE"] = gpg_keys.passphrase
    child = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        wait_for(
            lambda: (downloading.is_set() and _extractor_running(child.pid)) or child.poll() is not None,
            timeout=50,  # botocore gives up on the held answer after 60 s and asks again
            what="the download held and the extractor running",
        )
        assert child.poll() is None, (
            f"the restore ended (exit {child.returncode}) before its download was held"
        )
        os.kill(child.pid, signal.SIGKILL)  # the worker dies (OOM killer, lost task)
        child.wait()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)  # and whatever it started
    left = list(parent.iterdir())
    assert left and not (parent / "data").exists(), left

    restore_with(catalog, gpg_keys, parent / "data")  # the next restore into the same place
    assert sorted(p.name for p in parent.iterdir()) == ["data"], "the killed restore's scratch is still there"
    assert (parent / "data" / db).is_dir()


def _kill_first_prepare(stop: threading.Event, killed: list[list[bytes]]) -> None:
    """SIGKILL the first `mariabackup --prepare` this test process started, as the OOM killer or
    a `kill -9` does (the chaos run's kill_tool)."""
    me = os.getpid()
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or not ProcScanner.descends_from(int(pid), me):
                continue
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if argv[0].endswith(b"mariabackup") and b"--prepare" in argv:
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(argv)
                    return
        time.sleep(0.002)


def test_a_prepare_killed_by_a_signal_names_the_tool_and_the_signal(backed_up, gpg_keys, tmp_path):
    """A real mariabackup --prepare, run by the product's runner, killed by SIGKILL: the error a
    user reads names the tool and the signal ("mariabackup --prepare of ... failed (killed by
    signal 9)"), the evidence they look for after an OOM kill; the target stays empty and the
    same backup restores afterwards."""
    catalog, _manifest, db = backed_up
    target_dir = tmp_path / "restore" / "data"
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_first_prepare, args=(stop, killed), daemon=True)
    killer.start()
    try:
        with pytest.raises(PrepareError) as excinfo:
            restore_with(catalog, gpg_keys, target_dir, scratch_dir=tmp_path / "scratch")
    finally:
        stop.set()
        killer.join()
    assert killed, "no mariabackup --prepare was seen to kill"
    message = str(excinfo.value)
    assert re.match(r"mariabackup --prepare of \S+ failed \(killed by signal 9\)", message), message
    assert not target_dir.exists(), "the target was created although the prepare was killed"

    restore_with(catalog, gpg_keys, target_dir)  # nothing of the backup was harmed
    assert (target_dir / db).is_dir()


def test_answers_cut_short_by_the_network_are_read_again_and_the_restore_succeeds(
    backed_up, proxy, gpg_keys, tmp_path
):
    """The first answer to each GET of the backup arrives cut short (its full Content-Length,
    half the body, the connection closed). botocore retries a request, not the reading of its
    body, so the store reads such an answer again (found by the chaos run: one truncated answer
    from the S3 proxy failed a restore test)."""
    catalog, _manifest, db = backed_up
    cut: list[str] = []

    def rule(op: str, path: str) -> str | None:
        if op.startswith("GET ") and "/backups/" in path and path not in cut:
            cut.append(path)
            return "truncate"
        return None

    proxy.rule = rule
    flaky = s3_catalog(proxy.endpoint_url, catalog.store.bucket)
    target_dir = tmp_path / "restore" / "data"
    restore_with(flaky, gpg_keys, target_dir)  # every object's sha256 is checked against the manifest
    assert (target_dir / "ibdata1").is_file() and (target_dir / db).is_dir()
    assert any(p.endswith("/manifest.json") for p in cut) and any(".xbstream" in p for p in cut), cut
