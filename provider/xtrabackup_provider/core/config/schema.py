"""Fleet and policy configuration: the pydantic models of the YAML fleet config.

The same file drives the shipped DAGs (Airflow connection ids) and the CLI (file paths and
environment, for when Airflow is down). Models and validators only: no I/O, no runtime module.
"""

from __future__ import annotations

import functools
import os
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from ..db.dsn import DEFAULT_DSN_TABLE, DEFAULT_REPLICATE, check_database_name, check_dsn, check_table_name
from ..retention.model import RetentionPolicy
from ..storage.base import DEFAULT_MEMORY_MIB, MEMORY_MIB_RANGE, STORAGE_CLASSES, UPLOAD_CAP_MIB_RANGE

NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
CONFIG_ENV = "XTRABACKUP_FLEET_CONFIG"
DAY_SECONDS = 86400
MAX_PREFIX = 512  # S3 keys are at most 1024 bytes: the prefix leaves room for cluster/host/backup id
NAME_MAX = 255  # bytes in one file name: a prefix segment is a directory of a local target
YEAR_HOURS = 24 * 366
# Airflow's cron presets (airflow.utils.dates.cron_presets): 3.1 and 3.3 resolve them before croniter
# parses the expression, 3.2 does not (see airflow_cron_presets); @once and @continuous are no cron.
AIRFLOW_CRON_PRESETS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *",
}


def check_prefix(value: str) -> str:
    """A key prefix: relative path segments, none empty, '.' or '..' (they would escape it)."""
    parts = value.strip("/").split("/")
    if len(value.encode()) > MAX_PREFIX:
        raise ValueError(f"the prefix is {len(value.encode())} bytes; at most {MAX_PREFIX}")
    if value.strip("/") and any(p in ("", ".", "..") or not p.isprintable() or "\\" in p for p in parts):
        raise ValueError(
            f"{value[:100]!r}: a prefix is segments like backups/prod, without '.', '..', '//' or control characters"
        )
    if long := [p for p in parts if len(p.encode()) > NAME_MAX]:
        raise ValueError(
            f"the prefix segment {long[0][:40]!r}... is over {NAME_MAX} bytes, longer than a file name"
        )
    return value


@functools.cache
def airflow_cron_presets() -> dict[str, str]:
    """The presets the installed Airflow's DAGs resolve, told by its task SDK's version (core
    imports no Airflow): 1.1 (Airflow 3.1) builds core's cron timetables, which resolve them all;
    1.2 (3.2) its own, which resolve none (croniter parses @daily, @hourly, ... itself, not
    @quarterly; read in 3.2.2's airflow/sdk/definitions/timetables/_cron.py); 1.3 (3.3) resolves
    them again (CRON_PRESETS there)."""
    try:
        sdk = tuple(int(p) for p in version("apache-airflow-task-sdk").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return AIRFLOW_CRON_PRESETS
    return {} if sdk == (1, 2) else AIRFLOW_CRON_PRESETS


def check_schedule(value: str | None) -> str | None:
    """A DAG `schedule` the installed Airflow accepts: null, @once, @continuous, a preset it resolves,
    or what croniter (Airflow's cron parser) parses; refused here, it does not become a DAG import
    error."""
    if value is None or value in ("@once", "@continuous"):
        return value
    try:
        from croniter import croniter

        croniter(airflow_cron_presets().get(value, value))
    except Exception as exc:  # whatever croniter raises, Airflow refuses the DAG with it
        if value in AIRFLOW_CRON_PRESETS:  # a preset croniter lacks, which this Airflow does not resolve
            raise ValueError(
                f"{value!r}: the Airflow installed here does not resolve this preset; write it as "
                f"'{AIRFLOW_CRON_PRESETS[value]}'"
            ) from None
        why = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise ValueError(
            f"{value!r} is not a schedule Airflow accepts ({why}); use a cron expression like "
            "'30 2 * * *', a preset like @daily, or null"
        ) from None
    return value


Schedule = Annotated[str | None, AfterValidator(check_schedule)]


def path_names(path: str) -> tuple[str, ...]:
    """The names of `path` from the root, spellings resolved lexically (`//`, `.`, `..`, a trailing
    `/`): the schema reads no files, and the directory may not exist where the config is checked."""
    return tuple(p for p in os.path.normpath(os.path.abspath(path)).split("/") if p)


def nests(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether one of two paths (as path_names gives them) is the other or inside it."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def check_path(value: str | None) -> str | None:
    """A local path the OS can open: at most 4095 bytes, each part at most 255, no NUL."""
    if value is None:
        return None
    if "\x00" in value or len(value.encode()) > 4095 or any(len(p.encode()) > 255 for p in value.split("/")):
        raise ValueError(f"{value[:100]!r}...: not a usable path (at most 4095 bytes, 255 per name, no NUL)")
    return value


class ConfigError(ValueError):
    """The fleet config is invalid; the message names the file and the field path."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # .inf hours or MiB/s mean nothing


class ObjectLockConfig(_Model):
    """S3 Object Lock retention set on every backup object (the bucket must have Object Lock on)."""

    mode: Literal["GOVERNANCE", "COMPLIANCE"] = "GOVERNANCE"
    retain_days: int = Field(ge=1, le=36500)


class PoolConfig(_Model):
    """An Airflow pool (`airflow pools set NAME SLOTS DESC`; `xtrabackup-provider pools` prints them)."""

    name: str = Field(pattern=NAME)
    slots: int = Field(2, ge=1, le=10_000)
    description: str = ""

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value  # `pool: s3_backups` is enough

    @field_validator("name")
    @classmethod
    def _not_default(cls, value: str) -> str:
        if value == "default_pool":
            raise ValueError("default_pool is Airflow's shared pool; name a pool of its own")
        return value


class StorageConfig(_Model):
    name: str = Field("primary", pattern=NAME)  # what `restore --target-store`, list and report call it
    bucket: str | None = None
    local_path: str | None = None  # a directory instead of S3 (tests, air-gapped hosts)
    prefix: str = "backups"
    aws_conn_id: str = "aws_default"
    endpoint_url: str | None = None  # CLI only; the DAGs take it from the aws connection
    region: str | None = None
    storage_class: dict[str, str] = Field(
        default_factory=lambda: {"full": "STANDARD", "incremental": "STANDARD"}
    )
    sse: Literal["AES256", "aws:kms"] | None = None
    kms_key_id: str | None = None
    object_lock: ObjectLockConfig | None = None
    glacier_restore_tier: Literal["Standard", "Bulk", "Expedited"] = "Standard"
    glacier_restore_days: int = Field(3, ge=1, le=365)  # how long restored copies stay readable
    glacier_poll_seconds: float = Field(
        600, ge=1, le=DAY_SECONDS, allow_inf_nan=False
    )  # GlacierRestoreSensor / trigger poll interval
    pool: PoolConfig | None = None  # caps concurrent uploads to this storage target, across clusters
    # Buffers one upload stream may hold (the part being filled + those in flight); sizes the
    # multipart parts, and a stream past what one object holds continues in segments (S3 only).
    upload_memory_mib: int = Field(DEFAULT_MEMORY_MIB, ge=MEMORY_MIB_RANGE[0], le=MEMORY_MIB_RANGE[1])

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        return check_prefix(value)

    @field_validator("local_path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        return check_path(value)

    @field_validator("storage_class")
    @classmethod
    def _known_classes(cls, value: dict[str, str]) -> dict[str, str]:
        for kind, klass in value.items():
            if kind not in ("full", "incremental"):
                raise ValueError(f"storage classes are set per backup kind (full, incremental), not {kind!r}")
            if klass not in STORAGE_CLASSES:
                raise ValueError(
                    f"{kind}: unknown S3 storage class {klass!r}; use one of {sorted(STORAGE_CLASSES)}"
                )
        return value

    def place(self) -> tuple[str, tuple[str, ...]]:
        """Where the objects land, spellings resolved (lexically: the schema reads no files): the
        store, and the names under it (a local target's whole path, then the prefix)."""
        prefix = tuple(p for p in self.prefix.split("/") if p)
        if self.local_path:
            return "file", path_names(self.local_path) + prefix
        return f"s3 {_endpoint(self.endpoint_url)} {self.bucket}", prefix

    def describe_place(self) -> str:
        store, names = self.place()
        return "/" + "/".join(names) if store == "file" else f"{store}/{'/'.join(names)}"

    @model_validator(mode="after")
    def _one_target(self) -> StorageConfig:
        if bool(self.bucket) == bool(self.local_path):
            raise ValueError("set exactly one of `bucket` (S3) or `local_path` (a directory)")
        if self.kms_key_id and self.sse != "aws:kms":
            raise ValueError("kms_key_id is only used with `sse: aws:kms`; set sse or drop the key id")
        return self


def _endpoint(url: str | None) -> str:
    """An S3 endpoint as one spelling: AWS's (unset, or any amazonaws.com host: bucket names are
    global there), else scheme://host:port/path."""
    if url is None:
        return "aws"
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower()
    if host == "amazonaws.com" or host.endswith(".amazonaws.com"):
        return "aws"
    scheme = parts.scheme.lower()
    try:
        port = parts.port or {"https": 443, "http": 80}.get(scheme)
    except ValueError:
        port = None
    return f"{scheme}://{host}:{port}{parts.path.rstrip('/')}"


class ImpactConfig(_Model):
    """Bounds on what a backup takes from its database host (core/backup/impact.py); recorded in
    each manifest. Unset fields leave the tool's and the system's defaults."""

    throttle: int | None = Field(None, ge=1)  # the tool's --throttle (I/O operations per second)
    parallel: int | None = Field(None, ge=1, le=64)  # the tool's --parallel (default policy.parallel)
    nice: int | None = Field(None, ge=0, le=19)  # CPU niceness of the tool, gpg and the zstd threads
    ionice: Literal["idle", "best-effort"] | None = None  # I/O scheduling class of the tool
    ionice_level: int = Field(7, ge=0, le=7)  # with best-effort: 0 highest .. 7 lowest
    max_upload_mib_per_second: float | None = Field(  # cap on the upload to `storage`
        None, ge=UPLOAD_CAP_MIB_RANGE[0], le=UPLOAD_CAP_MIB_RANGE[1]
    )
    # Seconds of COUNT(*) a backup may spend on the server for exact row counts of its smallest
    # InnoDB tables (what restore tests compare exactly; core/db/rowcounts.py). 0: none.
    row_count_seconds: float = Field(1.0, ge=0, le=60, allow_inf_nan=False)


class CheckConfig(_Model):
    """What `xtrabackup-provider check` and the mysql_backup_check_<cluster> DAG hold a cluster's
    hosts to (core/report/check.py)."""

    schedule: Schedule = "*/30 * * * *"  # the check DAG; None: no DAG (the CLI still checks)
    rpo_hours: float = Field(26, gt=0, le=10 * YEAR_HOURS)  # newest restorable backup older: critical
    restore_test_max_age_days: float = Field(8, gt=0, le=3660)  # newest passed restore test older: warning
    binlog_max_lag_minutes: float = Field(15, gt=0, le=60 * YEAR_HOURS)  # shipped binlogs older: critical
    copies_max_behind_hours: float = Field(26, gt=0, le=10 * YEAR_HOURS)  # not on a further target: warning


class EncryptionConfig(_Model):
    enabled: bool = True
    gpg_conn_id: str = "backup_gpg"  # Airflow connection of type gpgkeys (public keys)
    private_gpg_conn_id: str = "backup_gpg_private"  # only restore workers should read this one
    public_key_files: list[str] = Field(default_factory=list)  # CLI
    private_key_file: str | None = None  # CLI restores
    passphrase_env: str = "XTRABACKUP_GPG_PASSPHRASE"  # CLI restores read the passphrase from here

    @field_validator("public_key_files")
    @classmethod
    def _paths(cls, value: list[str]) -> list[str]:
        for path in value:
            check_path(path)
        return value

    @field_validator("private_key_file")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        return check_path(value)


class PolicyConfig(_Model):
    compression_level: int = Field(3, ge=1, le=19)
    zstd_threads: int = Field(0, ge=0, le=256)
    parallel: int = Field(2, ge=1, le=64)
    # K-part backups (docs/configuration.md, "Parallel streams"): at most this many parts, each >= part_min_gib.
    max_parts: int = Field(1, ge=1, le=64)
    part_min_gib: float = Field(8, ge=0, le=1024 * 1024, allow_inf_nan=False)
    full_every_days: float = Field(7, gt=0, le=3650, allow_inf_nan=False)
    max_chain_length: int = Field(6, ge=0, le=1000)
    max_incremental_ratio: float = Field(0.5, gt=0, le=1000, allow_inf_nan=False)
    prepare_max_free_memory_pct: int = Field(50, ge=1, le=90)
    heartbeat: bool = True  # canary row written before each backup, checked by restore tests
    impact: ImpactConfig = Field(default_factory=ImpactConfig)  # every host's, unless it sets its own

    @property
    def full_every(self) -> timedelta:
        return timedelta(days=self.full_every_days)


class RetentionConfig(RetentionPolicy):
    """`retention:` (core/retention/plan.py documents the rules). Unset, everything is kept."""

    confirm: bool = False  # the backup DAG deletes only when true; until then it logs the plan


class CopyTargetConfig(StorageConfig):
    """A further storage target (`copies:`): each backup and shipped binlog is copied there after it
    is registered on `storage` (core/backup/copies.py), with its own manifest and retention."""

    name: str = Field(pattern=NAME)
    retention: RetentionConfig | None = None  # its own policy; None: the fleet's `retention:`
    binlogs: bool = True  # copy the shipped binlogs too (closed ones and gap markers)
    copy_attempts: int = Field(3, ge=1, le=20)  # tries per run before the copy is left behind
    copy_retry_seconds: float = Field(20, ge=0, le=3600)  # wait between those tries


class ChecksumGateConfig(_Model):
    """Gate a replica's backups on its pt-table-checksum results and health (off when absent)."""

    on_diff: Literal["fail", "skip", "mark"] = "fail"  # mark: back up and record it in the manifest
    on_blocked: Literal["fail", "wait"] = "fail"  # replication stopped, lag, stale/missing results
    max_age_hours: float = Field(26, gt=0, le=24 * 3650, allow_inf_nan=False)
    max_lag_seconds: float = Field(300, ge=0, le=DAY_SECONDS * 365, allow_inf_nan=False)
    wait_minutes: float = Field(
        30, gt=0, le=7 * 24 * 60, allow_inf_nan=False
    )  # how long on_blocked=wait waits
    poke_seconds: float = Field(60, gt=0, le=DAY_SECONDS, allow_inf_nan=False)
    deferrable: bool = False  # wait in the triggerer instead of a worker slot
    dsn: str | None = None  # how pt-table-checksum reaches this replica, e.g. "h=10.0.0.12,P=3306"

    @field_validator("dsn")
    @classmethod
    def _dsn(cls, value: str | None) -> str | None:
        return None if value is None else check_dsn(value)


class ProvisionConfig(_Model):
    """This host can be built as a replica from backups (`provision-replica`, its DAG)."""

    start_command: list[str] = Field(default_factory=lambda: ["systemctl", "start", "mariadb"], min_length=1)
    owner: str | None = None  # chown the restored datadir to the server's user (e.g. mysql)
    from_host: str | None = None  # whose backups: a host of the cluster (default: the replication source)
    checksum: bool = True  # gate on a pt-table-checksum pass (the source's account runs it)
    dsn: str | None = None  # how pt-table-checksum reaches this host (default: its host/port)

    @field_validator("dsn")
    @classmethod
    def _dsn(cls, value: str | None) -> str | None:
        return None if value is None else check_dsn(value)


class HostConfig(_Model):
    name: str = Field(pattern=NAME)
    flavour: Literal["mariabackup", "xtrabackup", "clone"] = "mariabackup"
    binary: str | None = None
    # The binlog client for this host's server (mysqlbinlog / mariadb-binlog of the server's own
    # family and version): default the cluster's `binlogs.binary`, else the server family's client.
    binlog_binary: str | None = None
    mysql_conn_id: str | None = None  # Airflow
    heartbeat_conn_id: str | None = None  # the source's connection when this host is a replica
    datadir: str | None = None
    queue: str = "default"
    # CLI connection when Airflow is down: a client option file holding the credentials,
    # or host/port/socket/user with the password in an environment variable.
    defaults_file: str | None = None
    host: str | None = None
    port: int = Field(3306, ge=1, le=65535)
    socket: str | None = None
    user: str = "root"
    password_env: str | None = None
    checksum_gate: ChecksumGateConfig | None = None
    impact: ImpactConfig | None = None  # fields set here override policy.impact
    # The server's option files (my.cnf; its !include / !includedir are followed), saved
    # encrypted with each backup and written next to the datadir by a restore.
    option_files: list[str] = Field(default_factory=list)
    restore_test: bool = True  # false: the restore-test DAG leaves this host out (xtrabackup hosts must)
    provision: ProvisionConfig | None = None
    # A directory kept as a prepared standby of the newest chain (core/restore/standby.py): the
    # backup DAG refreshes it after each backup, the CLI's `standby refresh` too; `restore
    # --from-standby` restores from it (with --to-*: rolled forward). It lives on the worker of
    # `standby_queue` (else the cluster's): that worker reads the private key to apply backups, so
    # there is no default; the host's own `queue` keeps it on the database host, by choice.
    standby_dir: str | None = None
    standby_queue: str | None = Field(None, pattern=NAME)

    @field_validator("binary", "binlog_binary", "datadir", "defaults_file", "socket", "standby_dir")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        return check_path(value)

    @field_validator("standby_dir")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"{value!r}: give an absolute path (a directory on the host's worker)")
        return value


class ChecksumConfig(_Model):
    """pt-table-checksum for a cluster, run against its source on its own schedule."""

    source: str | HostConfig  # a host of this cluster, or an inline one that is not backed up
    schedule: Schedule = "@daily"
    replicate: str = DEFAULT_REPLICATE
    recursion_method: Literal["dsn", "processlist", "hosts"] = "dsn"
    dsn_table: str = DEFAULT_DSN_TABLE
    databases: list[str] = Field(default_factory=list)
    ignore_databases: list[str] = Field(default_factory=list)
    chunk_time: float = Field(0.5, gt=0, le=60, allow_inf_nan=False)
    max_lag_seconds: float = Field(
        1, gt=0, le=DAY_SECONDS, allow_inf_nan=False
    )  # pt pauses while a replica lags more
    timeout_minutes: float = Field(240, gt=0, le=7 * 24 * 60, allow_inf_nan=False)
    binary: str = "pt-table-checksum"

    @field_validator("replicate", "dsn_table")
    @classmethod
    def _table(cls, value: str) -> str:
        return check_table_name(value, "the table")

    @field_validator("databases", "ignore_databases")
    @classmethod
    def _databases(cls, value: list[str]) -> list[str]:
        for name in value:
            check_database_name(name)
        return value


class BinlogConfig(_Model):
    """Binlog shipping for point-in-time recovery (dags/mysql_binlog_shipping.py); off unless set."""

    schedule: Schedule = "*/5 * * * *"
    mode: Literal["batch", "continuous"] = "batch"
    flush: bool = True  # batch: FLUSH BINARY LOGS first, so each run ships up to now (RPO = schedule)
    continuous_minutes: float = Field(
        55, gt=0, le=24 * 60, allow_inf_nan=False
    )  # continuous: one run's length
    progress_seconds: float = Field(10, gt=0, le=3600, allow_inf_nan=False)  # the open binlog's upload period
    gate_backups: bool = True  # the backup DAG waits until the binlogs up to the backup are shipped
    lag_timeout_minutes: float = Field(60, gt=0, le=7 * 24 * 60, allow_inf_nan=False)
    binary: str | None = None  # mariadb-binlog / mysqlbinlog
    storage_class: str = "STANDARD"

    @field_validator("storage_class")
    @classmethod
    def _known_class(cls, value: str) -> str:
        if value not in STORAGE_CLASSES:
            raise ValueError(f"unknown S3 storage class {value!r}; use one of {sorted(STORAGE_CLASSES)}")
        return value


class ReplicationConfig(_Model):
    """How replicas follow this cluster's source: `provision-replica` and the deep restore test."""

    source: str | HostConfig | None = None  # a host of this cluster (default: checksum.source), or inline
    source_host: str | None = None  # the address replicas connect to (default: the source's `host`)
    source_port: int | None = Field(None, ge=1, le=65535)  # default: the source's `port`
    user: str = "repl"  # the replication account (CLI)
    password_env: str = "XTRABACKUP_REPLICATION_PASSWORD"  # CLI: the account's password
    conn_id: str = (
        "mysql_replication"  # Airflow `mysql` connection: login/password (host/port override source_*)
    )
    ssl: bool = False
    max_lag_seconds: float = Field(5, ge=0, le=DAY_SECONDS * 365)  # caught up: Seconds_Behind_Master at most
    catch_up_timeout_minutes: float = Field(240, gt=0, le=60 * YEAR_HOURS)
    poll_seconds: float = Field(5, gt=0, le=3600)


class ClusterConfig(_Model):
    name: str = Field(pattern=NAME)
    schedule: Schedule = "@daily"
    max_parallel_backups: int = Field(2, ge=1, le=10_000)
    backup_pool: PoolConfig | None = None  # caps concurrent backups; slots default: max_parallel_backups
    restore_test_schedule: Schedule = "@weekly"
    restore_workdir: str = "/tmp"  # scratch for restore tests on the restore worker
    standby_queue: str | None = Field(None, pattern=NAME)  # its hosts' standby_queue unless they set one

    @field_validator("restore_workdir")
    @classmethod
    def _path(cls, value: str) -> str:
        return check_path(value) or value

    hosts: list[HostConfig] = Field(min_length=1)
    checksum: ChecksumConfig | None = None
    binlogs: BinlogConfig | None = None
    check: CheckConfig = Field(default_factory=CheckConfig)
    replication: ReplicationConfig | None = None

    @model_validator(mode="after")
    def _standby_queues(self) -> ClusterConfig:
        """A standby names the worker it lives on; a standby_queue without a standby does nothing."""
        for i, host in enumerate(self.hosts):
            if host.standby_dir is None and host.standby_queue is not None:
                raise ValueError(
                    f"hosts.{i}.standby_queue: host {host.name!r} has no standby_dir, so nothing runs on "
                    f"{host.standby_queue!r}; set its standby_dir or leave standby_queue out"
                )
            if host.standby_dir is not None and self.standby_queue_of(host) is None:
                raise ValueError(
                    f"hosts.{i}.standby_dir: host {host.name!r} needs a standby_queue (on the host or the "
                    "cluster): the queue of the worker where the directory lives, which reads the private key "
                    "to apply backups, e.g. a recovery host. To keep it on the database host, which then holds "
                    f"the private key, set standby_queue: {host.queue}"
                )
        if self.standby_queue is not None and not any(h.standby_dir for h in self.hosts):
            raise ValueError(
                f"standby_queue: no host of cluster {self.name!r} has a standby_dir, so nothing runs on "
                f"{self.standby_queue!r}; give a host a standby_dir or leave standby_queue out"
            )
        return self

    def standby_queue_of(self, host: HostConfig) -> str | None:
        """The queue of the worker where `host`'s standby lives (None: it has none)."""
        if host.standby_dir is None:
            return None
        return host.standby_queue or self.standby_queue

    @model_validator(mode="after")
    def _unique_hosts(self) -> ClusterConfig:
        seen: set[str] = set()
        for host in self.hosts:
            if host.name in seen:
                raise ValueError(f"host {host.name!r} appears twice in cluster {self.name!r}")
            seen.add(host.name)
        return self

    @model_validator(mode="after")
    def _pool_slots(self) -> ClusterConfig:
        if self.backup_pool and "slots" not in self.backup_pool.model_fields_set:
            self.backup_pool.slots = self.max_parallel_backups
        return self

    @model_validator(mode="after")
    def _checksum_source(self) -> ClusterConfig:
        source = self.checksum.source if self.checksum else None
        if isinstance(source, str) and source not in {h.name for h in self.hosts}:
            raise ValueError(
                f"checksum.source: cluster {self.name!r} has no host {source!r}; name one of its hosts "
                "or give the source inline (name, mysql_conn_id, defaults_file...)"
            )
        return self

    @model_validator(mode="after")
    def _replication_hosts(self) -> ClusterConfig:
        names = {h.name for h in self.hosts}
        source = self.replication.source if self.replication else None
        if isinstance(source, str) and source not in names:
            raise ValueError(
                f"replication.source: cluster {self.name!r} has no host {source!r}; name one of its hosts "
                "or give the source inline (name, mysql_conn_id, defaults_file...)"
            )
        for host in self.hosts:
            given = host.provision.from_host if host.provision else None
            if given is not None and given not in names:
                raise ValueError(
                    f"hosts.{host.name}.provision.from_host: cluster {self.name!r} has no host {given!r}"
                )
        return self

    def replication_source(self) -> HostConfig | None:
        """The host replicas follow: `replication.source`, else `checksum.source`; None if neither."""
        source = self.replication.source if self.replication else None
        if source is None and self.checksum is not None:
            source = self.checksum.source
        if isinstance(source, str):
            return next(h for h in self.hosts if h.name == source)
        return source


class FleetConfig(_Model):
    storage: StorageConfig
    encryption: EncryptionConfig = Field(default_factory=EncryptionConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    clusters: list[ClusterConfig] = Field(min_length=1)
    copies: list[CopyTargetConfig] = Field(default_factory=list)  # further storage targets
    _source: str = PrivateAttr("")

    @property
    def source(self) -> str:
        return self._source

    @model_validator(mode="after")
    def _unique_clusters(self) -> FleetConfig:
        names = [c.name for c in self.clusters]
        if dup := {n for n in names if names.count(n) > 1}:
            raise ValueError(f"cluster names must be unique; repeated: {sorted(dup)}")
        return self

    @model_validator(mode="after")
    def _distinct_standby_dirs(self) -> FleetConfig:
        """Two hosts' standbys in one directory would rebuild each other's (one chain per standby),
        and a rebuild empties its directory: one inside another's would be deleted by it."""
        seen: list[tuple[str, tuple[str, ...], str]] = []
        for cluster in self.clusters:
            for host in cluster.hosts:
                if host.standby_dir is None:
                    continue
                queue, names = cluster.standby_queue_of(host) or "", path_names(host.standby_dir)
                for other_queue, other, who in seen:
                    if other_queue == queue and nests(names, other):
                        how = (
                            "is also"
                            if names == other
                            else "is inside"
                            if len(names) > len(other)
                            else "holds"
                        )
                        raise ValueError(
                            f"host {cluster.name}/{host.name}: standby_dir {host.standby_dir} on queue {queue!r} "
                            f"{how} {who}'s; give each host its own standby_dir, none inside another"
                        )
                seen.append((queue, names, f"{cluster.name}/{host.name}"))
        return self

    @model_validator(mode="after")
    def _distinct_targets(self) -> FleetConfig:
        seen: dict[str, str] = {}
        places: list[tuple[tuple[str, tuple[str, ...]], str]] = []
        for i, target in enumerate(self.targets()):
            where = "storage" if i == 0 else f"copies[{i - 1}]"
            if target.name in seen:
                raise ValueError(f"{where}: target name {target.name!r} is also used by {seen[target.name]}")
            store, names = target.place()
            for (other_store, other_names), other in places:
                if store == other_store and nests(names, other_names):
                    how = "in the same place as" if len(names) == len(other_names) else "where it nests with"
                    raise ValueError(
                        f"{where} stores {how} {other} ({target.describe_place()}); a copy must go elsewhere, "
                        "or its copies and their retention land on that target"
                    )
            seen[target.name] = where
            places.append(((store, names), where))
        return self

    def targets(self) -> list[StorageConfig]:
        """Every storage target: `storage` first, then the `copies` in order."""
        return [self.storage, *self.copies]

    def target(self, name: str) -> StorageConfig:
        for target in self.targets():
            if target.name == name:
                return target
        raise ConfigError(
            f"{self.source}: no storage target {name!r}; targets are {[t.name for t in self.targets()]}"
        )

    def impact_for(self, host: HostConfig) -> ImpactConfig:
        """policy.impact, with the fields the host sets in its own `impact:` on top."""
        if host.impact is None:
            return self.policy.impact
        own = host.impact.model_dump(include=host.impact.model_fields_set)
        return self.policy.impact.model_copy(update=own)

    @model_validator(mode="after")
    def _consistent_pools(self) -> FleetConfig:
        self.pools()
        return self

    def pools(self) -> list[PoolConfig]:
        """Every pool the DAGs use, once; a name given two sizes is an error naming both places."""
        found: dict[str, tuple[PoolConfig, str]] = {}
        named = [(c.backup_pool, f"clusters[{c.name}].backup_pool") for c in self.clusters]
        named += [(t.pool, f"copies[{t.name}].pool") for t in self.copies]
        for pool, where in [*named, (self.storage.pool, "storage.pool")]:
            if pool is None:
                continue
            seen = found.setdefault(pool.name, (pool, where))
            if seen[0].slots != pool.slots:
                raise ValueError(
                    f"pool {pool.name!r} has {seen[0].slots} slots in {seen[1]} but {pool.slots} in {where}; "
                    "give it one size, or use another name"
                )
        return [pool for pool, _ in found.values()]

    def backup_pool(self, cluster: ClusterConfig) -> PoolConfig | None:
        """A task has one pool: backups take the cluster's (it caps the database side), else the
        storage target's. None leaves them in Airflow's default_pool."""
        return cluster.backup_pool or self.storage.pool

    def cluster(self, name: str) -> ClusterConfig:
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise ConfigError(
            f"{self.source}: no cluster {name!r}; clusters are {[c.name for c in self.clusters]}"
        )

    def find_host(self, cluster: str, host: str) -> HostConfig:
        for h in self.cluster(cluster).hosts:
            if h.name == host:
                return h
        raise ConfigError(f"{self.source}: cluster {cluster!r} has no host {host!r}")
