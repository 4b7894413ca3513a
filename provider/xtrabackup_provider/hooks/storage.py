"""BackupStorageHook: the amazon provider's S3Hook (an `aws` connection) -> the core's S3Store.

The connection's extra may hold `upload_memory_mib` (32..65536, default 512): the buffers one
upload stream may hold (core/storage/partplan.py), as `storage.upload_memory_mib` is for the CLI.
"""

from __future__ import annotations

__all__ = ["BackupStorageHook"]

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseHook

from ..core.catalog.backups import Catalog
from ..core.catalog.targets import Source, choose
from ..core.storage.base import MEMORY_MIB_RANGE, MiB, ObjectStore
from ..core.storage.local import LocalStore
from ..core.storage.partplan import DEFAULT_MEMORY, PartLimits
from ..core.storage.s3 import S3Store

MEMORY_FIELD = "upload_memory_mib"


class BackupStorageHook(BaseHook):
    """Object storage for backups. `endpoint_url` (MinIO, moto) goes in the aws connection's extra."""

    def __init__(
        self,
        aws_conn_id: str = "aws_default",
        bucket: str | None = None,
        local_path: str | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if bool(bucket) == bool(local_path):
            raise ValueError("BackupStorageHook needs exactly one of bucket or local_path")
        self.aws_conn_id = aws_conn_id
        self.bucket = bucket
        self.local_path = local_path
        # For readers that must answer soon (the Backups view): connect and read timeouts in
        # seconds and one retry, instead of the tasks' patient defaults.
        self.timeout = timeout

    def get_store(self) -> ObjectStore:
        return LocalStore(self.local_path) if self.local_path else self.get_s3_store()

    def get_s3_store(self) -> S3Store:
        """The bucket's store, for what only S3 has (lifecycle rules): the hook was given a bucket."""
        if not self.bucket:
            raise ValueError(f"BackupStorageHook({self.local_path!r}): a directory is not an S3 bucket")
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook
        from botocore.config import Config

        # Standard retry mode backs off on 5xx, throttling and connection resets.
        config = Config(retries={"max_attempts": 8, "mode": "standard"}, max_pool_connections=16)
        if self.timeout is not None:
            config = config.merge(
                Config(
                    connect_timeout=self.timeout,
                    read_timeout=self.timeout,
                    retries={"max_attempts": 2, "mode": "standard"},
                )
            )
        hook = S3Hook(aws_conn_id=self.aws_conn_id, config=config)
        return S3Store(hook.get_conn(), self.bucket, part_limits=PartLimits(memory=self._upload_memory(hook)))

    def _upload_memory(self, hook: Any) -> int:
        extra = hook.conn_config.extra_config if self.aws_conn_id else {}
        value = (extra or {}).get(MEMORY_FIELD)
        if value is None:
            return DEFAULT_MEMORY
        low, high = MEMORY_MIB_RANGE
        if isinstance(value, bool) or not str(value).isdigit() or not low <= int(value) <= high:
            raise ValueError(
                f"connection {self.aws_conn_id!r}: extra {MEMORY_FIELD}={value!r} must be a whole number "
                f"of MiB from {low} to {high} (the buffers one upload may hold); fix the connection's extra"
            )
        return int(value) * MiB

    def get_catalog(self, prefix: str, cluster: str, host: str) -> Catalog:
        return Catalog(self.get_store(), prefix, cluster, host)


def target_catalog(target: Mapping[str, Any], cluster: str, host: str) -> Catalog:
    """The host's catalog on a storage target given as the DAGs pass one: `bucket` (through
    `aws_conn_id`) or `local_path`, under `prefix`."""
    hook = BackupStorageHook(
        target.get("aws_conn_id") or "aws_default", target.get("bucket"), target.get("local_path")
    )
    return hook.get_catalog(target.get("prefix") or "backups", cluster, host)


def target_sources(
    first: Source, fallbacks: Sequence[Mapping[str, Any]], only: str | None = None
) -> list[Source]:
    """`first`, then the host's catalog on each of `fallbacks` (target dicts, by `name`): the
    targets a read tries in order (core/catalog/targets.py); `only`: the one of that name alone."""
    cluster, host = first.catalog.cluster, first.catalog.host
    sources = [first, *(Source(t["name"], target_catalog(t, cluster, host)) for t in fallbacks)]
    return choose(sources, only or None)
