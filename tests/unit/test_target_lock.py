"""The restore target's lock (core/restore/standby_lock.py): one holder, named to the next; taken
again freely by the thread holding it; nothing left beside the target afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from xtrabackup_provider.core.restore.standby_lock import (
    StandbyBusy,
    TargetBusy,
    held_lock,
    standby_lock,
    target_lock,
    target_lock_path,
)

HOLD = """
import sys, time
from pathlib import Path
from xtrabackup_provider.core.restore.standby_lock import target_lock
with target_lock(Path(sys.argv[1]), "point-in-time restore"):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_second_process_is_refused_at_once_by_name_and_the_lock_file_goes_with_its_holder(tmp_path):
    target = tmp_path / "data"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(target)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(TargetBusy) as excinfo, target_lock(target, "restore"):
            pass
        message = str(excinfo.value)
        assert str(target) in message and "another restore" in message, message
        assert f"point-in-time restore by {os.uname().nodename} pid {holder.pid}" in message, message
        assert "\n" not in message
        assert not target.exists(), "the refused run wrote to the target"
    finally:
        holder.communicate("", timeout=30)
    assert list(tmp_path.iterdir()) == [], "the lock file was left beside the target"
    with target_lock(target, "restore"):  # free again
        pass


def test_the_holding_thread_takes_it_again_and_another_thread_is_refused(tmp_path):
    target = tmp_path / "data"
    refused: list[BaseException] = []

    def other() -> None:
        try:
            with target_lock(target, "restore"):
                pass
        except TargetBusy as exc:
            refused.append(exc)

    with target_lock(target, "point-in-time restore"), target_lock(target, "restore"):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert target_lock_path(target).exists(), "the inner release let go of the outer hold"
    assert len(refused) == 1 and f"pid {os.getpid()}" in str(refused[0])
    assert not target_lock_path(target).exists()


def test_two_spellings_of_one_target_share_one_lock(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert target_lock_path(tmp_path / "link" / "data") == target_lock_path(tmp_path / "real" / "." / "data")


def test_a_run_that_locked_a_file_its_holder_removed_locks_the_new_one(tmp_path):
    """The holder removes the file before it lets go; a run that opened it just before must not
    think it holds the target while a third run locks the new file."""
    path = tmp_path / ".data.restore.lock"
    stale = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # opened before the holder removes it
    path.unlink()
    try:
        with held_lock(path, "restore", 0.0, lambda h: TargetBusy(h), remove=True):
            assert path.exists()
            assert os.fstat(stale).st_ino != os.stat(path).st_ino
    finally:
        os.close(stale)


def test_the_standby_lock_still_waits_and_names_its_holder(tmp_path):
    with standby_lock(tmp_path, "standby update"):
        busy = pytest.raises(StandbyBusy, match=r"standby directory .* is in use: the standby update by")
        with busy, standby_lock(tmp_path, "restore from the standby", wait_seconds=0.3):
            pass
        # another thread waits in vain too (the lock is the directory's, not the process's)
        errors: list[BaseException] = []

        def other() -> None:
            try:
                with standby_lock(tmp_path, "refresh", wait_seconds=0.3):
                    pass
            except StandbyBusy as exc:
                errors.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert errors
    assert (tmp_path / "standby.lock").exists(), "the standby's lock file is kept"
    with standby_lock(tmp_path, "standby update", wait_seconds=0):
        pass
