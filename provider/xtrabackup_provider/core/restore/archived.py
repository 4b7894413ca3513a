"""Which objects of a backup chain are archived (GLACIER / DEEP_ARCHIVE) and in what restore state."""

from __future__ import annotations

from ..catalog.backups import Catalog
from ..catalog.manifest import Manifest
from ..storage.glacier import ObjectState, key_states


def chain_keys(chain: list[Manifest]) -> list[str]:
    return [key for m in chain for obj in m.objects for key in obj.keys]


def chain_states(catalog: Catalog, backup_id: str | None) -> list[ObjectState]:
    """The state of every object the restore of `backup_id` (None: the newest) will read."""
    chain = catalog.chain(backup_id) if backup_id else catalog.latest_chain()
    return key_states(catalog.store, chain_keys(chain))
