"""The cluster's pt-table-checksum and replica gates as the fleet config describes them, with the
CLI's connection details (the DAGs pass the same values to the operators as primitives).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from ..db.checksum import ChecksumOptions, ChecksumRun, checksum_options, replica_dsn, run_checksum
from ..db.dsn import DEFAULT_REPLICATE
from ..db.gate import GatePolicy, GateVerdict, check_replica
from ..db.server import MySQLTarget
from .schema import ClusterConfig, FleetConfig, HostConfig
from .wiring import SetupError, cli_target


@dataclass
class ClusterChecksum:
    source: HostConfig
    options: ChecksumOptions
    gated: dict[str, GatePolicy] = field(default_factory=dict)  # replica host name -> its policy


def gate_policy(cluster: ClusterConfig, host: HostConfig) -> GatePolicy | None:
    gate = host.checksum_gate
    if gate is None:
        return None
    return GatePolicy(
        on_diff=gate.on_diff,
        max_age=timedelta(hours=gate.max_age_hours),
        max_lag_seconds=gate.max_lag_seconds,
        replicate=cluster.checksum.replicate if cluster.checksum else DEFAULT_REPLICATE,
    )


def cluster_checksum(config: FleetConfig, cluster_name: str) -> ClusterChecksum:
    """The checksum as the fleet config describes it, with CLI connection details for replicas."""
    cluster = config.cluster(cluster_name)
    spec = cluster.checksum
    if spec is None:
        raise SetupError(
            f"{config.source}: cluster {cluster_name!r} has no `checksum` section (source, schedule...)"
        )
    source = spec.source if not isinstance(spec.source, str) else config.find_host(cluster_name, spec.source)
    gated = {h.name: p for h in cluster.hosts if h.name != source.name and (p := gate_policy(cluster, h))}
    dsns = []
    for host in cluster.hosts:
        if host.name in gated and host.checksum_gate is not None:
            if host.checksum_gate.dsn:
                dsns.append(host.checksum_gate.dsn)
            elif host.host:
                dsns.append(replica_dsn(MySQLTarget(host=host.host, port=host.port)))
            else:
                raise SetupError(
                    f"{config.source}: host {host.name!r}: set checksum_gate.dsn or host/port so "
                    "pt-table-checksum on the source can reach this replica"
                )
    options = checksum_options(spec, dsns)
    return ClusterChecksum(source, options, gated)


def run_configured_checksum(
    config: FleetConfig, cluster_name: str, host_name: str
) -> tuple[ChecksumRun, GateVerdict | None]:
    """The CLI's `checksum`: run on the cluster's source, then check `host_name` when it is gated."""
    spec = cluster_checksum(config, cluster_name)
    host = config.find_host(cluster_name, host_name)
    run = run_checksum(cli_target(spec.source, config.source), spec.options)
    policy = spec.gated.get(host.name)
    if policy is None:
        return run, None
    label = f"replica {cluster_name}/{host.name}"
    return run, check_replica(cli_target(host, config.source), policy, label)
