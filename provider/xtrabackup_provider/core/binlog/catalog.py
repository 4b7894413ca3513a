"""Shipped binlogs in object storage: manifests, gap markers, and what they cover.

Layout, per server (MariaDB has no server_uuid: core.db.server.server_facts derives one):

    <prefix>/<cluster>/<host>/binlogs/<server_uuid>/<binlog>.zst.gpg         a closed binlog
    <prefix>/<cluster>/<host>/binlogs/<server_uuid>/<binlog>.json            its manifest, written last
    <prefix>/<cluster>/<host>/binlogs/<server_uuid>/<binlog>.partial-<offset>.zst.gpg
    <prefix>/<cluster>/<host>/binlogs/<server_uuid>/<binlog>.partial.json    the open binlog so far
    <prefix>/<cluster>/<host>/binlogs/<server_uuid>/gaps/<first>..<last>.json binlogs lost before shipping

A binlog is shipped when its manifest exists. The open binlog (continuous mode) is stored as
segments that each hold the bytes since the previous one, so progress uploads cost what was
written, not the whole file. Manifests hold no secrets: listing, lag checks, retention and
PITR planning need no keys.
"""

from __future__ import annotations

__all__ = ["binlogs_needed"]

from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ..catalog.backups import Catalog
from ..catalog.manifest import MAX_SERVER_ID, NAME_RE, SERVER_UUID_RE, Manifest, StoredObject
from ..common.values import (
    BINLOG_NAME,
    GtidPos,
    GtidSet,
    binlog_name,
    binlog_number,
    gtid_reached,
    parse_gtid_pos,
)
from ..storage.base import StorageError

BINLOG_DIR = "binlogs"
GAP_DIR = "gaps"
PARTIAL = ".partial"
BINLOG_NAME_RE = BINLOG_NAME
MAX_BINLOG_MANIFEST_BYTES = 4 * 1024 * 1024


class BinlogError(RuntimeError):
    """Binlogs cannot be shipped or used; the message names the server, binlog or object."""


class BinlogGapError(BinlogError):
    """Binlogs were purged on the server before they were shipped; the gap is recorded."""


class BinlogSegment(BaseModel):
    model_config = ConfigDict(extra="forbid")

    offset: int = Field(ge=0, le=2**63)
    raw_size: int = Field(ge=0, le=2**63)
    raw_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    object: StoredObject


class BinlogManifest(BaseModel):
    """One shipped binlog (complete) or the shipped part of the open one (partial)."""

    model_config = ConfigDict(extra="forbid")

    format_version: Literal[1] = 1
    name: str = Field(pattern=BINLOG_NAME_RE)
    cluster: str = Field(pattern=NAME_RE)
    host: str = Field(pattern=NAME_RE)
    server_uuid: str = Field(pattern=SERVER_UUID_RE)
    server_id: int = Field(ge=0, le=MAX_SERVER_ID)
    complete: bool
    size: int = Field(ge=0, le=2**63)  # raw bytes stored (a complete binlog: the whole file)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")  # of the whole raw file
    events: int = Field(ge=0, le=2**63)
    first_event_time: AwareDatetime | None = None
    last_event_time: AwareDatetime | None = None
    # Every event the server wrote to this binlog before this instant is stored.
    covers_until: AwareDatetime | None = None
    gtid_start: str = ""  # the server's GTID state when the binlog was opened
    gtid_first: str = ""  # first GTID per domain in this binlog
    gtid_last: str = ""  # last GTID per domain in this binlog
    # MySQL (MariaDB binlogs leave them empty, and a manifest leaves them out then): the GTID set
    # the server had logged before this binlog (its Previous_gtids event), and the GTIDs of the
    # transactions stored in it (core/common/values.py GtidSet, MySQL's normal form).
    gtid_set_before: str = ""
    gtid_set: str = ""
    segments: list[BinlogSegment] = Field(min_length=1, max_length=100_000)
    shipped_at: AwareDatetime

    @field_validator("gtid_start", "gtid_first", "gtid_last")
    @classmethod
    def _gtids(cls, value: str) -> str:
        parse_gtid_pos(value)  # MariaDB GTIDs; PITR plans with them (MySQL binlogs leave them empty)
        return value

    @field_validator("gtid_set_before", "gtid_set")
    @classmethod
    def _gtid_sets(cls, value: str) -> str:
        return str(GtidSet.parse(value))  # MySQL GTID sets, kept in MySQL's normal form

    @model_validator(mode="after")
    def _contiguous(self) -> BinlogManifest:
        at = 0
        for seg in self.segments:
            if seg.offset != at:
                raise ValueError(f"segment at offset {seg.offset} does not continue the previous one ({at})")
            at += seg.raw_size
        if at != self.size:
            raise ValueError(f"segments hold {at} bytes, the manifest says {self.size}")
        if self.complete and (len(self.segments) != 1 or not self.sha256):
            raise ValueError("a complete binlog is one object with the sha256 of the whole file")
        return self

    @property
    def number(self) -> int:
        return binlog_number(self.name)[1]

    @property
    def stored_bytes(self) -> int:
        return sum(s.object.size for s in self.segments)

    def gtids(self) -> tuple[GtidPos, GtidPos]:
        return parse_gtid_pos(self.gtid_first), parse_gtid_pos(self.gtid_last)

    def gtid_sets(self) -> tuple[GtidSet, GtidSet]:
        """MySQL: (what the server had logged before this binlog, the GTIDs stored in it)."""
        return GtidSet.parse(self.gtid_set_before), GtidSet.parse(self.gtid_set)

    def to_json(self) -> bytes:
        # A MariaDB binlog's manifest stays as readers before the MySQL fields read it.
        unset = {name for name in ("gtid_set_before", "gtid_set") if not getattr(self, name)}
        return self.model_dump_json(indent=2, exclude=unset or None).encode()


class BinlogGap(BaseModel):
    """Binlogs the server purged before they were shipped: point-in-time recovery cannot cross them."""

    model_config = ConfigDict(extra="forbid")

    server_uuid: str = Field(pattern=SERVER_UUID_RE)
    first_missing: str = Field(pattern=BINLOG_NAME_RE)
    last_missing: str = Field(pattern=BINLOG_NAME_RE)
    last_shipped: str | None = Field(None, pattern=BINLOG_NAME_RE)
    server_oldest: str = Field(pattern=BINLOG_NAME_RE)
    detected_at: AwareDatetime

    def covers(self, number: int) -> bool:
        return binlog_number(self.first_missing)[1] <= number <= binlog_number(self.last_missing)[1]

    def describe(self) -> str:
        span = (
            self.first_missing
            if self.first_missing == self.last_missing
            else f"{self.first_missing}..{self.last_missing}"
        )
        return f"{span} (purged before shipping; detected {self.detected_at:%Y-%m-%d %H:%M:%S} UTC)"


Loader = Callable[[str, bool], "BinlogManifest | str"]  # (name, partial) -> manifest or problem


class _Manifests(Mapping[str, BinlogManifest]):
    """Binlog name -> manifest, known from the listing and read on first use.

    Membership and iteration need no read: a shipping run that only asks "is it shipped?"
    costs one LIST whatever the history's length. A manifest that cannot be read raises.
    """

    def __init__(self, names: Iterable[str], load: Loader, partial: bool) -> None:
        self._names = set(names)
        self._load, self._partial = load, partial
        self._cache: dict[str, BinlogManifest] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._names, key=binlog_number))

    def __len__(self) -> int:
        return len(self._names)

    def __getitem__(self, name: str) -> BinlogManifest:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._cache:
            item = self._load(name, self._partial)
            if isinstance(item, str):
                raise BinlogError(item)
            self._cache[name] = item
        return self._cache[name]

    def add(self, manifest: BinlogManifest) -> None:
        self._names.add(manifest.name)
        self._cache[manifest.name] = manifest


class BinlogIndex:
    """Everything shipped for one server: names from one listing, manifests read when needed."""

    def __init__(
        self, server_uuid: str, complete: _Manifests, partial: _Manifests, gaps: list[BinlogGap] | None = None
    ) -> None:
        self.server_uuid = server_uuid
        self.complete = complete
        self.partial = partial
        self.gaps = gaps or []
        self.problems: list[str] = []

    @classmethod
    def of(
        cls, server_uuid: str, manifests: Iterable[BinlogManifest], gaps: Iterable[BinlogGap] = ()
    ) -> BinlogIndex:
        """An index over manifests in memory."""
        missing: Loader = lambda name, _partial: f"{name}: no manifest"  # noqa: E731
        index = cls(server_uuid, _Manifests((), missing, False), _Manifests((), missing, True), list(gaps))
        for m in manifests:
            (index.complete if m.complete else index.partial).add(m)
        return index

    def best(self, name: str) -> BinlogManifest | None:
        """The complete binlog if shipped, else the shipped part of it."""
        if name in self.complete:
            return self.complete[name]
        return self.partial.get(name)

    def names(self) -> list[str]:
        return sorted(set(self.complete) | set(self.partial), key=binlog_number)

    def shipped(self) -> list[BinlogManifest]:
        """One manifest per binlog (complete preferred), in binlog order; reads them all. One that
        cannot be read is left out and named in `problems`."""

        def best(name: str) -> BinlogManifest | str | None:
            try:
                return self.best(name)
            except BinlogError as exc:
                return str(exc)

        with ThreadPoolExecutor(8) as pool:
            found = list(pool.map(best, self.names()))
        self.problems += [m for m in found if isinstance(m, str)]
        return [m for m in found if isinstance(m, BinlogManifest)]

    def last_complete(self, base: str) -> int | None:
        numbers = [binlog_number(n)[1] for n in self.complete if binlog_number(n)[0] == base]
        return max(numbers) if numbers else None

    def gap_at(self, number: int) -> BinlogGap | None:
        return next((g for g in self.gaps if g.covers(number)), None)

    def covers_position(self, file: str, position: int) -> bool:
        """True when everything the server wrote to `file` before `position` is stored."""
        if file in self.complete:
            return True
        return file in self.partial and self.partial[file].size >= position

    def covers_gtid(self, want: GtidPos | GtidSet) -> bool:
        """True when the shipped binlogs reach `want` in every domain (reads the newest first); a
        MySQL GTID set: when every transaction of it is logged before or in a shipped binlog."""
        if isinstance(want, GtidSet):
            return self._covers_gtid_set(want)
        have: GtidPos = {}
        for name in reversed(self.names()):
            m = self.best(name)
            for domain, gtid in parse_gtid_pos(m.gtid_last if m else "").items():
                have.setdefault(domain, gtid)  # the newest binlog holding a domain has its highest
            if gtid_reached(have, want) or all(d in have for d in want):
                break
        return gtid_reached(have, want)

    def _covers_gtid_set(self, want: GtidSet) -> bool:
        have = GtidSet()
        for name in reversed(self.names()):
            m = self.best(name)
            if m is not None:
                before, held = m.gtid_sets()
                have = have | before | held
            if want <= have:
                return True
        return False

    def chain_from(self, start: str) -> tuple[list[BinlogManifest], str]:
        """Contiguous shipped binlogs from `start` on (only the last may be partial), and why it ends."""
        base, number = binlog_number(start)
        chain: list[BinlogManifest] = []
        while True:
            name = binlog_name(base, number)
            gap = self.gap_at(number)
            if gap is not None:
                return chain, f"gap: {gap.describe()}"
            try:
                m = self.best(name)
            except BinlogError as exc:  # like a hole: what comes before it is still usable
                return chain, f"the manifest of {name} is unreadable ({exc})"
            if m is None:
                later = any(binlog_number(n) > (base, number) for n in self.names())
                why = f"{name} is not shipped" + (" although later binlogs are" if later else "")
                return chain, why
            chain.append(m)
            if not m.complete:
                return chain, f"{name} is the open binlog (shipped up to byte {m.size})"
            number += 1


class BinlogCatalog:
    """The shipped binlogs of one server of one host."""

    def __init__(self, catalog: Catalog, server_uuid: str) -> None:
        if not server_uuid or "/" in server_uuid or server_uuid in (".", ".."):
            raise BinlogError(f"server uuid {server_uuid!r} cannot name a storage directory")
        self.catalog = catalog
        self.store = catalog.store
        self.server_uuid = server_uuid
        self.prefix = f"{catalog.host_prefix}/{BINLOG_DIR}/{server_uuid}"

    def describe(self) -> str:
        return f"{self.store.location}/{self.prefix}"

    def manifest_key(self, name: str, partial: bool = False) -> str:
        return f"{self.prefix}/{name}{PARTIAL if partial else ''}.json"

    def object_key(self, name: str, encrypted: bool, upload_id: str = "") -> str:
        """A closed binlog's object; `upload_id` (the shipping run's) makes the key that run's own."""
        tag = f".{upload_id}" if upload_id else ""
        return f"{self.prefix}/{name}{tag}.zst" + (".gpg" if encrypted else "")

    def segment_key(self, name: str, offset: int, encrypted: bool, upload_id: str = "") -> str:
        tag = f".{upload_id}" if upload_id else ""
        return f"{self.prefix}/{name}{PARTIAL}-{offset:012d}{tag}.zst" + (".gpg" if encrypted else "")

    def gap_key(self, gap: BinlogGap) -> str:
        return f"{self.prefix}/{GAP_DIR}/{gap.first_missing}..{gap.last_missing}.json"

    def index(self) -> BinlogIndex:
        """One LIST of this server's directory; gap markers are read now, manifests when used."""
        complete: list[str] = []
        partial: list[str] = []
        gap_keys: list[str] = []
        stray: list[str] = []
        for info in self.store.list(self.prefix + "/"):
            rest = info.key[len(self.prefix) + 1 :]
            if rest.startswith(GAP_DIR + "/") and rest.endswith(".json"):
                gap_keys.append(info.key)
            elif rest.endswith(".json") and "/" not in rest:
                name, is_partial = rest[: -len(".json")], rest.endswith(PARTIAL + ".json")
                name = name[: -len(PARTIAL)] if is_partial else name
                if not _is_binlog_name(name):
                    stray.append(info.key)  # not ours: a binlog manifest is named after its binlog
                    continue
                (partial if is_partial else complete).append(name)
        index = BinlogIndex(
            self.server_uuid,
            _Manifests(complete, self._manifest, False),
            _Manifests(partial, self._manifest, True),
        )
        index.problems += [
            f"{self.store.location}/{key}: not a binlog manifest's name; ignored" for key in stray
        ]
        with ThreadPoolExecutor(8) as pool:
            for item in pool.map(self._load, gap_keys):
                if isinstance(item, BinlogGap):
                    index.gaps.append(item)
                else:
                    index.problems.append(str(item))
        return index

    def read(self, name: str, partial: bool = False) -> BinlogManifest:
        """One binlog's manifest (the complete one, or with `partial` the open one's); raises
        BinlogError naming the object when it cannot be read or is not this server's."""
        item = self._manifest(name, partial)
        if isinstance(item, str):
            raise BinlogError(item)
        return item

    def _manifest(self, name: str, partial: bool) -> BinlogManifest | str:
        item = self._load(self.manifest_key(name, partial))
        return item if isinstance(item, BinlogManifest | str) else f"{name}: not a binlog manifest"

    def _load(self, key: str) -> BinlogManifest | BinlogGap | str:
        where = f"{self.store.location}/{key}"
        try:
            data = self.store.get_bytes(key)
        except StorageError as exc:
            return f"{where}: {exc}"
        if len(data) > MAX_BINLOG_MANIFEST_BYTES:
            return f"{where}: {len(data)} bytes, over the {MAX_BINLOG_MANIFEST_BYTES} limit; ignored"
        try:
            if key.startswith(f"{self.prefix}/{GAP_DIR}/"):
                return BinlogGap.model_validate_json(data)
            manifest = BinlogManifest.model_validate_json(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            return f"{where}: invalid: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
        return self._check_own(manifest, key, where)

    def _check_own(self, m: BinlogManifest, key: str, where: str) -> BinlogManifest | str:
        """A manifest must describe this server's binlog and name objects in this directory only."""
        expected = self.manifest_key(m.name, partial=not m.complete)
        owner = (m.cluster, m.host, m.server_uuid)
        if key != expected or owner != (self.catalog.cluster, self.catalog.host, self.server_uuid):
            return f"{where}: describes {'/'.join(owner)}/{m.name}; it was copied or tampered with"
        outside = [s.object.key for s in m.segments if not s.object.key.startswith(self.prefix + "/")]
        if outside:
            return f"{where}: names object {outside[0]!r} outside {self.prefix}/; refusing it"
        return m

    def write_manifest(self, manifest: BinlogManifest, new: list[BinlogSegment] | None = None) -> None:
        """Write the manifest last, after checking the objects it names are stored at their size
        (`new`: only those, when the others were checked by an earlier write of this manifest)."""
        for seg in manifest.segments if new is None else new:
            info = self.store.head(seg.object.key)
            if info is None or info.size != seg.object.size:
                found = "missing" if info is None else f"{info.size} bytes"
                raise BinlogError(
                    f"refusing to register {manifest.name}: {seg.object.key} is {found}, expected {seg.object.size}"
                )
        self.store.put_bytes(self.manifest_key(manifest.name, not manifest.complete), manifest.to_json())

    def remove_uploads_of(self, upload_id: str) -> list[str]:
        """Delete the objects a shipping run proven dead (killed before its manifest) uploaded and no
        manifest names; returns their keys. Another run's objects are never touched: their keys carry
        that run's own upload id."""
        tag = f".{upload_id}.zst"
        index = self.index()
        debris = []
        for info in self.store.list(self.prefix + "/"):
            rest = info.key[len(self.prefix) + 1 :]
            if "/" in rest or tag not in rest:
                continue
            name = rest.split(PARTIAL)[0] if PARTIAL in rest else rest[: rest.index(tag)]
            try:  # an unreadable manifest might name it: then it stays
                found = [m[name] for m in (index.complete, index.partial) if name in m]
            except BinlogError:
                continue
            if info.key not in {seg.object.key for m in found for seg in m.segments}:
                debris.append(info.key)
        if debris:
            self.store.delete(debris)
        return debris

    def write_gap(self, gap: BinlogGap) -> str:
        key = self.gap_key(gap)
        self.store.put_bytes(key, gap.model_dump_json(indent=2).encode())
        return key

    def drop_partial(self, partial: BinlogManifest | None) -> None:
        """Once a binlog is stored complete, its partial manifest and segments are debris."""
        if partial is None:
            return
        self.store.delete([self.manifest_key(partial.name, partial=True)])
        self.store.delete([s.object.key for s in partial.segments])


def leased_manifest_keys(catalog: Catalog, item: str) -> tuple[str, str]:
    """The manifest keys of a binlog named as leases and retention name it (`<server_uuid>/<binlog>`):
    the complete binlog's and the open one's partial manifest; either shows it is stored."""
    server_uuid, _, name = item.partition("/")
    bcat = BinlogCatalog(catalog, server_uuid)
    return bcat.manifest_key(name), bcat.manifest_key(name, partial=True)


def _is_binlog_name(name: str) -> bool:
    try:
        binlog_number(name)
    except ValueError:
        return False
    return True


def server_uuids(catalog: Catalog) -> list[str]:
    """The servers whose binlogs were shipped for this host (a host can change servers)."""
    base = f"{catalog.host_prefix}/{BINLOG_DIR}/"
    return sorted({info.key[len(base) :].split("/", 1)[0] for info in catalog.store.list(base)})


# ---------------------------------------------------------------------------------------------
# pure checks over an index and the server's binlog list


def find_gap(index: BinlogIndex, server_logs: list[str], now: datetime | None = None) -> BinlogGap | None:
    """A new gap: binlogs after the last one shipped that the server no longer has."""
    if not server_logs:
        return None
    base, oldest = binlog_number(server_logs[0])
    last = index.last_complete(base)
    if last is None or oldest <= last + 1:
        return None
    first_missing, last_missing = last + 1, oldest - 1
    if any(g.covers(first_missing) and g.covers(last_missing) for g in index.gaps):
        return None  # recorded by an earlier run
    return BinlogGap(
        server_uuid=index.server_uuid,
        first_missing=binlog_name(base, first_missing),
        last_missing=binlog_name(base, last_missing),
        last_shipped=binlog_name(base, last),
        server_oldest=server_logs[0],
        detected_at=now or datetime.now(UTC),
    )


def check_not_reset(index: BinlogIndex, server_logs: list[tuple[str, int]], where: str) -> None:
    """Refuse to ship into a history the server no longer continues (RESET MASTER, another server).

    Cheap by design (at most one manifest read): the server's open binlog must be newer than
    every binlog shipped closed, and the newest one shipped must still have the server's size.
    """
    if not server_logs:
        return
    base, open_number = binlog_number(server_logs[-1][0])
    in_part = [binlog_number(n)[1] for n in index.partial if binlog_number(n)[0] == base]
    if in_part and open_number < max(in_part):  # numbered below the binlog being followed
        found = f"the server is writing {server_logs[-1][0]}, but {binlog_name(base, max(in_part))} was shipped in part"
        raise BinlogError(f"{where}: {found} (server {index.server_uuid}); {_RESET_ADVICE}")
    last = index.last_complete(base)
    if last is None:
        return
    newest = binlog_name(base, last)
    closed = dict(server_logs[:-1])
    if open_number <= last:
        found = f"the server is writing {server_logs[-1][0]}, but {newest} was already shipped closed"
    elif newest in closed and index.complete[newest].size != closed[newest]:
        found = (
            f"{newest} is {closed[newest]} bytes on the server but {index.complete[newest].size} in storage"
        )
    else:
        return
    raise BinlogError(f"{where}: {found} (server {index.server_uuid}); {_RESET_ADVICE}")


def check_backup_reached(backup: Manifest | None, server_logs: list[tuple[str, int]], where: str) -> None:
    """Before any binlog of a server is shipped, its newest backup is the only record of its binlog
    history: the server must still be at or past the backup's position. Writing a binlog numbered
    below the backup's, or listing the backup's binlog shorter than its position, the server began
    a new history under the old names (RESET MASTER, a datadir re-seeded under the same server_id):
    shipped under its name, a point-in-time recovery from the backup would read it from there."""
    if backup is None or not backup.binlog_file or backup.binlog_position is None or not server_logs:
        return
    base, number = binlog_number(backup.binlog_file)
    open_base, open_number = binlog_number(server_logs[-1][0])
    if open_base != base:
        return  # log_bin renamed: binlogs of two basenames do not compare
    at = f"backup {backup.backup_id} was taken at {backup.binlog_file}:{backup.binlog_position}"
    size = dict(server_logs).get(backup.binlog_file)
    if open_number < number:
        found = f"the server is writing {server_logs[-1][0]}, but {at}"
    elif size is not None and size < backup.binlog_position:
        found = f"the server's {backup.binlog_file} is {size} bytes, but {at}"
    else:
        return
    raise BinlogError(f"{where}: {found}, and none of its binlogs is shipped yet; {_RESET_ADVICE}")


_RESET_ADVICE = (
    "the server's binlogs were reset (RESET MASTER?) or another server reports the same identity (a server "
    "restored into the old one's place needs a server_id of its own and `xtrabackup-provider promote`, then a "
    "full backup). Point-in-time recovery across this is impossible: take a new full backup and move the old "
    "binlogs aside"
)


def binlogs_needed(index: BinlogIndex, backup: Manifest) -> list[str]:
    """The shipped binlogs needed to reach any point after `backup`, up to the first gap or hole."""
    if not backup.binlog_file:
        return []
    chain, _why = index.chain_from(backup.binlog_file)
    return [m.name for m in chain]


def binlogs_older_than(index: BinlogIndex, oldest_kept: Manifest) -> list[str]:
    """Shipped binlogs that no kept backup needs (all before the oldest kept backup's binlog)."""
    if not oldest_kept.binlog_file:
        return []
    base, first = binlog_number(oldest_kept.binlog_file)
    return [m.name for m in index.shipped() if binlog_number(m.name)[0] == base and m.number < first]
