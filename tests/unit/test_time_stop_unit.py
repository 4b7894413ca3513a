"""A --to-time stop over a replica's binlogs across its restart (the chaos run, seed 390202).

The replica crashed (its binlog ends without a Rotate event) and restarted; the transactions its
source committed meanwhile arrive in the next binlog, stamped with the source's earlier time,
behind that file's own events (Format_description, Gtid_list), stamped at the restart, after T.
The stop compares transactions' events only: the report's `replay_end`, the applier's
`plan_stop` and the pipe's bounds all end after the last transaction stamped before T.
"""

from __future__ import annotations

import struct
from pathlib import Path

from xtrabackup_provider.core.binlog import events as ev
from xtrabackup_provider.core.common import values
from xtrabackup_provider.core.pitr.applier import Stop, plan_stop, through_stop

T0 = 1_800_000_000
XID_EVENT = 16


def _event(etype: int, ts: int, body: bytes = b"") -> bytes:
    return struct.pack("<IBIIIH", ts, etype, 7, 19 + len(body), 0, 0) + body


def _file_head(ts: int, last_seq: int) -> list[bytes]:
    gtid_list = struct.pack("<I", 1) + struct.pack("<IIQ", 0, 7, last_seq)
    return [_event(ev.FORMAT_DESCRIPTION_EVENT, ts, b"\0" * 100), _event(ev.GTID_LIST_EVENT, ts, gtid_list)]


def _transaction(seq: int, ts: int) -> list[bytes]:
    return [_event(ev.GTID_EVENT, ts, struct.pack("<QIB", seq, 0, 0)), _event(XID_EVENT, ts, b"\0" * 8)]


def _write(path: Path, events: list[bytes]) -> Path:
    path.write_bytes(ev.MAGIC + b"".join(events))
    return path


def _restarted_replica(tmp_path: Path) -> tuple[list[Path], int, int]:
    """mysql-bin.000001: GTID 5 (T0), then the crash. mysql-bin.000002, opened at the restart
    (T0+10): GTID 6 stamped T0+1 (the source's time), GTID 7 stamped T0+12. Returns the files,
    the start (GTID 5's offset) and the end of GTID 6's transaction."""
    first = _write(tmp_path / "mysql-bin.000001", [*_file_head(T0 - 10, 4), *_transaction(5, T0)])
    head, six = _file_head(T0 + 10, 5), _transaction(6, T0 + 1)
    second = _write(tmp_path / "mysql-bin.000002", [*head, *six, *_transaction(7, T0 + 12)])
    start = 4 + sum(map(len, _file_head(T0 - 10, 4)))
    return [first, second], start, 4 + sum(map(len, head + six))


def test_a_time_stop_takes_the_transactions_stamped_before_it_behind_a_later_format_event(tmp_path):
    files, start, six_end = _restarted_replica(tmp_path)
    end = ev.replay_end(files, start, stop_time=T0 + 5)
    assert values.format_gtid_pos(end.last_gtid) == "0-7-6", "GTID 6 was committed before T"
    assert (end.file, end.position) == ("mysql-bin.000002", six_end)
    stop = plan_stop(files, start, "0-7-4", stop_time=T0 + 5)
    assert stop == Stop("mysql-bin.000002", six_end, "0-7-6", 2)


def test_a_time_stop_still_ends_at_the_first_transaction_stamped_at_or_after_it(tmp_path):
    files, start, _ = _restarted_replica(tmp_path)
    assert values.format_gtid_pos(ev.replay_end(files, start, stop_time=T0 + 1).last_gtid) == "0-7-5"
    stop = plan_stop(files, start, "0-7-4", stop_time=T0 + 1)
    assert (stop.file, stop.gtid, stop.transactions) == ("mysql-bin.000001", "0-7-5", 1)
    assert through_stop(files, stop) == files[:1], "the binlog after the crashed one is not read on into"
