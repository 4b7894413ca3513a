"""The backup DAG's branch: full or incremental, from the host's catalog and its server."""

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
    storage: dict[str, Any],
    policy: dict[str, Any],
    requested: str = "auto",
) -> dict[str, Any]:
    """Return {"kind", "reason", "parent_id"}; `requested` full/incremental overrides the policy.

    `storage`: bucket or local_path, prefix, aws_conn_id; `policy`: full_every_days,
    max_chain_length, max_incremental_ratio (the backup operator's arguments of the same names)."""
    from ..core.backup.decide import ChainPolicy, decide
    from ..core.db.server import server_facts
    from ..hooks.storage import BackupStorageHook
    from ..hooks.xtrabackup import XtraBackupHook

    if requested in ("full", "incremental"):
        return {"kind": requested, "reason": f"{requested} requested by the run's params", "parent_id": None}
    hook = BackupStorageHook(storage["aws_conn_id"], storage.get("bucket"), storage.get("local_path"))
    catalog = hook.get_catalog(storage["prefix"], cluster, host)
    problems: list[str] = []
    manifests = catalog.manifests(problems)
    for problem in problems:
        log.warning("ignoring unreadable manifest: %s", problem)
    facts = server_facts(XtraBackupHook(mysql_conn_id).get_target())
    chain = ChainPolicy(
        timedelta(days=policy["full_every_days"]), policy["max_chain_length"], policy["max_incremental_ratio"]
    )
    decision = decide(manifests, chain, datetime.now(UTC), server_uuid=facts.server_uuid)
    log.info("%s/%s: %s backup because %s", cluster, host, decision.kind, decision.reason)
    return {"kind": decision.kind, "reason": decision.reason, "parent_id": decision.parent_id}
