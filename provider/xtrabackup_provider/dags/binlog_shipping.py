"""Binlog shipping for point-in-time recovery: one DAG per cluster whose config sets `binlogs:`.

Every run ships the closed binlogs of each host of the cluster (one mapped task per host) over
the replication protocol, so it runs on any worker. In `batch` mode (default, every 5 minutes)
FLUSH BINARY LOGS first closes the open binlog, so the schedule bounds the RPO. In `continuous`
mode each run follows the servers live for `continuous_minutes` (e.g. 55 minutes, hourly) and
stores the open binlog's new bytes every `progress_seconds`: an RPO of seconds. A binlog
purged before it was shipped fails that host's task once, with the gap recorded.
"""

from __future__ import annotations

__all__ = ["build_dags"]

from collections.abc import Iterator
from datetime import datetime, timedelta
from functools import partial

from airflow.sdk import DAG

from ..core.config.schema import BinlogConfig, ClusterConfig, FleetConfig
from ..operators.binlog import BinlogShipOperator
from ..operators.copies import CopyBackupsOperator
from . import fleet_dags


def build_dag(config: FleetConfig, cluster: ClusterConfig, binlogs: BinlogConfig) -> DAG:
    storage = config.storage
    continuous = binlogs.mode == "continuous"
    seconds = binlogs.continuous_minutes * 60 if continuous else 0
    with DAG(
        dag_id=f"mysql_binlog_shipping_{cluster.name}",
        description=f"Binlog shipping of cluster {cluster.name} ({binlogs.mode})",
        schedule=binlogs.schedule,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,  # two runs must never ship one server's binlogs at once
        tags=["mysql", "binlog", "pitr", cluster.name],
        doc_md=__doc__,
    ) as dag:
        shipped = BinlogShipOperator.partial(
            task_id="ship_binlogs",
            cluster=cluster.name,
            bucket=storage.bucket,
            local_path=storage.local_path,
            prefix=storage.prefix,
            aws_conn_id=storage.aws_conn_id,
            gpg_conn_id=config.encryption.gpg_conn_id if config.encryption.enabled else None,
            flush=binlogs.flush and not continuous,
            continuous_seconds=seconds,
            progress_seconds=binlogs.progress_seconds,
            compression_level=config.policy.compression_level,
            storage_class=binlogs.storage_class,
            sse=storage.sse,
            kms_key_id=storage.kms_key_id,
            execution_timeout=timedelta(seconds=seconds + 1800),
            retries=1,
            retry_delay=timedelta(seconds=30),
        ).expand_kwargs(
            [
                {
                    "host": h.name,
                    "mysql_conn_id": h.mysql_conn_id or f"mysql_{h.name.replace('.', '_')}",
                    # the host's own binlog client (its server family's), else the cluster's
                    "binary": h.binlog_binary or binlogs.binary,
                }
                for h in cluster.hosts
            ]
        )
        for target in [t for t in config.copies if t.binlogs]:
            # The closed binlogs shipped so far, to each further target (any worker, no database).
            shipped >> CopyBackupsOperator.partial(
                task_id=f"copy_binlogs_{target.name}",
                cluster=cluster.name,
                what="binlogs",
                source_name=storage.name,
                target_name=target.name,
                target_bucket=target.bucket,
                target_local_path=target.local_path,
                target_prefix=target.prefix,
                target_aws_conn_id=target.aws_conn_id,
                target_sse=target.sse,
                target_kms_key_id=target.kms_key_id,
                attempts=target.copy_attempts,
                retry_seconds=target.copy_retry_seconds,
                trigger_rule="all_done",  # a host with a recorded gap still has binlogs to copy
                bucket=storage.bucket,
                local_path=storage.local_path,
                prefix=storage.prefix,
                aws_conn_id=storage.aws_conn_id,
            ).expand(host=[h.name for h in cluster.hosts])
    return dag


def _dags(config: FleetConfig) -> Iterator[DAG]:
    for cluster in config.clusters:
        if cluster.binlogs is not None:
            yield build_dag(config, cluster, cluster.binlogs)


# build_dags(dag_file): this kind's DAGs of the fleet config of that DAG file (the file calls it).
build_dags = partial(fleet_dags, build=_dags)
