"""Full or incremental? A pure decision from the host's catalog, the policy and the clock."""

from __future__ import annotations

__all__ = ["decide"]

from dataclasses import dataclass
from datetime import datetime, timedelta

from ..catalog.chain import resolve_chain
from ..catalog.manifest import CatalogError, Manifest
from ..engine.tools import takes_incrementals


@dataclass(frozen=True)
class ChainPolicy:
    full_every: timedelta = timedelta(days=7)
    max_chain_length: int = 6  # incrementals after the full
    max_incremental_ratio: float = 0.5  # last incremental's stored size / the full's


@dataclass(frozen=True)
class Decision:
    kind: str  # "full" | "incremental"
    reason: str
    parent: Manifest | None = None
    # A full chosen by policy (age, length, size) on a chain that validates: what a forced
    # incremental may continue. None when the chain cannot take one (invalid, other server or tool).
    continuable: Manifest | None = None

    @property
    def parent_id(self) -> str | None:
        return self.parent.backup_id if self.parent else None


def decide(
    manifests: list[Manifest],
    policy: ChainPolicy,
    now: datetime,
    server_uuid: str | None = None,
    engine: tuple[str, str] | None = None,
) -> Decision:
    """Pick the next backup's kind. `manifests` are the host's readable manifests, any order."""
    if engine and not takes_incrementals(engine[0]):
        return Decision("full", f"the {engine[0]} engine takes full backups only")
    if not manifests:
        return Decision("full", "no backup of this host yet")
    newest = max(manifests, key=lambda m: m.backup_id)
    try:
        chain = resolve_chain({m.backup_id: m for m in manifests}, newest.backup_id)
    except CatalogError as exc:
        return Decision("full", f"the newest chain is not valid ({exc})")
    full, last = chain[0], chain[-1]
    if server_uuid and last.server_uuid != server_uuid:
        return Decision(
            "full", f"the server changed since {last.backup_id} ({last.server_uuid} -> {server_uuid})"
        )
    if engine and (last.engine_flavour, last.engine_major) != engine:
        return Decision("full", f"the backup tool changed to {engine[0]} {engine[1]}")
    age = now - full.started_at
    if age >= policy.full_every:
        return Decision(
            "full",
            f"the chain's full {full.backup_id} is {_days(age)} old (full_every {_days(policy.full_every)})",
            continuable=last,
        )
    incrementals = len(chain) - 1
    if incrementals >= policy.max_chain_length:
        return Decision(
            "full",
            f"the chain has {incrementals} incrementals (max_chain_length {policy.max_chain_length})",
            continuable=last,
        )
    if incrementals and full.stored_bytes:
        ratio = last.stored_bytes / full.stored_bytes
        if ratio > policy.max_incremental_ratio:
            return Decision(
                "full",
                f"the last incremental was {ratio:.0%} of the full's size "
                f"(max_incremental_ratio {policy.max_incremental_ratio:.0%})",
                continuable=last,
            )
    return Decision("incremental", f"continuing chain {full.backup_id} after {last.backup_id}", parent=last)


def _days(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 86400:.1f}d"
