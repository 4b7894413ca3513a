"""The final sweep's backup directories without a manifest (checker.py unnamed_strays): each must be
debris that retention's plan names, unless retention deleted it after the sweep listed the store."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deployment"))  # fleet.py's airflow_stack

from checker import unnamed_strays  # noqa: E402

STRAY = {"20261205T113041Z-inc": ["backups/c2/r1/backups/20261205T113041Z-inc/backup.p0of2.xbstream.zst.gpg"]}


def test_a_stray_retention_deleted_after_the_listing_is_not_a_violation():
    # Seed 120504: the final sweep listed c2's store; the last scheduled backup run's retention
    # deleted the debris 20261205T113041Z-inc at 12:33:48; the plan asked after no longer named it.
    assert unnamed_strays(STRAY, named=set(), after={}) == []


def test_a_stray_still_there_and_not_named_is_a_violation():
    assert unnamed_strays(STRAY, named=set(), after=STRAY) == ["20261205T113041Z-inc"]
    assert unnamed_strays(STRAY, named={"20261205T113041Z-inc"}, after=STRAY) == []
    # Unnamed binlog objects are judged on their own.
    assert unnamed_strays({"binlogs": ["k"]}, named=set(), after={"binlogs": ["k"]}) == []
