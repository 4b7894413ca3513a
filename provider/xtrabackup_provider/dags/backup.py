"""Backups of every configured MySQL/MariaDB host: one DAG per cluster, one task group mapped
over its hosts: optional checksum gate -> `backup` -> `retention` (core/retention/plan.py; deletes
only with `retention.confirm: true`) -> optional binlog gate, and per further storage target
(`copies:`) `copy_<target>` -> `retention_<target>` (that target's own policy); a host with a
`standby_dir` also gets `standby` after its backup: the new backup merged into its prepared standby
(on its `standby_queue`, the worker where the directory lives, with the private key's connection:
never the database host's worker unless the config names that queue), so `restore --from-standby`
is current.

`backup` decides full or incremental itself, on the host's worker and under the host lock (the
chain policy, core/backup/decide.py); the run conf {"kind": "full"} (or "incremental") overrides
it. Nothing is queued for the kind not taken. Each map index is named after its host and, once
the backup ran, the kind it took: `db1 (incremental)`.

Hosts with different `checksum_gate` settings get one mapped group each (`backup`,
`gated_backup`, ...). A backup must run on its host's worker: when the hosts of a group have
different queues, xtrabackup_provider.policy (installed in airflow_local_settings.py) routes
each mapped backup task to its host's queue, because Airflow cannot map `queue` (and each standby
task to its host's `standby_queue` when those differ).

The fleet config ($XTRABACKUP_FLEET_CONFIG, else fleet.yaml next to the DAG file) is validated at parse
time, so a bad file shows as an import error naming the field and the file. Parsing imports
no boto3, zstandard or gnupg: the operators import them when they run.
"""

from __future__ import annotations

__all__ = ["build_dags"]

from collections.abc import Iterator
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from airflow.sdk import DAG, task_group

from .. import policy
from ..core.config.schema import (
    ChecksumGateConfig,
    ClusterConfig,
    ConfigError,
    FleetConfig,
    HostConfig,
)
from ..dag_tasks.gates import binlog_gate, checksum_gate
from ..dag_tasks.targets import read_targets
from ..operators.backup import BACKUP_LABEL, KIND_FROM_RUN_CONF, XtraBackupOperator
from ..operators.copies import CopyBackupsOperator
from ..operators.retention import ApplyRetentionOperator
from ..operators.standby import XtraBackupStandbyOperator
from . import fleet_dags

# The retry of a task after the backup (retention, the standby): soon, since the run it holds holds
# the host's next backups (one run at a time); the next run repeats these tasks anyway.
FOLLOW_UP_RETRY = timedelta(minutes=1)


def _storage_args(config: FleetConfig) -> dict[str, Any]:
    s = config.storage
    return {"bucket": s.bucket, "local_path": s.local_path, "prefix": s.prefix, "aws_conn_id": s.aws_conn_id}


def _policy_args(config: FleetConfig) -> dict[str, Any]:
    p = config.policy
    return {
        "full_every_days": p.full_every_days,
        "max_chain_length": p.max_chain_length,
        "max_incremental_ratio": p.max_incremental_ratio,
    }


def _backup_args(config: FleetConfig, cluster: ClusterConfig) -> dict[str, Any]:
    """The backup operators' arguments that are the same for every host of the cluster."""
    pool = config.backup_pool(cluster)  # the cluster's pool, else the storage target's
    lock = config.storage.object_lock
    return dict(
        cluster=cluster.name,
        pool=pool.name if pool else None,
        gpg_conn_id=config.encryption.gpg_conn_id if config.encryption.enabled else None,
        compression_level=config.policy.compression_level,
        zstd_threads=config.policy.zstd_threads,
        parallel=config.policy.parallel,
        max_parts=config.policy.max_parts,
        part_min_gib=config.policy.part_min_gib,
        storage_classes=dict(config.storage.storage_class),
        sse=config.storage.sse,
        kms_key_id=config.storage.kms_key_id,
        object_lock_mode=lock.mode if lock else None,
        object_lock_days=lock.retain_days if lock else None,
        heartbeat=config.policy.heartbeat,
        map_index_template=BACKUP_LABEL,
        **_storage_args(config),
        **_policy_args(config),
    )


def _host_args(config: FleetConfig, host: HostConfig, standby_queue: str) -> dict[str, Any]:
    """One map index of a backup group: what differs between hosts (policy.py reads `queue` and
    `standby_queue`)."""
    return {
        "host": host.name,
        "mysql_conn_id": host.mysql_conn_id or f"mysql_{host.name.replace('.', '_')}",
        "flavour": host.flavour,
        "binary": host.binary,
        "datadir": host.datadir,
        "heartbeat_conn_id": host.heartbeat_conn_id,
        "queue": host.queue,
        "impact": config.impact_for(host).model_dump(exclude_none=True),
        "option_files": list(host.option_files),
        "standby_dir": host.standby_dir,
        "standby_queue": standby_queue,
    }


def _copy_tasks(config: FleetConfig, cluster: ClusterConfig, host: str, upstream: Any) -> None:
    """Per further storage target: copy the host's new backups there (on any worker: no database
    access), then apply that target's own retention. A target that is down leaves the copy behind
    without failing the run (core/backup/copies.py); the check DAG reports it."""
    for target in config.copies:
        lock = target.object_lock
        copy = CopyBackupsOperator(
            task_id=f"copy_{target.name}",
            cluster=cluster.name,
            host=host,
            what="backups",
            source_name=config.storage.name,
            target_name=target.name,
            target_bucket=target.bucket,
            target_local_path=target.local_path,
            target_prefix=target.prefix,
            target_aws_conn_id=target.aws_conn_id,
            target_storage_classes=dict(target.storage_class),
            target_sse=target.sse,
            target_kms_key_id=target.kms_key_id,
            target_object_lock_mode=lock.mode if lock else None,
            target_object_lock_days=lock.retain_days if lock else None,
            attempts=target.copy_attempts,
            retry_seconds=target.copy_retry_seconds,
            pool=target.pool.name if target.pool else None,
            map_index_template="{{ task.host }}",
            **_storage_args(config),
        )
        retention = target.retention or config.retention
        (
            upstream
            >> copy
            >> ApplyRetentionOperator(
                task_id=f"retention_{target.name}",
                cluster=cluster.name,
                host=host,
                policy=retention.model_dump(exclude={"confirm"}),
                confirm=retention.confirm,
                retries=2,
                retry_delay=FOLLOW_UP_RETRY,
                pool=target.pool.name if target.pool else None,
                map_index_template="{{ task.host }}",
                bucket=target.bucket,
                local_path=target.local_path,
                prefix=target.prefix,
                aws_conn_id=target.aws_conn_id,
            )
        )


def _by_gate(cluster: ClusterConfig) -> list[tuple[str, ChecksumGateConfig | None, list[HostConfig]]]:
    """Hosts grouped by their checksum_gate settings (the gate's task arguments are not mapped)."""
    groups: dict[str, tuple[ChecksumGateConfig | None, list[HostConfig]]] = {}
    for host in cluster.hosts:
        key = host.checksum_gate.model_dump_json() if host.checksum_gate else ""
        groups.setdefault(key, (host.checksum_gate, []))[1].append(host)
    named, gated = [], 0
    for gate, hosts in groups.values():
        gated += gate is not None
        group_id = "backup" if gate is None else "gated_backup" + (f"_{gated}" if gated > 1 else "")
        named.append((group_id, gate, hosts))
    return named


def _group_queue(cluster: ClusterConfig, group_id: str, queues: set[str], placeholder: str) -> str:
    """The queue a group's mapped tasks are created with: the hosts' one queue, or the policy's
    `placeholder` (xtrabackup_provider.policy routes each to its host's)."""
    if len(queues) == 1:
        return next(iter(queues))
    if not policy.installed():
        task = "standby" if placeholder == policy.STANDBY_QUEUE else "backup"
        raise ConfigError(
            f"cluster {cluster.name!r} ({group_id}): hosts use different {policy.ROUTED[placeholder]}s "
            f"{sorted(queues)}, so each mapped {task} task must be routed to its host's; add `from "
            "xtrabackup_provider.policy import task_instance_mutation_hook` to "
            "$AIRFLOW_HOME/config/airflow_local_settings.py on every Airflow component (docs/install.md, 'Queues')"
        )
    return placeholder


def _standby_queues(
    cluster: ClusterConfig, group_id: str, hosts: list[HostConfig]
) -> tuple[str, dict[str, str]]:
    """The queue the group's standby tasks are created with, and each host's `standby_queue`. One
    worker keeping every standby of the group needs no routing: the hosts without a standby skip
    there too. Otherwise those skip on their own worker."""
    kept = {q for h in hosts if (q := cluster.standby_queue_of(h))}
    if len(kept) <= 1:
        queue = next(iter(kept), hosts[0].queue)
        return queue, {h.name: queue for h in hosts}
    return _group_queue(cluster, group_id, kept, policy.STANDBY_QUEUE), {
        h.name: cluster.standby_queue_of(h) or h.queue for h in hosts
    }


def _backup_group(
    config: FleetConfig,
    cluster: ClusterConfig,
    group_id: str,
    gate: ChecksumGateConfig | None,
    hosts: list[HostConfig],
) -> None:
    queue = _group_queue(cluster, group_id, {h.queue for h in hosts}, policy.HOST_QUEUE)
    common = _backup_args(config, cluster) | {"queue": queue}
    standby_task_queue, standby_queues = _standby_queues(cluster, group_id, hosts)

    @task_group(group_id=group_id, tooltip=f"backup of each host of {cluster.name}, then its retention")
    def per_host(
        host: str,
        mysql_conn_id: str,
        flavour: str,
        binary: str | None,
        datadir: str | None,
        heartbeat_conn_id: str | None,
        queue: str,  # read by xtrabackup_provider.policy, not by a task
        impact: dict[str, Any],
        option_files: list[str],
        standby_dir: str | None,
        standby_queue: str,  # read by xtrabackup_provider.policy, not by a task
    ) -> None:
        checked = checksum_gate(cluster, gate, mysql_conn_id, host)  # None without a gate

        backup = XtraBackupOperator(
            task_id="backup",
            kind=KIND_FROM_RUN_CONF,
            host=host,
            mysql_conn_id=mysql_conn_id,
            flavour=flavour,
            binary=binary,
            datadir=datadir,
            heartbeat_conn_id=heartbeat_conn_id,
            gates_from=[checked.task_id] if checked else [],
            impact=impact,
            option_files=option_files,
            **common,
        )
        if checked:
            checked >> backup
        # It runs only when this host's backup succeeded: a failed backup never costs an older one.
        backup >> ApplyRetentionOperator(
            task_id="retention",
            cluster=cluster.name,
            host=host,
            policy=config.retention.model_dump(exclude={"confirm"}),
            confirm=config.retention.confirm,
            # A lock held elsewhere skips it (the next run applies it); a retry is for what failed.
            retries=2,
            retry_delay=FOLLOW_UP_RETRY,
            pool=config.storage.pool.name if config.storage.pool else None,  # storage API work only
            map_index_template="{{ task.host }}",
            **_storage_args(config),
        )
        # Opt-in (cluster `binlogs.gate_backups`): the backup counts once its binlogs are stored.
        if shipped := binlog_gate(config, cluster, host, mysql_conn_id):
            backup >> shipped
        _copy_tasks(config, cluster, host, backup)
        if any(h.standby_dir for h in hosts):  # a host of the group without one skips it
            backup >> XtraBackupStandbyOperator(
                task_id="standby",
                cluster=cluster.name,
                host=host,
                standby_dir=standby_dir,
                binary=binary,
                queue=standby_task_queue,  # where the standbys live (policy.py routes a placeholder)
                # A standby held elsewhere skips it (the next run refreshes it); a retry is for what failed.
                retries=2,
                retry_delay=FOLLOW_UP_RETRY,
                gpg_conn_id=config.encryption.private_gpg_conn_id if config.encryption.enabled else None,
                map_index_template="{{ task.host }}",
                **_storage_args(config),
                **read_targets(config),  # the copies, where the first target cannot be read
            )

    per_host.expand_kwargs([_host_args(config, host, standby_queues[host.name]) for host in hosts])


def build_dag(config: FleetConfig, cluster: ClusterConfig) -> DAG:
    with DAG(
        dag_id=f"mysql_backup_{cluster.name}",
        description=f"Physical backups of cluster {cluster.name} ({len(cluster.hosts)} hosts)",
        schedule=cluster.schedule,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,  # two runs must never back up one host at once
        tags=["mysql", "backup", cluster.name],
        # No DAG-level Params: trigger with conf {"kind": "full"} to override the policy (a bad
        # value fails the backup task, naming it).
        doc_md=__doc__,
    ) as dag:
        for group_id, gate, hosts in _by_gate(cluster):
            _backup_group(config, cluster, group_id, gate, hosts)
    return dag


def _dags(config: FleetConfig) -> Iterator[DAG]:
    for cluster in config.clusters:
        yield build_dag(config, cluster)


# build_dags(dag_file): this kind's DAGs of the fleet config of that DAG file (the file calls it).
build_dags = partial(fleet_dags, build=_dags)
