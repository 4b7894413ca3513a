"""Restore tests: prove on a schedule (and by hand) that the backups restore.

One DAG per cluster. Each run restores one host's backup into a scratch datadir, starts a
socket-only sandbox, verifies it, writes restore-report.json next to the backup (retention
reads it as "verified") and emits an Asset event that downstream DAGs can be scheduled on.
Trigger by hand with Params: host (or "random"), backup_id (or "latest"), level (quick, full, and
deep when the cluster has a `replication` section; core/restore/restore_test.py lists what each
level checks), and with `copies:` target_store (any: the first storage target, and the copies in
order where it cannot be read or an object is damaged; or one target by name, to prove a copy).
Hosts with `restore_test: false` are left out. An XtraBackup host must be: restore tests run on
mariabackup (a mariadbd sandbox) and clone (a mysqld sandbox) backups only, so the DAG refuses to
build a restore test that could never pass and names the host.
"""

from __future__ import annotations

__all__ = ["build_dags"]

import random
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from typing import Any

from airflow.sdk import DAG, Asset, Param, task

from ..core.config.schema import ClusterConfig, ConfigError, FleetConfig, HostConfig
from ..dag_tasks.glacier import glacier_tasks
from ..dag_tasks.targets import read_targets
from ..operators.pitr import PitrRestoreTestOperator
from ..operators.restore_test import RestoreTestOperator
from . import fleet_dags

# The engines whose backups a restore test can start and check (core/restore/restore_test.py says the
# same; not imported: it loads the server client library at DAG parse time).
TESTED_FLAVOURS = ("mariabackup", "clone")


def verified_asset(cluster: str) -> Asset:
    # Name only: a URI with a scheme makes Airflow load every provider's URI handlers (boto3
    # among them) at parse time.
    return Asset(name=f"mysql_restore_verified_{cluster}")


def tested_hosts(config: FleetConfig, cluster: ClusterConfig) -> list[HostConfig]:
    """The hosts the DAG restore-tests; an XtraBackup host among them is a config error."""
    hosts = [h for h in cluster.hosts if h.restore_test]
    for host in hosts:
        if host.flavour not in TESTED_FLAVOURS:
            raise ConfigError(
                f"{config.source}: cluster {cluster.name!r}, host {host.name!r} is backed up with {host.flavour}, but "
                "restore tests run on mariabackup (a mariadbd sandbox) and clone (a mysqld sandbox) backups only. Set `restore_test: false` "
                "on the host (restore it by hand, see docs/RUNBOOK.md), or back it up with flavour clone"
            )
    return hosts


def _conn_id(host: HostConfig) -> str:
    return host.mysql_conn_id or f"mysql_{host.name.replace('.', '_')}"


def deep_args(config: FleetConfig, cluster: ClusterConfig) -> dict[str, Any]:
    """The deep level's operator arguments: the source, the replication account, pt's options."""
    source = cluster.replication_source()
    if cluster.replication is None or source is None:
        return {}
    rep = cluster.replication
    spec = cluster.checksum
    return {
        "source_conn_id": _conn_id(source),
        "replication_conn_id": rep.conn_id,
        "replication": {
            "source_name": source.name,
            "source_host": rep.source_host,
            "source_port": rep.source_port,
            "ssl": rep.ssl,
            "max_lag_seconds": rep.max_lag_seconds,
            "catch_up_timeout_minutes": rep.catch_up_timeout_minutes,
            "poll_seconds": rep.poll_seconds,
        },
        "checksum": (
            {
                "binary": spec.binary,
                "chunk_time": spec.chunk_time,
                "max_lag_seconds": spec.max_lag_seconds,
                "timeout_minutes": spec.timeout_minutes,
                "databases": list(spec.databases),
                "ignore_databases": list(spec.ignore_databases),
            }
            if spec
            else {}
        ),
    }


# The target_store Param as the operators take it: "any" (or no Param: no copies) is every target.
TARGET_STORE = "{{ '' if params.get('target_store', 'any') == 'any' else params.target_store }}"


def build_dag(config: FleetConfig, cluster: ClusterConfig) -> DAG:
    hosts = [h.name for h in tested_hosts(config, cluster)]
    deep = deep_args(config, cluster)
    storage = config.storage
    with DAG(
        dag_id=f"mysql_restore_test_{cluster.name}",
        description=f"Restore tests of cluster {cluster.name}",
        schedule=cluster.restore_test_schedule,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        tags=["mysql", "restore-test", cluster.name],
        params={
            "host": Param("random", enum=["random", *hosts], description="host to test"),
            "backup_id": Param("latest", type="string", description="a backup id, or latest"),
            "level": Param(
                "quick",
                enum=["quick", "full", *(["deep"] if deep else [])],
                description="quick: page checksums, source shape, CHECK TABLE sample; full: + all tables, binlogs "
                "rolled forward; deep: + a replica of the source compared by pt-table-checksum",
            ),
            **(
                {"target_time": Param("", type="string", description="ISO time, UTC: restore to it (PITR)")}
                if cluster.binlogs
                else {}
            ),
            **(
                {
                    "target_store": Param(
                        "any",
                        enum=["any", *(t.name for t in config.targets())],
                        description="the storage target to read: any (the first, then the copies), or one",
                    )
                }
                if config.copies
                else {}
            ),
        },
        doc_md=__doc__,
    ) as dag:

        @task
        def pick_host(**context: Any) -> str:
            chosen = context["params"]["host"]
            return random.choice(hosts) if chosen == "random" else chosen

        @task.branch(trigger_rule="none_failed_min_one_success")  # after the Glacier branch's join
        def choose_path(**context: Any) -> str:
            if context["params"].get("target_time"):
                return "restore_to_time"
            given = context["params"]["backup_id"] not in ("", "latest")
            return "restore_given_backup" if given else "restore_latest_chain"

        common: dict[str, Any] = dict(
            cluster=cluster.name,
            host="{{ ti.xcom_pull(task_ids='pick_host') }}",
            level="{{ params.level }}",
            bucket=storage.bucket,
            local_path=storage.local_path,
            prefix=storage.prefix,
            aws_conn_id=storage.aws_conn_id,
            workdir_root=cluster.restore_workdir,
            gpg_conn_id=config.encryption.private_gpg_conn_id if config.encryption.enabled else None,
            outlets=[verified_asset(cluster.name)],
            target_store=TARGET_STORE,
            **read_targets(config),
        )
        latest = RestoreTestOperator(task_id="restore_latest_chain", backup_id="latest", **common, **deep)
        given = RestoreTestOperator(
            task_id="restore_given_backup", backup_id="{{ params.backup_id }}", **common, **deep
        )
        host, path = pick_host(), choose_path()
        if storage.bucket:  # archived backups: request restore -> wait (deferred) -> restore test
            first, last = glacier_tasks(cluster.name, config)
            host >> first
            last >> path
        else:
            host >> path
        path >> [latest, given]
        if cluster.binlogs:  # binlogs are shipped: a point-in-time restore test on request
            to_time = {k: v for k, v in common.items() if k != "outlets"}
            path >> PitrRestoreTestOperator(
                task_id="restore_to_time", target_time="{{ params.target_time }}", **to_time
            )
    return dag


def _dags(config: FleetConfig) -> Iterator[DAG]:
    for cluster in config.clusters:
        if any(h.restore_test for h in cluster.hosts):
            yield build_dag(config, cluster)


# build_dags(dag_file): this kind's DAGs of the fleet config of that DAG file (the file calls it).
build_dags = partial(fleet_dags, build=_dags)
