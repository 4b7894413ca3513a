"""The pause_shipper fault's expectations (tests/chaos/faults.py SHIP_TAKEN, SHIP_LOST,
late_registrations) against the product, on the crash-point bed (a seeded MariaDB, moto, no
fleet): a continuous shipper (the DAG's follower) stopped with SIGSTOP while it follows the open
binlog; past its 2-minute lease a shipper on another host (its own hostname: the lock trusts the
lease, not this machine's process table) takes the shipping lock over; resumed with SIGCONT, the
follower says it lost the lock, registers nothing more, removes what it uploaded after (nothing
named by no manifest stays) and ends; a PITR through the binlogs shipped around it equals the
source."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from crashbed import CLUSTER, HOST, Bed, binlog_debris, check_pitr, gtid_now
from test_crash_points import audit, shipped_base, writing

from helpers import RUN

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deployment"))  # fleet.py's airflow_stack

from faults import SHIP_LOST, SHIP_TAKEN, _stopped, late_registrations, upload_keys  # noqa: E402


def _shipper(bed: Bed, log: Path, seconds: int, elsewhere: bool = False) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "XBP_"))}
    env |= {"XTRABACKUP_GPG_PASSPHRASE": bed.keys.passphrase, "HOME": str(bed.tmp)}
    argv = [sys.executable, "-c", RUN, "binlogs", "ship", "--continuous", str(seconds), "--progress-interval", "1",
            "--config", str(bed.config), "--cluster", CLUSTER, "--host", HOST]  # fmt: skip
    if elsewhere:
        argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', f"elsewhere-{CLUSTER}", *argv]
    with log.open("wb") as fh:
        return subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _wait(what: str, ok: Callable[[], object], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not ok():
        assert time.monotonic() < deadline, f"{what} within {seconds:.0f} s"
        time.sleep(0.5)


def test_a_follower_paused_past_its_lease_is_taken_over_and_registers_nothing_after(bed: Bed) -> None:
    shipped_base(bed)
    lock = f"backups/{CLUSTER}/{HOST}/binlog-ship.lock"
    follower_log, taker_log = bed.tmp / "follower.log", bed.tmp / "taker.log"
    with writing(bed):
        follower = _shipper(bed, follower_log, 600)
        try:
            _wait("the follower stores the open binlog's progress", lambda: bed.view().partials, 120)
            holder = bed.reader().get_json(lock)
            assert holder["pid"] == follower.pid, holder
            uid = str(holder["token"])[:8]
            named = upload_keys([*bed.view().binlogs.values(), *bed.view().partials.values()], uid)
            assert named, "the follower's progress names its own segments"
            os.kill(follower.pid, signal.SIGSTOP)
            _wait("the follower stopped", lambda: _stopped(follower.pid), 10)
            time.sleep(125)  # its 2-minute lease and the store clock's margin
            taker = _shipper(bed, taker_log, 20, elsewhere=True)
            took = re.compile(SHIP_TAKEN.format(c=CLUSTER, host=HOST))
            _wait("a shipper elsewhere takes the lock over", lambda: took.search(taker_log.read_text()), 120)
        finally:
            os.killpg(follower.pid, signal.SIGCONT)
        follower.wait(timeout=300)
        assert taker.wait(timeout=300) == 0, taker_log.read_text()[-3000:]
    out = follower_log.read_text()
    print(out[-3000:])
    assert follower.returncode != 0, "the follower that lost its lock must not end as if it shipped"
    assert re.search(SHIP_LOST.format(c=CLUSTER, host=HOST), out), out[-3000:]
    assert re.search(r"nothing was registered or deleted by this run|will register and delete nothing", out)
    view = bed.view()
    assert late_registrations(named, [*view.binlogs.values(), *view.partials.values()], uid) == []
    # What it uploaded before its confirm() refused it removed (its own keys): no debris no run removes.
    assert binlog_debris(view) == [], binlog_debris(view)
    audit(bed, "after")
    gtid, expected = gtid_now(bed), bed.checksums()
    bed.ok("binlogs", "ship", "--flush")
    check_pitr(bed, gtid, expected)
