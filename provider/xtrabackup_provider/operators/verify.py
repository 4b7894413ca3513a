"""VerifyBackupOperator: check stored backups without restoring them."""

from __future__ import annotations

__all__ = ["VerifyBackupOperator", "BackupVerifyFailed"]

from collections.abc import Sequence
from typing import Any

from .base import BackupStorageOperator, storage_template_fields


class BackupVerifyFailed(RuntimeError):
    """At least one backup failed verification; the message lists every problem found."""


class VerifyBackupOperator(BackupStorageOperator):
    """Verify stored backups without restoring them; fails if any backup has a problem.

    mode quick: every object exists with the manifest's size, a known storage class, and the
    SSE / Object Lock recorded. mode deep: also stream every object (sha256, gpg, zstd, xbstream
    framing) to nowhere; encrypted backups need the private key (`gpg_conn_id`).
    `backup_id`: "all" (default), "latest" or an id. XCom: one small report per backup.
    """

    template_fields: Sequence[str] = storage_template_fields("backup_id", "mode")

    def __init__(self, *, backup_id: str = "all", mode: str = "quick", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.backup_id = backup_id
        self.mode = mode

    def execute(self, context: Any) -> list[dict[str, Any]]:
        from ..core.restore.verify import VerifyRequest, selected_ids, verify

        if self.mode not in ("quick", "deep"):
            raise ValueError(f"mode must be quick or deep, not {self.mode!r}")
        catalog = self.catalog()
        key, passphrase = self.private_key() if self.mode == "deep" else (None, None)
        ids = selected_ids(catalog, self.backup_id)
        reports = verify(VerifyRequest(catalog, ids, self.mode, key, passphrase))  # type: ignore[arg-type]
        bad = [r for r in reports if not r.ok]
        if bad:
            raise BackupVerifyFailed(
                f"{len(bad)} of {len(reports)} backup(s) of {self.cluster}/{self.host} failed {self.mode} verify: "
                + " | ".join(f"{r.backup_id}: {'; '.join(r.problems)}" for r in bad)
            )
        return [{k: v for k, v in r.as_dict().items() if k != "objects"} for r in reports]
