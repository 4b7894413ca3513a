"""Restore reports: restore-report.json beside a backup, what retention and the report read as
"verified" (written by restore.restore_test).
"""

from __future__ import annotations

import json
from typing import Any

from .backups import Catalog

REPORT_NAME = "restore-report.json"


def read_report(catalog: Catalog, backup_id: str) -> dict[str, Any] | None:
    key = catalog.object_key(backup_id, REPORT_NAME)
    if catalog.store.head(key) is None:
        return None
    return dict(json.loads(catalog.store.get_bytes(key)))
