"""Lookups every storage-backed operator does the same way: the host's catalog, the private key."""

from __future__ import annotations

from typing import Any

from ..core.catalog.backups import Catalog


def host_catalog(op: Any) -> Catalog:
    """The catalog of `op.cluster/op.host` in the operator's bucket (or local_path) under `op.prefix`."""
    from ..hooks.storage import BackupStorageHook

    store = BackupStorageHook(op.aws_conn_id, op.bucket, getattr(op, "local_path", None))
    return store.get_catalog(op.prefix, op.cluster, op.host)


def private_key(gpg_conn_id: str | None) -> tuple[str | None, str | None]:
    """(armored private key, passphrase) from a gpg_keys connection; (None, None) without one."""
    from ..hooks.gpg import GpgKeysHook

    return GpgKeysHook(gpg_conn_id).private_key() if gpg_conn_id else (None, None)


def skip_unless_branch_chose(op: Any, context: Any) -> None:
    """Skip `op` when an upstream @task.branch of the same map index did not choose it.

    Inside a mapped task group Airflow 3.3 does not skip the branch not taken: its
    NotPreviouslySkippedDep reads the branch's decision at map index -1, while a task in a mapped
    group wrote it at its own index. This reads it at the right index.
    """
    from airflow.sdk.exceptions import AirflowSkipException

    ti = context["ti"]
    if ti.map_index < 0:
        return  # not mapped: Airflow's own dependency already skipped us if needed
    for task_id in op.upstream_task_ids:
        decision = ti.xcom_pull(task_ids=task_id, key="skipmixin_key", map_indexes=ti.map_index)
        if isinstance(decision, dict) and op.task_id not in decision.get("followed", [op.task_id]):
            raise AirflowSkipException(f"{task_id} chose {decision['followed']}, not {op.task_id}")
