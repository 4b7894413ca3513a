"""Values that cross the product's boundary, parsed strictly: times, GTIDs, binlog file names.

They come from CLI flags, the fleet config and manifests in the store (anyone with write access
to the bucket can edit those), and later code converts and compares them: so a time must fit the
calendar whatever the arithmetic on it, a MariaDB GTID must be within MariaDB's ranges and
written in ASCII digits, a binlog name must have its numeric suffix. Pure; a bad value raises
ValueError naming it and what is expected (callers turn that into their one-line errors).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal


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


# -- MySQL GTIDs ------------------------------------------------------------------------------------

MAX_GNO = 2**63 - 1  # MySQL's transaction numbers are positive 63-bit
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.ASCII | re.IGNORECASE)
_TAG = re.compile(r"[a-z_][a-z0-9_]{0,31}", re.ASCII | re.IGNORECASE)  # MySQL 8.3+ tagged GTIDs
_INTERVAL = re.compile(r"([0-9]{1,20})(?:-([0-9]{1,20}))?", re.ASCII)
_MYSQL_EXAMPLE = "uuid:first-last, e.g. 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"


@dataclass(frozen=True, order=True)
class MysqlGtid(Gtid):
    """One MySQL transaction's GTID, `uuid:gno` (`uuid:tag:gno` when tagged). Its source (uuid and
    tag) stands as its domain: a source numbers its transactions in order, as a MariaDB domain
    does, so code that follows "the last GTID per domain" follows a MySQL binlog too."""

    source: str = ""  # lower-case uuid, with `:tag` when tagged

    @classmethod
    def of(cls, source: str, gno: int, server_id: int = 0) -> MysqlGtid:
        source = source.lower()
        return cls(_source_number(source), server_id, gno, source)

    def __str__(self) -> str:
        return f"{self.source}:{self.seq}"


def valid_tag(text: str) -> bool:
    """A MySQL 8.3+ GTID tag: a letter or _, then up to 31 letters, digits or _ (any case)."""
    return bool(_TAG.fullmatch(text))


def _source_number(source: str) -> int:
    """A stable number for a uuid[:tag] (the domain MysqlGtid stands under)."""
    uuid, _, tag = source.partition(":")
    number = int(uuid.replace("-", ""), 16)
    return number if not tag else number ^ (int.from_bytes(tag.encode(), "little") << 128)


Interval = tuple[int, int]  # first..last, inclusive


class GtidSet:
    """A MySQL GTID set (`gtid_executed`, `uuid:1-5:7,uuid2:1-3`; tags `uuid:tag:1-3`): per source,
    sorted disjoint inclusive intervals. Immutable; `|` union, `-` difference, `<=` subset, `in` for
    one MysqlGtid; str() is MySQL's own normal form (sources sorted, untagged intervals first)."""

    __slots__ = ("_sets",)

    def __init__(self, sets: Mapping[str, Iterable[Interval]] | None = None) -> None:
        self._sets: dict[str, tuple[Interval, ...]] = {}
        for source, intervals in (sets or {}).items():
            merged = _merge(intervals)
            if merged:
                self._sets[source.lower()] = merged

    # -- reading and writing ---------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str | None, what: str = "GTID set") -> GtidSet:
        """`uuid:1-5:7,uuid2:tag:1-3` (blanks and newlines, as gtid_executed prints them, ignored)."""
        sets: dict[str, list[Interval]] = {}
        for part in "".join((text or "").split()).split(","):
            if not part:
                continue
            uuid, *items = part.split(":")
            if not _UUID.fullmatch(uuid) or not items:
                raise ValueError(
                    f"{what} {quoted(text)}: {quoted(part)} is not a MySQL GTID set ({_MYSQL_EXAMPLE})"
                )
            source = uuid.lower()
            for item in items:
                interval = _INTERVAL.fullmatch(item)
                if interval:
                    first = int(interval.group(1))
                    last = int(interval.group(2) or first)
                    if not 1 <= first <= last <= MAX_GNO:
                        raise ValueError(
                            f"{what} {quoted(text)}: interval {item!r} must be first-last with 1 <= first <= last "
                            "< 2^63"
                        )
                    sets.setdefault(source, []).append((first, last))
                elif _TAG.fullmatch(item):
                    source = f"{uuid.lower()}:{item.lower()}"
                else:
                    raise ValueError(
                        f"{what} {quoted(text)}: {item!r} in {quoted(part)} is neither an interval nor a tag"
                    )
        return cls(sets)

    def __str__(self) -> str:
        by_uuid: dict[str, list[str]] = {}
        for source in sorted(self._sets, key=lambda s: (s.partition(":")[0], s.partition(":")[2])):
            uuid, _, tag = source.partition(":")
            words = by_uuid.setdefault(uuid, [uuid])
            words += ([tag] if tag else []) + [
                f"{a}" if a == b else f"{a}-{b}" for a, b in self._sets[source]
            ]
        return ",".join(":".join(words) for words in by_uuid.values())

    def __repr__(self) -> str:
        return f"GtidSet({str(self)!r})"

    # -- queries ---------------------------------------------------------------------------------
    def intervals(self) -> dict[str, tuple[Interval, ...]]:
        return dict(self._sets)

    def __bool__(self) -> bool:
        return bool(self._sets)

    def __len__(self) -> int:
        """The number of transactions."""
        return sum(b - a + 1 for intervals in self._sets.values() for a, b in intervals)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GtidSet) and self._sets == other._sets

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._sets.items())))

    def __contains__(self, gtid: object) -> bool:
        if not isinstance(gtid, MysqlGtid):
            return False
        return any(a <= gtid.seq <= b for a, b in self._sets.get(gtid.source, ()))

    def __le__(self, other: GtidSet) -> bool:
        """Subset: every transaction of self is in other (MySQL's GTID_SUBSET)."""
        return not (self - other)

    def __ge__(self, other: GtidSet) -> bool:
        return other <= self

    def contains(self, other: GtidSet) -> bool:
        return other <= self

    # -- building --------------------------------------------------------------------------------
    def __or__(self, other: GtidSet) -> GtidSet:
        sources = set(self._sets) | set(other._sets)
        return GtidSet({s: [*self._sets.get(s, ()), *other._sets.get(s, ())] for s in sources})

    def __sub__(self, other: GtidSet) -> GtidSet:
        return GtidSet({s: _minus(iv, other._sets.get(s, ())) for s, iv in self._sets.items()})

    def with_gtid(self, gtid: MysqlGtid) -> GtidSet:
        return self | GtidSet({gtid.source: [(gtid.seq, gtid.seq)]})

    def last(self) -> dict[str, int]:
        """Per source, its highest transaction number."""
        return {s: iv[-1][1] for s, iv in self._sets.items()}


def _merge(intervals: Iterable[Interval]) -> tuple[Interval, ...]:
    """Sorted, overlapping and adjacent intervals joined (1-3,4-5 is 1-5, as MySQL prints it)."""
    out: list[Interval] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def _minus(have: Iterable[Interval], remove: Iterable[Interval]) -> list[Interval]:
    """`have` without `remove` (both sorted and disjoint)."""
    out: list[Interval] = []
    cuts = sorted(remove)
    for a, b in have:
        start = a
        for c, d in cuts:
            if d < start:
                continue
            if c > b:
                break
            if c > start:
                out.append((start, c - 1))
            start = d + 1
        if start <= b:
            out.append((start, b))
    return out


def check_mysql_gtid_set(text: str, what: str = "GTID set") -> str:
    """A MySQL GTID set (gtid_executed), e.g. `3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5`."""
    GtidSet.parse(text, what)
    return text


# -- either server's GTIDs ------------------------------------------------------------------------

GtidForm = Literal["mariadb", "mysql"]


def gtid_form(text: str | None, what: str = "GTID") -> GtidForm | None:
    """Which server's form a GTID text is in (None: empty); ValueError when it is neither."""
    if not (text or "").strip():
        return None
    try:
        parse_gtid_pos(text)
        return "mariadb"
    except ValueError:
        pass
    try:
        GtidSet.parse(text)
        return "mysql"
    except ValueError:
        raise ValueError(
            f"{what} {quoted(text)} is neither a MariaDB GTID position (domain-server_id-sequence, e.g. 0-1-42) nor "
            f"a MySQL GTID set ({_MYSQL_EXAMPLE})"
        ) from None


def check_gtid_for(text: str, family: str, what: str, whose: str) -> None:
    """Refuse a GTID of the other server's form in one line: `what` names the flag or field, `whose`
    the server or backup it is for (e.g. "backup 20261130T103000Z-full of MySQL 9.7.4")."""
    form = gtid_form(text)
    if form is None or form == family:
        return
    if family == "mysql":
        raise ValueError(
            f"{what} {quoted(text)} is a MariaDB GTID (domain-server_id-sequence), but {whose} is MySQL: give a "
            f"MySQL GTID set ({_MYSQL_EXAMPLE})"
        )
    raise ValueError(
        f"{what} {quoted(text)} is a MySQL GTID set, but {whose} is MariaDB: give a MariaDB GTID "
        "(domain-server_id-sequence, e.g. 0-1-42)"
    )


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
