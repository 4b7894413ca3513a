"""Binlog transactions with what they did: the event bodies the header walk (events.py) skips.

Pure Python over the v4 format, streaming (memory stays flat whatever the file size). Per
transaction (event group) it reads the GTID event (sequence, flags: DDL, standalone), Query
events (schema and statement text, capped), Annotate_rows (the original SQL of row events,
which MariaDB writes by default), Table_map (table id -> schema.table) and the row events
(counted per table and kind, never decoded: no column types are needed for "which table, how
much"), and where the group ends (Xid, COMMIT / ROLLBACK, XA PREPARE, or the one statement of a
standalone group). Groups that are not complete when the files end (the open binlog, shipped up
to a point) are reported as incomplete.

Two users: the "find the moment" listing (core/pitr/moments.py: one line per transaction with
the `--to-gtid` / `--to-position` that stops right before it) and the relay-log applier's stop
planner (core/pitr/applier.py), which needs the end of the last complete transaction before a
target.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..common.values import Gtid, GtidPos
from .charsets import decode
from .events import (
    FILE_EVENTS,
    FORMAT_DESCRIPTION_EVENT,
    GTID_EVENT,
    GTID_LIST_EVENT,
    MAX_GTID_LIST,
    MYSQL_ANONYMOUS_GTID_EVENT,
    MYSQL_GTID_EVENT,
    MYSQL_GTID_HEAD,
    MYSQL_GTID_TAGGED_EVENT,
    MYSQL_TAGGED_GTID_HEAD,
    ROTATE_EVENT,
    STOP_EVENT,
    BinlogFormatError,
    event_frames,
    mysql_gtid,
    tagged_gtid,
)
from .statements import CONTROL_KINDS, ROUTINE_KINDS, Name, Statement, read_statement

QUERY_EVENT = 2
XID_EVENT = 16
EXECUTE_LOAD_QUERY_EVENT = 18  # LOAD DATA in statement format: a Query event with more post-header
TABLE_MAP_EVENT = 19
XA_PREPARE_EVENT = 38
ANNOTATE_ROWS_EVENT = 160
BINLOG_CHECKPOINT_EVENT = 161
START_ENCRYPTION_EVENT = 164
QUERY_COMPRESSED_EVENT = 165
ROW_KINDS = {
    23: "insert",  # v1 (MariaDB)
    24: "update",
    25: "delete",
    30: "insert",  # v2 (MySQL)
    31: "update",
    32: "delete",
    166: "insert",  # MariaDB compressed (log_bin_compress)
    167: "update",
    168: "delete",
    169: "insert",
    170: "update",
    171: "delete",
}
# Events that are never part of a transaction: they end the one before them.
_OUTSIDE = {FORMAT_DESCRIPTION_EVENT, ROTATE_EVENT, STOP_EVENT, GTID_LIST_EVENT, BINLOG_CHECKPOINT_EVENT}
_FULL_BODY = {
    QUERY_EVENT,
    QUERY_COMPRESSED_EVENT,
    EXECUTE_LOAD_QUERY_EVENT,
    ANNOTATE_ROWS_EVENT,
    TABLE_MAP_EVENT,
    GTID_EVENT,
    GTID_LIST_EVENT,
    FORMAT_DESCRIPTION_EVENT,
}
MAX_TEXT = 64 * 1024  # bytes of a statement read (a summary needs the start)
# How much of each body read_events() reads: whole small bodies, the table id of row events.
_SUMMARY_BODIES = {
    **{etype: 8 for etype in (XID_EVENT, *ROW_KINDS)},
    **{etype: MAX_TEXT for etype in _FULL_BODY},
    GTID_LIST_EVENT: MAX_GTID_LIST,
    MYSQL_GTID_EVENT: MYSQL_GTID_HEAD,
    MYSQL_GTID_TAGGED_EVENT: MYSQL_TAGGED_GTID_HEAD,
}
_QUERIES = (QUERY_EVENT, QUERY_COMPRESSED_EVENT)
_QUERY_HEAD = struct.Struct("<IIBHH")  # thread_id, exec_time, db_len, error_code, status_vars_len
_LOAD_HEAD = 13  # Execute_load_query: file_id, start_pos, end_pos, dup_handling after _QUERY_HEAD
FL_STANDALONE = 1
FL_GROUP_COMMIT_ID = 2
FL_DDL = 32
# Not MariaDB's: a MySQL GTID event, read as a GTID event. MySQL marks no standalone group: one
# whose first statement is not BEGIN is that one statement (DDL), until then this flag says so.
FL_MYSQL_FIRST = 1 << 8
_ENDS = ("COMMIT", "ROLLBACK")
Q_SQL_MODE_CODE = 1
Q_CHARSET_CODE = 4  # character_set_client, collation_connection, collation_server (2 bytes each)
# Sizes of the Query status variables (fixed ones; 2, 5, 6, 11, 12 carry their lengths).
_STATUS_SIZES = {0: 4, 1: 8, 3: 4, 4: 6, 7: 2, 8: 2, 9: 8, 10: 4, 13: 3, 128: 3, 129: 8, 130: 1}


@dataclass(frozen=True)
class BodyEvent:
    """One event: its header and what a transaction summary needs of its body."""

    file: str
    offset: int
    end: int
    timestamp: int
    type: int
    server_id: int
    gtid: Gtid | None = None
    flags: int = 0  # GTID event flags
    text: str = ""  # Query: the statement; Annotate_rows: the original statement
    schema: str = ""  # Query: the default schema; Table_map: the table's schema
    table: str = ""  # Table_map: the table name
    table_id: int = -1  # Table_map and row events
    gtid_list: tuple[Gtid, ...] = ()  # Gtid_list: the binlog state when the file was opened
    cut: bool = False  # Query: the statement was longer than MAX_TEXT and is read in part
    sql_mode: int | None = None  # Query: the session's sql_mode (None: not found in the event)
    undecoded: bool = False  # Query: its bytes' character set cannot be read for sure (charsets.py)


def read_events(path: Path, start: int = 0) -> Iterator[BodyEvent]:
    """Complete events of `path` from `start` (0 or an event boundary), with the bodies a
    summary needs; a file's last incomplete event (still being written) is not returned."""
    checksum = 4  # CRC32, MariaDB's default; the format description says

    with open(path, "rb") as fh:
        for offset, end, timestamp, etype, server_id, body, body_len in event_frames(
            fh, 0, str(path), _SUMMARY_BODIES
        ):
            if etype == FORMAT_DESCRIPTION_EVENT:
                checksum = _checksum_length(body)
            elif etype == START_ENCRYPTION_EVENT:
                raise _encrypted(path, offset)
            cut = len(body) < body_len
            if not cut and checksum and etype in _FULL_BODY:
                body = body[:-checksum]
            event = _decode(path.name, offset, end, timestamp, etype, server_id, body)
            yield replace(event, cut=True) if cut and event.text else event


def _encrypted(path: Path, offset: int) -> BinlogFormatError:
    return BinlogFormatError(
        f"{path}: encrypted by the server at offset {offset} (encrypt_binlog): its events cannot be "
        "read outside the server; list it with mariadb-binlog on the server that wrote it"
    )


def _checksum_length(body: bytes) -> int:
    # binlog_version(2) server_version(50) created(4) header_length(1) post_header_lengths(n)
    # checksum_alg(1) crc(4): alg 1 = CRC32, 0 = none (then no crc follows)
    if len(body) >= 5 and body[-5] == 1:
        return 4
    return 0


def _decode(file: str, offset: int, end: int, ts: int, etype: int, server_id: int, body: bytes) -> BodyEvent:
    event = BodyEvent(file, offset, end, ts, etype, server_id)
    try:
        if etype == MYSQL_GTID_EVENT:  # a MysqlGtid (uuid:gno) standing as a GTID event
            gtid = mysql_gtid(body, server_id, file, offset)
            return BodyEvent(file, offset, end, ts, GTID_EVENT, server_id, gtid, FL_MYSQL_FIRST)
        if etype == MYSQL_GTID_TAGGED_EVENT:  # uuid:tag:gno; one that does not read is named
            gtid = tagged_gtid(body, server_id, file, offset)
            return BodyEvent(file, offset, end, ts, GTID_EVENT, server_id, gtid, FL_MYSQL_FIRST)
        if etype == MYSQL_ANONYMOUS_GTID_EVENT:  # not listed would read as "no transaction matches"
            raise BinlogFormatError(
                f"{file}: a transaction without a GTID at offset {offset} (written while MySQL's gtid_mode was not "
                "ON), which binlogs events cannot name; read this binlog with mysqlbinlog -v"
            )
        if etype == GTID_EVENT and len(body) >= 13:
            seq, domain, flags = struct.unpack_from("<QIB", body)
            return BodyEvent(file, offset, end, ts, etype, server_id, Gtid(domain, server_id, seq), flags)
        if etype in (*_QUERIES, EXECUTE_LOAD_QUERY_EVENT) and len(body) >= _QUERY_HEAD.size:
            schema, text, mode, undecoded, longer = _query(etype, body)
            return BodyEvent(
                file,
                offset,
                end,
                ts,
                etype,
                server_id,
                text=text,
                schema=schema,
                sql_mode=mode,
                undecoded=undecoded,
                cut=longer,
            )
        if etype == ANNOTATE_ROWS_EVENT:
            return BodyEvent(file, offset, end, ts, etype, server_id, text=body.decode(errors="replace"))
        if etype == TABLE_MAP_EVENT and len(body) >= 10:
            table_id = int.from_bytes(body[:6], "little")
            at = 8
            db_len = body[at]
            schema = body[at + 1 : at + 1 + db_len].decode(errors="replace")
            at += 2 + db_len
            name_len = body[at]
            name = body[at + 1 : at + 1 + name_len].decode(errors="replace")
            return BodyEvent(
                file, offset, end, ts, etype, server_id, schema=schema, table=name, table_id=table_id
            )
        if etype in ROW_KINDS and len(body) >= 6:
            return BodyEvent(
                file, offset, end, ts, etype, server_id, table_id=int.from_bytes(body[:6], "little")
            )
        if etype == GTID_LIST_EVENT and len(body) >= 4:
            (count,) = struct.unpack_from("<I", body)
            count &= 0x0FFFFFFF
            entries = []
            for i in range(count):
                at = 4 + i * 16
                if at + 16 > len(body):
                    break
                domain, sid, seq = struct.unpack_from("<IIQ", body, at)
                entries.append(Gtid(domain, sid, seq))
            return BodyEvent(file, offset, end, ts, etype, server_id, gtid_list=tuple(entries))
    except (IndexError, struct.error):
        pass  # a body too short for its type: the header is still right
    return event


def _query(etype: int, body: bytes) -> tuple[str, str, int | None, bool, bool]:
    """A Query event's default schema, statement, sql_mode, whether the statement's bytes could not
    be read for sure (charsets.py, a compressed body that does not inflate) and whether it is
    longer than MAX_TEXT once inflated (`body` without its checksum)."""
    _thread, _exec, db_len, _err, status_len = _QUERY_HEAD.unpack_from(body)
    status = _QUERY_HEAD.size + (_LOAD_HEAD if etype == EXECUTE_LOAD_QUERY_EVENT else 0)
    found = _status_vars(body[status : status + status_len])
    mode = int.from_bytes(found[Q_SQL_MODE_CODE], "little") if Q_SQL_MODE_CODE in found else None
    charset = int.from_bytes(found[Q_CHARSET_CODE][:2], "little") if Q_CHARSET_CODE in found else None
    at = status + status_len
    schema = body[at : at + db_len].decode(errors="replace")
    raw: bytes | None = body[at + db_len + 1 :]
    longer = False
    if etype == QUERY_COMPRESSED_EVENT:
        raw, longer = _inflate(body[at + db_len + 1 :])
    text = None if raw is None else decode(raw, charset)
    if text is None:
        return (
            schema,
            "<statement not read>" if raw is None else raw.decode(errors="replace"),
            mode,
            True,
            longer,
        )
    return schema, text, mode, False, longer


def _inflate(data: bytes) -> tuple[bytes | None, bool]:
    """A compressed statement (log_bin_compress: a header byte 0x80 | algorithm << 4 | n, the
    length in n bytes, zlib), up to MAX_TEXT bytes, and whether it is longer; None when it does
    not inflate (an algorithm not known, damage). A body cut at MAX_TEXT inflates in part."""
    if not data or data[0] & 0xF0 != 0x80:
        return None, False
    try:
        text = zlib.decompressobj().decompress(data[1 + (data[0] & 0x07) :], MAX_TEXT + 1)
    except zlib.error:
        return None, False
    return text[:MAX_TEXT], len(text) > MAX_TEXT


def _status_vars(status: bytes) -> dict[int, bytes]:
    """A Query event's status variables by code, up to one whose size is not known here (the
    server writes FLAGS2, SQL_MODE, CATALOG, AUTO_INCREMENT, CHARSET first)."""
    found: dict[int, bytes] = {}
    at = 0
    while at < len(status):
        code, at = status[at], at + 1
        if code in (5, 6):  # TIME_ZONE, CATALOG_NZ: length, text
            size = 1 + status[at] if at < len(status) else 0
        elif code == 2:  # CATALOG (old): length, text, NUL
            size = 2 + status[at] if at < len(status) else 0
        elif code in _STATUS_SIZES:
            size = _STATUS_SIZES[code]
        else:
            break
        if at + size > len(status):
            break
        found[code] = status[at : at + size]
        at += size
    return found


def state_of(gtids: Iterable[Gtid]) -> GtidPos:
    """Per domain, the GTID with the highest sequence (a binlog state lists one per server_id)."""
    pos: GtidPos = {}
    for g in gtids:
        if g.domain not in pos or g.seq >= pos[g.domain].seq:
            pos[g.domain] = g
    return pos


@dataclass
class Transaction:
    """One event group (a transaction, or a DDL statement) as it is in the binlog."""

    file: str
    offset: int  # where its GTID event starts: `--to-position` FILE:offset stops right before it
    gtid: Gtid
    flags: int
    time: int  # the timestamp of its GTID event
    last_time: int = 0  # the highest timestamp of its events
    end: int = 0  # end of its last event read
    end_file: str = ""
    complete: bool = False
    before: GtidPos = field(default_factory=dict)  # the GTID state right before it
    statements: list[str] = field(default_factory=list)  # Query texts (DDL, statement-format DML)
    defaults: list[str] = field(default_factory=list)  # each statement's session database ("" none)
    modes: list[int | None] = field(
        default_factory=list
    )  # each statement's sql_mode (None or missing: not known)
    partial: set[int] = field(default_factory=set)  # statements read only in part (longer than MAX_TEXT)
    undecoded: set[int] = field(default_factory=set)  # statements in a character set not read for sure
    schemas: set[str] = field(default_factory=set)  # Query default schemas
    annotations: list[str] = field(default_factory=list)  # the statements behind row events
    rows: dict[str, dict[str, int]] = field(default_factory=dict)  # schema.table -> kind -> row events
    row_tables: set[Name] = field(default_factory=set)  # the tables of its row events
    row_bytes: int = 0
    _read: tuple[tuple[object, ...], list[Statement]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def ddl(self) -> bool:
        return bool(self.flags & FL_DDL)

    def read(self) -> list[Statement]:
        """Each statement as its own sql_mode reads it (core/binlog/statements.py); one read in
        part names unknown tables and may call a function in what was not read; one whose bytes
        cannot be read for sure (charsets.py) is of no kind known either."""
        key = (
            tuple(self.statements),
            tuple(self.modes),
            tuple(sorted(self.partial)),
            tuple(sorted(self.undecoded)),
        )
        if self._read is not None and self._read[0] == key:
            return self._read[1]  # kinds(), has_kind() and touched() each ask
        modes = [*self.modes, *[None] * (len(self.statements) - len(self.modes))]
        found = [read_statement(text, mode) for text, mode in zip(self.statements, modes, strict=False)]
        for n in self.partial:
            found[n] = replace(
                found[n], named=None, why=f"read in part: longer than {MAX_TEXT} bytes", routine=True
            )
        for n in self.undecoded:
            found[n] = Statement(None, None, "its character set is not read: its bytes may mean other names")
        self._read = (key, found)
        return found

    def kinds(self) -> list[str]:
        """What it did, upper case: each statement's kind (DROP, TRUNCATE, ALTER, CREATE, RENAME,
        ... wherever its first word is: after SET STATEMENT ... FOR, in /*!...*/), INSERT / UPDATE /
        DELETE for row events; "?" when a statement's kind cannot be told or nothing was read."""
        found: list[str] = []
        control: list[str] = []  # BEGIN, XA...: shown only when it did nothing else
        unknown = False
        for statement in self.read():
            unknown |= statement.kind is None
            seen = control if statement.kind in CONTROL_KINDS else found
            for kind in (statement.kind, *statement.also):
                if kind and kind not in seen:
                    seen.append(kind)
        for per in self.rows.values():
            for kind in per:
                if kind.upper() not in found:
                    found.append(kind.upper())
        found = found or control
        return [*found, "?"] if unknown or not found else found

    def has_kind(self, wanted: set[str]) -> bool:
        """Whether it may be of a kind in `wanted`: a kind that cannot be told is never ruled out,
        nor what a stored function a statement calls may do (INSERT, UPDATE, DELETE, REPLACE)."""
        kinds = set(self.kinds())
        if "?" in kinds or wanted & kinds:
            return True
        return bool(wanted & ROUTINE_KINDS) and any(s.routine for s in self.read())

    def touched(self) -> Touched:
        """What it touched by name: its row events' tables, and every table each statement names
        (core/binlog/statements.py), qualified by that statement's session database."""
        found = Touched(set(self.row_tables))
        if any(name.startswith("table#") for name in self.rows):
            found.unparsed.append("row events of a table whose Table_map was not read")
        if not self.statements and not self.rows:
            found.unparsed.append(
                "nothing it did was read" + ("" if self.complete else ": the binlog ends inside it")
            )
        for text, default, statement in zip(self.statements, self.defaults, self.read(), strict=True):
            if statement.named is None or statement.kind is None:
                found.unparsed.append(f"{_short(text)} ({statement.why or 'its kind cannot be told'})")
            else:
                found.tables |= {name.resolved(default) for name in statement.named.tables}
                found.schemas |= statement.named.schemas
        return found

    def tables(self) -> set[str]:
        """schema.table names it touched (`schema.*`: a whole schema, as DROP DATABASE)."""
        return {name.qualified("") for name in self.touched().tables}

    def summary(self, width: int = 160) -> str:
        if self.rows:
            parts = [
                f"{t}: "
                + ", ".join(f"{k} in {n} row event{'s' if n > 1 else ''}" for k, n in sorted(v.items()))
                for t, v in sorted(self.rows.items())
            ]
            text = "; ".join(parts) + f" ({_kib(self.row_bytes)})"
            if self.annotations:
                text += " <- " + " ".join(self.annotations[0].split())
            elif self.statements:
                text += " <- " + " ".join(self.statements[0].split())
        else:
            text = " ".join(self.statements[0].split()) if self.statements else "-"
            schema = next(iter(self.schemas), "")
            if schema and self.statements:
                text += f"  (in {schema})"
        if not self.complete:
            text += "  [incomplete: the shipped binlog ends inside it]"
        return text if len(text) <= width else text[: width - 3] + "..."


@dataclass
class Touched:
    """The tables a transaction names (`*` for a whole schema: DROP DATABASE; schema None when its
    session had no database), the schemas it names without a table (CREATE DATABASE), and the
    statements whose tables cannot be told (a filter never hides those)."""

    tables: set[Name]
    schemas: set[str] = field(default_factory=set)
    unparsed: list[str] = field(default_factory=list)

    def names_table(self, want: str) -> bool:
        """Whether `want` (`schema.table`, or `table` in any schema) is named (Name.named_by)."""
        return any(name.named_by(want) for name in self.tables)

    def names_schema(self, want: str) -> bool:
        """A table without a known schema may be in any."""
        want = want.casefold()
        return any(n.schema is None or n.schema.casefold() == want for n in self.tables) or any(
            s.casefold() == want for s in self.schemas
        )


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 80 else text[:77] + "..."


def _kib(n: int) -> str:
    return f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} B"


def transactions(
    files: list[Path], start: int = 4, state: GtidPos | None = None, *, events: bool = False
) -> Iterator[Transaction | BodyEvent]:
    """The transactions of `files` (consecutive binlogs) from `start` in the first, in order.

    Each is yielded once it is complete (or, the last one, when the files end inside it).
    `state` is the GTID state at `start` (per domain), updated in place as transactions go by,
    so a caller reading one file at a time passes the same dict on. Empty, the first file's
    Gtid_list gives the state at its start, and GTIDs between that and `start` are followed.
    With `events`, every event is yielded too, before the transaction it closes.
    """
    state = {} if state is None else state
    known = bool(state)
    tables: dict[int, Name] = {}
    current: Transaction | None = None
    for n, path in enumerate(files):
        for ev in read_events(path, 0):
            if ev.type == GTID_LIST_EVENT and not known and n == 0:
                state.update(state_of(ev.gtid_list))
                known = True
            if n == 0 and ev.offset < start:
                if ev.gtid is not None:
                    state[ev.gtid.domain] = ev.gtid
                continue
            if events:
                yield ev
            if ev.type == GTID_EVENT and ev.gtid is not None:
                if current is not None:
                    yield current
                current = Transaction(
                    path.name, ev.offset, ev.gtid, ev.flags, ev.timestamp, before=dict(state)
                )
                state[ev.gtid.domain] = ev.gtid
            elif ev.type in _OUTSIDE:
                if current is not None:
                    yield current
                    current = None
                continue
            if current is None:
                continue
            _add(current, ev, tables)
            if current.complete:
                yield current
                current = None
    if current is not None:
        yield current


def _add(txn: Transaction, ev: BodyEvent, tables: dict[int, Name]) -> None:
    txn.end, txn.end_file = ev.end, ev.file
    txn.last_time = max(txn.last_time, ev.timestamp)
    if ev.type == GTID_EVENT:
        return
    if ev.type in (*_QUERIES, EXECUTE_LOAD_QUERY_EVENT):
        word = ev.text.strip().upper()
        if word in _ENDS:
            txn.complete = True
            return
        if word != "BEGIN" and not word.startswith("XA START") and not word.startswith("XA END"):
            if ev.cut:
                txn.partial.add(len(txn.statements))
            if ev.undecoded:
                txn.undecoded.add(len(txn.statements))
            txn.statements.append(ev.text[:MAX_TEXT])
            txn.defaults.append(ev.schema)
            txn.modes.append(ev.sql_mode)
            if ev.schema:
                txn.schemas.add(ev.schema)
        if txn.flags & FL_STANDALONE or (
            txn.flags & FL_MYSQL_FIRST and word != "BEGIN" and "XA START" not in word
        ):
            txn.complete = True  # a standalone group is one statement
        txn.flags &= ~FL_MYSQL_FIRST
    elif ev.type == ANNOTATE_ROWS_EVENT:
        txn.annotations.append(ev.text)
    elif ev.type == TABLE_MAP_EVENT:
        tables[ev.table_id] = Name(ev.schema, ev.table)
    elif ev.type in ROW_KINDS:
        table = tables.get(ev.table_id)
        if table is not None:
            txn.row_tables.add(table)
        name = f"{table.schema}.{table.table}" if table else f"table#{ev.table_id}"
        per = txn.rows.setdefault(name, {})
        per[ROW_KINDS[ev.type]] = per.get(ROW_KINDS[ev.type], 0) + 1
        txn.row_bytes += ev.end - ev.offset
    elif ev.type in (XID_EVENT, XA_PREPARE_EVENT):
        txn.complete = True


_GTID_HEAD = struct.Struct("<QIB")  # seq_no, domain_id, flags


# What complete_groups() reads: the GTID's flags, statements (COMMIT?), the checksum setting.
_GROUP_BODIES = {
    GTID_EVENT: _GTID_HEAD.size,
    **dict.fromkeys((*_QUERIES, FORMAT_DESCRIPTION_EVENT), MAX_TEXT),
}
# What an event means to a group; every other type is inside one (rows, table maps, annotations).
_STARTS, _ENDS_IT, _MAY_END, _CUTS, _FORMAT, _ENCRYPTED = range(6)
_ROLES = {
    GTID_EVENT: _STARTS,
    XID_EVENT: _ENDS_IT,
    XA_PREPARE_EVENT: _ENDS_IT,
    **dict.fromkeys(_QUERIES, _MAY_END),
    **dict.fromkeys(_OUTSIDE, _CUTS),
    FORMAT_DESCRIPTION_EVENT: _FORMAT,  # also outside a group
    START_ENCRYPTION_EVENT: _ENCRYPTED,
}
_NEVER = 1 << 63


def complete_groups(
    files: list[Path],
    start: int = 4,
    *,
    stop_time: int | None = None,
    stop_gtid: GtidPos | None = None,
    stop_position: int | None = None,
) -> Iterator[tuple[Gtid, str, int]]:
    """(GTID, file, end of its last event) of each complete event group from `start` in the
    first file, in order, until the event a bounded `mariadb-binlog` stops at: the first one
    stamped at or after `stop_time` (FILE_EVENTS aside: see events.replay_end), the first GTID
    past `stop_gtid` in its domain, or in the last file the first event at or after
    `stop_position`.

    A group ends where `transactions()` says, read from the headers and the GTID and Query
    bodies only: the applier's stop planner needs no more, and decoding what each group did
    took 84 s for 1.1 GiB of sysbench binlogs where this takes 8 s.
    """
    until = _NEVER if stop_time is None else stop_time
    for n, path in enumerate(files):
        skip_to = start if n == 0 else 0
        position = stop_position if stop_position is not None and path == files[-1] else _NEVER
        checksum = 4
        group: Gtid | None = None
        standalone = False
        with open(path, "rb") as fh:
            for offset, end, ts, etype, server_id, body, body_len in event_frames(
                fh, 0, str(path), _GROUP_BODIES
            ):
                role = _ROLES.get(etype)
                if role == _FORMAT:
                    checksum = _checksum_length(body)
                elif role == _ENCRYPTED:
                    raise _encrypted(path, offset)
                if offset < skip_to:
                    continue
                if (ts >= until and etype not in FILE_EVENTS) or offset >= position:
                    return  # a time stop compares transactions' events only (FILE_EVENTS)
                if role is None or (group is None and role != _STARTS):
                    continue
                if role == _STARTS:
                    if len(body) < _GTID_HEAD.size:
                        continue  # a GTID event too short to read: inside the group, as transactions() has it
                    seq, domain, flags = _GTID_HEAD.unpack_from(body)
                    if stop_gtid and domain in stop_gtid and seq > stop_gtid[domain].seq:
                        return
                    group, standalone = Gtid(domain, server_id, seq), bool(flags & FL_STANDALONE)
                elif role in (_CUTS, _FORMAT):
                    group = None  # the file ended inside it
                elif role == _ENDS_IT or _query_ends(etype, body, body_len, checksum, standalone):
                    yield group, path.name, end  # type: ignore[misc]  # group is set here
                    group = None


def _query_ends(etype: int, body: bytes, body_len: int, checksum: int, standalone: bool) -> bool:
    """COMMIT / ROLLBACK, or the one statement of a standalone group."""
    if len(body) == body_len and checksum:
        body = body[:-checksum]
    text = _query(etype, body)[1] if len(body) >= _QUERY_HEAD.size else ""
    return text.strip().upper() in _ENDS or standalone
