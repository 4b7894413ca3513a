"""Who a process is, as a record another process can check later: the machine and PID namespace a
pid means something in, the pid, and the process's start time (a pid with another start time is
another process). The host lock, the read leases and the private temp dirs record their owner so,
and remove what an owner left only once it is proven dead.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Any


def machine_id() -> str:
    """Which machine and PID namespace a pid number means something in."""
    parts = [socket.gethostname()]
    with contextlib.suppress(OSError):
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    with contextlib.suppress(OSError):
        parts.append(os.readlink("/proc/self/ns/pid"))
    return "/".join(parts)


def start_ticks(pid: int) -> int | None:
    """A process's start time (clock ticks since boot): a pid with another start time is another process."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def this_process() -> dict[str, Any]:
    """Who writes a lock or lease, as `process_gone` reads it back: machine, pid, start time."""
    return {"machine": machine_id(), "pid": os.getpid(), "pid_start": start_ticks(os.getpid())}


def process_gone(machine: Any, pid: Any, pid_start: Any) -> bool:
    """Proven dead: the process ran on this machine (and PID namespace) and no process with its
    pid and start time exists any more. Anything else (another machine, an older record without
    the start time) proves nothing."""
    if not machine or machine != machine_id() or not isinstance(pid, int) or not isinstance(pid_start, int):
        return False
    return start_ticks(pid) != pid_start
