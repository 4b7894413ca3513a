"""Plan a point-in-time recovery from manifests alone (nothing downloaded): the newest backup
whose binlog coordinates are before the target, and the contiguous shipped binlogs from its
position to the target. A recorded gap, a binlog never shipped, or shipped binlogs that end
before the target stop the restore here, with the reason.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from ..binlog.catalog import BinlogCatalog, BinlogIndex, BinlogManifest
from ..binlog.timeline import timelines
from ..catalog.backups import Catalog
from ..catalog.manifest import Manifest
from ..common.values import (
    GtidPos,
    GtidSet,
    binlog_number,
    check_gtid_for,
    format_gtid_pos,
    gtid_form,
    gtid_reached,
    parse_gtid_pos,
    parse_utc,
)
from ..restore.chain import plan_chain

log = logging.getLogger(__name__)


_POSITION = re.compile(r"[0-9]{1,19}", re.ASCII)


class PitrError(RuntimeError):
    """Point-in-time recovery cannot reach the target; the message says why and what to do."""


@dataclass(frozen=True)
class PitrTarget:
    kind: Literal["time", "gtid", "position"]
    time: datetime | None = None
    gtid: str | None = None
    file: str | None = None
    position: int | None = None

    @classmethod
    def at_time(cls, text: str) -> PitrTarget:
        """ISO 8601; a time without an offset is UTC. Binlogs stamp whole seconds: fractions are dropped."""
        try:
            when = parse_utc(text, "--to-time")
        except ValueError as exc:
            raise PitrError(str(exc)) from None
        return cls("time", time=when.replace(microsecond=0))

    @classmethod
    def at_gtid(cls, text: str) -> PitrTarget:
        try:
            if (
                gtid_form(text, "--to-gtid") == "mysql"
            ):  # refused by the plan, naming the backup (_check_gtid_form)
                return cls("gtid", gtid=str(GtidSet.parse(text, "--to-gtid")))
            pos = parse_gtid_pos(text, "--to-gtid")
        except ValueError as exc:
            raise PitrError(str(exc)) from exc
        if not pos:
            raise PitrError("--to-gtid is empty; give a GTID such as 0-1-42")
        return cls("gtid", gtid=format_gtid_pos(pos))

    @classmethod
    def at_position(cls, text: str) -> PitrTarget:
        file, _, pos = text.strip().rpartition(":")
        try:
            binlog_number(file)
            if not _POSITION.fullmatch(pos):
                raise ValueError(pos)
        except ValueError:
            raise PitrError(
                f"--to-position {text!r}: expected FILE:POS, e.g. mysql-bin.000042:1234"
            ) from None
        position = int(pos)
        if not 4 <= position < 2**63:
            raise PitrError(f"--to-position {text!r}: a binlog position is at least 4 (and below 2^63)")
        return cls("position", file=file, position=position)

    def describe(self) -> str:
        if self.kind == "time":
            assert self.time is not None
            return f"{self.time:%Y-%m-%d %H:%M:%S} UTC"
        return f"GTID {self.gtid}" if self.kind == "gtid" else f"{self.file}:{self.position}"

    def gtid_pos(self) -> GtidPos:
        return parse_gtid_pos(self.gtid)


@dataclass
class PitrPlan:
    backup: Manifest
    binlogs: list[BinlogManifest]
    target: PitrTarget

    def replay_args(self) -> list[str]:
        """mariadb-binlog's range options (the files follow them)."""
        start = f"--start-position={self.backup.binlog_position}"
        if self.target.kind == "time":
            assert self.target.time is not None
            return [start, f"--stop-datetime={self.target.time:%Y-%m-%d %H:%M:%S}"]  # run with TZ=UTC
        if self.target.kind == "gtid":
            # GTID mode: the backup's state (exclusive) to the target (inclusive). A backup taken
            # before any GTID was written has no state: everything after it is replayed.
            gtid_start = [f"--start-position={self.backup.gtid}"] if self.backup.gtid else []
            return [*gtid_start, f"--stop-position={self.target.gtid}"]
        return [start, f"--stop-position={self.target.position}"]


def _before(m: Manifest, target: PitrTarget) -> bool:
    if target.kind == "time":
        assert target.time is not None
        return m.finished_at <= target.time
    if target.kind == "gtid":
        try:
            have = parse_gtid_pos(m.gtid)
        except ValueError:
            return False  # a MySQL GTID set: no MariaDB GTID is before or after it
        return all(have[d].seq <= g.seq for d, g in target.gtid_pos().items() if d in have)
    assert m.binlog_file and target.file and target.position is not None
    base, number = binlog_number(m.binlog_file)
    t_base, t_number = binlog_number(target.file)
    return base == t_base and (number, m.binlog_position or 0) <= (t_number, target.position)


def choose_backup(manifests: list[Manifest], target: PitrTarget, backup_id: str | None = None) -> Manifest:
    """The newest backup with binlog coordinates before the target (or the one asked for)."""
    usable = [m for m in manifests if m.binlog_file and m.binlog_position is not None]
    _check_gtid_form(target, [m for m in usable if m.backup_id == backup_id] if backup_id else usable)
    if backup_id:
        chosen = next((m for m in usable if m.backup_id == backup_id), None)
        if chosen is None:
            raise PitrError(f"backup {backup_id} has no manifest with binlog coordinates in this catalog")
        if not _before(chosen, target):
            raise PitrError(f"backup {backup_id} was taken after {target.describe()}; pick an older one")
        return chosen
    before = [m for m in usable if _before(m, target)]
    servers = sorted({m.server_uuid for m in before})
    if target.kind == "position" and len(servers) > 1:
        # Binlog names restart on a new timeline (core/binlog/timeline.py): FILE:POS alone is ambiguous.
        raise PitrError(
            f"{target.describe()} names a binlog of more than one server timeline ({', '.join(servers)}); "
            "add --backup-id of a backup of the one you mean, or target a GTID"
        )
    if not before:
        oldest = min(usable, key=lambda m: m.backup_id).backup_id if usable else "none"
        raise PitrError(
            f"no backup with binlog coordinates before {target.describe()} (oldest usable: {oldest}); "
            "point-in-time recovery starts from a backup taken before the target"
        )
    return max(before, key=lambda m: m.backup_id)


def _check_gtid_form(target: PitrTarget, backups: list[Manifest]) -> None:
    """A --to-gtid of the other server's form than the newest backup's is refused by name (a MySQL
    GTID set against MariaDB backups, a MariaDB GTID against MySQL ones); MySQL's own is not planned."""
    if target.kind != "gtid" or not backups or target.gtid is None:
        return
    m = max(backups, key=lambda b: b.backup_id)
    family = _family(m)
    if family is None:
        return
    whose = f"backup {m.backup_id} ({m.server_version or m.engine_flavour})"
    try:
        check_gtid_for(target.gtid, family, "--to-gtid", whose)
    except ValueError as exc:
        raise PitrError(str(exc)) from None
    if family == "mysql":
        raise PitrError(
            f"--to-gtid {target.gtid} on {whose}: this restore replays MariaDB binlogs only; restore a MySQL "
            "host with the CLI's `restore --to-gtid` (its flavour clone or xtrabackup: mysqlbinlog | mysql)"
        )


def _family(m: Manifest) -> str | None:
    """Whose GTIDs a backup holds: its recorded GTID's form, else its server's (None: unknown)."""
    try:
        form = gtid_form(m.gtid)
    except ValueError:
        form = None
    if form is not None:
        return form
    if m.server_version:
        return "mariadb" if "mariadb" in m.server_version.lower() else "mysql"
    return {"mariabackup": "mariadb", "clone": "mysql"}.get(m.engine_flavour)


def _reaches(m: BinlogManifest, target: PitrTarget) -> bool:
    if target.kind == "time":
        assert target.time is not None
        seen = [t for t in (m.covers_until, m.last_event_time) if t is not None]
        return bool(seen) and max(seen) >= target.time
    if target.kind == "gtid":
        return gtid_reached(parse_gtid_pos(m.gtid_last), target.gtid_pos())
    return m.name == target.file


def plan_binlogs(index: BinlogIndex, backup: Manifest, target: PitrTarget) -> list[BinlogManifest]:
    """The binlogs from the backup's position to the target, contiguous and shipped far enough."""
    assert backup.binlog_file and backup.binlog_position is not None
    start = f"{backup.binlog_file}:{backup.binlog_position}"
    chain, why = index.chain_from(backup.binlog_file)
    if not chain or chain[0].size < backup.binlog_position:
        held = f" (only {chain[0].size} bytes shipped)" if chain else ""
        raise PitrError(
            f"backup {backup.backup_id} starts at {start}, but {why or backup.binlog_file + held}; ship binlogs, "
            "or restore without a point in time"
        )
    needed: list[BinlogManifest] = []
    for m in chain:
        needed.append(m)
        if _reaches(m, target):
            _check_reach(m, target, needed, parse_gtid_pos(backup.gtid))
            return needed
    last = chain[-1]
    until = last.covers_until or last.last_event_time
    fix = "Point-in-time recovery cannot cross a gap" if why.startswith("gap") else "Ship binlogs first"
    raise PitrError(
        f"the binlogs shipped after backup {backup.backup_id} ({start}) end at {last.name} "
        f"(GTID {last.gtid_last or '-'}, events until {f'{until:%Y-%m-%d %H:%M:%S} UTC' if until else '-'}), "
        f"before {target.describe()}: {why}. {fix}"
    )


def _check_reach(
    last: BinlogManifest, target: PitrTarget, needed: list[BinlogManifest], backup_gtid: GtidPos
) -> None:
    if target.kind == "position" and target.position is not None and last.size < target.position:
        raise PitrError(
            f"{target.file} is shipped only up to byte {last.size}, before {target.describe()}; ship binlogs first"
        )
    if target.kind == "gtid":
        # Domains with transactions after the backup: the stop position must bound each of them.
        domains = {
            d
            for m in needed
            for d, g in parse_gtid_pos(m.gtid_last).items()
            if d not in backup_gtid or g.seq > backup_gtid[d].seq
        }
        missing = sorted(domains - set(target.gtid_pos()))
        if missing:
            raise PitrError(
                f"the binlogs hold transactions of GTID domain(s) {missing} too; name one GTID per domain "
                f"in --to-gtid (e.g. {target.gtid},{missing[0]}-<server_id>-<seq>)"
            )


def _check_timeline(catalog: Catalog, backup: Manifest, target: PitrTarget) -> None:
    """A GTID written by a promoted server (core/binlog/timeline.py) is reached from that
    timeline's own backups only: never from the parent's, whose binlogs do not hold it."""
    if target.kind != "gtid":
        return
    ids = {g.server_id for g in target.gtid_pos().values()}
    for timeline in timelines(catalog):
        if timeline.server_id in ids and backup.server_uuid != timeline.server_uuid:
            raise PitrError(
                f"{target.describe()} is on the timeline of {timeline.server_uuid} (promoted "
                f"{timeline.promoted_at:%Y-%m-%d %H:%M:%S} UTC, forked at {timeline.fork_gtid}), which has no backup "
                "before it: point-in-time recovery on a new timeline starts from its first full backup"
            )


def _after_promotion(catalog: Catalog, backup: Manifest, target: PitrTarget) -> PitrError | None:
    """The binlogs of `backup`'s server cannot reach a time after that server's history was
    replaced by a promoted one: say so (None when no promotion explains it)."""
    if target.time is None:
        return None
    for timeline in timelines(catalog):
        if timeline.parent_server_uuid == backup.server_uuid and timeline.promoted_at <= target.time:
            return PitrError(
                f"{target.describe()} is after {backup.server_uuid} was replaced by {timeline.server_uuid} "
                f"(promoted {timeline.promoted_at:%Y-%m-%d %H:%M:%S} UTC, forked at {timeline.fork_gtid}) and "
                "the new timeline has no backup before it: take a full backup of the new primary (point-in-time "
                "recovery on it starts there), or give a time before the promotion"
            )
    return None


def already_there(backup: Manifest, target: PitrTarget) -> bool:
    """The backup is at the target already (its own GTID, its own position): no binlog is needed,
    shipped or not; the restore leaves gtid_slave_pos at the backup's GTID."""
    if target.kind == "gtid":
        try:
            return gtid_reached(parse_gtid_pos(backup.gtid), target.gtid_pos())
        except ValueError:
            return False  # a MySQL GTID set
    if target.kind == "position":
        return (backup.binlog_file, backup.binlog_position) == (target.file, target.position)
    return False


def _binlogs(catalog: Catalog, backup: Manifest, target: PitrTarget) -> list[BinlogManifest]:
    index = BinlogCatalog(catalog, backup.server_uuid).index()
    for problem in index.problems:
        log.warning("ignoring unreadable binlog manifest: %s", problem)
    try:
        return plan_binlogs(index, backup, target)
    except PitrError as exc:
        if (promoted := _after_promotion(catalog, backup, target)) is None:
            raise
        raise promoted from exc


def make_plan(catalog: Catalog, target: PitrTarget, backup_id: str | None = None) -> PitrPlan:
    now = datetime.now(UTC)
    if target.time is not None and target.time > now:
        raise PitrError(
            f"{target.describe()} is in the future (it is now {now:%Y-%m-%d %H:%M:%S} UTC); "
            "point-in-time recovery reaches only what has happened"
        )
    problems: list[str] = []
    backup = choose_backup(catalog.manifests(problems), target, backup_id)
    for problem in problems:
        # Like a plain restore: a bad manifest elsewhere does not block this one; plan_chain below
        # names it if it is on the chosen backup's own chain.
        log.warning("ignoring unreadable manifest: %s", problem)
    _check_timeline(catalog, backup, target)
    if backup.engine_flavour != "mariabackup":
        raise PitrError(
            f"backup {backup.backup_id} was taken with {backup.engine_flavour}: the replay runs in a MariaDB "
            "sandbox, so point-in-time recovery supports MariaDB backups only; restore it and replay by hand"
        )
    plan = PitrPlan(
        backup, [] if already_there(backup, target) else _binlogs(catalog, backup, target), target
    )
    plan_chain(catalog, backup.backup_id)  # validates the chain before anything is downloaded
    return plan
