"""A PITR point from the standby drawn before a refresh moved the standby past it: the product's
refusal is right, not a violation (chaos seed 120514: the standby of c2 was refreshed to a full taken
after the drawn GTID between the draw and the run)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deployment"))  # fleet.py's airflow_stack

from checker import standby_passed  # noqa: E402

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
