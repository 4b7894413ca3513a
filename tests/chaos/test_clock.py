"""The clock_ahead fault's question on the crash-point bed (a seeded MariaDB, moto, no fleet): a
backup from a host whose clock is 10 minutes ahead (libfaketime, that one process) registers
under an id 10 minutes in the future, and then an honest host's backup is refused until real
time passes that id ("the newest backup ... is later than this worker's clock"): one skewed
host stopped every backup of the host for the length of its skew (a strict xfail before the fix).
Now the skewed run is refused by the store's clock (the Date of its answer to reading the host
lock) naming the skew, registers nothing, and the honest run goes on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from crashbed import Bed, run_python

from helpers import RUN

HERE = Path(__file__).resolve().parent
FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


@pytest.mark.skipif(
    not FAKETIME.exists(), reason="libfaketime is not installed (apt-get install libfaketime)"
)
def test_a_host_whose_clock_is_ahead_does_not_stop_the_honest_hosts_backups(bed: Bed) -> None:
    bed.ok("backup")
    where = ["--config", str(bed.config), "--cluster", "c1", "--host", "db1"]
    ahead = run_python(
        ["-c", RUN, "backup", *where],
        {"XTRABACKUP_GPG_PASSPHRASE": bed.keys.passphrase, "HOME": str(bed.tmp), "LD_PRELOAD": str(FAKETIME),
         "FAKETIME": "+10m", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
         "PYTHONPATH": os.pathsep.join([str(HERE / "faketime"), os.environ.get("PYTHONPATH", "")])},
    )  # fmt: skip
    print("ahead:", ahead.returncode, ahead.stdout[-1500:], ahead.stderr[-1500:])
    assert ahead.returncode != 0 and "ahead of the store's" in ahead.stderr, ahead.stderr[-1500:]
    honest = bed.cli("backup")
    print("honest:", honest.returncode, honest.stdout[-1500:], honest.stderr[-1500:])
    assert honest.returncode == 0, (
        f"an honest backup after one from a host 10 minutes ahead (exit {ahead.returncode}) failed: "
        f"{honest.stderr.strip().splitlines()[-1:]}"
    )
