"""The cluster's replication as the fleet config describes it (`replication:`): the source
replicas follow, the address they reach it at, and the settings provision-replica and the deep
restore test use; with the CLI's credentials (the DAGs read the same from Airflow connections).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..binlog.replication import ReplicationSource
from ..common import secretenv
from ..db.checksum import ChecksumOptions, checksum_options, replica_dsn
from ..db.server import MySQLTarget
from ..restore.replica_compare import SourceCompare
from .schema import ClusterConfig, FleetConfig, HostConfig, ReplicationConfig
from .wiring import SetupError, cli_target

PROVISION_REPLICATE = "percona.xbp_provision_checksums"
PROVISION_DSN_TABLE = "percona.xbp_provision_dsns"
# Each server's own: its replication position and pt's tables (core/db/checksum.py always leaves out
# the host-local heartbeat schema).
PROVISION_IGNORE_TABLES = ("mysql.gtid_slave_pos",)
PROVISION_IGNORE_DATABASES = ("percona",)


@dataclass(frozen=True)
class ClusterReplication:
    settings: ReplicationConfig
    source: HostConfig  # the host replicas follow


def cluster_replication(config: FleetConfig, cluster_name: str) -> ClusterReplication:
    cluster = config.cluster(cluster_name)
    source = cluster.replication_source()
    if cluster.replication is None or source is None:
        raise SetupError(
            f"{config.source}: cluster {cluster_name!r} needs a `replication` section (source: a host, user, "
            "password_env) for replicas built from backups and deep restore tests"
        )
    return ClusterReplication(cluster.replication, source)


def source_address(settings: ReplicationConfig, source: HostConfig, where: str) -> tuple[str, int]:
    """Where replicas connect to (TCP: a replica's IO thread has no socket option)."""
    host = settings.source_host or source.host
    if not host:
        raise SetupError(
            f"{where}: replication.source_host is not set and host {source.name!r} has no `host`: "
            "give the address replicas reach the source at"
        )
    return host, settings.source_port or source.port


def cli_replication_source(config: FleetConfig, cluster_name: str) -> ReplicationSource:
    rep = cluster_replication(config, cluster_name)
    password = secretenv.get(rep.settings.password_env)
    if password is None:
        raise SetupError(
            f"{config.source}: cluster {cluster_name!r}: set ${rep.settings.password_env} to the password of the "
            f"replication account {rep.settings.user!r}"
        )
    host, port = source_address(rep.settings, rep.source, config.source)
    return ReplicationSource(
        host, port, rep.settings.user, password, rep.settings.ssl, label=f"{cluster_name}/{rep.source.name}"
    )


def checksum_settings(cluster: ClusterConfig) -> ChecksumOptions:
    """The cluster's pt-table-checksum options (binary, chunking, filters), or the defaults."""
    return checksum_options(cluster.checksum, ()) if cluster.checksum else ChecksumOptions()


def provision_checksum(cluster: ClusterConfig, replica_dsn_text: str) -> ChecksumOptions:
    """pt-table-checksum against one new replica, into tables of its own (the gate's stay untouched)."""
    settings = checksum_settings(cluster)
    return replace(
        settings,
        recursion_method="dsn",
        replicate=PROVISION_REPLICATE,
        dsn_table=PROVISION_DSN_TABLE,
        replica_dsns=(replica_dsn_text,),
        ignore_databases=(*settings.ignore_databases, *PROVISION_IGNORE_DATABASES),
        ignore_tables=(*settings.ignore_tables, *PROVISION_IGNORE_TABLES),
    )


def host_dsn(host: HostConfig, where: str) -> str:
    """How pt-table-checksum on the source reaches a host: its provision.dsn, else its host/port."""
    if host.provision and host.provision.dsn:
        return host.provision.dsn
    if host.host:
        return replica_dsn(MySQLTarget(host=host.host, port=host.port))
    raise SetupError(
        f"{where}: host {host.name!r}: set provision.dsn or host/port so pt-table-checksum can reach it"
    )


def deep_compare(
    cluster: ClusterConfig, source: ReplicationSource, source_admin: MySQLTarget, settings: ReplicationConfig
) -> SourceCompare:
    return SourceCompare(
        source,
        source_admin,
        max_lag_seconds=settings.max_lag_seconds,
        catch_up_timeout=settings.catch_up_timeout_minutes * 60,
        poll_seconds=min(settings.poll_seconds, 2.0),
        checksum=checksum_settings(cluster),
        binlog_binary=cluster.binlogs.binary if cluster.binlogs else None,
    )


def cli_deep_compare(config: FleetConfig, cluster_name: str) -> SourceCompare:
    rep = cluster_replication(config, cluster_name)
    return deep_compare(
        config.cluster(cluster_name),
        cli_replication_source(config, cluster_name),
        cli_target(rep.source, config.source),
        rep.settings,
    )
