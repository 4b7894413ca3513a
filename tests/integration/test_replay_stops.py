"""Where a bounded replay stops, planned fast, is where the full transaction listing says.

The applier's stop planner (`plan_stop`, over `complete_groups`: headers plus GTID and Query
bodies) must end after the same transaction as a walk of the full listing (`transactions()`, the
"find the moment" reader that decodes what each group did). A real server writes the groups
that end differently: row transactions (Xid), DDL (standalone), a rollback of a non-transactional
change (ROLLBACK), XA (XA PREPARE, then XA COMMIT), a statement over the 64 KiB read cap, a second
GTID domain, and timestamps out of order, across three binlog files. Every time, GTID and
position stop, from several start positions, gives the same end, GTID state and count.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from xtrabackup_provider.core.binlog.events import at_stop_time
from xtrabackup_provider.core.binlog.listing import BodyEvent, Transaction, read_events, transactions
from xtrabackup_provider.core.common.values import GtidPos, format_gtid_pos, parse_gtid_pos
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.pitr.applier import Stop, plan_stop

T0 = 1_900_000_000


def _by_listing(
    files: list[Path],
    start: int,
    start_gtid: str,
    stop_time: int | None = None,
    stop_gtid: GtidPos | None = None,
    stop_position: int | None = None,
) -> Stop:
    """The stop as the decoded listing gives it: every complete group before the first event the
    bounded reader stops at (for a time, the first transaction event: events.FILE_EVENTS aside)."""
    state = parse_gtid_pos(start_gtid)
    stop = Stop(files[0].name, start, format_gtid_pos(state), 0)
    for item in transactions(files, start, dict(state), events=True):
        if isinstance(item, BodyEvent):
            past_gtid = bool(
                stop_gtid
                and item.gtid is not None
                and item.gtid.domain in stop_gtid
                and item.gtid.seq > stop_gtid[item.gtid.domain].seq
            )
            at_time = at_stop_time(item.type, item.timestamp, stop_time)  # a file's own events aside
            at_position = (
                stop_position is not None and item.file == files[-1].name and item.offset >= stop_position
            )
            if past_gtid or at_time or at_position:
                break
            continue
        txn: Transaction = item
        if txn.complete:
            state[txn.gtid.domain] = txn.gtid
            stop = Stop(txn.end_file, txn.end, format_gtid_pos(state), stop.transactions + 1)
    return stop


@pytest.fixture(scope="module")
def written(mariadb_factory) -> tuple[SandboxServer, list[Path], str]:
    server = mariadb_factory("stops")
    start_gtid = str(server.query("SELECT @@gtid_binlog_pos")[0][0])
    big = "x" * 70_000  # a Query body past MAX_TEXT: the COMMIT test must not depend on the cap
    conn = server.connect()
    cur = conn.cursor()
    for sql in [
        f"SET timestamp = {T0}",
        "CREATE DATABASE s",
        "CREATE TABLE s.t (id INT PRIMARY KEY, v MEDIUMTEXT) ENGINE=InnoDB",
        "CREATE TABLE s.m (id INT PRIMARY KEY) ENGINE=MyISAM",
        f"SET timestamp = {T0 + 1}",
        "BEGIN",
        "INSERT INTO s.t VALUES (1, 'a'), (2, 'b')",
        "UPDATE s.t SET v = 'c' WHERE id = 1",
        "COMMIT",
        "FLUSH BINARY LOGS",
        f"SET timestamp = {T0 + 5}",
        "SET SESSION binlog_format = 'STATEMENT'",  # so the MyISAM row goes into the transaction's cache
        "BEGIN",
        "INSERT INTO s.t VALUES (3, 'rolled back')",
        "INSERT INTO s.m VALUES (3)",  # non-transactional: the group is logged, ending in ROLLBACK
        "ROLLBACK",
        "SET SESSION binlog_format = 'ROW'",
        f"SET timestamp = {T0 + 3}",  # stamped before the group above
        "XA START 'x1'",
        "INSERT INTO s.t VALUES (4, 'xa')",
        "XA END 'x1'",
        "XA PREPARE 'x1'",
        "XA COMMIT 'x1'",
        "SET SESSION gtid_domain_id = 7",
        f"SET timestamp = {T0 + 7}",
        "INSERT INTO s.t VALUES (5, 'domain 7')",
        "SET SESSION gtid_domain_id = 0",
        "SET SESSION binlog_format = 'STATEMENT'",
        f"INSERT INTO s.t VALUES (6, '{big}')",
        "SET SESSION binlog_format = 'ROW'",
        "FLUSH BINARY LOGS",
        f"SET timestamp = {T0 + 9}",
        "ALTER TABLE s.t ADD COLUMN w INT",
        "DELETE FROM s.t WHERE id = 2",
        f"SET timestamp = {T0 + 11}",
        "BEGIN",
        "INSERT INTO s.t (id, v) VALUES (7, 'last')",  # the open binlog ends after this commit
        "COMMIT",
    ]:
        cur.execute(sql)
    conn.close()
    names = [r[0] for r in server.query("SHOW BINARY LOGS")]
    return server, [server.datadir / n for n in names], start_gtid


def test_the_fast_stop_plan_ends_where_the_full_listing_does(written):
    _server, files, start_gtid = written
    events = [e for path in files for e in _events(path)]
    times = sorted({e.timestamp for e in events})
    gtids = [e.gtid for e in events if e.gtid is not None]
    assert {g.domain for g in gtids} == {0, 7}, "the history has two GTID domains"
    starts = [4, *[e.offset for e in events if e.file == files[0].name and e.gtid is not None]]
    last = [e.offset for e in events if e.file == files[-1].name]
    cases: list[dict] = [{}]
    cases += [{"stop_time": t} for t in [*times, times[-1] + 1]]
    cases += [{"stop_gtid": {g.domain: g}} for g in gtids]
    cases += [
        {"stop_gtid": {0: g0, 7: g7}} for g0 in gtids if g0.domain == 0 for g7 in gtids if g7.domain == 7
    ]
    cases += [{"stop_position": p} for p in [*last, last[-1] + 1]]
    seen = set()
    for start in starts:
        for stops in cases:
            fast = plan_stop(files, start, start_gtid, **stops)
            assert fast == _by_listing(files, start, start_gtid, **stops), (start, stops)
            seen.add(fast.transactions)
    assert len(seen) >= 8, f"the stops cover many different ends, not a few: {sorted(seen)}"


def test_without_a_stop_the_plan_reaches_what_the_server_wrote(written):
    server, files, start_gtid = written
    whole = plan_stop(files, 4, start_gtid)
    assert parse_gtid_pos(whole.gtid) == parse_gtid_pos(str(server.query("SELECT @@gtid_binlog_pos")[0][0]))
    assert (whole.file, whole.position) == (files[-1].name, _events(files[-1])[-1].end)
    # 3 CREATE, the transaction, the ROLLBACK, XA PREPARE, XA COMMIT, domain 7, the big statement,
    # ALTER, DELETE, the last one
    assert whole.transactions == 12


def _events(path: Path) -> list[BodyEvent]:
    return list(read_events(path))
