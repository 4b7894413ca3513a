"""TableChecksumOperator: pt-table-checksum against a source, compared on its replicas."""

from __future__ import annotations

__all__ = ["TableChecksumOperator"]

import logging
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from ..arguments import KeptArguments, keep_arguments

log = logging.getLogger(__name__)


class TableChecksumOperator(KeptArguments, BaseOperator):
    """Run pt-table-checksum on the source `source_conn_id` with `--replicate`.

    Replicas are found through a dsn table the operator writes on the source from
    `replica_conn_ids` (host/port of each `mysql` connection) and `replica_dsns`, or by
    `recursion_method` processlist/hosts. Credentials reach the tool (and, through it, the
    replicas) only in a 0600 defaults file. Fails when the results cannot be trusted (no
    replica found, replication stopped, table errors) and, with `fail_on_diff`, on differences.
    XCom: a small summary (counts, flags, differing tables).
    """

    template_fields: Sequence[str] = (
        "source_conn_id",
        "replica_conn_ids",
        "replicate",
        "databases",
        "ignore_databases",
    )
    ui_color = "#e8daef"

    def __init__(
        self,
        *,
        source_conn_id: str,
        replica_conn_ids: list[str] | None = None,
        replica_dsns: list[str] | None = None,
        replicate: str = "percona.checksums",
        recursion_method: str = "dsn",
        dsn_table: str = "percona.dsns",
        databases: list[str] | None = None,
        ignore_databases: list[str] | None = None,
        ignore_tables: list[str] | None = None,
        chunk_time: float = 0.5,
        max_lag_seconds: float = 1.0,
        timeout_minutes: float = 240,
        binary: str = "pt-table-checksum",
        fail_on_diff: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())
        self.replica_conn_ids = replica_conn_ids or []
        self.replica_dsns = replica_dsns or []
        self.databases = databases or []
        self.ignore_databases = ignore_databases or []
        self.ignore_tables = ignore_tables or []

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.providers.common.compat.sdk import AirflowFailException

        from ..core.db.checksum import ConsistencyError, checksum_options, replica_dsn, run_checksum
        from ..hooks.xtrabackup import XtraBackupHook

        # Host and port of each replica's connection (its unix socket is of no use on the source).
        dsns = [
            *self.replica_dsns,
            *(replica_dsn(XtraBackupHook(c).get_target()) for c in self.replica_conn_ids),
        ]
        options = checksum_options(self, dsns)
        run = run_checksum(XtraBackupHook(self.source_conn_id).get_target(), options)
        for table in run.tables:
            log.info(
                "%s: %d rows in %d chunks, %d differing chunk(s), %d skipped",
                table.table,
                table.rows,
                table.chunks,
                table.diffs,
                table.skipped,
            )
        for warning in run.warnings:
            log.warning(warning)
        summary = run.summary()
        if not run.ok:  # keep the facts visible in the UI although the task fails
            context["ti"].xcom_push(key="checksum", value=summary)
        if run.problems:
            raise ConsistencyError("pt-table-checksum results cannot be trusted: " + "; ".join(run.problems))
        if run.differing and self.fail_on_diff:
            names = ", ".join(summary["differing_tables"])
            raise AirflowFailException(
                f"pt-table-checksum found differences between the source and a replica in "
                f"{summary['differing_count']} table(s): {names}"
            )
        return summary
