"""Which shipped binlogs a PITR window of a full reads (storeview.window_binlogs): its server's, from
the full's binlog on, numbered without a hole. Pure: no fleet, no server.

Seed 120503 (c2): r1 re-seeded, given server_id 209, a full at mysql-bin.000002; re-seeded again
3 minutes later under the same server_id before shipping had caught up: 209's binlogs went with its
datadir, and the server's new mysql-bin.000001 (seq 6830..11174) was shipped under 209's name. The
checker drew the full's window to seq 11174 and called every point past the full a violation."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from storeview import HostView, window_binlogs


def binlog(server: str, name: str, first: int, last: int) -> dict[str, Any]:
    return {"server_uuid": server, "name": name, "gtid_first": f"0-205-{first}", "gtid_last": f"0-205-{last}"}


def full(server: str, seq: int, binlog_file: str | None) -> dict[str, Any]:
    return {"kind": "full", "server_uuid": server, "gtid": f"0-205-{seq}", "binlog_file": binlog_file}


def view(binlogs: list[dict[str, Any]], partials: list[dict[str, Any]]) -> HostView:
    return HostView(
        "backups/c2/r1",
        {},
        binlogs={f"{m['server_uuid']}/{m['name']}": m for m in binlogs},
        partials={f"{m['server_uuid']}/{m['name']}": m for m in partials},
        store_now=datetime.now(UTC),
    )


def names(ms: list[dict[str, Any]]) -> list[str]:
    return [f"{m['server_uuid']}/{m['name']}" for m in ms]


def test_a_binlog_numbered_before_the_full_is_another_history_and_the_window_ends_at_the_full():
    store = view(
        [binlog("s210", "mysql-bin.000001", 9000, 11000)],
        [binlog("s209", "mysql-bin.000001", 6830, 11174), binlog("s210", "mysql-bin.000002", 11001, 11300)],
    )
    assert window_binlogs(store, full("s209", 4907, "mysql-bin.000002")) == []
    # The next server's full reads its own binlogs from its own binlog on.
    assert names(window_binlogs(store, full("s210", 11050, "mysql-bin.000002"))) == ["s210/mysql-bin.000002"]


def test_the_window_stops_at_the_first_binlog_missing_and_a_complete_binlog_wins_over_its_partial():
    store = view(
        [binlog("u", f"b.{n:06d}", 100 * n, 100 * n + 99) for n in (1, 2, 3, 5)],
        [binlog("u", "b.000003", 300, 350), binlog("u", "b.000006", 600, 650)],
    )
    got = window_binlogs(store, full("u", 150, "b.000001"))
    assert names(got) == ["u/b.000001", "u/b.000002", "u/b.000003"]
    assert got[-1]["gtid_last"] == "0-205-399"  # the complete manifest, not the stale partial


def test_the_window_ends_at_the_open_binlog():
    store = view(
        [binlog("u", "b.000001", 1, 50)], [binlog("u", "b.000002", 51, 80), binlog("u", "b.000003", 81, 90)]
    )
    assert names(window_binlogs(store, full("u", 10, "b.000001"))) == ["u/b.000001", "u/b.000002"]


def test_a_full_without_a_binlog_position_reads_every_binlog_of_its_server():
    store = view([binlog("u", "b.000001", 1, 50), binlog("v", "b.000001", 1, 60)], [])
    assert names(window_binlogs(store, full("u", 10, None))) == ["u/b.000001"]
