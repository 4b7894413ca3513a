"""Chain rules, from manifests alone: a root full, then each incremental continuing its parent's
LSN on the same server and engine series.
"""

from __future__ import annotations

from .manifest import CatalogError, Manifest


def first_missing_link(by_id: dict[str, Manifest], backup_id: str) -> str | None:
    """The first id on the way from backup_id to its root that has no readable manifest."""
    current: str | None = backup_id
    for _ in range(len(by_id) + 1):
        if current is None or current not in by_id:
            return current
        current = by_id[current].parent_id
    return None


def resolve_chain(by_id: dict[str, Manifest], backup_id: str, where: str = "") -> list[Manifest]:
    if backup_id not in by_id:
        raise CatalogError(f"backup {backup_id} has no manifest in {where or 'the catalog'}")
    chain = [by_id[backup_id]]
    while chain[-1].parent_id:
        child = chain[-1]
        parent = by_id.get(child.parent_id or "")
        if parent is None:
            raise CatalogError(
                f"broken chain in {where or 'the catalog'}: {child.backup_id} needs its parent {child.parent_id}, "
                f"which has no manifest (missing link {child.parent_id} -> {child.backup_id}); "
                "restore an older backup or take a new full"
            )
        if len(chain) > 10_000:
            raise CatalogError(f"chain of {backup_id} loops or exceeds 10,000 links")
        chain.append(parent)
    chain.reverse()
    validate_chain(chain)
    return chain


def validate_chain(chain: list[Manifest]) -> None:
    """Root is a full with from_lsn 0; each link continues its parent's LSN on the same server/engine."""
    root = chain[0]
    if root.kind != "full" or root.from_lsn != 0:
        raise CatalogError(f"chain root {root.backup_id} is not a full backup with from_lsn 0")
    for parent, child in zip(chain, chain[1:], strict=False):
        link = f"{parent.backup_id} -> {child.backup_id}"
        if child.parent_id != parent.backup_id:
            raise CatalogError(f"link {link}: child names parent {child.parent_id}")
        if child.from_lsn != parent.to_lsn:
            raise CatalogError(
                f"LSN gap in link {link}: child starts at from_lsn {child.from_lsn}, parent ends at to_lsn {parent.to_lsn}"
            )
        if child.server_uuid != parent.server_uuid:
            raise CatalogError(
                f"link {link}: backups of different servers ({parent.server_uuid} vs {child.server_uuid})"
            )
        if (child.engine_flavour, child.engine_major) != (parent.engine_flavour, parent.engine_major):
            raise CatalogError(
                f"link {link}: engine changed from {parent.engine_flavour} {parent.engine_major} "
                f"to {child.engine_flavour} {child.engine_major}; take a new full"
            )
        if child.chain_root != root.backup_id:
            raise CatalogError(
                f"link {link}: child records chain root {child.chain_root}, expected {root.backup_id}"
            )
