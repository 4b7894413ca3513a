"""Which server a host is, and the proof that a run reached that server and no other.

A host's catalog knows the servers it has had: the server_uuid of each backup, of each promoted
timeline, and of each directory of shipped binlogs. Before a backup or a shipping run reads a
byte, the server its connection reached must be one of them (a host with no backup, timeline or
binlog yet takes the first one it sees), its @@datadir must be the datadir the host's config
names, and its socket or port must be the one the connection used. A server the catalog does not
know is refused, naming both sides: a connection steered elsewhere (an option file, a moved
socket, a wrong port) and a rebuilt server look alike from here; only the DBA can tell them
apart, and `--new-server` (operators: `accept_new_server`) takes the server as the host's from
then on.

`checked_copy()` is the after-the-fact half for a backup: the GTID position the tool recorded
must lie between the server's position before and after the stream (MySQL: GTID sets, before <=
copy <= after), so the data copied is that server's (the tool's own datadir check, a warning in its log, is made an error by the caller).
The identity that was checked goes into the manifest (`extra.server_identity`) and the task log.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from typing import Any

from ..catalog.backups import Catalog
from ..catalog.manifest import Manifest
from ..common.values import GtidSet, parse_gtid_pos
from ..db.server import MySQLTarget, ServerFacts
from .catalog import server_uuids
from .timeline import timelines

log = logging.getLogger(__name__)

NEW_SERVER_HINT = "--new-server (operator: accept_new_server=True)"


class IdentityError(RuntimeError):
    """The server reached is not the host's configured server; the message names both."""


@dataclass(frozen=True)
class ServerIdentity:
    """What was checked about the server a run reached, and why it is the host's."""

    server_uuid: str
    server_id: int
    datadir: str
    version: str
    port: int
    socket: str
    basis: str  # why it is the host's server: "backup <id>", "timeline", "first run of the host", ...

    @classmethod
    def of(cls, facts: ServerFacts, basis: str) -> ServerIdentity:
        datadir = tool_datadir(facts.datadir)
        return cls(
            facts.server_uuid, facts.server_id, datadir, facts.version, facts.port, facts.socket, basis
        )

    def record(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return (
            f"server {self.server_uuid} (server_id {self.server_id}, datadir {self.datadir}, port {self.port}, "
            f"version {self.version})"
        )


def tool_datadir(datadir: str) -> str:
    """The server's @@datadir as the tools are given it: without the trailing slash."""
    return datadir.rstrip("/") or "/"


def known_servers(
    catalog: Catalog, manifests: list[Manifest] | None = None, wanted: str = ""
) -> dict[str, str]:
    """server_uuid -> why the host's catalog knows it (shipped binlogs, a promotion, its newest
    backup). Without `manifests`, the host's readable manifests are read, unless `wanted` is
    already known from the binlogs and timelines (a shipping run every few minutes)."""
    known: dict[str, str] = {}
    for uuid in server_uuids(catalog):
        known[uuid] = "its shipped binlogs"
    for record in timelines(catalog):
        known[record.server_uuid] = f"promoted from {record.parent_server_uuid}"
    if manifests is None and wanted in known:
        return known
    for m in sorted(
        manifests if manifests is not None else catalog.manifests(problems=[]), key=lambda m: m.backup_id
    ):
        known[m.server_uuid] = f"backup {m.backup_id}"
    return known


def check_server(
    catalog: Catalog,
    facts: ServerFacts,
    target: MySQLTarget,
    *,
    manifests: list[Manifest] | None = None,
    datadir: str | None = None,
    accept_new: bool = False,
    check_port: bool = False,
) -> ServerIdentity:
    """The identity of the server `target` reached, once it proved to be the host's (IdentityError
    naming both sides otherwise). `datadir`: the host's configured datadir; `check_port`: compare
    @@port with a TCP connection's port (a backup, which runs on the database host)."""
    where = f"host {catalog.cluster}/{catalog.host}"
    reached = ServerIdentity.of(facts, "")
    if datadir and os.path.realpath(datadir) != os.path.realpath(facts.datadir):
        raise IdentityError(
            f"{where}: the config names datadir {datadir}, but the server reached at {target.address} runs on "
            f"{facts.datadir} ({reached.describe()}); fix the host's connection or its `datadir`"
        )
    _check_address(where, target, facts, reached, check_port)
    known = known_servers(catalog, manifests, facts.server_uuid)
    if facts.server_uuid in known:
        basis = known[facts.server_uuid]
    elif not known:
        basis = "the first run of the host"
    elif accept_new:
        basis = "accepted as the host's new server (--new-server)"
        log.warning("%s: %s is taken as the host's server from now on", where, reached.describe())
    else:
        names = ", ".join(f"{uuid} ({why})" for uuid, why in list(known.items())[-3:])
        raise IdentityError(
            f"{where}: the server reached at {target.address} is {reached.describe()}, which this host's catalog "
            f"does not know (it knows {names}): the connection went elsewhere (an option file, a moved socket, "
            f"another port) or the host's server was rebuilt. Fix the connection; if {catalog.host} really is a "
            f"new server, run once with {NEW_SERVER_HINT}"
        )
    return ServerIdentity.of(facts, basis)


def _check_address(
    where: str, target: MySQLTarget, facts: ServerFacts, reached: ServerIdentity, check_port: bool
) -> None:
    """The server listens where the connection went: the socket (the same file), or the TCP port."""
    if target.socket:
        seen = os.path.exists(target.socket) and os.path.exists(facts.socket)  # (a container's may not be)
        if seen and not os.path.samefile(target.socket, facts.socket):
            raise IdentityError(
                f"{where}: the connection used socket {target.socket}, but the server reached listens on "
                f"{facts.socket} ({reached.describe()}); fix the host's `socket`"
            )
    elif check_port and target.host and target.host != "localhost" and target.port != facts.port:
        raise IdentityError(
            f"{where}: the connection went to {target.host}:{target.port}, but the server reached listens on "
            f"port {facts.port} ({reached.describe()}); with a proxy or a port mapping in between, back it up "
            "through the server's `socket`"
        )


def checked_copy(copied_gtid: str | None, before: ServerFacts, after_gtid: str) -> str | None:
    """Why the GTID position a backup tool recorded is not the checked server's (None: it is). A
    MariaDB tool records @@gtid_current_pos at its copy's moment, which lies between the server's
    position before and after the stream: per domain, a sequence in between, and the same server_id
    where it equals an end (a domain without writes meanwhile keeps its exact GTID). A MySQL copy's
    GTID set holds everything the server had executed before and nothing it had not after."""
    if not copied_gtid:
        return None
    if not before.is_mariadb:
        return _checked_mysql_copy(copied_gtid, before.gtid_current, after_gtid)
    try:
        low, got, high = (parse_gtid_pos(t) for t in (before.gtid_current, copied_gtid, after_gtid))
    except ValueError as exc:
        return str(exc)
    for domain in sorted(set(low) | set(got) | set(high)):
        lo, mid, hi = low.get(domain), got.get(domain), high.get(domain)
        if mid is None:
            if lo is not None:
                return f"the copy has no GTID in domain {domain}, the server had {lo} before it"
            continue
        if hi is None or (lo is not None and not lo.seq <= mid.seq <= hi.seq):
            return f"the copy's GTID {mid} is not between the server's {lo or '-'} before and {hi or '-'} after it"
        if (lo is not None and mid.seq == lo.seq and mid != lo) or (mid.seq == hi.seq and mid != hi):
            return f"the copy's GTID {mid} is another server's than the server's {lo or hi}"
    return None


def _checked_mysql_copy(copied: str, before: str, after: str) -> str | None:
    try:
        low, got, high = (GtidSet.parse(t, "GTID set") for t in (before, copied, after))
    except ValueError as exc:
        return str(exc)
    if not low <= got:
        return f"the copy's GTID set {got} lacks {low - got}, which the server had executed before it"
    if not got <= high:
        return f"the copy's GTID set {got} holds {got - high}, which the server had not executed after it"
    return None
