"""The character set a statement was sent in (its Query event's character_set_client, a collation
id), to read its bytes as the server did.

In Big5, Shift-JIS (cp932) and GBK a character's second byte can be 0x5C (a backslash) or 0x60 (a
backtick): read as UTF-8, such a character ends a string or an identifier early, and the tables
after it are misread. Those are decoded with their own codec; any other character set of MariaDB
10.11 or 11.8 is ASCII-compatible with no ASCII byte inside a character (ucs2 / utf16 / utf32
cannot be a client's), so its text reads right whatever its other bytes. A collation id not known
here, with bytes that are not UTF-8, cannot be read for sure.

Generated from information_schema.COLLATIONS of MariaDB 10.11 and 11.8;
tests/integration/test_binlog_event_kinds.py checks it against the real server.
"""

from __future__ import annotations

# Collation id -> Python codec, for the character sets with ASCII bytes inside characters.
CODECS = {
    1: "big5",
    13: "cp932",
    28: "gbk",
    84: "big5",
    87: "gbk",
    88: "cp932",
    95: "cp932",
    96: "cp932",
    1025: "big5",
    1037: "cp932",
    1052: "gbk",
    1108: "big5",
    1111: "gbk",
    1112: "cp932",
    1119: "cp932",
    1120: "cp932",
}


def _ids(text: str) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split():
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return frozenset(out)


# The other client character sets' collation ids: no ASCII byte inside a character.
ASCII_SAFE = _ids(
    """
2-12 14-16 18-27 29-34 36-53 57-59 63-75 77-83 85-86 89 91-94 97-99 192-215 223-247 255-271 273-275
277-294 296-298 300 305 309 576-579 608-611 1027-1028 1030-1036 1040 1042-1043 1046 1048-1050 1054
1056-1057 1060-1065 1067 1069-1071 1074-1075 1077 1081-1083 1088-1099 1101-1107 1109-1110 1113
1115-1117 1121-1122 1216 1238 1248 1270
"""
)


def decode(raw: bytes, charset: int | None) -> str | None:
    """The statement's text as the server read it; None when that cannot be told."""
    codec = CODECS.get(charset) if charset is not None else None
    try:
        return raw.decode(codec or "utf-8")
    except UnicodeDecodeError:
        if codec is None and charset in ASCII_SAFE:
            return raw.decode(errors="replace")  # its ASCII bytes are what they are
        return None
