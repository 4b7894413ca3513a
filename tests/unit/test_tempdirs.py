"""Private temp dirs carry their owner's pid; the next one of a kind sweeps those of dead owners."""

from __future__ import annotations

import os
import subprocess
import sys

from xtrabackup_provider.core.common.tempdirs import private_dir, private_workdir


def _dead_pid() -> int:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(proc.stdout)


def test_the_next_dir_of_a_kind_removes_those_of_dead_owners_only(tmp_path):
    dead = _dead_pid()
    debris = [
        tmp_path / f"xbp-backup-{dead}-abc123",
        tmp_path / f".xbp-restore-{dead}-20261201T000000Z-full-abc123",
    ]
    alive = [tmp_path / f"xbp-backup-{os.getpid()}-live", tmp_path / "xbp-backup-1-init"]
    other_kind = tmp_path / f"xbp-binlog-{dead}-abc"
    for d in [*debris, *alive, other_kind]:
        (d / "sub").mkdir(parents=True)
        (d / "sub" / "file").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    (tmp_path / f"xbp-backup-{dead}-link").symlink_to(outside)

    seen = []
    new = private_dir("backup", tmp_path, on_sweep=seen.append)
    restore = private_dir("restore", tmp_path, label="20261202T000000Z-full", hidden=True)
    assert not debris[0].exists() and not debris[1].exists()
    assert seen == [debris[0]]
    assert all(d.exists() for d in alive) and other_kind.exists() and (outside / "keep").exists()
    assert new.name.startswith(f"xbp-backup-{os.getpid()}-") and oct(new.stat().st_mode & 0o777) == "0o700"
    assert restore.name.startswith(f".xbp-restore-{os.getpid()}-20261202T000000Z-full-")


def test_a_workdir_is_removed_when_its_block_ends(tmp_path):
    with private_workdir("backup", tmp_path) as work:
        (work / "lsn").mkdir()
    assert not work.exists()
