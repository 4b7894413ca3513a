"""The standby copy never deletes a directory it did not create, a crash between a prepare step
and its state write is detected and rebuilt instead of failing forever, and one run at a time
holds the directory (a second is refused by name, the first's work untouched).

Real components: a MariaDB sandbox, mariabackup (backup, prepare, copy-back), a child process
killed with SIGKILL at the worst moment (right after the incremental's prepare step, before the
standby's state file says so: what a power cut or an OOM kill does).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from helpers import add_orders, restored_checksums
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.restore.chain import RestoreError
from xtrabackup_provider.core.restore.standby import load_state, restore_standby, update_standby
from xtrabackup_provider.core.restore.standby_lock import StandbyBusy
from xtrabackup_provider.core.storage.local import LocalStore


def _backup(catalog: Catalog, server, kind: str) -> str:
    target = MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)
    return run_backup(
        BackupRequest(catalog=catalog, target=target, kind=kind, allow_unencrypted=True)
    ).backup_id


def test_a_non_empty_directory_without_standby_state_is_refused_and_left_alone(seeded, tmp_path):
    server, _db = seeded
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    _backup(catalog, server, "full")
    standby = tmp_path / "var-lib-mysql"  # a mistyped standby_dir: somebody's live datadir
    (standby / "app").mkdir(parents=True)
    (standby / "app" / "orders.ibd").write_bytes(b"precious")
    (standby / "ibdata1").write_bytes(b"precious too")
    with pytest.raises(RestoreError) as excinfo:
        update_standby(catalog, standby)
    message = str(excinfo.value)
    print("error:", message)
    assert str(standby) in message and "standby.json" in message and "not empty" in message, message
    assert (standby / "app" / "orders.ibd").read_bytes() == b"precious"
    assert sorted(p.name for p in standby.iterdir()) == ["app", "ibdata1"]


# Runs update_standby in a child that is SIGKILLed right after the prepare step that merges the
# incremental, before the state file records it.
_CRASH_AFTER_MERGE = """
import os, signal, sys
from pathlib import Path
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.restore import standby
from xtrabackup_provider.core.storage.local import LocalStore

real_step = standby._step
def step(tool, prep, dirs, use_memory):
    real_step(tool, prep, dirs, use_memory)
    if prep.incremental_dir:  # merged into base/: die before the state says so
        os.kill(os.getpid(), signal.SIGKILL)
standby._step = step
standby.update_standby(Catalog(LocalStore(sys.argv[1]), "backups", "c1", "db1"), Path(sys.argv[2]))
"""


def test_a_crash_between_a_prepare_step_and_the_state_write_is_rebuilt(seeded, tmp_path):
    server, db = seeded
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    standby = tmp_path / "standby"
    full = _backup(catalog, server, "full")
    assert update_standby(catalog, standby).newest == full
    add_orders(server, db, 300)
    inc = _backup(catalog, server, "incremental")
    expected = table_checksums(server, [db])

    crashed = subprocess.run(
        [sys.executable, "-c", _CRASH_AFTER_MERGE, str(tmp_path / "store"), str(standby)],
        capture_output=True,
        text=True,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    state = load_state(standby)
    assert state is not None and inc not in state.applied, "the crash came too late to test anything"

    update = update_standby(catalog, standby)  # today: the merge again, refused by mariabackup, forever
    assert update.rebuilt and update.newest == inc, update
    target = tmp_path / "restored"
    assert restore_standby(catalog, standby, target).backup_id == inc
    assert restored_checksums(target, tmp_path / "sb", [db], server_id=991) == expected


# Runs update_standby in a child that stops inside its first prepare step (base/ half built, the
# state saying so) until the test creates the file `go`: a long update another run meets.
_PAUSE_IN_PREPARE = """
import sys, time
from pathlib import Path
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.restore import standby
from xtrabackup_provider.core.storage.local import LocalStore

real_step = standby._step
def step(tool, prep, dirs, use_memory):
    Path(sys.argv[3], "paused").touch()
    while not Path(sys.argv[3], "go").exists():
        time.sleep(0.05)
    real_step(tool, prep, dirs, use_memory)
standby._step = step
standby.update_standby(Catalog(LocalStore(sys.argv[1]), "backups", "c1", "db1"), Path(sys.argv[2]))
"""


@pytest.mark.parametrize("second", ["update", "restore"])
def test_a_second_standby_run_while_one_holds_the_directory_is_refused_by_name(seeded, tmp_path, second):
    server, db = seeded
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    standby = tmp_path / "standby"
    signals = tmp_path / "signals"
    signals.mkdir()
    full = _backup(catalog, server, "full")
    expected = table_checksums(server, [db])
    if second == "restore":
        assert update_standby(catalog, standby).newest == full
        add_orders(server, db, 200)
        _backup(catalog, server, "incremental")  # the first run merges it while the restore comes
        expected = table_checksums(server, [db])
    first = subprocess.Popen(
        [sys.executable, "-c", _PAUSE_IN_PREPARE, str(tmp_path / "store"), str(standby), str(signals)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while not (signals / "paused").exists():
            assert first.poll() is None, first.stderr.read() if first.stderr else ""
            time.sleep(0.05)
        before = sorted(str(p.relative_to(standby)) for p in standby.rglob("*"))
        with pytest.raises(StandbyBusy) as excinfo:
            if second == "update":
                update_standby(catalog, standby, lock_wait=1)
            else:
                restore_standby(catalog, standby, tmp_path / "restored", lock_wait=1)
        message = str(excinfo.value)
        print("error:", message)
        assert str(standby) in message and f"pid {first.pid}" in message and "standby update" in message
        assert sorted(str(p.relative_to(standby)) for p in standby.rglob("*")) == before
        assert not (tmp_path / "restored").exists()
    finally:
        (signals / "go").touch()
        _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    target = tmp_path / "restored"
    restore_standby(catalog, standby, target)
    assert restored_checksums(target, tmp_path / "sb", [db], server_id=992) == expected
