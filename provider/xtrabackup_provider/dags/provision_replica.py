"""Build a replica from a backup, by hand: one DAG per host with a `provision` section in a cluster
with a `replication` section (`mysql_provision_replica_<cluster>_<host>`, no schedule).

`provision` runs on the host's own worker (its `queue`): it restores the newest backup of
`from_host` (or `backup_id`) into the host's empty datadir, starts its server with
`provision.start_command`, points it at the cluster's source from the backup's GTID (CHANGE
MASTER TO ... MASTER_USE_GTID with the account of `replication.conn_id`) and starts replication.
`wait_caught_up` waits (reschedule mode) until its lag is under `max_lag_seconds`; then, unless
the `checksum` param is off, pt-table-checksum on the source must find no differing chunk.
A datadir that is not empty, a replication account that cannot log in to the source from the
new host (or read its binlogs), a new server's account without the privileges provisioning uses,
or a source that purged the binlogs the backup needs, fails the first task before anything is
restored, and the error says what to do. A replication error that persists (a wrong password,
an unreachable source, a stopped SQL thread) fails `provision` or `wait_caught_up` within a
minute, naming Last_IO_Errno / Last_SQL_Errno; `provision` then stops the server it started and,
with the `clean_on_failure` param, empties the datadir.
"""

from __future__ import annotations

__all__ = ["build_dags"]

from collections.abc import Iterator
from datetime import datetime
from functools import partial
from typing import Any

from airflow.sdk import DAG, Param, task

from ..core.config.replication import (
    PROVISION_DSN_TABLE,
    PROVISION_IGNORE_DATABASES,
    PROVISION_IGNORE_TABLES,
    PROVISION_REPLICATE,
)
from ..core.config.schema import ClusterConfig, ConfigError, FleetConfig, HostConfig
from ..dag_tasks.targets import read_targets
from ..operators.checksum import TableChecksumOperator
from ..operators.provision import ProvisionReplicaOperator
from ..sensors.replica import ReplicaCaughtUpSensor
from . import fleet_dags


def _conn_id(host: HostConfig) -> str:
    return host.mysql_conn_id or f"mysql_{host.name.replace('.', '_')}"


def build_dag(config: FleetConfig, cluster: ClusterConfig, host: HostConfig) -> DAG:
    rep, source, settings = cluster.replication, cluster.replication_source(), host.provision
    assert rep is not None and source is not None and settings is not None
    if host.flavour not in ("mariabackup", "clone"):
        raise ConfigError(
            f"{config.source}: cluster {cluster.name!r}, host {host.name!r}: provision-replica builds replicas from "
            f"mariabackup or clone backups, not {host.flavour}; back the host up with flavour clone, or drop its "
            "`provision` section"
        )
    if not host.datadir:
        raise ConfigError(
            f"{config.source}: cluster {cluster.name!r}, host {host.name!r}: `provision` needs its `datadir`"
        )
    others = [h.name for h in cluster.hosts if h.name != host.name]
    storage = config.storage
    spec = cluster.checksum
    with DAG(
        dag_id=f"mysql_provision_replica_{cluster.name}_{host.name.replace('.', '_')}",
        description=f"Build {host.name} as a replica of {source.name} from a backup",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        tags=["mysql", "provision", cluster.name],
        params={
            "from_host": Param(settings.from_host or source.name, enum=others, description="whose backups"),
            "backup_id": Param("latest", type="string", description="a backup id, or latest"),
            "checksum": Param(settings.checksum, type="boolean", description="gate on pt-table-checksum"),
            "max_lag_seconds": Param(rep.max_lag_seconds, type="number", minimum=0),
            "clean_on_failure": Param(
                False, type="boolean", description="after a failure, empty the datadir it restored into"
            ),
        },
        doc_md=__doc__,
    ) as dag:
        provision = ProvisionReplicaOperator(
            task_id="provision",
            cluster=cluster.name,
            host="{{ params.from_host }}",
            backup_id="{{ params.backup_id }}",
            target_datadir=host.datadir,
            source_conn_id=_conn_id(source),
            replication_conn_id=rep.conn_id,
            replica_conn_id=_conn_id(host),
            start_command=list(settings.start_command),
            owner=settings.owner,
            source_host=rep.source_host,
            source_port=rep.source_port,
            ssl=rep.ssl,
            queue=host.queue,  # it writes the new host's datadir and starts its server
            bucket=storage.bucket,
            local_path=storage.local_path,
            prefix=storage.prefix,
            aws_conn_id=storage.aws_conn_id,
            gpg_conn_id=config.encryption.private_gpg_conn_id if config.encryption.enabled else None,
            binary=host.binary,
            clean_on_failure="{{ params.clean_on_failure }}",
            **read_targets(config),  # the copies, where the first target cannot be read
        )
        caught_up = ReplicaCaughtUpSensor(
            task_id="wait_caught_up",
            replica_conn_id=_conn_id(host),
            target_gtid="{{ ti.xcom_pull(task_ids='provision')['source_gtid'] }}",
            max_lag_seconds="{{ params.max_lag_seconds }}",
            replica_name=f"the new replica {cluster.name}/{host.name}",
            source_name=f"{cluster.name}/{source.name}",
            deferrable=True,  # a catch-up of hours waits in the triggerer
            poke_interval=max(30.0, rep.poll_seconds),
            timeout=rep.catch_up_timeout_minutes * 60,
        )

        @task.short_circuit
        def checksum_requested(**context: Any) -> bool:
            return bool(context["params"]["checksum"])

        checksum = TableChecksumOperator(
            task_id="pt_table_checksum",
            source_conn_id=_conn_id(source),
            replica_dsns=[settings.dsn] if settings.dsn else None,
            replica_conn_ids=None if settings.dsn else [_conn_id(host)],
            replicate=PROVISION_REPLICATE,
            dsn_table=PROVISION_DSN_TABLE,
            databases=list(spec.databases) if spec else None,
            ignore_databases=[*(spec.ignore_databases if spec else []), *PROVISION_IGNORE_DATABASES],
            ignore_tables=list(PROVISION_IGNORE_TABLES),
            chunk_time=spec.chunk_time if spec else 0.5,
            timeout_minutes=spec.timeout_minutes if spec else 240,
            binary=spec.binary if spec else "pt-table-checksum",
        )
        provision >> caught_up >> checksum_requested() >> checksum
    return dag


def _dags(config: FleetConfig) -> Iterator[DAG]:
    for cluster in config.clusters:
        if cluster.replication is None or cluster.replication_source() is None:
            continue
        for host in cluster.hosts:
            if host.provision is not None:
                yield build_dag(config, cluster, host)


# build_dags(dag_file): this kind's DAGs of the fleet config of that DAG file (the file calls it).
build_dags = partial(fleet_dags, build=_dags)
