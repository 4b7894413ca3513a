"""ApplyRetentionOperator: plan retention for one host, log the plan as a table, delete if confirmed."""

from __future__ import annotations

__all__ = ["ApplyRetentionOperator"]

import logging
from typing import Any

from .base import BackupStorageOperator

log = logging.getLogger(__name__)


class ApplyRetentionOperator(BackupStorageOperator):
    """Keep or delete every backup and leftover object of `cluster/host` by `policy` (the keys of
    the fleet config's `retention:` section, see core/retention/plan.py); binlogs are not handed in yet.

    Dry run until `confirm=True`: the plan is logged and nothing is deleted. When confirmed,
    manifests are deleted before the data they name (core/retention/apply.py). Returns small
    metadata for XCom: counts, bytes, and the first deleted names. A backup started elsewhere (or
    another retention run) holding the host's lock skips it, naming the holder: nothing is deleted,
    and the next backup run applies it.
    """

    ui_color = "#fdebd0"

    def __init__(
        self,
        *,
        policy: dict[str, Any] | None = None,
        confirm: bool = False,
        max_table_rows: int = 500,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.policy = policy or {}
        self.confirm = confirm
        self.max_table_rows = max_table_rows

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.providers.common.compat.sdk import AirflowSkipException

        from ..core.catalog.lock import HostLockBusy
        from ..core.retention.apply import apply_plan, plan_host
        from ..core.retention.model import parse_policy, plan_table

        policy = parse_policy(self.policy, f"{self.task_id} ({self.cluster}/{self.host})")
        catalog = self.catalog()
        plan = plan_host(catalog, policy)
        for problem in plan.problems:
            log.warning("unreadable manifest (its backup is kept): %s", problem)
        mode = "deleting" if self.confirm else "DRY RUN (set retention.confirm: true to delete)"
        log.info(
            "retention of %s/%s, %s:\n%s",
            self.cluster,
            self.host,
            mode,
            plan_table(plan, self.max_table_rows),
        )
        try:
            return apply_plan(catalog, plan, confirm=bool(self.confirm)).summary()
        except HostLockBusy as exc:
            # A backup started elsewhere (or another retention run) holds the lock. The next backup
            # run applies retention again; retrying here would hold this run, and with it (one run
            # at a time) the host's next backups.
            raise AirflowSkipException(f"{exc}; the next backup run of the host applies it") from exc
