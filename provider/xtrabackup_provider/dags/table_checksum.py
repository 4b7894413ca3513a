"""pt-table-checksum on its own schedule: one DAG per cluster with a `checksum` section.

Checksumming reads every row on the source, so it runs apart from the backups (daily by
default); the backup DAG's `checksum_gate` only reads the freshest results on each replica.
The replicas compared are the cluster's hosts with a `checksum_gate` (reached by the host and
port of their `mysql` connection, or `checksum_gate.dsn`). The run fails on differences, so
drift alerts at once rather than at the next backup.
"""

from __future__ import annotations

__all__ = ["build_dags"]

from collections.abc import Iterator
from datetime import datetime
from functools import partial

from airflow.sdk import DAG

from ..core.config.schema import ClusterConfig, FleetConfig, HostConfig
from ..operators.checksum import TableChecksumOperator
from . import fleet_dags


def _conn_id(host: HostConfig) -> str:
    # The backup DAG's default for a host without mysql_conn_id.
    return host.mysql_conn_id or f"mysql_{host.name.replace('.', '_')}"


def build_dag(config: FleetConfig, cluster: ClusterConfig) -> DAG:
    spec = cluster.checksum
    assert spec is not None
    source = (
        spec.source if isinstance(spec.source, HostConfig) else config.find_host(cluster.name, spec.source)
    )
    replicas = [h for h in cluster.hosts if h.checksum_gate is not None and h.name != source.name]
    with DAG(
        dag_id=f"mysql_table_checksum_{cluster.name}",
        description=f"pt-table-checksum of cluster {cluster.name} (source {source.name})",
        schedule=spec.schedule,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,  # two checksum runs on one source would overwrite each other's rows
        tags=["mysql", "checksum", cluster.name],
        doc_md=__doc__,
    ) as dag:
        TableChecksumOperator(
            task_id="pt_table_checksum",
            source_conn_id=_conn_id(source),
            replica_conn_ids=[_conn_id(h) for h in replicas if not (h.checksum_gate and h.checksum_gate.dsn)],
            replica_dsns=[h.checksum_gate.dsn for h in replicas if h.checksum_gate and h.checksum_gate.dsn],
            replicate=spec.replicate,
            recursion_method=spec.recursion_method,
            dsn_table=spec.dsn_table,
            databases=list(spec.databases),
            ignore_databases=list(spec.ignore_databases),
            chunk_time=spec.chunk_time,
            max_lag_seconds=spec.max_lag_seconds,
            timeout_minutes=spec.timeout_minutes,
            binary=spec.binary,
        )
    return dag


def _dags(config: FleetConfig) -> Iterator[DAG]:
    for cluster in config.clusters:
        if cluster.checksum is not None:
            yield build_dag(config, cluster)


# build_dags(dag_file): this kind's DAGs of the fleet config of that DAG file (the file calls it).
build_dags = partial(fleet_dags, build=_dags)
