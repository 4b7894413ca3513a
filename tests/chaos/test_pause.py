"""The pause_past_lease fault's expectations (tests/chaos/faults.py TAKEN_FROM, fenced) against the
product, on the crash-point bed (a seeded MariaDB, moto, no fleet): a backup on another host (its
own hostname) stops itself with SIGSTOP after storing its objects, before registering them; past
its 2-minute lease the next backup takes its lock over; resumed with SIGCONT, it registers
nothing and says so."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from crashbed import CLUSTER, HOST, Bed

from helpers import RUN

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deployment"))  # fleet.py's airflow_stack

from faults import TAKEN_FROM, _stopped, fenced  # noqa: E402


def test_a_backup_paused_past_its_lease_elsewhere_is_taken_over_and_registers_nothing(bed: Bed) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "XBP_"))}
    env |= {"XTRABACKUP_GPG_PASSPHRASE": bed.keys.passphrase, "HOME": str(bed.tmp),
            "XBP_PAUSE_AT": "backup.after_objects"}  # fmt: skip
    argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', f"elsewhere-{CLUSTER}",
            sys.executable, "-c", RUN, "backup", "--config", str(bed.config), "--cluster", CLUSTER, "--host", HOST]  # fmt: skip
    paused = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                              start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while paused.poll() is None and not _stopped(paused.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert paused.poll() is None and _stopped(paused.pid), "the backup never paused before registering"
        time.sleep(125)  # its 2-minute lease and the store clock's margin
        out = bed.ok("backup")
        print(out[-2000:])
        took = re.search(TAKEN_FROM.format(c=CLUSTER, host=HOST), out)
        assert took, out[-2000:]
    finally:
        os.killpg(paused.pid, signal.SIGCONT)
    text, _ = paused.communicate(timeout=300)
    print(text[-2000:])
    verdict = fenced(text, paused.returncode, took.group(0), set(bed.view().manifests))
    assert verdict.startswith("ok"), verdict
    assert len(bed.view().manifests) == 1, "only the run that took the lock over registered a backup"
