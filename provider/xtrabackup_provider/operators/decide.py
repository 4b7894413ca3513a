"""The chain decision for a DAG branch: full or incremental, from the catalog and the server."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

log = logging.getLogger(__name__)


def choose_backup_kind(
    *,
    cluster: str,
    host: str,
    mysql_conn_id: str,
    bucket: str | None = None,
    local_path: str | None = None,
    prefix: str = "backups",
    aws_conn_id: str = "aws_default",
    full_every_days: float = 7,
    max_chain_length: int = 6,
    max_incremental_ratio: float = 0.5,
    requested: str = "auto",
) -> dict[str, Any]:
    """Return {"kind", "reason", "parent_id"}; `requested` full/incremental overrides the policy."""
    from ..core.backup.decide import ChainPolicy, decide
    from ..core.db.server import server_facts
    from ..hooks.storage import BackupStorageHook
    from ..hooks.xtrabackup import XtraBackupHook

    if requested in ("full", "incremental"):
        return {"kind": requested, "reason": f"{requested} requested by the run's params", "parent_id": None}
    catalog = BackupStorageHook(aws_conn_id, bucket, local_path).get_catalog(prefix, cluster, host)
    problems: list[str] = []
    manifests = catalog.manifests(problems)
    for problem in problems:
        log.warning("ignoring unreadable manifest: %s", problem)
    facts = server_facts(XtraBackupHook(mysql_conn_id).get_target())
    policy = ChainPolicy(timedelta(days=full_every_days), max_chain_length, max_incremental_ratio)
    decision = decide(manifests, policy, datetime.now(UTC), server_uuid=facts.server_uuid)
    log.info("%s/%s: %s backup because %s", cluster, host, decision.kind, decision.reason)
    return {"kind": decision.kind, "reason": decision.reason, "parent_id": decision.parent_id}
