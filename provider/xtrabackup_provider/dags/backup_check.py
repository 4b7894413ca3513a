"""Watched: one DAG per cluster (`mysql_backup_check_<cluster>`, on its `check.schedule`) that
checks every host from the catalogs alone, independent of whether the backup DAG ran: the age of
the newest restorable backup against the cluster's RPO, restore tests, binlog lag and gaps, and
the copies on further storage targets (core/report/check.py, the same as `xtrabackup-provider
check`). The task fails when a host is critical, so Airflow's own alerting fires (set
`on_failure_callback` or email in `default_args` of your deployment); each figure is a metric
(`<statsd_prefix>.xtrabackup.check.<cluster>.<host>.*`).
"""

from __future__ import annotations

__all__ = ["build_dags"]

from collections.abc import Iterator
from datetime import datetime, timedelta
from functools import partial

from airflow.sdk import DAG

from ..core.config.schema import ClusterConfig, FleetConfig
from ..dag_tasks.targets import target_args
from ..operators.check import BackupCheckOperator
from . import fleet_dags


def build_dag(config: FleetConfig, cluster: ClusterConfig) -> DAG:
    with DAG(
        dag_id=f"mysql_backup_check_{cluster.name}",
        description=f"Freshness and restorability check of cluster {cluster.name}",
        schedule=cluster.check.schedule,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        tags=["mysql", "check", cluster.name],
        doc_md=__doc__,
    ) as dag:
        BackupCheckOperator(
            task_id="check",
            cluster=cluster.name,
            hosts=[h.name for h in cluster.hosts],
            targets=[target_args(t) for t in config.targets()],
            check=cluster.check.model_dump(),
            binlogs=cluster.binlogs is not None,
            retries=0,  # a retry would only delay the alert
            execution_timeout=timedelta(minutes=30),
        )
    return dag


def _dags(config: FleetConfig) -> Iterator[DAG]:
    for cluster in config.clusters:
        if cluster.check.schedule is not None:
            yield build_dag(config, cluster)


# build_dags(dag_file): this kind's DAGs of the fleet config of that DAG file (the file calls it).
build_dags = partial(fleet_dags, build=_dags)
