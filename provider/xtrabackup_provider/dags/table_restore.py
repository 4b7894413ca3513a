"""Table restore on request: tables back as they were at a point in time, under new names.

One DAG per cluster, triggered by hand only. Params: host (whose backups and whose live server),
tables ("db.t,db.u"), new_names (default "<table>_restored", must not exist), and one of
to_time (ISO 8601, UTC), to_gtid, to_position (FILE:POS); none of them: as in backup_id (default
the newest). One task per host runs on that host's queue (the tablespaces are copied into its
datadir) with its `mysql_conn_id`; a branch picks the host's task. Existing tables are never
written to and nothing reaches the binlog (see XtraBackupTableRestoreOperator).
"""

from __future__ import annotations

__all__ = ["build_dags"]

from collections.abc import Iterator
from datetime import datetime
from functools import partial
from typing import Any

from airflow.sdk import DAG, Param, task

from ..core.config.schema import ClusterConfig, FleetConfig
from ..dag_tasks.targets import read_targets
from ..operators.restore import XtraBackupTableRestoreOperator
from . import fleet_dags


def build_dag(config: FleetConfig, cluster: ClusterConfig) -> DAG:
    hosts = [h for h in cluster.hosts if h.mysql_conn_id]
    storage = config.storage
    with DAG(
        dag_id=f"mysql_table_restore_{cluster.name}",
        description=f"Restore tables of cluster {cluster.name} under new names",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        tags=["mysql", "restore", cluster.name],
        params={
            "host": Param(hosts[0].name if hosts else "", enum=[h.name for h in hosts] or [""]),
            "tables": Param("", type="string", minLength=3, description="schema.table[,schema.table...]"),
            "new_names": Param("", type="string", description="schema.new[,...]; default <table>_restored"),
            "to_time": Param("", type="string", description="ISO time, UTC (binlogs needed)"),
            "to_gtid": Param("", type="string", description="replay up to and including this GTID"),
            "to_position": Param("", type="string", description="FILE:POS: replay the events before it"),
            "backup_id": Param("latest", type="string", description="a backup id, or latest"),
        },
        doc_md=__doc__,
    ) as dag:

        @task.branch
        def choose_host(**context: Any) -> str:
            return f"restore_tables_{context['params']['host']}"

        branch = choose_host()
        for host in hosts:
            branch >> XtraBackupTableRestoreOperator(
                task_id=f"restore_tables_{host.name}",
                queue=host.queue,
                cluster=cluster.name,
                host=host.name,
                mysql_conn_id=host.mysql_conn_id or "",
                tables="{{ params.tables }}",
                new_names="{{ params.new_names }}",
                to_time="{{ params.to_time }}",
                to_gtid="{{ params.to_gtid }}",
                to_position="{{ params.to_position }}",
                backup_id="{{ params.backup_id }}",
                scratch_dir=cluster.restore_workdir,
                binary=host.binary,
                bucket=storage.bucket,
                local_path=storage.local_path,
                prefix=storage.prefix,
                aws_conn_id=storage.aws_conn_id,
                gpg_conn_id=config.encryption.private_gpg_conn_id if config.encryption.enabled else None,
                **read_targets(config),  # the copies, where the first target cannot be read
            )
    return dag


def _dags(config: FleetConfig) -> Iterator[DAG]:
    for cluster in config.clusters:
        yield build_dag(config, cluster)


# build_dags(dag_file): this kind's DAGs of the fleet config of that DAG file (the file calls it).
build_dags = partial(fleet_dags, build=_dags)
