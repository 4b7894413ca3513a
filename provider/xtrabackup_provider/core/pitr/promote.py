"""Promote a server restored to a point in time to be the new primary: a new timeline.

After a point-in-time restore the datadir knows the GTID it reached only as its gtid_slave_pos
(the replay writes no binlog), and its binlog state is empty: the first write would reuse a GTID
the old timeline already wrote with other content, and with the old server_id the server would
also reuse the old binlog names, which shipping then refuses. Promotion (MariaDB, the "jump" of
findings 18 section 3):

1. checks, read-only: the server answers, is MariaDB with a binlog, replicates from nobody, has
   written nothing of its own, and runs with a server_id that no identity of this host's
   catalog used (so its binlogs go to a new directory: core/binlog/catalog.py);
2. writes the timeline record (core/binlog/timeline.py): parent identity, fork GTID, the state set;
3. RESET MASTER; SET GLOBAL gtid_binlog_state = '<reached>,<domain>-<new id>-<S>';
   SET GLOBAL gtid_slave_pos = '<domain>-<new id>-<S>' (other domains at the reached GTID),
   with S above every sequence this host's shipped binlogs, backups and the reached GTID hold,
   rounded up to the next multiple of `margin` (room for the old primary's unshipped writes).
   The first write is then <domain>-<new id>-<S+1>: no sequence of the old timeline is reused,
   and PITR's per-domain comparisons never confuse the two histories.

Running it again is safe: a server already in the recorded state is reported as promoted, and
one left between step 2 and 3 is promoted again.

On MySQL a GTID names its server (server_uuid:N), so a new timeline is a new server_uuid (a copy
restored with the old auto.cnf is refused: remove it and restart) and no jump is needed. Promotion
(`_promote_by_uuid`) checks, read-only: binlog and GTID mode on, no replication thread running, every
transaction a stopped replica received applied (GTID_SUBTRACT of its Retrieved_Gtid_Set from
gtid_executed), no transaction of its own (errant for the old history); writes the timeline record
(its gtid_executed as fork and start); then STOP REPLICA and RESET REPLICA ALL (a replica's channel),
super_read_only and read_only OFF.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..binlog.catalog import BinlogCatalog, server_uuids
from ..binlog.timeline import Timeline, read_timeline, timelines, write_timeline
from ..catalog.backups import Catalog
from ..common.crashpoints import crash_point
from ..common.values import Gtid, GtidPos, GtidSet, check_gtid_for, format_gtid_pos, parse_gtid_pos
from ..db.dialect import Dialect
from ..db.server import MySQLTarget, ServerError, ServerFacts
from ..db.session import Session
from .plan import PitrError, PitrTarget, choose_backup

log = logging.getLogger(__name__)

DEFAULT_MARGIN = 1_000_000


class PromoteError(RuntimeError):
    """The server cannot be promoted (nothing was changed unless the message says so)."""


class _NothingChanged(PromoteError):
    """The first change was refused: the server is as it was."""


def _step_failed(where: str, done: list[str], first: str, exc: Exception, privileges: str) -> PromoteError:
    """What a failed change step means: nothing changed when it was the first, else HALF-PROMOTED."""
    if not done:
        return _NothingChanged(
            f"{where}: {first} failed: {exc}; nothing was changed (the account needs the {privileges} "
            "privileges, or SUPER)"
        )
    return PromoteError(
        f"{where} is HALF-PROMOTED: done {', '.join(done)}, then {exc}; keep writes away "
        "and run promote again (it repeats every step)"
    )


@dataclass
class PromoteRequest:
    catalog: Catalog
    target: MySQLTarget
    parent: str | None = None  # the old timeline's server uuid; default: that of the backup PITR used
    reached_gtid: str | None = None  # default: the server's gtid_slave_pos (left by the PITR)
    margin: int = DEFAULT_MARGIN


@dataclass
class PromoteReport:
    timeline: Timeline
    already: bool = False  # the server was in the recorded state already
    state_name: str = "gtid_binlog_state"  # the variable binlog_state is (MySQL: gtid_executed)
    replicas_start: str = ""  # how a copy at the fork becomes a replica (Dialect.replica_start_hint)

    def summary(self) -> dict[str, Any]:
        t = self.timeline
        return {
            "server_uuid": t.server_uuid,
            "server_id": t.server_id,
            "parent_server_uuid": t.parent_server_uuid,
            "fork_gtid": t.fork_gtid,
            "gtid_binlog_state": t.binlog_state,
            "replicas_start_at": t.start_gtid,
            "already_promoted": self.already,
        }


def _server_id_of(uuid: str) -> int | None:
    """The server_id in a MariaDB identity (mariadb-<hostname>-<port>-<server_id>)."""
    tail = uuid.rsplit("-", 1)[-1]
    return int(tail) if uuid.startswith("mariadb-") and tail.isdigit() else None


def _state(db: Session) -> dict[str, Any]:
    import MySQLdb

    try:
        with db.use() as conn:
            cur = conn.cursor()
            cur.execute(
                "SELECT @@log_bin, @@gtid_binlog_state, @@gtid_slave_pos, @@gtid_domain_id, @@server_id, @@port"
            )
            log_bin, binlog_state, slave_pos, domain, server_id, port = cur.fetchone()
            cur.execute("SHOW ALL SLAVES STATUS")
            names = [d[0] for d in cur.description]
            slaves = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    except MySQLdb.Error as exc:
        raise ServerError(f"{db.address}: reading the GTID state failed: {exc}") from exc
    return {
        "log_bin": bool(log_bin),
        "binlog_state": str(binlog_state or ""),
        "slave_pos": str(slave_pos or ""),
        "domain": int(domain),
        "server_id": int(server_id),
        "port": int(port),
        "sources": [f"{s.get('Master_Host')}:{s.get('Master_Port')}" for s in slaves],
    }


def _highest_seq(catalog: Catalog, domain: int, reached: GtidPos) -> int:
    """The highest sequence of `domain` this host's history holds: shipped binlogs, backups, the fork."""
    seqs = [reached[domain].seq] if domain in reached else [0]
    for uuid in server_uuids(catalog):
        index = BinlogCatalog(catalog, uuid).index()
        for m in index.shipped():
            for pos in m.gtids():
                if domain in pos:
                    seqs.append(pos[domain].seq)
    for backup in catalog.manifests([]):
        try:
            pos = parse_gtid_pos(backup.gtid)
        except ValueError:
            continue  # a MySQL GTID set: no MariaDB domain
        if domain in pos:
            seqs.append(pos[domain].seq)
    return max(seqs)


def _parent(catalog: Catalog, reached: str, given: str | None, known: set[str]) -> str:
    if given:
        if given not in known:
            raise PromoteError(
                f"--parent {given}: no backups or binlogs of that server in {catalog.describe()}; "
                f"known: {', '.join(sorted(known)) or 'none'}"
            )
        return given
    try:
        return choose_backup(catalog.manifests([]), PitrTarget.at_gtid(reached)).server_uuid
    except PitrError as exc:
        raise PromoteError(
            f"cannot tell which timeline GTID {reached} belongs to ({exc}); name it with --parent"
        ) from None


def promote(req: PromoteRequest) -> PromoteReport:
    if req.margin < 1:
        raise PromoteError(f"margin {req.margin}: give a positive number of sequence numbers")
    with Session(req.target) as db:  # one connection for every read and change (issue 36)
        facts = db.facts  # a server that does not answer: ServerError naming it
        where = f"{req.target.address} (server {facts.server_uuid})"
        if facts.dialect.new_timeline_by == "server_uuid":
            return _promote_by_uuid(req, db, facts, where)
        return _promote_by_jump(req, db, facts, where)


def _promote_by_jump(req: PromoteRequest, db: Session, facts: ServerFacts, where: str) -> PromoteReport:
    """MariaDB: the new timeline is the GTID sequence jump of the module docstring."""
    state = _state(db)
    if state["port"] == 0:
        raise PromoteError(
            f"{where} runs without networking (port 0), so its identity would change when it starts in service; "
            "start it with its service port (--port, and --bind-address=127.0.0.1 to keep clients away)"
        )
    if not state["log_bin"]:
        raise PromoteError(
            f"{where}: binary logging is off; start it with --log-bin (a primary ships binlogs) and promote again"
        )
    if state["sources"]:
        raise PromoteError(
            f"{where} replicates from {', '.join(state['sources'])}; STOP ALL SLAVES and RESET SLAVE ALL first"
        )
    recorded = read_timeline(req.catalog, facts.server_uuid)
    if (
        recorded is not None
        and state["binlog_state"]
        and _continues(state["binlog_state"], recorded.binlog_state)
    ):
        log.info("%s is already promoted: %s", where, recorded.describe())
        return PromoteReport(
            recorded, already=True, replicas_start=facts.dialect.replica_start_hint(recorded.start_gtid)
        )
    if state["binlog_state"]:
        raise PromoteError(
            f"{where} has binlogged transactions of its own (gtid_binlog_state={state['binlog_state']}): "
            "promote only a server fresh from a point-in-time restore, before any write; restore again"
        )
    reached = req.reached_gtid or state["slave_pos"]
    if not reached:
        raise PromoteError(
            f"{where} has no gtid_slave_pos: it does not come from a point-in-time restore; "
            "give the GTID its data holds with --reached-gtid"
        )
    try:
        fork = parse_gtid_pos(reached, "--reached-gtid")
    except ValueError as exc:
        raise PromoteError(str(exc)) from None
    # Identities with binlogs or backups, and other promotions (this server's own record, left by
    # a run that stopped before setting the state, is not history).
    known = _history(req.catalog) | {t.server_uuid for t in timelines(req.catalog)}
    if facts.server_uuid not in _history(req.catalog):
        known.discard(facts.server_uuid)
    used_ids = {i for i in (_server_id_of(u) for u in known) if i is not None}
    parent = _parent(req.catalog, format_gtid_pos(fork), req.parent, known)
    new_id = state["server_id"]
    if facts.server_uuid in known or new_id in used_ids or new_id == _server_id_of(parent):
        owner = "the old timeline" if new_id == _server_id_of(parent) else "a server identity"
        raise PromoteError(
            f"{where}: server_id {new_id} is {owner}'s in {req.catalog.describe()}; a new timeline needs a "
            f"server_id of its own: restart the server with --server-id={max(used_ids | {new_id}) + 1} and "
            "promote again (nothing was changed)"
        )
    domain = state["domain"]
    top = _highest_seq(req.catalog, domain, fork)
    jump = (top // req.margin + 1) * req.margin
    start = dict(fork)
    start[domain] = Gtid(domain, new_id, jump)
    binlog_state = ",".join([*(str(fork[d]) for d in sorted(fork)), f"{domain}-{new_id}-{jump}"])
    parent_last = _shipped_until(req.catalog, parent)
    timeline = Timeline(
        cluster=req.catalog.cluster,
        host=req.catalog.host,
        server_uuid=facts.server_uuid,
        server_id=new_id,
        parent_server_uuid=parent,
        fork_gtid=format_gtid_pos(fork),
        binlog_state=binlog_state,
        start_gtid=format_gtid_pos(start),
        parent_shipped_until=parent_last,
        promoted_at=datetime.now(UTC),
    )
    key = write_timeline(
        req.catalog, timeline
    )  # first: a server promoted without its record would be unexplained
    crash_point("promote.after_timeline")
    try:
        _set_state(db, where, timeline)
    except _NothingChanged as exc:
        req.catalog.store.delete([key])  # the server is as it was: no timeline began
        raise PromoteError(str(exc)) from exc.__cause__
    log.info("promoted %s: %s", where, timeline.describe())
    return PromoteReport(timeline, replicas_start=facts.dialect.replica_start_hint(timeline.start_gtid))


def _history(catalog: Catalog) -> set[str]:
    """Identities with binlogs or backups (a timeline record alone is not history)."""
    return set(server_uuids(catalog)) | {m.server_uuid for m in catalog.manifests([])}


def _shipped_until(catalog: Catalog, uuid: str) -> str:
    last: GtidPos = {}
    for m in BinlogCatalog(catalog, uuid).index().shipped():
        for d, g in parse_gtid_pos(m.gtid_last).items():
            if d not in last or g.seq > last[d].seq:
                last[d] = g
    return format_gtid_pos(last)


def _binlog_state(text: str) -> dict[tuple[int, int], int]:
    """A gtid_binlog_state (one GTID per domain and server_id) as (domain, server_id) -> sequence."""
    out: dict[tuple[int, int], int] = {}
    for part in text.replace(" ", "").split(","):
        if part:
            domain, server_id, seq = (int(x) for x in part.split("-"))
            out[(domain, server_id)] = seq
    return out


def _continues(have: str, promoted: str) -> bool:
    """True when a server's binlog state is the promoted one, or that plus its own writes since."""
    now, then = _binlog_state(have), _binlog_state(promoted)
    return now.keys() == then.keys() and all(now[k] >= then[k] for k in then)


def _set_state(db: Session, where: str, timeline: Timeline) -> None:
    import MySQLdb

    steps = [
        ("RESET MASTER", None),
        ("SET GLOBAL gtid_binlog_state = %s", (timeline.binlog_state,)),
        ("SET GLOBAL gtid_slave_pos = %s", (timeline.start_gtid,)),
    ]
    done: list[str] = []
    try:
        with db.use() as conn:  # one block: a connection lost between the steps is not opened anew
            cur = conn.cursor()
            for sql, args in steps:
                cur.execute(sql, args)
                done.append(sql.split(" =")[0])
                crash_point("promote.after_reset_master")
            cur.execute("SELECT @@gtid_binlog_state, @@gtid_slave_pos")
            have_state, have_slave = (str(v or "") for v in cur.fetchone())
    except MySQLdb.Error as exc:
        raise _step_failed(where, done, "RESET MASTER", exc, "RELOAD and BINLOG ADMIN") from exc
    if _binlog_state(have_state) != _binlog_state(timeline.binlog_state) or have_slave != timeline.start_gtid:
        raise PromoteError(
            f"{where} is HALF-PROMOTED: gtid_binlog_state is {have_state!r} and gtid_slave_pos {have_slave!r}, "
            f"expected {timeline.binlog_state!r} and {timeline.start_gtid!r}; keep writes away and run promote again"
        )


# -- MySQL: a new timeline is a new server_uuid ----------------------------------------------------


@dataclass
class _MysqlState:
    log_bin: bool
    gtid_mode: str
    executed: GtidSet  # @@global.gtid_executed
    read_only: tuple[int, int]  # (read_only, super_read_only)
    channels: list[dict[str, Any]]  # Dialect.status of each channel, plus "unapplied"


def _mysql_state(db: Session, dialect: Dialect) -> _MysqlState:
    import MySQLdb

    try:
        with db.use() as conn:
            cur = conn.cursor()
            cur.execute("SELECT @@log_bin, @@global.gtid_mode, @@global.gtid_executed")
            log_bin, mode, executed = cur.fetchone()
            cur.execute(dialect.read_only_state)
            read_only, super_read_only = (int(v or 0) for v in cur.fetchone())
            channels = _channels(conn, dialect)
    except MySQLdb.Error as exc:
        raise ServerError(f"{db.address}: reading the replication and GTID state failed: {exc}") from exc
    return _MysqlState(
        bool(log_bin), str(mode), GtidSet.parse(str(executed or "")), (read_only, super_read_only), channels
    )


def _channels(conn: Any, dialect: Dialect) -> list[dict[str, Any]]:
    """Each replication channel's status, with what it received and has not applied (the server's
    own GTID_SUBTRACT of gtid_executed from Retrieved_Gtid_Set)."""
    import MySQLdb

    cur = conn.cursor(MySQLdb.cursors.DictCursor)
    cur.execute(dialect.replica_status)
    rows = [dialect.status(row) for row in cur.fetchall()]
    plain = conn.cursor()
    for row in rows:
        plain.execute(
            "SELECT GTID_SUBTRACT(%s, @@global.gtid_executed)", (str(row.get("retrieved_gtid_set") or ""),)
        )
        row["unapplied"] = GtidSet.parse(str(plain.fetchone()[0] or ""))
    return rows


def _source_of(channel: dict[str, Any]) -> str:
    name = f" (channel '{channel['channel']}')" if channel.get("channel") else ""
    return f"{channel.get('source_host')}:{channel.get('source_port')}{name}"


def _promote_by_uuid(req: PromoteRequest, db: Session, facts: ServerFacts, where: str) -> PromoteReport:
    dialect, uuid = facts.dialect, facts.server_uuid
    state = _mysql_state(db, dialect)
    if not state.log_bin:
        raise PromoteError(
            f"{where}: binary logging is off; start it with --log-bin (a primary ships binlogs) and promote again"
        )
    if state.gtid_mode != "ON":
        raise PromoteError(
            f"{where}: gtid_mode is {state.gtid_mode}; start it with --gtid-mode=ON --enforce-gtid-consistency=ON "
            "(timelines are told apart by their GTIDs) and promote again"
        )
    running = [
        c
        for c in state.channels
        if c.get("io_running") in ("Yes", "Connecting") or c.get("sql_running") == "Yes"
    ]
    if running:
        raise PromoteError(
            f"{where} replicates from {', '.join(_source_of(c) for c in running)}; {dialect.stop_replica} first "
            f"(promote then checks it applied all it received and detaches it with {dialect.reset_replica_all})"
        )
    recorded = read_timeline(req.catalog, uuid)
    if (
        recorded is not None
        and not state.channels
        and state.read_only == (0, 0)
        and GtidSet.parse(recorded.fork_gtid) <= state.executed
    ):
        log.info("%s is already promoted: %s", where, recorded.describe())
        return _mysql_report(recorded, dialect, already=True)
    _refuse_known_uuid(req.catalog, facts, where)
    for channel in state.channels:
        if channel["unapplied"]:
            error = channel.get("last_sql_errno")
            why = (
                f"; its applier stopped with error {error}: {channel.get('last_sql_error')}" if error else ""
            )
            raise PromoteError(
                f"{where} has received transactions it has not applied from {_source_of(channel)} "
                f"({channel['unapplied']}){why}: {dialect.start_sql_thread_until()[0]}, wait until they are "
                f"applied, {dialect.stop_replica}, and promote again (nothing was changed)"
            )
    own = GtidSet({s: iv for s, iv in state.executed.intervals().items() if s.split(":")[0] == uuid.lower()})
    if own:
        raise PromoteError(
            f"{where} has transactions of its own ({own}), errant for the old timeline's history: promote only a "
            "copy before any write of its own: restore again (a replica: rebuild it from a backup)"
        )
    fork = _mysql_fork(state.executed, req.reached_gtid, where)
    known = _history(req.catalog) | {t.server_uuid for t in timelines(req.catalog)}
    known.discard(uuid)  # its own record, left by a run that stopped halfway
    parent = _mysql_parent(req.catalog, fork, req.parent, known, where)
    timeline = Timeline(
        cluster=req.catalog.cluster,
        host=req.catalog.host,
        server_uuid=uuid,
        server_id=facts.server_id,
        parent_server_uuid=parent,
        fork_gtid=str(fork),
        binlog_state=str(fork),
        start_gtid=str(fork),
        parent_shipped_until=str(_shipped_set(req.catalog, parent)),
        promoted_at=datetime.now(UTC),
    )
    key = write_timeline(req.catalog, timeline)  # first, as on MariaDB
    crash_point("promote.after_timeline")
    try:
        _make_primary(db, where, dialect, detach=bool(state.channels))
    except _NothingChanged as exc:
        req.catalog.store.delete([key])
        raise PromoteError(str(exc)) from exc.__cause__
    log.info("promoted %s: %s", where, timeline.describe())
    return _mysql_report(timeline, dialect)


def _mysql_report(timeline: Timeline, dialect: Dialect, already: bool = False) -> PromoteReport:
    return PromoteReport(
        timeline,
        already=already,
        state_name="gtid_executed",
        replicas_start=dialect.replica_start_hint(timeline.start_gtid),
    )


def _refuse_known_uuid(catalog: Catalog, facts: ServerFacts, where: str) -> None:
    """A server_uuid with binlogs or backups in the catalog is an old timeline's: a copy restored with
    its auto.cnf would write that server's next GTIDs again, with other content."""
    uuid = facts.server_uuid
    if uuid not in _history(catalog):
        return
    whose = "shipped binlogs'" if uuid in server_uuids(catalog) else "backups'"
    auto_cnf = f"{facts.datadir.rstrip('/')}/auto.cnf"
    raise PromoteError(
        f"{where}: server_uuid {uuid} is the {whose} in {catalog.describe()} (the old timeline), so its writes "
        f"would reuse that server's GTIDs; a new timeline needs a server_uuid of its own: stop it, remove "
        f"{auto_cnf} (MySQL makes a new server_uuid at start), start it and promote again (nothing was changed)"
    )


def _mysql_fork(executed: GtidSet, given: str | None, where: str) -> GtidSet:
    """The GTID set the server holds (its gtid_executed); `given` must name that same set."""
    if not executed:
        raise PromoteError(
            f"{where} holds no GTIDs (gtid_executed is empty): it holds nothing of this host's history; "
            "restore it from a backup of the host first"
        )
    if given:
        try:
            check_gtid_for(given, "mysql", "--reached-gtid", where)
            wanted = GtidSet.parse(given, "--reached-gtid")
        except ValueError as exc:
            raise PromoteError(str(exc)) from None
        if wanted != executed:
            raise PromoteError(
                f"--reached-gtid {given}: {where} holds {executed} (its gtid_executed); promote the server restored "
                "to the GTID set you meant, or give the set it holds"
            )
    return executed


def _mysql_parent(catalog: Catalog, fork: GtidSet, given: str | None, known: set[str], where: str) -> str:
    """The old timeline: the server of this host's catalog whose transactions the fork holds (the
    newest of a chain of promotions when it holds several)."""
    if given:
        return _parent(catalog, "", given, known)
    sources = {source.split(":")[0] for source in fork.intervals()}
    candidates = sorted(sources & known)
    if len(candidates) > 1:
        parents = {t.parent_server_uuid for t in timelines(catalog)}
        candidates = [c for c in candidates if c not in parents] or candidates
    if len(candidates) != 1:
        raise PromoteError(
            f"cannot tell which timeline the GTIDs of {where} continue ({fork}; of servers this host's catalog "
            f"knows: {', '.join(candidates) or 'none'}); name it with --parent"
        )
    return candidates[0]


def _shipped_set(catalog: Catalog, uuid: str) -> GtidSet:
    """Every GTID `uuid`'s shipped binlogs hold (abandoned after the fork)."""
    held = GtidSet()
    for m in BinlogCatalog(catalog, uuid).index().shipped():
        held |= m.gtid_sets()[1]
    return held


def _make_primary(db: Session, where: str, dialect: Dialect, detach: bool) -> None:
    """Detach a replica (STOP REPLICA, RESET REPLICA ALL) and open the server to writes."""
    import MySQLdb

    steps = [*((dialect.reset_replica_all,) if detach else ()), *dialect.make_writable]
    done: list[str] = []
    try:
        with db.use() as conn:  # one block: a connection lost between the steps is not opened anew
            cur = conn.cursor()
            if detach:
                cur.execute(dialect.stop_replica)  # stopped already (checked): a guard, changes nothing
                late = [c for c in _channels(conn, dialect) if c["unapplied"]]
                if late:
                    raise _NothingChanged(
                        f"{where} received {late[0]['unapplied']} from {_source_of(late[0])} while promote ran (its "
                        f"replication was started again); it is stopped now: {dialect.start_sql_thread_until()[0]}, "
                        f"wait, {dialect.stop_replica}, and promote again"
                    )
            for sql in steps:
                cur.execute(sql)
                done.append(sql)
            cur.execute(dialect.read_only_state)
            read_only = tuple(int(v or 0) for v in cur.fetchone())
            left = _channels(conn, dialect)
    except MySQLdb.Error as exc:
        raise _step_failed(
            where, done, steps[0], exc, "REPLICATION_SLAVE_ADMIN and SYSTEM_VARIABLES_ADMIN"
        ) from exc
    if left or read_only != (0, 0):
        raise PromoteError(
            f"{where} is HALF-PROMOTED: {len(left)} replication channel(s) left, read_only/super_read_only "
            f"{read_only}; keep writes away and run promote again"
        )
