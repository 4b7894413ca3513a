"""The Glacier steps of the restore-test DAG: is the chain archived, request its restore, wait."""

from __future__ import annotations

from typing import Any

from ..core.config.schema import StorageConfig
from ..operators.glacier import GlacierRestoreRequestOperator
from ..sensors.glacier import GlacierRestoreSensor


def chain_needs_restore(
    *,
    cluster: str,
    host: str,
    bucket: str,
    backup_id: str | None = "latest",
    prefix: str = "backups",
    aws_conn_id: str = "aws_default",
) -> bool:
    """For a DAG branch: does restoring `backup_id` (or the newest) read archived objects?"""
    from ..core.restore.archived import chain_states
    from ..core.storage.glacier import waiting
    from ..hooks.storage import BackupStorageHook

    catalog = BackupStorageHook(aws_conn_id, bucket=bucket).get_catalog(prefix, cluster, host)
    states = chain_states(catalog, None if backup_id in (None, "", "latest") else backup_id)
    return bool(waiting(states))


def glacier_tasks(cluster: str, storage: StorageConfig) -> tuple[Any, list[Any]]:
    """check_archive -> request_glacier_restore -> wait_glacier_restore (deferrable), or
    chain_readable when nothing of the chain is archived. Returns (first task, last tasks)."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import task

    assert storage.bucket is not None
    where: dict[str, Any] = dict(
        cluster=cluster,
        host="{{ ti.xcom_pull(task_ids='pick_host') }}",
        backup_id="{{ params.backup_id }}",
        bucket=storage.bucket,
        prefix=storage.prefix,
        aws_conn_id=storage.aws_conn_id,
    )

    @task.branch
    def check_archive(**context: Any) -> str:
        archived = chain_needs_restore(
            cluster=cluster,
            host=context["ti"].xcom_pull(task_ids="pick_host"),
            backup_id=context["params"]["backup_id"],
            bucket=str(storage.bucket),
            prefix=storage.prefix,
            aws_conn_id=storage.aws_conn_id,
        )
        return "request_glacier_restore" if archived else "chain_readable"

    request = GlacierRestoreRequestOperator(
        task_id="request_glacier_restore",
        tier=storage.glacier_restore_tier,
        days=storage.glacier_restore_days,
        **where,
    )
    wait = GlacierRestoreSensor(
        task_id="wait_glacier_restore", poke_interval=storage.glacier_poll_seconds, deferrable=True, **where
    )
    readable = EmptyOperator(task_id="chain_readable")
    check = check_archive()
    check >> [request, readable]
    request >> wait
    return check, [wait, readable]
