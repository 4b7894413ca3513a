"""BackupCheckOperator: `xtrabackup-provider check` as a task: fails when a host is critical, so
Airflow's own alerting (on_failure_callback, email, Slack) fires; sends every figure as a metric."""

from __future__ import annotations

__all__ = ["BackupCheckOperator"]

import logging
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from ..arguments import KeptArguments, keep_arguments
from . import _metrics

log = logging.getLogger(__name__)


class BackupCheckOperator(KeptArguments, BaseOperator):
    """Check every host of `cluster` (core/report/check.py): the newest restorable backup against
    `check["rpo_hours"]`, restore tests, binlog lag and gaps (`binlogs=True` when the cluster ships
    them), and the copies on the further targets.

    `targets`: every storage target, the first one first, as dicts with `name`, `bucket` or
    `local_path`, `prefix` and `aws_conn_id`. `check`: the cluster's `check:` settings. The task
    fails when a host is critical (a warning is logged, and fails it too with
    `fail_on_warning=True`). XCom: one dict per host (status, findings, figures).
    """

    template_fields: Sequence[str] = ("cluster",)
    ui_color = "#fadbd8"

    def __init__(
        self,
        *,
        cluster: str,
        hosts: list[str],
        targets: list[dict[str, Any]],
        check: dict[str, Any] | None = None,
        binlogs: bool = False,
        fail_on_warning: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def execute(self, context: Any) -> list[dict[str, Any]]:
        from datetime import UTC, datetime

        from airflow.providers.common.compat.sdk import AirflowFailException

        from ..core.catalog.backups import Catalog
        from ..core.config.schema import CheckConfig
        from ..core.report.check import check_host
        from ..hooks.storage import BackupStorageHook

        settings = CheckConfig.model_validate(self.check or {})
        stores = [
            (
                t["name"],
                BackupStorageHook(
                    t.get("aws_conn_id", "aws_default"), t.get("bucket"), t.get("local_path")
                ).get_store(),
                t.get("prefix", "backups"),
            )
            for t in self.targets
        ]
        now = datetime.now(UTC)
        checks = []
        for host in self.hosts:
            catalogs = [(name, Catalog(store, prefix, self.cluster, host)) for name, store, prefix in stores]
            result = check_host(catalogs, settings, self.binlogs, now, self.cluster)
            (
                log.error
                if result.status == "critical"
                else log.warning
                if result.status == "warning"
                else log.info
            )("%s", result.line())
            _metrics.check_done(result)
            checks.append(result)
        bad = [
            c for c in checks if c.status == "critical" or (self.fail_on_warning and c.status == "warning")
        ]
        if bad:
            raise AirflowFailException(" | ".join(c.line() for c in bad))
        return [c.as_dict() for c in checks]
