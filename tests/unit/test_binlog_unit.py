"""Pure logic of binlog shipping and PITR planning: the event walker, GTIDs, the index of shipped
binlogs (gaps, holes, resets), choosing the backup and the binlogs for a target, argv."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from manifest_factory import make_manifest
from xtrabackup_provider.core.binlog import events as ev
from xtrabackup_provider.core.binlog.catalog import (
    BinlogError,
    BinlogGap,
    BinlogIndex,
    BinlogManifest,
    binlogs_needed,
    binlogs_older_than,
    check_not_reset,
    find_gap,
)
from xtrabackup_provider.core.binlog.follow import default_replica_server_id
from xtrabackup_provider.core.binlog.ship import download_argv
from xtrabackup_provider.core.common import values
from xtrabackup_provider.core.config.load import parse_config
from xtrabackup_provider.core.config.schema import ConfigError
from xtrabackup_provider.core.pitr.plan import PitrError, PitrPlan, PitrTarget, choose_backup, plan_binlogs
from xtrabackup_provider.core.pitr.recover import PitrReport, where_replay_stops

T0 = 1_800_000_000  # an epoch second
UUID = "mariadb-db1-3306-7"


# -- a tiny binlog writer (v4 headers, no checksums) ------------------------------------------------


def _event(etype: int, ts: int, body: bytes = b"", server_id: int = 7) -> bytes:
    return struct.pack("<IBIIIH", ts, etype, server_id, 19 + len(body), 0, 0) + body


def _gtid(seq: int, domain: int = 0, ts: int = T0) -> bytes:
    return _event(ev.GTID_EVENT, ts, struct.pack("<QIB", seq, domain, 0))


def _binlog(*events: bytes) -> bytes:
    return ev.MAGIC + b"".join(events)


def _sample(path: Path, rotate: bool = True) -> Path:
    """FD, Gtid_list [0-7-4], then GTIDs 5 (t0), 6 (t0+1), 7 (t0+3) with a query each, rotate."""
    gtid_list = struct.pack("<I", 1) + struct.pack("<IIQ", 0, 7, 4)
    events = [
        _event(ev.FORMAT_DESCRIPTION_EVENT, T0 - 10, b"\0" * 100),
        _event(ev.GTID_LIST_EVENT, T0 - 10, gtid_list),
    ]
    for seq, ts in ((5, T0), (6, T0 + 1), (7, T0 + 3)):
        events += [_gtid(seq, ts=ts), _event(2, ts, b"q" * 30)]
    if rotate:
        events.append(_event(ev.ROTATE_EVENT, T0 + 4, struct.pack("<Q", 4) + b"mysql-bin.000002"))
    path.write_bytes(_binlog(*events))
    return path


def test_summary_of_a_closed_binlog(tmp_path):
    s = ev.summarize(_sample(tmp_path / "mysql-bin.000001"))
    assert s.closed and s.events == 9 and s.size == (tmp_path / "mysql-bin.000001").stat().st_size
    assert (s.first_time, s.last_time) == (T0 - 10, T0 + 4)
    assert values.format_gtid_pos(s.gtid_start) == "0-7-4"
    assert (values.format_gtid_pos(s.gtid_first), values.format_gtid_pos(s.gtid_last)) == ("0-7-5", "0-7-7")
    assert s.server_id == 7  # the format event's: the server that wrote the file


def test_a_half_written_event_is_left_out_and_the_summary_continues_later(tmp_path):
    path = _sample(tmp_path / "mysql-bin.000001", rotate=False)
    whole = path.read_bytes()
    path.write_bytes(whole[:-10])  # the last event is still being written
    partial = ev.summarize(path)
    assert not partial.closed and partial.size < len(whole) - 10
    assert values.format_gtid_pos(partial.gtid_last) == "0-7-7"  # its GTID event is complete
    path.write_bytes(whole)
    assert ev.summarize(path, partial).size == len(whole)


def test_not_a_binlog_is_refused_with_its_name(tmp_path):
    path = tmp_path / "mysql-bin.000001"
    path.write_bytes(b"hello world, not a binlog")
    with pytest.raises(ev.BinlogFormatError, match="mysql-bin.000001"):
        ev.summarize(path)


def test_replay_end_mirrors_the_stop_options(tmp_path):
    files = [_sample(tmp_path / "mysql-bin.000001")]
    with open(files[0], "rb") as fh:  # the backup position: at the first GTID event
        start = next(e.offset for e, _ in ev.iter_events(fh) if e.gtid is not None)
    by_time = ev.replay_end(files, start, stop_time=T0 + 2)
    assert values.format_gtid_pos(by_time.last_gtid) == "0-7-6", "events stamped before T are replayed"
    by_gtid = ev.replay_end(files, start, stop_gtid=values.parse_gtid_pos("0-7-5"))
    assert values.format_gtid_pos(by_gtid.last_gtid) == "0-7-5"
    whole = ev.replay_end(files, start)
    assert whole.position == files[0].stat().st_size and values.format_gtid_pos(whole.last_gtid) == "0-7-7"
    assert ev.replay_end(files, start, stop_position=by_gtid.position).last_gtid == by_gtid.last_gtid


def test_gtid_parsing_and_comparison():
    pos = values.parse_gtid_pos("0-1-100, 1-2-7")
    assert values.format_gtid_pos(pos) == "0-1-100,1-2-7"
    assert values.gtid_reached(pos, values.parse_gtid_pos("0-9-99"))
    assert not values.gtid_reached(pos, values.parse_gtid_pos("0-1-101"))
    assert not values.gtid_reached(pos, values.parse_gtid_pos("5-1-1")), "a domain never seen is not reached"
    with pytest.raises(ValueError, match="domain-server_id-sequence"):
        values.parse_gtid_pos("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")
    with pytest.raises(ValueError, match="domain 0 appears twice"):
        values.parse_gtid_pos("0-1-1,0-1-2")
    assert values.binlog_number("mysql-bin.000042") == ("mysql-bin", 42)
    with pytest.raises(ValueError, match="not a binlog file name"):
        values.binlog_number("mysql-bin.index")


# -- the index of shipped binlogs ----------------------------------------------------------------------


def _manifest(
    n: int,
    *,
    complete: bool = True,
    size: int = 1000,
    gtids: tuple[int, int] | None = None,
    last: int | None = None,
) -> BinlogManifest:
    name = f"mysql-bin.{n:06d}"
    first, final = gtids or (n * 10, n * 10 + 9)
    when = datetime.fromtimestamp(T0 + n * 100, UTC)
    return BinlogManifest(
        name=name,
        cluster="c1",
        host="db1",
        server_uuid=UUID,
        server_id=7,
        complete=complete,
        size=size,
        sha256="cd" * 32 if complete else None,
        events=10,
        first_event_time=when,
        last_event_time=datetime.fromtimestamp(last, UTC) if last else when + timedelta(seconds=99),
        covers_until=None if complete else when + timedelta(seconds=99),
        gtid_first=f"0-7-{first}",
        gtid_last=f"0-7-{final}",
        segments=[
            {
                "offset": 0,
                "raw_size": size,
                "raw_sha256": "cd" * 32,
                "object": {
                    "key": f"backups/c1/db1/binlogs/{UUID}/{name}.zst",
                    "size": size // 2,
                    "sha256": "ef" * 32,
                    "raw_size": size,
                    "compression": "zstd",
                    "encryption": "none",
                },
            }
        ],
        shipped_at=when + timedelta(seconds=100),
    )


def _index(*manifests: BinlogManifest, gaps: tuple[tuple[int, int], ...] = ()) -> BinlogIndex:
    recorded = [
        BinlogGap(
            server_uuid=UUID,
            first_missing=f"mysql-bin.{first:06d}",
            last_missing=f"mysql-bin.{last:06d}",
            server_oldest=f"mysql-bin.{last + 1:06d}",
            detected_at=datetime.now(UTC),
        )
        for first, last in gaps
    ]
    return BinlogIndex.of(UUID, manifests, recorded)


def test_a_manifest_must_hold_contiguous_segments():
    good = _manifest(1).model_dump()
    good["segments"][0]["offset"] = 10
    with pytest.raises(ValueError, match="does not continue"):
        BinlogManifest.model_validate(good)
    two = _manifest(1).model_dump()
    two["size"] = 2000
    two["segments"].append(dict(two["segments"][0], offset=1000))
    with pytest.raises(ValueError, match="complete binlog is one object"):
        BinlogManifest.model_validate(two)


def test_find_gap_reports_binlogs_purged_before_shipping_once():
    index = _index(_manifest(1), _manifest(2))
    assert find_gap(index, ["mysql-bin.000003", "mysql-bin.000004"]) is None, "the next one is still there"
    assert find_gap(_index(), ["mysql-bin.000009"]) is None, "nothing shipped yet: no history to break"
    gap = find_gap(index, ["mysql-bin.000006", "mysql-bin.000007"])
    assert gap is not None and (gap.first_missing, gap.last_missing) == (
        "mysql-bin.000003",
        "mysql-bin.000005",
    )
    assert gap.last_shipped == "mysql-bin.000002"
    recorded = _index(_manifest(1), _manifest(2), gaps=((3, 5),))
    assert find_gap(recorded, ["mysql-bin.000006"]) is None, "a recorded gap is not reported again"


def test_a_history_the_server_no_longer_continues_is_refused():
    index = _index(_manifest(1, size=1000), _manifest(2, size=1000))
    check_not_reset(index, [("mysql-bin.000002", 1000), ("mysql-bin.000003", 50)], "db1")
    with pytest.raises(
        BinlogError, match=r"000002 is 420 bytes on the server.*RESET MASTER.*new full backup"
    ):
        check_not_reset(index, [("mysql-bin.000002", 420), ("mysql-bin.000003", 50)], "db1")
    with pytest.raises(
        BinlogError, match="writing mysql-bin.000001, but mysql-bin.000002 was already shipped"
    ):
        check_not_reset(index, [("mysql-bin.000001", 300)], "db1")


def test_chain_from_stops_at_gaps_holes_and_the_open_binlog():
    index = _index(_manifest(1), _manifest(2), _manifest(3, complete=False, size=500))
    chain, why = index.chain_from("mysql-bin.000001")
    assert [m.name for m in chain] == ["mysql-bin.000001", "mysql-bin.000002", "mysql-bin.000003"]
    assert "open binlog" in why
    chain, why = _index(_manifest(1), _manifest(3)).chain_from("mysql-bin.000001")
    assert len(chain) == 1 and "mysql-bin.000002 is not shipped although later binlogs are" in why
    chain, why = _index(_manifest(1), _manifest(4), gaps=((2, 3),)).chain_from("mysql-bin.000001")
    assert len(chain) == 1 and why.startswith("gap: mysql-bin.000002..mysql-bin.000003")
    assert index.covers_position("mysql-bin.000003", 500) and not index.covers_position(
        "mysql-bin.000003", 501
    )
    assert index.covers_gtid(values.parse_gtid_pos("0-7-39")) and not index.covers_gtid(
        values.parse_gtid_pos("0-7-40")
    )


def test_binlogs_for_retention():
    index = _index(*(_manifest(n) for n in range(1, 6)))
    backup = make_manifest("20261101T100000Z-full", binlog_file="mysql-bin.000003", binlog_position=4)
    assert binlogs_needed(index, backup) == ["mysql-bin.000003", "mysql-bin.000004", "mysql-bin.000005"]
    assert binlogs_older_than(index, backup) == ["mysql-bin.000001", "mysql-bin.000002"]


# -- PITR planning ----------------------------------------------------------------------------------------


def _backups():
    full = make_manifest(
        "20261101T100000Z-full",
        binlog_file="mysql-bin.000001",
        binlog_position=400,
        gtid="0-7-12",
        finished_at=datetime.fromtimestamp(T0 + 150, UTC),
    )
    inc = make_manifest(
        "20261101T110000Z-inc",
        parent=full,
        binlog_file="mysql-bin.000002",
        binlog_position=300,
        gtid="0-7-23",
        finished_at=datetime.fromtimestamp(T0 + 250, UTC),
    )
    return full, inc


def test_targets_are_parsed_with_errors_that_name_the_flag():
    assert PitrTarget.at_time("2026-11-30T10:15:00.7+02:00").time == datetime(2026, 11, 30, 8, 15, tzinfo=UTC)
    assert PitrTarget.at_time("2026-11-30 10:15:00").time == datetime(2026, 11, 30, 10, 15, tzinfo=UTC)
    with pytest.raises(PitrError, match="--to-time"):
        PitrTarget.at_time("yesterday")
    with pytest.raises(PitrError, match="--to-gtid"):
        PitrTarget.at_gtid("0-7")
    assert PitrTarget.at_position("mysql-bin.000002:1234").position == 1234
    with pytest.raises(PitrError, match="FILE:POS"):
        PitrTarget.at_position("1234")


def test_the_newest_backup_before_the_target_is_chosen():
    full, inc = _backups()
    at = PitrTarget.at_time
    assert choose_backup([full, inc], at(_iso(T0 + 200))).backup_id == full.backup_id
    assert choose_backup([full, inc], at(_iso(T0 + 300))).backup_id == inc.backup_id
    assert choose_backup([full, inc], PitrTarget.at_gtid("0-7-20")).backup_id == full.backup_id
    assert (
        choose_backup([full, inc], PitrTarget.at_position("mysql-bin.000002:300")).backup_id == inc.backup_id
    )
    with pytest.raises(PitrError, match="no backup with binlog coordinates before"):
        choose_backup([full, inc], at(_iso(T0)))
    with pytest.raises(PitrError, match="taken after"):
        choose_backup([full, inc], at(_iso(T0 + 200)), backup_id=inc.backup_id)


def test_plan_takes_the_binlogs_from_the_backup_to_the_target():
    full, _ = _backups()
    index = _index(_manifest(1), _manifest(2), _manifest(3), _manifest(4, complete=False))
    by_time = plan_binlogs(index, full, PitrTarget.at_time(_iso(T0 + 250)))
    assert [m.number for m in by_time] == [1, 2], "binlog 2 holds events after the target"
    by_gtid = plan_binlogs(index, full, PitrTarget.at_gtid("0-7-35"))
    assert [m.number for m in by_gtid] == [1, 2, 3]
    in_open = plan_binlogs(index, full, PitrTarget.at_position("mysql-bin.000004:900"))
    assert [m.number for m in in_open] == [1, 2, 3, 4]
    with pytest.raises(PitrError, match="shipped only up to byte 1000"):
        plan_binlogs(index, full, PitrTarget.at_position("mysql-bin.000004:1200"))
    with pytest.raises(PitrError, match="Ship binlogs first"):
        plan_binlogs(index, full, PitrTarget.at_time(_iso(T0 + 10_000)))
    with pytest.raises(PitrError, match="cannot cross a gap"):
        plan_binlogs(_index(_manifest(1), _manifest(3), gaps=((2, 2),)), full, PitrTarget.at_gtid("0-7-35"))
    with pytest.raises(PitrError, match=r"domain\(s\) \[1\]"):
        two_domains = _manifest(2)
        two_domains = two_domains.model_copy(update={"gtid_last": "0-7-29,1-7-3"})
        plan_binlogs(_index(_manifest(1), two_domains), full, PitrTarget.at_gtid("0-7-25"))


def test_a_domain_without_transactions_after_the_backup_need_not_be_named():
    full, _ = _backups()
    old_domain = full.model_copy(update={"gtid": "0-7-12,1-7-3"})
    two_domains = _manifest(2).model_copy(update={"gtid_last": "0-7-29,1-7-3"})
    chain = plan_binlogs(_index(_manifest(1), two_domains), old_domain, PitrTarget.at_gtid("0-7-25"))
    assert [m.number for m in chain] == [1, 2]


def test_the_report_says_where_the_replay_stops_and_whether_there_is_anything_to_replay(tmp_path):
    path = _sample(tmp_path / "mysql-bin.000001")
    with open(path, "rb") as fh:
        first_gtid = next(e.offset for e, _ in ev.iter_events(fh) if e.gtid is not None)
    backup = make_manifest(
        "20261101T100000Z-full", binlog_file=path.name, binlog_position=first_gtid, gtid="0-7-4"
    )
    report = PitrReport(backup.backup_id, [], "", "", [], "")
    assert where_replay_stops(PitrPlan(backup, [], PitrTarget.at_time(_iso(T0 + 2))), [path], report)
    assert report.reached_gtid == "0-7-6"
    assert not where_replay_stops(PitrPlan(backup, [], PitrTarget.at_time(_iso(T0))), [path], report)
    assert not where_replay_stops(PitrPlan(backup, [], PitrTarget.at_gtid("0-7-4")), [path], report), (
        "already there"
    )
    assert where_replay_stops(PitrPlan(backup, [], PitrTarget.at_gtid("0-7-5")), [path], report)
    assert report.reached_gtid == "0-7-5"


def test_replay_arguments_per_target_kind():
    full, _ = _backups()
    args = PitrPlan(full, [], PitrTarget.at_time("2026-11-30T10:15:00Z")).replay_args()
    assert args == ["--start-position=400", "--stop-datetime=2026-11-30 10:15:00"]
    assert PitrPlan(full, [], PitrTarget.at_gtid("0-7-30")).replay_args() == [
        "--start-position=0-7-12",
        "--stop-position=0-7-30",
    ]
    no_gtid = full.model_copy(update={"gtid": None})
    assert PitrPlan(no_gtid, [], PitrTarget.at_gtid("0-7-30")).replay_args() == ["--stop-position=0-7-30"]
    args = PitrPlan(full, [], PitrTarget.at_position("mysql-bin.000003:77")).replay_args()
    assert args == ["--start-position=400", "--stop-position=77"]


# -- argv, ids, config ------------------------------------------------------------------------------------


def test_download_argv_reads_credentials_from_the_defaults_file_first():
    argv = download_argv("mariadb-binlog", "/tmp/x/client.cnf", Path("/tmp/d"), "mysql-bin.000003")
    assert argv[1] == "--defaults-file=/tmp/x/client.cnf"
    assert argv[-1] == "mysql-bin.000003" and "--raw" in argv and "--read-from-remote-server" in argv
    assert not any(a.startswith(("--password", "-p")) for a in argv)
    live = download_argv("mariadb-binlog", "c", Path("/d"), "b.000001", stop_never=True, replica_server_id=42)
    assert "--stop-never" in live and "--stop-never-slave-server-id=42" in live


def test_replica_server_id_is_stable_per_host_and_above_real_ids():
    a = default_replica_server_id("main", "db1")
    assert a == default_replica_server_id("main", "db1") != default_replica_server_id("main", "db2")
    assert 4_000_000_000 <= a < 2**32


def test_binlog_config_errors_name_the_field():
    raw = {
        "storage": {"local_path": "/srv"},
        "clusters": [{"name": "c", "hosts": [{"name": "h"}], "binlogs": {"mode": "sometimes"}}],
    }
    with pytest.raises(ConfigError, match=r"clusters\.0\.binlogs\.mode"):
        parse_config(raw, "fleet.yaml")
    raw["clusters"][0]["binlogs"] = {"mode": "continuous"}
    assert parse_config(raw, "fleet.yaml").clusters[0].binlogs.continuous_minutes == 55


def _iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()
