"""GlacierRestoreRequestOperator: ask S3 to make a chain's archived objects readable again."""

from __future__ import annotations

__all__ = ["GlacierRestoreRequestOperator"]

from collections.abc import Sequence
from typing import Any

from ..arguments import keep_arguments
from .base import BackupStorageOperator, storage_template_fields


class GlacierRestoreRequestOperator(BackupStorageOperator):
    """Request the restore of every archived object of a backup's chain (`tier` Standard, Bulk or
    Expedited; readable for `days`). Objects already readable or being restored are left alone.
    XCom: {"requested": n, "states": [...]}; wait with GlacierRestoreSensor."""

    template_fields: Sequence[str] = storage_template_fields("backup_id", "tier")

    def __init__(
        self,
        *,
        bucket: str,  # archive tiers exist in S3 only
        backup_id: str | None = "latest",
        tier: str = "Standard",
        days: int = 3,
        **kwargs: Any,
    ) -> None:
        super().__init__(bucket=bucket, **kwargs)
        keep_arguments(self, locals(), passed_on=("bucket",))

    def execute(self, context: Any) -> dict[str, Any]:
        from ..core.restore.archived import chain_states
        from ..core.storage.glacier import request_restores

        catalog = self.catalog()
        before = chain_states(catalog, None if self.backup_id in (None, "", "latest") else self.backup_id)
        after = request_restores(catalog.store, before, self.tier, int(self.days))
        requested = sum(1 for s in before if s.state == "archived")
        self.log.info("requested %d restore(s) (%s tier): %s", requested, self.tier, [s.row() for s in after])
        return {"requested": requested, "states": [s.row() for s in after]}
