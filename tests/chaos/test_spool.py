"""The spool_full fault's question on the crash-point bed (a seeded MariaDB, moto, no fleet): binlog
shipping whose scratch directory (`--workdir`, a tmpfs of 8 MB) is full fails naming that directory,
registers nothing half (every binlog manifest names its own bytes, nothing unregistered is left),
and ships once space returns. Before core/common/tempdirs.py named it, the error was
'error: No space left on device' alone, and the failed run left its directory behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from crashbed import Bed, check_binlogs, run_python

from helpers import RUN, add_orders


@pytest.fixture
def small_tmp(tmp_path: Path):
    path = tmp_path / "spool"
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=1777", "tmpfs", str(path)],
                             capture_output=True, text=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root needed): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _ship_into_full(bed: Bed, spool: Path) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    """A backup, 300 transactions, then `binlogs ship --flush` into the full spool: (its argv without
    --flush, its run)."""
    bed.ok("backup")
    add_orders(bed.server, bed.db, 300)
    subprocess.run(["dd", "if=/dev/zero", f"of={spool / 'filler'}", "bs=64k"], capture_output=True)  # ENOSPC
    where = ["--config", str(bed.config), "--cluster", "c1", "--host", "db1"]
    # --workdir: a process whose TMPDIR is full silently uses /tmp instead (Python's tempfile tries
    # each candidate); the follower that meets a full spool is one that chose it before.
    ship = ["-c", RUN, "binlogs", "ship", "--workdir", str(spool), *where]
    full = run_python([*ship, "--flush"], _env(bed))
    print("full:", full.returncode, full.stdout[-1500:], full.stderr[-1500:])
    return ship, full


def _env(bed: Bed) -> dict[str, str]:
    return {"XTRABACKUP_GPG_PASSPHRASE": bed.keys.passphrase, "HOME": str(bed.tmp)}


def test_shipping_into_a_full_spool_fails_registers_nothing_half_and_recovers(
    bed: Bed, small_tmp: Path
) -> None:
    ship, full = _ship_into_full(bed, small_tmp)
    assert full.returncode != 0 and "No space left on device" in full.stderr, full.stderr[-1500:]
    check_binlogs(bed)  # nothing registered half, nothing unregistered left behind
    (small_tmp / "filler").unlink()
    again = run_python([*ship, "--flush"], _env(bed))
    print("again:", again.returncode, again.stdout[-1500:], again.stderr[-1500:])
    assert again.returncode == 0, again.stderr[-1500:]
    assert check_binlogs(bed).binlogs, "nothing was shipped once space returned"
    left = [p for p in small_tmp.rglob("*") if p.name != "filler"]
    assert not left, f"the shipper left files in its spool: {left}"


def test_shipping_into_a_full_spool_names_the_directory(bed: Bed, small_tmp: Path) -> None:
    _ship, full = _ship_into_full(bed, small_tmp)
    assert full.returncode != 0 and str(small_tmp) in full.stderr, full.stderr[-1500:]
