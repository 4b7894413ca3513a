"""The gates around a host's backup in the backup DAG: the replica's checksum gate before it, the
binlog lag sensor after it. Each is None when the fleet config does not ask for it."""

from __future__ import annotations

from typing import Any

from ..core.config.schema import ChecksumGateConfig, ClusterConfig, FleetConfig
from ..sensors.binlog import BinlogLagSensor
from ..sensors.checksum import ReplicaChecksumSensor


def checksum_gate(
    cluster: ClusterConfig,
    gate: ChecksumGateConfig | None,
    mysql_conn_id: Any,
    replica_name: Any,
    task_id: str = "checksum_gate",
) -> ReplicaChecksumSensor | None:
    """The gate task for hosts of the fleet config with this `checksum_gate` (None: no task).

    `mysql_conn_id` and `replica_name` may be a mapped task group's arguments."""
    if gate is None:
        return None
    wait = gate.on_blocked == "wait"
    return ReplicaChecksumSensor(
        task_id=task_id,
        mysql_conn_id=mysql_conn_id,
        replicate=cluster.checksum.replicate if cluster.checksum else "percona.checksums",
        on_diff=gate.on_diff,
        on_blocked=gate.on_blocked,
        max_age_hours=gate.max_age_hours,
        max_lag_seconds=gate.max_lag_seconds,
        cluster=cluster.name,
        replica_name=replica_name,
        map_index_template="{{ task.replica_name }}",
        deferrable=gate.deferrable and wait,
        mode="reschedule" if wait and gate.poke_seconds >= 60 else "poke",
        poke_interval=gate.poke_seconds,
        timeout=gate.wait_minutes * 60,  # runs on any worker: it only queries the replica
    )


def binlog_gate(config: FleetConfig, cluster: ClusterConfig, host: Any, conn_id: Any) -> Any:
    """For the backup DAG: a BinlogLagSensor after the backup, or None unless the cluster ships
    binlogs with `gate_backups`. It fails the run when the binlogs are not stored in time.
    `host` (its name) and `conn_id` may be a mapped task group's arguments."""
    binlogs = cluster.binlogs
    if binlogs is None or not binlogs.gate_backups:
        return None
    storage = config.storage
    return BinlogLagSensor(
        task_id="binlogs_shipped",
        cluster=cluster.name,
        host=host,
        mysql_conn_id=conn_id,
        map_index_template="{{ task.host }}",
        bucket=storage.bucket,
        local_path=storage.local_path,
        prefix=storage.prefix,
        aws_conn_id=storage.aws_conn_id,
        deferrable=True,  # a wait of up to lag_timeout_minutes holds no worker slot
        poke_interval=min(30.0, binlogs.progress_seconds * 3),
        timeout=binlogs.lag_timeout_minutes * 60,
    )
