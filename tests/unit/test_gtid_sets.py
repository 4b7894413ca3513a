"""The MySQL GTID set model (core/common/values.py) against plain Python sets of (source, number):
parse and format round-trip to MySQL's normal form; union, difference and subset agree with the
sets; a GTID of the other server's form is refused by name."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xtrabackup_provider.core.common.values import (
    GtidSet,
    MysqlGtid,
    check_gtid_for,
    check_mysql_gtid_set,
    gtid_form,
    parse_gtid_pos,
)

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "9b2f8a10-0000-11f1-81ec-02fc00000001"
SOURCES = [U1, U2, f"{U1}:blue"]

members = st.sets(st.tuples(st.sampled_from(SOURCES), st.integers(1, 40)), max_size=60)


def _of(items: set[tuple[str, int]]) -> GtidSet:
    return GtidSet({s: [(n, n) for src, n in items if src == s] for s in SOURCES})


def _members(gtids: GtidSet) -> set[tuple[str, int]]:
    return {
        (s, n) for s, intervals in gtids.intervals().items() for a, b in intervals for n in range(a, b + 1)
    }


@settings(derandomize=True, max_examples=300)
@given(members, members)
def test_set_operations_agree_with_python_sets(a, b):
    x, y = _of(a), _of(b)
    assert _members(x | y) == a | b
    assert _members(x - y) == a - b
    assert (x <= y) == (a <= b) and x.contains(y) == (b <= a)
    assert len(x) == len(a) and bool(x) == bool(a)
    assert all((MysqlGtid.of(s, n) in x) == ((s, n) in a) for s in SOURCES for n in (1, 20, 40))


@settings(derandomize=True, max_examples=300)
@given(members)
def test_format_is_mysqls_normal_form_and_parses_back(a):
    x = _of(a)
    text = str(x)
    assert GtidSet.parse(text) == x
    assert str(GtidSet.parse(text)) == text
    assert " " not in text and (not text or text.startswith(U1) or text.startswith(U2))


def test_parse_reads_what_the_server_prints():
    printed = f"{U1.upper()}:1-5:7-9,\n{U2}:1-3"
    gtids = GtidSet.parse(printed)
    assert str(gtids) == f"{U1}:1-5:7-9,{U2}:1-3"
    assert str(GtidSet.parse(f"{U1}:1-3:4-5:7")) == f"{U1}:1-5:7"  # adjacent intervals join
    assert str(GtidSet.parse(f"{U1}:blue:1-2,{U1}:1-3")) == f"{U1}:1-3:blue:1-2"  # untagged first
    assert GtidSet.parse("") == GtidSet() and str(GtidSet()) == ""
    assert str(MysqlGtid.of(U1.upper(), 42)) == f"{U1}:42"
    assert check_mysql_gtid_set(f"{U1}:1-5") == f"{U1}:1-5"


def test_tagged_sets_read_and_print_as_mysql_does():
    """Each expected text is what MySQL 9.7.4's GTID_SUBTRACT(text, '') printed for the input:
    tags in lower case, a source's untagged intervals first, then its tags in byte order."""
    assert str(GtidSet.parse(f"{U1}:zz:3:b:1-2,{U1}:1-3:A:5")) == f"{U1}:1-3:a:5:b:1-2:zz:3"
    assert str(GtidSet.parse(f"{U1}:_a:1,{U1}:a_:2,{U1}:a1:3")) == f"{U1}:_a:1:a1:3:a_:2"
    assert str(GtidSet.parse(f"{U1}:1:tag:2:1")) == f"{U1}:1:tag:1-2"
    assert str(GtidSet.parse(f" {U1} : Tag : 1 ")) == f"{U1}:tag:1"
    assert GtidSet.parse(f"{U1}:tag") == GtidSet()  # a tag with no interval names no transaction
    longest = "t" * 32
    assert str(GtidSet.parse(f"{U1}:{longest}:7")) == f"{U1}:{longest}:7"
    audit = GtidSet.parse(f"{U1}:1-5:audit:1-3")
    assert MysqlGtid.of(f"{U1}:AUDIT", 3) in audit and MysqlGtid.of(f"{U1}:audit", 4) not in audit
    assert str(MysqlGtid.of(f"{U1}:Audit", 3)) == f"{U1}:audit:3"
    assert MysqlGtid.of(f"{U1}:audit", 3).domain != MysqlGtid.of(U1, 3).domain
    assert GtidSet.parse(f"{U1}:audit:2") <= audit and not GtidSet.parse(f"{U1}:other:2") <= audit
    assert str(audit - GtidSet.parse(f"{U1}:2-5:audit:2")) == f"{U1}:1:audit:1:3"
    assert str(audit | GtidSet.parse(f"{U2}:x:9")) == f"{U1}:1-5:audit:1-3,{U2}:x:9"
    assert audit.with_gtid(MysqlGtid.of(f"{U1}:audit", 4)) == GtidSet.parse(f"{U1}:1-5:audit:1-4")


@pytest.mark.parametrize(
    "text",
    [f"{U1}:tag:1:", f"{U1}:9tag:1", f"{U1}:{'t' * 33}:1", f"{U1}:ta-g:1", f"{U1}:tag:0", f"{U1}::1"],
)
def test_a_bad_tagged_set_is_refused_in_one_line(text):
    """MySQL 9.7 refuses each of these too (Malformed GTID set specification)."""
    with pytest.raises(ValueError, match="--to-gtid") as exc:
        GtidSet.parse(text, "--to-gtid")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (f"{U1}:5-3", "interval '5-3'"),
        (f"{U1}:0", "interval '0'"),
        (f"{U1}:{2**63}", "interval"),
        (f"{U1}", "is not a MySQL GTID set"),
        ("0-1-5", "is not a MySQL GTID set"),
        (f"{U1}:1-x", "neither an interval nor a tag"),
        ("not-a-uuid:1-5", "is not a MySQL GTID set"),
    ],
)
def test_a_bad_set_is_refused_naming_the_part(text, says):
    with pytest.raises(ValueError, match="--to-gtid") as exc:
        GtidSet.parse(text, "--to-gtid")
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_a_gtid_of_the_other_servers_form_is_refused_in_one_line():
    assert gtid_form("0-1-5") == "mariadb" and gtid_form(f"{U1}:1-5") == "mysql" and gtid_form(" ") is None
    check_gtid_for("0-1-5", "mariadb", "--to-gtid", "backup b1")
    check_gtid_for(f"{U1}:1-5", "mysql", "--to-gtid", "backup b1")
    with pytest.raises(
        ValueError, match=r"--to-gtid '0-1-5' is a MariaDB GTID .* backup b1 of MySQL 9.7.4 is MySQL"
    ):
        check_gtid_for("0-1-5", "mysql", "--to-gtid", "backup b1 of MySQL 9.7.4")
    with pytest.raises(
        ValueError, match=r"is a MySQL GTID set, but backup b2 is MariaDB: give a MariaDB GTID"
    ):
        check_gtid_for(f"{U1}:1-5", "mariadb", "--to-gtid", "backup b2")
    with pytest.raises(ValueError, match="neither a MariaDB GTID position"):
        gtid_form("yesterday")


def test_a_mysql_copy_must_hold_the_servers_gtid_set_before_it_and_nothing_after():
    from xtrabackup_provider.core.binlog.identity import checked_copy
    from xtrabackup_provider.core.db.server import ServerFacts

    before = ServerFacts("9.7.4-2", 1, U1, "/d", f"{U1}:1-10", False, gtid_current=f"{U1}:1-10")
    assert checked_copy(f"{U1}:1-12", before, f"{U1}:1-15") is None
    assert checked_copy(f"{U1}:1-10", before, f"{U1}:1-10") is None
    assert "lacks 3e11fa47-71ca-11e1-9e33-c80aa9429562:9-10" in str(
        checked_copy(f"{U1}:1-8", before, f"{U1}:1-15")
    )
    assert f"holds {U2}:1" in str(checked_copy(f"{U1}:1-12,{U2}:1", before, f"{U1}:1-15"))
    assert "not a MySQL GTID set" in str(checked_copy("0-1-5", before, f"{U1}:1-15"))


def _backup(flavour: str, version: str, gtid: str):
    from datetime import UTC, datetime

    from xtrabackup_provider.core.catalog.manifest import Manifest

    at = datetime(2026, 11, 1, 10, 30, tzinfo=UTC)
    bid = f"20261101T1030{len(version):02d}Z-full"
    obj = {"key": f"c1/db1/backups/{bid}/b.zst", "size": 1, "sha256": "0" * 64, "raw_size": 1}
    return Manifest(
        backup_id=bid,
        cluster="c1",
        host="db1",
        kind="full",
        chain_root=bid,
        engine_flavour=flavour,
        engine_version="8.0.35-33",
        engine_major="8.0",
        server_uuid=U1,
        server_id=1,
        server_version=version,
        from_lsn=0,
        to_lsn=10,
        last_lsn=10,
        started_at=at,
        finished_at=at,
        objects=[obj | {"compression": "zstd", "encryption": "none"}],
        raw_bytes=1,
        stored_bytes=1,
        gtid=gtid,
        binlog_file="b.000001",
        binlog_position=4,
    )


def test_pitr_to_a_gtid_of_the_other_servers_form_is_refused_naming_the_backup():
    from xtrabackup_provider.core.pitr.plan import PitrError, PitrTarget, choose_backup

    mysql = _backup("xtrabackup", "9.7.4-2", f"{U1}:1-10")
    mariadb = _backup("mariabackup", "10.11.6-MariaDB", "0-1-10")
    with pytest.raises(
        PitrError,
        match=rf"--to-gtid '0-1-5' is a MariaDB GTID .*backup {mysql.backup_id} \(9.7.4-2\) is MySQL",
    ):
        choose_backup([mysql], PitrTarget.at_gtid("0-1-5"))
    with pytest.raises(
        PitrError,
        match=rf"is a MySQL GTID set, but backup {mariadb.backup_id} \(10.11.6-MariaDB\) is MariaDB",
    ):
        choose_backup([mariadb], PitrTarget.at_gtid(f"{U1}:1-5"))
    with pytest.raises(
        PitrError, match="this restore replays MariaDB binlogs only; restore a MySQL host with the CLI"
    ):
        choose_backup([mysql], PitrTarget.at_gtid(f"{U1}:1-5"))
    assert choose_backup([mariadb], PitrTarget.at_gtid("0-1-12")) == mariadb


def _binlog(n: int, before: str = "", held: str = ""):
    from datetime import UTC, datetime

    from xtrabackup_provider.core.binlog.catalog import BinlogManifest

    obj = {
        "key": f"p/mysql-bin.{n:06d}.zst",
        "size": 1,
        "sha256": "0" * 64,
        "raw_size": 10,
        "compression": "zstd",
    }
    obj["encryption"] = "none"
    return BinlogManifest(
        name=f"mysql-bin.{n:06d}",
        cluster="c1",
        host="db1",
        server_uuid=U1,
        server_id=7,
        complete=True,
        size=10,
        sha256="cd" * 32,
        events=3,
        gtid_set_before=before,
        gtid_set=held,
        segments=[{"offset": 0, "raw_size": 10, "raw_sha256": "ab" * 32, "object": obj}],
        shipped_at=datetime(2026, 11, 30, tzinfo=UTC),
    )


def test_a_binlog_manifest_keeps_mysql_sets_in_normal_form_and_leaves_them_out_when_empty():
    import json

    from xtrabackup_provider.core.binlog.catalog import BinlogIndex, BinlogManifest

    mariadb = json.loads(_binlog(1).to_json())
    assert "gtid_set" not in mariadb and "gtid_set_before" not in mariadb  # as readers before them read it
    mysql = _binlog(2, f"{U1.upper()}:1-3", f"{U1}:4-5:6")
    stored = json.loads(mysql.to_json())
    assert stored["gtid_set_before"] == f"{U1}:1-3" and stored["gtid_set"] == f"{U1}:4-6"
    assert BinlogManifest.model_validate_json(mysql.to_json()) == mysql
    with pytest.raises(ValueError, match="not a MySQL GTID set"):
        _binlog(3, held="0-1-5")
    index = BinlogIndex.of(U1, [_binlog(1, "", f"{U1}:1-3"), _binlog(2, f"{U1}:1-3", f"{U1}:4-6")])
    assert index.covers_gtid(GtidSet.parse(f"{U1}:1-6"))
    assert index.covers_gtid(GtidSet.parse(f"{U1}:2"))
    assert not index.covers_gtid(GtidSet.parse(f"{U1}:1-7"))
    assert not index.covers_gtid(GtidSet.parse(f"{U2}:1"))


def test_binlogs_events_refuses_gtid_filters_of_the_other_servers_form():
    from xtrabackup_provider.core.pitr.moments import MomentFilter, _check_gtid_form
    from xtrabackup_provider.core.pitr.plan import PitrError

    mysql = [_binlog(1, "", f"{U1}:1-3")]
    mariadb = [_binlog(1).model_copy(update={"gtid_first": "0-7-1", "gtid_last": "0-7-9"})]
    mine = MysqlGtid.of(U1, 2)
    theirs = parse_gtid_pos("0-7-2")
    _check_gtid_form(MomentFilter(gtid_from={mine.domain: mine}), mysql)
    _check_gtid_form(MomentFilter(gtid_to=theirs), mariadb)
    _check_gtid_form(MomentFilter(), mysql)
    with pytest.raises(PitrError, match="name MariaDB GTIDs, but the binlogs read are MySQL's"):
        _check_gtid_form(MomentFilter(gtid_from=theirs), mysql)
    with pytest.raises(PitrError, match="name MySQL GTIDs, but the binlogs read are MariaDB's"):
        _check_gtid_form(MomentFilter(gtid_to={mine.domain: mine}), mariadb)
