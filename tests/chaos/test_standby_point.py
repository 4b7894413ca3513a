"""A PITR point from the standby drawn before a refresh moved the standby past it: the product's
refusal is right, not a violation (chaos seed 120514: the standby of c2 was refreshed to a full taken
after the drawn GTID between the draw and the run)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deployment"))  # fleet.py's airflow_stack

from checker import shipped_whole, standby_passed  # noqa: E402
from storeview import HostView  # noqa: E402

REFUSAL = (
    "standby --to-gtid: error: standby /tmp/xbpc-m6xt2vag/standby/c2 holds 20261205T152011Z-full, which cannot "
    "be rolled forward to GTID 0-205-46898: backup 20261205T152011Z-full was taken after GTID 0-205-46898; pick "
    "an older one. Restore the chain to that point instead (leave out --from-standby)"
)


def test_a_standby_refreshed_past_the_point_excuses_only_that_refusal() -> None:
    assert standby_passed(REFUSAL, "0-205-47010", 46898)
    assert not standby_passed(REFUSAL, "0-205-46898", 46898), "the standby is not past the point"
    assert not standby_passed(REFUSAL, None, 46898), "the standby's GTID unknown: a violation still"
    assert not standby_passed("error: no storage target holds mysql-bin.000004 intact", "0-205-47010", 46898)


def test_the_standby_rolls_forward_only_to_a_transaction_stored_whole() -> None:
    """Seed 120534: the open binlog's partial manifest named 0-201-50754 last, stored up to a byte
    inside it; the roll-forward drawn at it was refused (`only in part`), rightly."""
    full = {"server_uuid": "u1", "binlog_file": "mysql-bin.000001"}
    closed = {
        "server_uuid": "u1",
        "name": "mysql-bin.000001",
        "gtid_first": "0-201-10",
        "gtid_last": "0-201-900",
    }
    open_ = {
        "server_uuid": "u1",
        "name": "mysql-bin.000002",
        "gtid_first": "0-201-901",
        "gtid_last": "0-201-50754",
    }
    view = HostView("b/c1/r1", {}, binlogs={"u1/mysql-bin.000001": closed})
    assert shipped_whole(view, full) == 900
    view.partials["u1/mysql-bin.000002"] = open_
    assert shipped_whole(view, full) == 50753
    view.binlogs["u1/mysql-bin.000002"] = open_  # closed since: its manifest complete, all of it stored
    del view.partials["u1/mysql-bin.000002"]
    assert shipped_whole(view, full) == 50754
