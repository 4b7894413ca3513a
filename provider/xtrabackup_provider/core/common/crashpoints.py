"""Crash points of the commit protocols, for tests only: off unless $XBP_CRASH_AT names one.

Each protocol (a backup's registration, a K-part commit, a retention round, a copy, promote's
timeline record, a standby update, a lease or lock release, a binlog's registration) calls
`crash_point("<protocol>.<step>")` at its step boundaries. With `XBP_CRASH_AT=backup.after_objects`
the process kills itself with SIGKILL the first time it reaches that boundary, as a power cut or
an OOM kill would stop it: no `finally`, no atexit, no flush. `NAME@N` kills at the Nth time
(a retention run's second deletion round). The test suite (tests/chaos/test_crash_points.py) runs
each point in turn and checks what the next run makes of it; docs/RELIABILITY.md is its table.

`XBP_PAUSE_AT=NAME[@N]` stops the process there instead (SIGSTOP), as a paused VM or a stalled
worker would, until a test sends SIGCONT: a holder that outlives its lease.

Children never see the variable (core/common/children.py passes a fixed set of variables), so
only the process of the protocol dies, not a tool it started.
"""

from __future__ import annotations

import os
import signal

ENV = "XBP_CRASH_AT"
PAUSE_ENV = "XBP_PAUSE_AT"

# Every point the product calls, so the suite can prove it covers each one.
POINTS = (
    "backup.after_objects",
    "backup.after_manifest",
    "parts.between_commits",
    "binlog.after_object",
    "binlog.after_segment",
    "binlog.after_complete",
    "binlog.after_gap",
    "retention.between_rounds",
    "retention.before_data",
    "retention.after_data",
    "copy.after_objects",
    "copy.after_manifest",
    "copy.after_report",
    "promote.after_timeline",
    "promote.after_reset_master",
    "standby.mid_step",
    "standby.after_step",
    "lease.after_write",
    "lease.before_release",
    "lease.before_removal",
    "lock.after_takeover",
    "lock.before_release",
    "abandoned.before_removal",
)

_hits: dict[str, int] = {}


def crash_point(name: str) -> None:
    """SIGKILL this process if $XBP_CRASH_AT names `name` (or `name@N` and this is the Nth hit);
    SIGSTOP it if $XBP_PAUSE_AT does."""
    for env, sig in ((ENV, signal.SIGKILL), (PAUSE_ENV, signal.SIGSTOP)):
        wanted = os.environ.get(env)
        if not wanted or not wanted.startswith(name):
            continue
        point, _, nth = wanted.partition("@")
        if point != name:
            continue
        key = f"{env}:{name}"
        _hits[key] = _hits.get(key, 0) + 1
        if _hits[key] == (int(nth) if nth.isdigit() else 1):
            os.kill(os.getpid(), sig)
