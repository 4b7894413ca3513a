"""Loaded (PYTHONPATH) only into the CLI the clock_skew fault runs under libfaketime.

libfaketime 0.9.10 (Debian's) with FAKETIME_DONT_FAKE_MONOTONIC breaks Python 3.11's time.sleep:
it rewrites the absolute CLOCK_MONOTONIC deadline of clock_nanosleep(TIMER_ABSTIME) and the
kernel answers EINVAL (wolfcw/libfaketime#426). select()'s relative timeout is left alone, so
sleeping with it keeps the process working; its wall clock stays 20 minutes behind, which is
the fault.
"""

import select
import time


def _sleep(seconds: float) -> None:
    select.select([], [], [], seconds)


time.sleep = _sleep
