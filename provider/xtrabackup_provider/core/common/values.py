"""Values that cross the product's boundary, parsed strictly: times, GTIDs, binlog file names.

They come from CLI flags, the fleet config and manifests in the store (anyone with write access
to the bucket can edit those), and later code converts and compares them: so a time must fit the
calendar whatever the arithmetic on it, a MariaDB GTID must be within MariaDB's ranges and
written in ASCII digits, a binlog name must have its numeric suffix. Pure; a bad value raises
ValueError naming it and what is expected (callers turn that into their one-line errors).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime


def quoted(value: object, limit: int = 80) -> str:
    """A value a user gave, as an error shows it: repr (a blank, a newline, a quote stay visible),
    cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- times ------------------------------------------------------------------------------------------

# Binlog events stamp 32-bit epoch seconds and retention looks back at most 100 years: a time
# outside this window is a mistake, and arithmetic near the calendar's ends would overflow.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def parse_utc(text: str, what: str) -> datetime:
    """An ISO 8601 time as an aware UTC datetime; a time without an offset is UTC."""
    example = "(e.g. 2026-11-30T10:15:00Z)"
    try:
        when = datetime.fromisoformat(text.strip())
        when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except ValueError:
        raise ValueError(f"{what} {text!r}: not an ISO 8601 time {example}") from None
    except OverflowError:
        raise ValueError(f"{what} {text!r}: outside the calendar once in UTC {example}") from None
    if not EARLIEST <= when < LATEST:
        raise ValueError(f"{what} {text!r}: not between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d} UTC")
    return when


# -- MariaDB GTIDs ------------------------------------------------------------------------------------

MAX_DOMAIN_ID = MAX_SERVER_ID = 2**32 - 1
MAX_SEQ_NO = 2**64 - 1
_GTID = re.compile(r"([0-9]{1,10})-([0-9]{1,10})-([0-9]{1,20})", re.ASCII)


@dataclass(frozen=True, order=True)
class Gtid:
    """A MariaDB GTID: domain-server-sequence."""

    domain: int
    server_id: int
    seq: int

    def __str__(self) -> str:
        return f"{self.domain}-{self.server_id}-{self.seq}"


GtidPos = dict[int, Gtid]  # one GTID per replication domain


def parse_gtid_pos(text: str | None, what: str = "GTID") -> GtidPos:
    """`"0-1-100,1-2-7"` -> {0: Gtid(0, 1, 100), 1: Gtid(1, 2, 7)}; one GTID per domain, each part
    within MariaDB's ranges (domain and server_id 32-bit, sequence 64-bit), ASCII digits only."""
    pos: GtidPos = {}
    for part in (text or "").replace(" ", "").replace("\n", "").split(","):
        if not part:
            continue
        match = _GTID.fullmatch(part)
        if not match:
            raise ValueError(
                f"{what} {text!r}: {part!r} is not a MariaDB GTID (domain-server_id-sequence, e.g. 0-1-42)"
            )
        gtid = Gtid(*(int(g) for g in match.groups()))
        if gtid.domain > MAX_DOMAIN_ID or gtid.server_id > MAX_SERVER_ID or gtid.seq > MAX_SEQ_NO:
            raise ValueError(
                f"{what} {text!r}: {part!r} is out of range (domain and server_id below 2^32, sequence below 2^64)"
            )
        if gtid.domain in pos:
            raise ValueError(f"{what} {text!r}: domain {gtid.domain} appears twice; give one GTID per domain")
        pos[gtid.domain] = gtid
    return pos


def format_gtid_pos(pos: GtidPos) -> str:
    return ",".join(str(pos[d]) for d in sorted(pos))


def gtid_reached(have: GtidPos, want: GtidPos) -> bool:
    """True when `have` holds, in every domain of `want`, a sequence number at least as high."""
    return all(d in have and have[d].seq >= g.seq for d, g in want.items())


# A MySQL GTID set: uuid:interval[:interval...] (8.3+: tags between), comma separated.
_MYSQL_GTID_SET = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"(?::(?:[a-z_][a-z0-9_]{0,31}|[0-9]{1,20}(?:-[0-9]{1,20})?))+",
    re.ASCII | re.IGNORECASE,
)


def check_mysql_gtid_set(text: str, what: str = "GTID set") -> str:
    """A MySQL GTID set (gtid_executed), e.g. `3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5`."""
    parts = "".join(text.split()).split(",")
    if not all(_MYSQL_GTID_SET.fullmatch(p) for p in parts if p):
        raise ValueError(f"{what} {text[:100]!r}: not a MySQL GTID set (uuid:first-last, ...)")
    return text


# -- binlog file names -------------------------------------------------------------------------------

_BINLOG_NAME_BODY = r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.[0-9]{6,10}"
BINLOG_NAME = f"^{_BINLOG_NAME_BODY}$"  # for pydantic's Field(pattern=...)
_BINLOG_NAME = re.compile(_BINLOG_NAME_BODY, re.ASCII)


def binlog_number(name: str) -> tuple[str, int]:
    """`mysql-bin.000042` -> ("mysql-bin", 42): binlogs sort by number within one basename."""
    if not _BINLOG_NAME.fullmatch(name):
        raise ValueError(f"{name[:100]!r} is not a binlog file name (<basename>.<6 to 10 digit number>)")
    base, _, number = name.rpartition(".")
    return base, int(number)


def binlog_name(base: str, number: int) -> str:
    return f"{base}.{number:06d}"
