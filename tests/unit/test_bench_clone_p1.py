"""bench/clone_p1.py's pure parts: the P1 ratio is taken pair by pair (ours / shell of the same
round), its range is reported beside the median, and each server gets its own docs section."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def p1():
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("clone_p1", BENCH / "clone_p1.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_the_ratio_is_pair_by_pair_not_of_medians(p1):
    pairs = [
        p1.Pair(ours={"backup": 10.0, "restore": 4.0}, shell={"backup": 5.0, "restore": 4.0}),
        p1.Pair(ours={"backup": 12.0, "restore": 6.0}, shell={"backup": 12.0, "restore": 3.0}),
        p1.Pair(ours={"backup": 9.0, "restore": 5.0}, shell={"backup": 10.0, "restore": 5.0}),
    ]
    backup = p1.summarize(pairs, "backup")
    assert backup.ratios == [2.0, 1.0, 0.9]
    assert (backup.median, backup.low, backup.high) == (1.0, 0.9, 2.0)
    assert backup.verdict == "PASS"
    total = p1.summarize(pairs, "total")
    assert total.ratios == [14.0 / 9.0, 18.0 / 15.0, 14.0 / 15.0]
    assert total.verdict == "MISS"
    assert p1.fmt_summary(total) == "1.20 (range 0.93 .. 1.56)"


def test_a_pair_cut_short_by_a_failure_gives_no_ratio_for_what_it_lacks(p1):
    pairs = [
        p1.Pair(ours={"backup": 3.0, "restore": 1.0}, shell={"backup": 3.0, "restore": 1.0}),
        p1.Pair(ours={"backup": 4.0}, shell={}),
    ]
    assert p1.summarize(pairs, "backup").ratios == [1.0]
    assert p1.summarize(pairs, "total").ratios == [1.0]
    empty = p1.summarize([p1.Pair()], "restore")
    assert empty.median is None and empty.verdict == "n/a" and p1.fmt_summary(empty) == "n/a"


def test_each_server_version_has_its_own_section(p1):
    assert p1.section_name("mysql", "9.7.4-2") == "p1_mysql_9_7"
    assert p1.section_name("mariadb", "10.11.19-MariaDB-0+deb12u1") == "p1_mariadb_10_11"
    assert p1.section_name("mariadb", "11.8.9-MariaDB-0+deb13u1") == "p1_mariadb_11_8"
    with pytest.raises(ValueError, match="major.minor"):
        p1.section_name("mysql", "nine")


def test_rounds_alternate_which_method_goes_first(p1):
    """Neither method always runs right after the other's writes; a restore follows both backups."""
    first, second = p1.round_order(0), p1.round_order(1)
    assert first == [("backup", "ours"), ("backup", "shell"), ("restore", "ours"), ("restore", "shell")]
    assert second == [("backup", "shell"), ("backup", "ours"), ("restore", "shell"), ("restore", "ours")]
    assert p1.round_order(2) == first


def test_cpu_ratios_pair_the_same_rounds_and_skip_what_a_failure_cut(p1):
    cpu = {"b-ours": [10.0, 12.0], "b-shell": [8.0, 12.0], "r-ours": [4.0], "r-shell": [2.0]}
    pairs = p1.cpu_pairs(cpu)
    assert p1.summarize(pairs, "backup").ratios == [1.25, 1.0]
    assert p1.summarize(pairs, "restore").ratios == [2.0]
    assert p1.summarize(pairs, "total").ratios == [14.0 / 10.0]
