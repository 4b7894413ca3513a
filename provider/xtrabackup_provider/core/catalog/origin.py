"""Which Airflow task made a backup or ran a restore test: recorded in the manifest's `extra` (and
the restore report) under "airflow", so the Backups view links each backup to its DAG run and
task log. Small and secret-free: ids only.

    {"dag_id": "mysql_backup_main", "run_id": "scheduled__2026-...", "task_id": "backup.backup",
     "map_index": 0, "try_number": 1}

A backup taken with the CLI has none. Anyone who can write to the bucket can write these, so they
are read defensively: only these keys, ids of bounded length, whole numbers.
"""

from __future__ import annotations

import re
from typing import Any

ORIGIN_KEY = "airflow"
ID_FIELDS = ("dag_id", "run_id", "task_id")
INT_FIELDS = ("map_index", "try_number")
# Airflow's own bounds: dag_id/task_id 250 characters, run_id 250; no control characters.
_ID = re.compile(r"^[^\x00-\x1f\x7f]{1,250}$")


def airflow_origin(value: Any) -> dict[str, Any]:
    """The recorded origin, reduced to what it may hold; {} when absent or not an origin."""
    if not isinstance(value, dict):
        return {}
    out: dict[str, Any] = {}
    for name in ID_FIELDS:
        text = value.get(name)
        if isinstance(text, str) and _ID.match(text):
            out[name] = text
    for name in INT_FIELDS:
        number = value.get(name)
        if isinstance(number, int) and not isinstance(number, bool) and -1 <= number < 2**31:
            out[name] = number
    return out if {"dag_id", "run_id"} <= set(out) else {}
