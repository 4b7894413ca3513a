"""Backups of every configured MySQL/MariaDB host: one DAG per cluster, a branch per host,
then a `retention` task per host (core/retention.py; deletes only with `retention.confirm: true`).

The fleet config (dags/config/fleet.yaml or $XTRABACKUP_FLEET_CONFIG) is validated at parse
time, so a bad file shows as an import error naming the field and the file. Parsing imports
no boto3, zstandard or gnupg: the operators import them when they run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, TaskGroup, task

from xtrabackup_provider.core.config import ClusterConfig, FleetConfig, HostConfig, load_config
from xtrabackup_provider.operators.backup import XtraBackupOperator
from xtrabackup_provider.operators.decide import choose_backup_kind
from xtrabackup_provider.operators.retention import ApplyRetentionOperator
from xtrabackup_provider.sensors.binlog import binlog_gate
from xtrabackup_provider.sensors.checksum import checksum_gate


def _storage_args(config: FleetConfig) -> dict[str, Any]:
    s = config.storage
    return {"bucket": s.bucket, "local_path": s.local_path, "prefix": s.prefix, "aws_conn_id": s.aws_conn_id}


def _backup_pool(config: FleetConfig, cluster: ClusterConfig) -> str | None:
    pool = config.backup_pool(cluster)  # the cluster's pool, else the storage target's
    return pool.name if pool else None


def _policy_args(config: FleetConfig) -> dict[str, Any]:
    p = config.policy
    return {
        "full_every_days": p.full_every_days,
        "max_chain_length": p.max_chain_length,
        "max_incremental_ratio": p.max_incremental_ratio,
    }


def _host_group(config: FleetConfig, cluster: ClusterConfig, host: HostConfig) -> None:
    group_id = host.name.replace(".", "_")
    conn_id = host.mysql_conn_id or f"mysql_{group_id}"
    with TaskGroup(group_id=group_id, tooltip=f"backup of {cluster.name}/{host.name}"):
        gate = checksum_gate(cluster, host, conn_id)  # None unless the host has a checksum_gate

        @task.branch(task_id="choose_kind")
        def choose_kind(**context: Any) -> str:
            decision = choose_backup_kind(
                cluster=cluster.name,
                host=host.name,
                mysql_conn_id=conn_id,
                requested=_requested_kind(context),
                **_storage_args(config),
                **_policy_args(config),
            )
            return f"{group_id}.{'full' if decision['kind'] == 'full' else 'incremental'}_backup"

        common = dict(
            cluster=cluster.name,
            host=host.name,
            mysql_conn_id=conn_id,
            flavour=host.flavour,
            binary=host.binary,
            datadir=host.datadir,
            queue=host.queue,
            pool=_backup_pool(config, cluster),
            gpg_conn_id=config.encryption.gpg_conn_id if config.encryption.enabled else None,
            compression_level=config.policy.compression_level,
            zstd_threads=config.policy.zstd_threads,
            parallel=config.policy.parallel,
            storage_classes=dict(config.storage.storage_class),
            sse=config.storage.sse,
            kms_key_id=config.storage.kms_key_id,
            object_lock_mode=config.storage.object_lock.mode if config.storage.object_lock else None,
            object_lock_days=config.storage.object_lock.retain_days if config.storage.object_lock else None,
            heartbeat=config.policy.heartbeat,
            heartbeat_conn_id=host.heartbeat_conn_id,
            gates_from=[gate.task_id] if gate else [],
            **_storage_args(config),
            **_policy_args(config),
        )
        full = XtraBackupOperator(task_id="full_backup", kind="full", **common)
        incremental = XtraBackupOperator(task_id="incremental_backup", kind="incremental", **common)
        (gate >> choose_kind() if gate else choose_kind()) >> [full, incremental]
        # Opt-in (cluster `binlogs.gate_backups`): the backup counts once its binlogs are stored.
        if shipped := binlog_gate(config, cluster, host, conn_id):
            [full, incremental] >> shipped


def _retention_branch(dag: DAG, config: FleetConfig, cluster: ClusterConfig) -> None:
    """After each host's backup, its retention: a dry run (the plan, logged) unless retention.confirm.

    It runs only when that host's backup succeeded: a failed backup never costs an older one.
    """
    policy = config.retention.model_dump(exclude={"confirm"})
    with TaskGroup(group_id="retention", tooltip="apply the retention policy per host"):
        for host in cluster.hosts:
            group_id = host.name.replace(".", "_")
            apply = ApplyRetentionOperator(
                task_id=group_id,
                cluster=cluster.name,
                host=host.name,
                policy=policy,
                confirm=config.retention.confirm,
                trigger_rule="none_failed_min_one_success",
                pool=config.storage.pool.name if config.storage.pool else None,  # storage API work only
                **_storage_args(config),
            )
            backups = [dag.get_task(f"{group_id}.{kind}_backup") for kind in ("full", "incremental")]
            apply.set_upstream(backups)


def _requested_kind(context: Any) -> str:
    conf = getattr(context.get("dag_run"), "conf", None) or {}
    kind = conf.get("kind", "auto")
    if kind not in ("auto", "full", "incremental"):
        raise ValueError(f"dag_run.conf kind must be auto, full or incremental, not {kind!r}")
    return str(kind)


def build_dag(config: FleetConfig, cluster: ClusterConfig) -> DAG:
    with DAG(
        dag_id=f"mysql_backup_{cluster.name}",
        description=f"Physical backups of cluster {cluster.name} ({len(cluster.hosts)} hosts)",
        schedule=cluster.schedule,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,  # two runs must never back up one host at once
        tags=["mysql", "backup", cluster.name],
        # No DAG-level Params: Airflow deep-copies them into every task, which at 500 hosts was
        # a third of the parse time. Trigger with conf {"kind": "full"} to override the policy.
        doc_md=__doc__,
    ) as dag:
        for host in cluster.hosts:
            _host_group(config, cluster, host)
        _retention_branch(dag, config, cluster)
    return dag


FLEET = load_config()
for _cluster in FLEET.clusters:
    globals()[f"mysql_backup_{_cluster.name}"] = build_dag(FLEET, _cluster)
