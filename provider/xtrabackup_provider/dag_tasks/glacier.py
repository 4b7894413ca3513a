"""The Glacier steps of the restore-test DAG: is the chain archived, request its restore, wait.

Whether the chain is archived is read where the restore test will read it: the first storage
target, or the first copy that can be read when it cannot (or the `target_store` chosen). The
request and the wait work on the first target; a chain archived on a copy that the run reads
instead fails here, naming the command that requests its restore there."""

from __future__ import annotations

from typing import Any

from ..core.config.schema import FleetConfig
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
    storage_name: str = "primary",
    fallback_targets: list[dict[str, Any]] | None = None,
    target_store: str | None = None,
) -> bool:
    """For a DAG branch: does restoring `backup_id` (or the newest) read archived objects on the
    first target? (See the module doc for the other targets.)"""
    from ..core.catalog.targets import Source, Targets
    from ..core.restore.archived import chain_states
    from ..core.storage.glacier import waiting
    from ..hooks.storage import BackupStorageHook, target_sources

    first = Source(
        storage_name, BackupStorageHook(aws_conn_id, bucket=bucket).get_catalog(prefix, cluster, host)
    )
    targets = Targets(target_sources(first, fallback_targets or [], target_store))
    wanted = None if backup_id in (None, "", "latest") else backup_id
    states = targets.read("the chain's storage classes", lambda catalog: chain_states(catalog, wanted))
    archived = bool(waiting(states))
    if archived and targets.first is not first:
        name = targets.first.name
        raise RuntimeError(
            f"the chain of {cluster}/{host} {backup_id or 'latest'} is archived on storage target {name}, which this "
            f"run reads: request its restore there (xtrabackup-provider glacier-restore --target-store {name} "
            "--wait), then trigger the restore test again"
        )
    return archived


def _chosen(param: str | None) -> str | None:
    """The restore-test DAG's target_store Param: "any" (or none) is every target."""
    return None if param in (None, "", "any") else param


def glacier_tasks(cluster: str, config: FleetConfig) -> tuple[Any, list[Any]]:
    """check_archive -> request_glacier_restore -> wait_glacier_restore (deferrable), or
    chain_readable when nothing of the chain is archived. Returns (first task, last tasks)."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import task

    from .targets import read_targets

    storage = config.storage
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
            target_store=_chosen(context["params"].get("target_store")),
            **read_targets(config),
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
