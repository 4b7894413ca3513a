"""The filters of `binlogs events`, checked before anything is read: a value that can match no
transaction (an empty kind, `d.`, a regular expression Python cannot compile, a window that ends
before it starts) is refused naming its flag, instead of filtering nothing or failing later."""

from __future__ import annotations

import argparse
import re
from typing import Any

from ..core.catalog.manifest import SERVER_UUID_RE
from ..core.common.values import GtidPos, GtidSet, MysqlGtid, format_gtid_pos, gtid_form, parse_gtid_pos
from .options import BadArgument, bad

NAME_MAX = 64  # characters in a MariaDB database or table name
_KIND = re.compile(r"[A-Za-z]+")


def statement_kinds(text: str) -> list[str]:
    """--kind DROP,TRUNCATE: statement kinds (what `Transaction.kinds` lists: a statement's own first
    word, past SET STATEMENT ... FOR and /*!...*/)."""
    kinds = [k.strip() for k in text.split(",")]
    for kind in kinds:
        if not kind:
            raise bad("--kind", text, "a kind is missing between commas; give kinds like DROP,TRUNCATE")
        if not _KIND.fullmatch(kind):
            raise bad(
                "--kind",
                text,
                f"{kind!r} is not a statement kind: one word, a statement's first (DROP, TRUNCATE, ALTER, "
                "DELETE, UPDATE, INSERT, CREATE, RENAME...)",
            )
    return [k.upper() for k in kinds]


def _name(flag: str, text: str, name: str, what: str) -> None:
    if not name:
        raise bad(flag, text, f"no {what} name; give SCHEMA.TABLE or TABLE")
    if name != name.rstrip():
        raise bad(flag, text, f"the {what} name ends with a blank, which no MariaDB name does")
    if len(name) > NAME_MAX:
        raise bad(flag, text, f"a {what} name is at most {NAME_MAX} characters")


def schema_name(text: str) -> str:
    _name("--schema", text, text, "schema")
    return text


def table_name(text: str) -> str:
    """--table SCHEMA.TABLE or TABLE (any schema)."""
    schema, dot, table = text.partition(".")
    if dot:
        _name("--table", text, schema, "schema")
    _name("--table", text, table if dot else text, "table")
    return text


def server_uuid(text: str) -> str:
    if not re.fullmatch(SERVER_UUID_RE, text):
        raise bad(
            "--server",
            text,
            "not a server uuid (letters, digits, '.', '_', ':', '-'); `binlogs list` names them",
        )
    return text


def grep_pattern(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text, re.I)
    except RecursionError:
        raise bad("--grep", text, "its groups are nested too deeply to compile") from None
    except (re.error, OverflowError, ValueError) as exc:
        raise bad("--grep", text, f"not a regular expression Python compiles ({exc})") from None


def gtid_position(flag: str) -> Any:
    def gtid(text: str) -> GtidPos:
        try:
            if gtid_form(text, flag) == "mysql":
                return _mysql_gtids(flag, text)
            pos = parse_gtid_pos(text, flag)
        except ValueError as exc:
            raise BadArgument(str(exc)) from None
        if not pos:
            raise bad(flag, text, "names no GTID; give domain-server_id-sequence, e.g. 0-1-42")
        return pos

    return gtid


def _mysql_gtids(flag: str, text: str) -> GtidPos:
    """MySQL: one GTID per source (`uuid:42`), standing under its source as a MariaDB GTID stands
    under its domain (core/common/values.py MysqlGtid)."""
    pos: GtidPos = {}
    for source, intervals in GtidSet.parse(text, flag).intervals().items():
        if len(intervals) != 1 or intervals[0][0] != intervals[0][1]:
            raise bad(flag, text, f"give one GTID per source (e.g. {source}:42), not a range")
        gtid = MysqlGtid.of(source, intervals[0][0])
        pos[gtid.domain] = gtid
    return pos


def check_window(args: argparse.Namespace) -> None:
    """A window that ends before it starts matches nothing."""
    if args.since and args.until and args.since > args.until:
        raise bad(
            "--since", args.since.isoformat(), f"is after --until {args.until.isoformat()!r}: nothing matches"
        )
    low, high = args.gtid_from or {}, args.gtid_to or {}
    for domain, first in low.items():
        if domain in high and first.seq > high[domain].seq:
            raise bad(
                "--gtid-from",
                format_gtid_pos(low),
                f"is after --gtid-to {format_gtid_pos(high)!r} in domain {domain}: nothing matches",
            )
