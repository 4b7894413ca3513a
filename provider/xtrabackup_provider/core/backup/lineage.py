"""Does the server's data descend from an incremental's parent? A pure decision from the parent's
manifest and what the server says now; any doubt means a full backup.

The checks (each failing one is named):
  - identity: the server's id is the parent's (MySQL's server_uuid changes when a datadir is
    re-seeded without its auto.cnf; MariaDB's hostname-port-server_id usually does not);
  - LSN: the server's current LSN is not below the parent's last_lsn (the parent's data reached
    it; a re-seed or an older self-restore starts lower);
  - GTID: the parent's GTID position is contained in the server's history (MariaDB: every
    domain-server_id of the parent's position at least that far in @@gtid_binlog_state, or in
    @@gtid_current_pos for a server without a binlog; MySQL: GTID_SUBSET(parent, gtid_executed));
  - lineage token: the row the product planted in the data right before the parent backup
    (core/db/heartbeat.py) is still there with the parent's token. It travels with physical
    copies of that data history only, so it catches a re-seed whose LSN and GTIDs happen to be
    higher (another replica of the same source). Parents without a token (heartbeat off, or an
    account that may not write unlogged, or MySQL under super_read_only) skip this check.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..catalog.manifest import Manifest
from ..db.server import DataPosition


@dataclass(frozen=True)
class ServerLineage:
    server_uuid: str
    position: DataPosition
    token: str | None  # the token the server holds for the parent's backup id (None: no row)
    is_mariadb: bool = True


def _gtids(pos: str | None) -> list[tuple[int, int, int]]:
    out = []
    for part in (pos or "").replace("\n", "").split(","):
        fields = part.strip().split("-")
        if len(fields) == 3 and all(f.isdigit() for f in fields):
            out.append((int(fields[0]), int(fields[1]), int(fields[2])))
    return out


def mariadb_contains(parent_gtid: str, state: str, current: str) -> bool:
    """Every GTID of the parent's position is within the server's binlog state (or, for a server
    without a binlog, its current position) in the same domain."""
    have = _gtids(state)
    now = {d: n for d, _s, n in _gtids(current)}
    for domain, server, seq in _gtids(parent_gtid):
        if any(d == domain and s == server and n >= seq for d, s, n in have):
            continue
        if not have and now.get(domain, -1) >= seq:
            continue
        return False
    return True


def lineage_problems(parent: Manifest, server: ServerLineage) -> list[str]:
    """Why the server's data does not descend from `parent` (empty: it does, as far as we can tell)."""
    problems = []
    pos = server.position
    if parent.server_uuid != server.server_uuid:
        problems.append(f"it is server {server.server_uuid}, the parent was taken on {parent.server_uuid}")
    if pos.lsn is not None and pos.lsn < parent.last_lsn:
        problems.append(f"its LSN {pos.lsn} is below the parent's last_lsn {parent.last_lsn}")
    if parent.gtid:
        contained = (
            mariadb_contains(parent.gtid, pos.gtid, pos.gtid_current) if server.is_mariadb else pos.contains
        )
        if contained is False:
            problems.append(
                f"its GTID history {pos.gtid or '(empty)'} does not contain the parent's {parent.gtid}"
            )
    wanted = parent.extra.get("lineage_token")
    if wanted and server.token != wanted:
        problems.append(
            f"its lineage row for {parent.backup_id} is missing (re-seeded, or restored from another backup?)"
            if server.token is None
            else f"its lineage row for {parent.backup_id} holds another token"
        )
    return problems


def describe_break(parent: Manifest, server: ServerLineage, problems: list[str]) -> str:
    """One sentence naming both identities: the parent's and the server's."""
    token = parent.extra.get("lineage_token")
    pos = server.position
    return (
        f"this server's data does not descend from {parent.backup_id} ({'; '.join(problems)}). "
        f"parent {parent.backup_id}: {parent.server_uuid}, last_lsn {parent.last_lsn}, GTID {parent.gtid or '-'}, "
        f"lineage token {token[:8] + '...' if token else '-'}; "
        f"this server: {server.server_uuid}, LSN {pos.lsn if pos.lsn is not None else 'unknown'}, "
        f"GTID {pos.gtid or '-'}, lineage token {server.token[:8] + '...' if server.token else 'missing'}"
    )
