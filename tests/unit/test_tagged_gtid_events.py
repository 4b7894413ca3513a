"""The binlog readers' decoding of MySQL 8.3+'s tagged GTIDs (core/binlog/events.py), on event
bodies MySQL 9.7.4 wrote (copied from its binlog after `SET gtid_next='AUTOMATIC:audit'` and
`'AUTOMATIC:Blue_2'`; mysqlbinlog and SHOW BINLOG EVENTS name the same GTIDs): a Gtid_tagged_log_event
and a Previous_gtids event in the tagged form. A body that does not read is refused in one line
naming the file and the offset. tests/mysql/test_tagged_gtids.py reads whole binlogs of a live
server."""

from __future__ import annotations

import pytest

from xtrabackup_provider.core.binlog.events import BinlogFormatError, previous_gtids, tagged_gtid
from xtrabackup_provider.core.common.values import GtidSet, MysqlGtid

UUID = "58b847a9-f064-11f1-b177-02fc00000001"
# Bodies after the 19-byte header, with their 4-byte CRC32, as MySQL 9.7.4 wrote them.
AUDIT_1 = bytes.fromhex(
    "027200000002b0e1028ea502c103c822c503c502ee04f103000000020404060a617564697408080a0c0c7f41bc7f6ddb61061029"
    "041283120b7534b050"
)
BLUE_2_1 = bytes.fromhex(
    "027400000002b0e1028ea502c103c822c503c502ee04f103000000020404060c626c75655f3208080a140c7f15c17f6ddb6106102d"
    "041283120bfb51dfed"
)
PREVIOUS = bytes.fromhex(  # the count word (format 1, 3 sources, format 1), then uuid, tag, intervals
    "0103000000000001"
    "58b847a9f06411f1b17702fc00000001"
    "00"
    "0100000000000000"
    "0100000000000000"
    "0400000000000000"
    "58b847a9f06411f1b17702fc00000001"
    "0a6175646974"
    "0100000000000000"
    "0100000000000000"
    "0200000000000000"
    "58b847a9f06411f1b17702fc00000001"
    "0c626c75655f32"
    "0100000000000000"
    "0100000000000000"
    "0200000000000000"
    "df0b3101"
)


def test_a_tagged_gtid_event_reads_as_uuid_tag_number():
    gtid = tagged_gtid(AUDIT_1, 977, "mysql-bin.000001", 529)
    assert gtid == MysqlGtid.of(f"{UUID}:audit", 1, 977) and str(gtid) == f"{UUID}:audit:1"
    assert str(tagged_gtid(BLUE_2_1, 977, "mysql-bin.000001", 1060)) == f"{UUID}:blue_2:1"
    assert gtid.domain != MysqlGtid.of(UUID, 1).domain  # a tag numbers its own transactions


def test_a_tagged_previous_gtids_event_reads_as_the_set_before_the_binlog():
    assert previous_gtids(PREVIOUS, "mysql-bin.000002", 127) == GtidSet.parse(f"{UUID}:1-3:audit:1:blue_2:1")


@pytest.mark.parametrize("cut", range(37))  # every cut before the tag's end (byte 37)
def test_a_tagged_gtid_event_cut_short_is_refused_naming_the_file_and_offset(cut):
    with pytest.raises(BinlogFormatError) as exc:
        tagged_gtid(AUDIT_1[:cut], 977, "mysql-bin.000001", 529)
    message = str(exc.value)
    assert message.startswith("mysql-bin.000001: the tagged GTID event") and "at offset 529" in message
    assert "\n" not in message and "mysqlbinlog -v" in message


@pytest.mark.parametrize(
    ("at", "byte", "says"),
    [
        (0, 0x03, "serialisation format 3, not 2"),
        (1, 0x10, "ends inside a field"),  # a size that ends before the uuid does
        (5, 0x0A, "field 5 after field 0"),  # the uuid's field id, another
        (31, 0x7E, "is not one"),  # a tag length past the message
    ],
)
def test_a_tagged_gtid_event_that_does_not_read_is_refused_saying_why(at, byte, says):
    body = bytearray(AUDIT_1)
    body[at] = byte
    with pytest.raises(BinlogFormatError, match=says):
        tagged_gtid(bytes(body), 977, "mysql-bin.000001", 529)


def test_a_previous_gtids_event_of_an_unknown_format_is_refused_naming_it():
    body = bytearray(PREVIOUS)
    body[7] = 2
    with pytest.raises(
        BinlogFormatError, match=r"mysql-bin.000002: the Previous_gtids event at offset 127 is of"
    ):
        previous_gtids(bytes(body), "mysql-bin.000002", 127)
