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
from ..common.values import Gtid, GtidPos, format_gtid_pos, parse_gtid_pos
from ..db.server import MySQLTarget, ServerError, connect, server_facts
from .plan import PitrError, PitrTarget, choose_backup

log = logging.getLogger(__name__)

DEFAULT_MARGIN = 1_000_000


class PromoteError(RuntimeError):
    """The server cannot be promoted (nothing was changed unless the message says so)."""


class _NothingChanged(PromoteError):
    """The first change was refused: the server is as it was."""


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


def _state(target: MySQLTarget) -> dict[str, Any]:
    import MySQLdb

    conn = connect(target)
    try:
        cur = conn.cursor()
        cur.execute(
            "SELECT @@log_bin, @@gtid_binlog_state, @@gtid_slave_pos, @@gtid_domain_id, @@server_id, @@port"
        )
        log_bin, binlog_state, slave_pos, domain, server_id, port = cur.fetchone()
        cur.execute("SHOW ALL SLAVES STATUS")
        names = [d[0] for d in cur.description]
        slaves = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    except MySQLdb.Error as exc:
        raise ServerError(f"{target.address}: reading the GTID state failed: {exc}") from exc
    finally:
        conn.close()
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
    facts = server_facts(req.target)  # a server that does not answer: ServerError naming it
    where = f"{req.target.address} (server {facts.server_uuid})"
    if not facts.is_mariadb:
        raise PromoteError(f"{where} is not MariaDB ({facts.version}): promotion sets MariaDB GTID state")
    state = _state(req.target)
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
        return PromoteReport(recorded, already=True)
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
        _set_state(req.target, where, timeline)
    except _NothingChanged as exc:
        req.catalog.store.delete([key])  # the server is as it was: no timeline began
        raise PromoteError(str(exc)) from exc.__cause__
    log.info("promoted %s: %s", where, timeline.describe())
    return PromoteReport(timeline)


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


def _set_state(target: MySQLTarget, where: str, timeline: Timeline) -> None:
    import MySQLdb

    steps = [
        ("RESET MASTER", None),
        ("SET GLOBAL gtid_binlog_state = %s", (timeline.binlog_state,)),
        ("SET GLOBAL gtid_slave_pos = %s", (timeline.start_gtid,)),
    ]
    conn = connect(target)
    done: list[str] = []
    try:
        cur = conn.cursor()
        for sql, args in steps:
            cur.execute(sql, args)
            done.append(sql.split(" =")[0])
            crash_point("promote.after_reset_master")
        cur.execute("SELECT @@gtid_binlog_state, @@gtid_slave_pos")
        have_state, have_slave = (str(v or "") for v in cur.fetchone())
    except MySQLdb.Error as exc:
        if not done:
            raise _NothingChanged(
                f"{where}: RESET MASTER failed: {exc}; nothing was changed (the account needs the RELOAD and "
                "BINLOG ADMIN privileges, or SUPER)"
            ) from exc
        raise PromoteError(
            f"{where} is HALF-PROMOTED: done {', '.join(done)}, then {exc}; keep writes away "
            "and run promote again (it repeats every step)"
        ) from exc
    finally:
        conn.close()
    if _binlog_state(have_state) != _binlog_state(timeline.binlog_state) or have_slave != timeline.start_gtid:
        raise PromoteError(
            f"{where} is HALF-PROMOTED: gtid_binlog_state is {have_state!r} and gtid_slave_pos {have_slave!r}, "
            f"expected {timeline.binlog_state!r} and {timeline.start_gtid!r}; keep writes away and run promote again"
        )
