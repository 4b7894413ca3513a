"""Find the moment to restore to: the shipped binlogs' transactions, one line each, with the
`--to-gtid` and `--to-position` that stop right before it.

The binlogs are read where they are stored (sha256-checked, decrypted, decompressed like a
PITR fetch), one at a time into a private scratch directory and removed once listed, so the
disk holds at most one binlog. Which binlogs: those of one server (the newest backup's, or the
one named) whose manifests overlap the time window or GTID range asked for; without either,
everything shipped after the newest backup. A transaction is listed when it matches every
filter given: its time, its GTID, a schema or table it touched, a kind of statement (DROP,
TRUNCATE, ALTER, DELETE, ...), a regular expression over its summary. "Touched" is every table
its row events and statements name (core/binlog/statements.py: a DROP or RENAME list, a
multi-table DELETE / UPDATE, ...), names compared without regard to case; a transaction with a
statement whose tables cannot be told is listed whatever the table and schema filters say, marked
`[TABLES NOT PARSED ...]` (`"tables_parsed": false` in JSON): a filter never hides it.

"Stop right before it": the GTID state just before the transaction (every domain; tracked from
the backup's GTID or the binlog's Gtid_list, never `seq - 1`: sequences can have gaps and a
domain can change server) is the `--to-gtid`; the position of its GTID event is the
`--to-position`. A `--to-time` of its second would also drop the transactions of that second
committed before it (binlog times have one-second resolution).
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..binlog.catalog import BinlogCatalog, BinlogError, BinlogManifest, server_uuids
from ..binlog.listing import Transaction, transactions
from ..catalog.backups import Catalog
from ..catalog.manifest import Manifest
from ..catalog.targets import READ_ERRORS, Source, Targets
from ..common.tempdirs import private_dir
from ..common.values import (
    GtidPos,
    GtidSet,
    MysqlGtid,
    binlog_number,
    format_gtid_pos,
    gtid_form,
    parse_gtid_pos,
    quoted,
)
from .plan import PitrError, PitrTarget
from .recover import PitrRequest, fetch_binlogs

log = logging.getLogger(__name__)


@dataclass
class MomentFilter:
    since: datetime | None = None
    until: datetime | None = None
    gtid_from: GtidPos = field(default_factory=dict)  # per domain, inclusive
    gtid_to: GtidPos = field(default_factory=dict)
    schemas: set[str] = field(default_factory=set)
    tables: set[str] = field(default_factory=set)  # "schema.table" or "table" (any schema)
    kinds: set[str] = field(default_factory=set)  # DROP, TRUNCATE, ALTER, DELETE, INSERT, UPDATE, ...
    grep: re.Pattern[str] | None = None

    @property
    def windowed(self) -> bool:
        return bool(self.since or self.until or self.gtid_from or self.gtid_to)

    def matches(self, txn: Transaction) -> bool:
        when = datetime.fromtimestamp(txn.time, UTC)
        if (self.since and when < self.since) or (self.until and when > self.until):
            return False
        g = txn.gtid
        low, high = self.gtid_from.get(g.domain), self.gtid_to.get(g.domain)
        if (self.gtid_from and (low is None or g.seq < low.seq)) or (high is not None and g.seq > high.seq):
            return False
        if self.kinds and not txn.has_kind(self.kinds):  # an unknown kind is never hidden
            return False
        touched = txn.touched()
        if not touched.unparsed:  # a statement whose tables are unknown is never hidden by these
            if self.schemas and not any(touched.names_schema(s) for s in self.schemas):
                return False
            if self.tables and not any(touched.names_table(t) for t in self.tables):
                return False
        return not (
            self.grep and not self.grep.search(" ".join(txn.statements + txn.annotations) + txn.summary())
        )

    def binlog_overlaps(self, m: BinlogManifest) -> bool:
        """Whether a shipped binlog can hold a matching transaction (from its manifest alone)."""
        first = m.first_event_time
        last = m.covers_until or m.last_event_time
        if self.since and last is not None and last < self.since:
            return False
        if self.until and first is not None and first > self.until:
            return False
        gfirst, glast = m.gtids()
        for domain, low in self.gtid_from.items():
            if domain in glast and glast[domain].seq < low.seq:
                return False
        for domain, high in self.gtid_to.items():
            if domain in gfirst and gfirst[domain].seq > high.seq:
                return False
        return True


@dataclass(frozen=True)
class Moment:
    time: datetime
    gtid: str
    file: str
    position: int
    kinds: list[str]
    summary: str
    complete: bool
    to_gtid: str  # stops right before it ("" if its domain had no transaction before it)
    to_position: str  # FILE:POS of its GTID event, which --to-position does not replay
    unparsed: list[str] = field(default_factory=list)  # statements whose tables are unknown

    def line(self) -> str:
        stop = f"--to-gtid={self.to_gtid} | " if self.to_gtid else ""
        unknown = "  [TABLES NOT PARSED: listed whatever --table/--schema say]" if self.unparsed else ""
        if "?" in self.kinds:
            unknown = "  [KIND AND TABLES NOT PARSED: listed whatever --kind/--table/--schema say]"
        return (
            f"{self.time:%Y-%m-%d %H:%M:%S}  {self.gtid:<16} {self.file}:{self.position:<10} "
            f"{'+'.join(self.kinds):<9} {self.summary}{unknown}   [stop before: {stop}--to-position={self.to_position}]"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "time": self.time.isoformat(),
            "gtid": self.gtid,
            "file": self.file,
            "position": self.position,
            "kinds": self.kinds,
            "summary": self.summary,
            "complete": self.complete,
            "to_gtid": self.to_gtid,
            "to_position": self.to_position,
            "tables_parsed": not self.unparsed,
            "unparsed": self.unparsed,
        }


@dataclass
class MomentsRequest:
    catalog: Catalog
    filter: MomentFilter = field(default_factory=MomentFilter)
    private_key: str | None = None
    passphrase: str | None = field(default=None, repr=False)
    server_uuid: str | None = None  # default: the newest backup's server
    backup_id: str | None = None  # without a window: list from this backup's position on
    scratch_dir: Path | None = None
    source_name: str = "primary"  # the name of `catalog`'s storage target
    fallbacks: list[Source] = field(default_factory=list)  # further targets (core/catalog/targets.py)
    notes: list[str] = field(default_factory=list)  # filled while listing: what came from another target


def choose_server(catalog: Catalog, server_uuid: str | None, newest: Manifest | None) -> str:
    """The server whose binlogs are read: the one asked for, else the newest backup's."""
    servers = server_uuids(catalog)
    if server_uuid:
        if server_uuid not in servers:
            raise PitrError(
                f"{catalog.describe()} holds no binlogs of server {quoted(server_uuid)}; shipped: {', '.join(servers) or 'none'}"
            )
        return server_uuid
    if newest is not None and newest.server_uuid in servers:
        return newest.server_uuid
    if len(servers) == 1:
        return servers[0]
    if not servers:
        raise PitrError(f"no binlogs are shipped for {catalog.describe()}; ship them first (binlogs ship)")
    raise PitrError(
        f"{catalog.describe()} holds binlogs of several servers ({', '.join(servers)}) and no backup says which "
        "is current; name one with --server"
    )


def list_moments(req: MomentsRequest) -> Iterator[Moment]:
    """The matching transactions, oldest first (streaming: one binlog on disk at a time)."""
    targets = Targets.of(req.catalog, req.source_name, req.fallbacks)
    targets.notes = req.notes
    shipped, begin = targets.read(
        "the shipped binlogs",
        lambda catalog: _select(req, catalog),
        errors=(*READ_ERRORS, PitrError, BinlogError),
    )
    _check_gtid_form(req.filter, shipped)
    scratch = private_dir("moments", req.scratch_dir)  # 0700; swept if this run is killed
    try:
        yield from _read(req, shipped, begin, scratch, targets)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _check_gtid_form(f: MomentFilter, shipped: list[BinlogManifest]) -> None:
    """--gtid-from/--gtid-to of the other server's form than the binlogs' would match nothing:
    refused by name (MySQL binlogs record GTID sets, MariaDB's first/last GTIDs per domain)."""
    given = [*f.gtid_from.values(), *f.gtid_to.values()]
    if not given:
        return
    mysql = [isinstance(g, MysqlGtid) for g in given]
    if any(m.gtid_set or m.gtid_set_before for m in shipped) and not all(mysql):
        raise PitrError(
            "--gtid-from/--gtid-to name MariaDB GTIDs, but the binlogs read are MySQL's: give one GTID per "
            "source (uuid:N, as binlogs events prints them)"
        )
    if any(m.gtid_first or m.gtid_last for m in shipped) and any(mysql):
        raise PitrError(
            "--gtid-from/--gtid-to name MySQL GTIDs, but the binlogs read are MariaDB's: give "
            "domain-server_id-sequence (e.g. 0-1-42)"
        )


Begin = tuple[str, int, str]  # binlog, position, GTID state there: where the listing starts


def _select(req: MomentsRequest, catalog: Catalog) -> tuple[list[BinlogManifest], Begin | None]:
    """The shipped binlogs to read from `catalog`, and where in the first one to begin."""
    problems: list[str] = []
    manifests = catalog.manifests(problems)
    start = next((m for m in manifests if m.backup_id == req.backup_id), None) if req.backup_id else None
    if req.backup_id and start is None:
        raise PitrError(f"backup {quoted(req.backup_id)} has no readable manifest in {catalog.describe()}")
    newest = max(manifests, key=lambda m: m.backup_id) if manifests else None
    server = choose_server(catalog, req.server_uuid or (start.server_uuid if start else None), newest)
    shipped = BinlogCatalog(catalog, server).index().shipped()
    if req.filter.windowed:
        return [m for m in shipped if req.filter.binlog_overlaps(m)], None
    origin = start or max(
        (m for m in manifests if m.server_uuid == server), key=lambda m: m.backup_id, default=None
    )
    if origin is None or not origin.binlog_file:
        return shipped, None
    base, first = binlog_number(origin.binlog_file)
    shipped = [m for m in shipped if binlog_number(m.name)[0] == base and m.number >= first]
    return shipped, (origin.binlog_file, origin.binlog_position or 4, origin.gtid or "")


def _read(
    req: MomentsRequest, shipped: list[BinlogManifest], begin: Begin | None, scratch: Path, targets: Targets
) -> Iterator[Moment]:
    fetch = PitrRequest(
        req.catalog, scratch, PitrTarget("time"), private_key=req.private_key, passphrase=req.passphrase
    )
    state: GtidPos = {}
    previous: tuple[str, int] | None = None
    for n, m in enumerate(shipped):
        here = binlog_number(m.name)
        if previous is None or here != (previous[0], previous[1] + 1):
            state = {}  # not the next binlog: its own Gtid_list says the state at its start
        start = 4
        # MySQL: the exact GTID set before each transaction, from the binlog's Previous_gtids.
        logged = GtidSet.parse(m.gtid_set_before)
        if begin is not None and m.name == begin[0]:
            mysql = gtid_form(begin[2]) == "mysql"
            start, state = begin[1], {} if mysql else parse_gtid_pos(begin[2])
            logged = GtidSet.parse(begin[2]) if mysql else logged
        (path,) = fetch_binlogs(fetch, [m], scratch / str(n), targets)
        try:
            for txn in transactions([path], start, state):
                if not isinstance(txn, Transaction):
                    continue
                if req.filter.matches(txn):
                    yield _moment(txn, logged)
                if isinstance(txn.gtid, MysqlGtid):
                    logged = logged.with_gtid(txn.gtid)
        finally:
            shutil.rmtree(scratch / str(n), ignore_errors=True)
        previous = here


def _moment(txn: Transaction, logged: GtidSet) -> Moment:
    before = dict(txn.before)
    if isinstance(txn.gtid, MysqlGtid):  # MySQL: the GTID set the server had logged before it
        to_gtid = str(logged)
    else:
        to_gtid = format_gtid_pos(before) if txn.gtid.domain in before else ""
    return Moment(
        time=datetime.fromtimestamp(txn.time, UTC),
        gtid=str(txn.gtid),
        file=txn.file,
        position=txn.offset,
        kinds=txn.kinds(),
        summary=txn.summary(),
        complete=txn.complete,
        to_gtid=to_gtid,
        to_position=f"{txn.file}:{txn.offset}",
        unparsed=txn.touched().unparsed,
    )
