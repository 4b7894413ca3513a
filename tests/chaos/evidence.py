"""Where a fault must show: the task logs Airflow wrote (JSON lines with their own timestamps) and
the run's CLI logs. A line counts for a fault when it was written after the fault began and
within its bound. `alerts()` reads the check DAG's lines (CRITICAL / WARNING per host) for the
false-alert count.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from faults import Fault

ALERT = re.compile(r"\b(CRITICAL|WARNING|OK) (\w+)/(\w+): (.*)")


def lines(work: Path, since: float) -> Iterator[tuple[float, str, str]]:
    """(time, file, text) of every log line written at or after `since`."""
    for path in (work / "airflow" / "logs").rglob("*"):
        if path.is_file() and path.stat().st_mtime >= since:
            for raw in path.read_text(errors="replace").splitlines():
                t = _stamp(raw)
                if t is not None and t >= since:
                    yield t, str(path), raw
    for path in (work / "cli").glob("*.log") if (work / "cli").is_dir() else []:
        t = float(path.name.split("-", 1)[0])
        if t >= since:
            for raw in path.read_text(errors="replace").splitlines():
                yield t, str(path), raw


def _stamp(raw: str) -> float | None:
    if not raw.startswith("{"):
        return None
    try:
        value = json.loads(raw).get("timestamp")
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


def find(work: Path, fault: Fault) -> str | None:
    """Where the fault's evidence shows within its bound (None: not yet / not at all)."""
    if fault.evidence is None:
        return "no victim"
    pattern = re.compile(fault.evidence)
    for t, path, raw in lines(work, fault.t0):
        if t <= fault.t0 + fault.bound_s and pattern.search(raw):
            return f"{Path(path).name}: {raw[:200]}"
    return None


def alerts(work: Path, since: float) -> list[tuple[float, str, str, str]]:
    """(time, status, cluster, line) of every host line the check DAG logged."""
    out = []
    for t, path, raw in lines(work, since):
        if "mysql_backup_check_" not in path:
            continue
        try:
            event = str(json.loads(raw).get("event", ""))
        except ValueError:
            continue
        if m := ALERT.search(event):
            out.append((t, m.group(1), m.group(2), event))
    return out
