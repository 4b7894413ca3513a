"""Where the chaos checker restores to (tests/chaos/sampling.py): the edges are drawn, a small
budget still meets each kind of edge, --to-time points are seconds whose outcome the ledger knows,
the restored ledger table is judged by it, and binlog positions are read from mariadb-binlog's text.
Pure: no fleet, no server."""

from __future__ import annotations

import random

from sampling import (
    Binlog,
    Point,
    Row,
    as_positions,
    candidates,
    clean_second,
    compare_rows,
    expected_rows,
    rows_until,
    select,
    time_points,
    transaction_ends,
)


def rows(
    n: int, start: float = 1000.0, every: float = 1.0, took: float = 0.05, first_seq: int = 10
) -> list[Row]:
    """n ledger rows, one every `every` s, each taking `took` s, 5 sequence numbers apart (the
    sysbench load commits between them)."""
    return [Row(start + i * every, start + i * every + took, first_seq + 5 * i, i, f"v{i}") for i in range(n)]


def test_the_edges_of_a_window_its_binlogs_and_its_moments_are_candidates_and_nothing_outside_it():
    binlogs = [
        Binlog("b.000001", 90, 120),
        Binlog("b.000002", 121, 180),
        Binlog("b.000003", 181, 260, open=True),
    ]
    got = candidates(100, 200, binlogs, [(150, "restart"), (300, "re-seed")])
    seqs = {p.seq: p.why for p in got}
    assert {100, 101, 199, 200} <= set(seqs)  # the window's ends
    assert seqs[120] == "binlog last" and seqs[121] == "binlog first" and seqs[180] == "binlog last"
    assert seqs[181] == "open binlog first"  # its last (260) is past the window's end
    assert seqs[150] == "restart" and seqs[151] == "restart"
    assert all(100 <= s <= 200 for s in seqs)  # 90 (before the window) and the re-seed at 300 are not
    assert candidates(100, 99, binlogs, []) == []


def test_a_small_budget_meets_every_kind_of_edge_before_any_uniform_point():
    edges = candidates(
        100, 10_000, [Binlog("b.1", 100, 5000), Binlog("b.2", 5001, 10_000, open=True)], [(7000, "restart")]
    )
    kinds = {
        p.why for p in edges
    }  # 7: the window's start is its first binlog's first, its end the open one's last
    for seed in range(20):
        got = select(random.Random(seed), edges, 100, 10_000, len(kinds))
        met = {p.why for p in edges if p.seq in {g.seq for g in got}}  # a point meets every reason at its seq
        assert met == kinds
        assert len({p.seq for p in got}) == len(got) == len(kinds)


def test_the_budget_is_filled_with_uniform_points_and_never_exceeded():
    edges = candidates(100, 110, [], [])
    got = select(random.Random(1), edges, 100, 110, 8)
    assert len(got) == 8 and len({p.seq for p in got}) == 8
    assert sum(p.why == "uniform" for p in got) == 8 - len(edges)
    assert len(select(random.Random(1), edges, 100, 103, 50)) == 4  # the whole window, once each
    assert select(random.Random(1), edges, 100, 99, 5) == []


def test_the_seed_decides_the_draw():
    edges = candidates(1, 100_000, [Binlog("b.1", 1, 60_000)], [(500, "restart")])
    a = select(random.Random(7), edges, 1, 100_000, 10)
    assert a == select(random.Random(7), edges, 1, 100_000, 10)
    assert a != select(random.Random(8), edges, 1, 100_000, 10)


def test_a_share_of_the_points_is_checked_by_position():
    points = [Point(s, "uniform") for s in range(100, 108)]
    got = as_positions(random.Random(3), points, 0.25)
    assert sum(p.kind == "position" for p in got) == 2
    assert [p.seq for p in got] == [p.seq for p in points]
    assert as_positions(random.Random(3), points[:1], 0.25) == points[:1]


def test_a_clean_second_is_one_no_acknowledged_row_straddles():
    ledger = [Row(9.9, 10.2, 1, 1, "a"), Row(10.95, 11.01, 2, 2, "b"), Row(12.5, 12.6, 3, 3, "c")]
    assert clean_second(ledger, 10.4) == 12  # 11 and 10 are straddled: the nearest one that is not
    assert clean_second(ledger, 12.2) == 13
    # every second straddled for a minute: none
    busy = [Row(float(s) - 0.5, float(s) + 0.5, s, s, "x") for s in range(0, 200)]
    assert clean_second(busy, 100.0) is None


def test_a_time_point_holds_what_was_acknowledged_before_its_second_and_nothing_started_after():
    ledger = rows(60)
    for p in time_points(random.Random(5), ledger, 40, 300, [(1020.3, "restart")], 4):
        assert p.kind == "time" and float(p.at).is_integer()
        must, must_not = expected_rows(ledger, p.at)
        assert len(must) + len(must_not) == len(ledger)  # a clean second: every row's outcome is known
        assert must[-1].seq == p.seq and p.seq >= 40 and must_not[0].seq <= 300
    points = time_points(random.Random(5), ledger, 40, 300, [(1020.3, "restart")], 4)
    assert any(p.why == "restart" and p.at == 1021 for p in points)
    assert len(points) == 4


def test_no_time_point_whose_outcome_lies_outside_the_window():
    ledger = rows(60)  # seqs 10..305
    for p in time_points(random.Random(2), ledger, 100, 150, [], 10):
        must, must_not = expected_rows(ledger, p.at)
        assert must[-1].seq >= 100 and must_not[0].seq <= 150
    assert time_points(random.Random(2), ledger, 400, 500, [], 3) == []


def test_the_restored_ledger_table_is_judged_by_the_ledger():
    ledger = rows(5)  # seqs 10, 15, 20, 25, 30
    must, must_not = rows_until(ledger, 20)
    restored = {r.n: r.v for r in must}
    assert compare_rows(restored, must, must_not) == []
    assert compare_rows({**restored, 99: "never acknowledged"}, must, must_not) == []  # its answer was lost
    assert compare_rows({k: v for k, v in restored.items() if k != 1}, must, must_not) == [
        "1 acknowledged row(s) missing (n [1]...)"
    ]
    assert compare_rows({**restored, 0: "other"}, must, must_not) == ["1 row(s) changed (n [0]...)"]
    assert compare_rows({**restored, 3: "v3"}, must, must_not) == ["1 row(s) from after the point (n [3]...)"]


LISTING = """\
# at 4
#261205  7:23:28 server id 205  end_log_pos 256 CRC32 0xd266e888 \tStart: binlog v 4, server v 10.11.19-MariaDB-log created 261205  7:23:28 at startup
# at 256
#261205  7:23:28 server id 205  end_log_pos 285 CRC32 0x6ef23ae3 \tGtid list [0-205-6]
# at 285
#261205  7:23:28 server id 205  end_log_pos 328 CRC32 0x7b11af49 \tBinlog checkpoint mysql-bin.000001
# at 328
#261205  7:23:29 server id 205  end_log_pos 370 CRC32 0xb6919a72 \tGTID 0-205-7 ddl
# at 370
#261205  7:23:29 server id 205  end_log_pos 461 CRC32 0x1d1d7887 \tQuery\tthread_id=6\texec_time=0\terror_code=0\txid=0
# at 461
#261205  7:23:29 server id 205  end_log_pos 503 CRC32 0xb630a61c \tGTID 0-205-8 trans
# at 503
#261205  7:23:29 server id 205  end_log_pos 600 CRC32 0x39ae963b \tAnnotate_rows:
# at 600
#261205  7:23:29 server id 205  end_log_pos 660 CRC32 0xc02e0ab2 \tTable_map: `sbtest`.`sbtest1` mapped to number 21
# at 660
#261205  7:23:29 server id 205  end_log_pos 900 CRC32 0xb74b7b14 \tWrite_rows: table id 21 flags: STMT_END_F
# at 900
#261205  7:23:29 server id 205  end_log_pos 931 CRC32 0xaf568f44 \tXid = 3670
# at 931
#261205  7:23:29 server id 205  end_log_pos 973 CRC32 0xb630a61d \tGTID 1-205-3 trans
# at 973
#261205  7:23:29 server id 205  end_log_pos 1004 CRC32 0xaf568f45 \tXid = 3671
# at 1004
#261205  7:23:30 server id 205  end_log_pos 1050 CRC32 0x0a0b0c0d \tRotate to mysql-bin.000002  pos: 4
"""


def test_a_transaction_ends_after_its_last_event_and_the_file_events_are_no_transaction():
    assert transaction_ends(LISTING) == {7: 461, 8: 931}  # domain 1's transaction is not domain 0's


def test_no_time_point_before_the_window_full_finished():
    # The full's GTID is seq 40 (row 6, acknowledged at 1006.05), but the backup finished at
    # 1012.5: the product starts a --to-time PITR only from a backup finished by the target, so a
    # second in 1007..1012 is refused ("no backup with binlog coordinates before"), not a loss.
    ledger = rows(60)
    for seed in range(40):
        points = time_points(
            random.Random(seed), ledger, 40, 300, [(1008.2, "restart")], 6, not_before=1012.5
        )
        assert points and all(p.at >= 1012.5 for p in points)
