"""Config -> core objects, for the CLI (and anything else without Airflow connections)."""

from __future__ import annotations

import os
from pathlib import Path

from ..backup.copies import CopyTarget
from ..backup.decide import ChainPolicy
from ..backup.impact import ImpactSettings
from ..catalog.backups import Catalog
from ..catalog.targets import Source
from ..db.server import MySQLTarget
from ..storage.base import MiB, ObjectStore
from ..storage.local import LocalStore
from ..storage.partplan import PartLimits
from ..storage.s3 import S3Store, make_s3_client
from .schema import CopyTargetConfig, FleetConfig, HostConfig, PolicyConfig, StorageConfig


class SetupError(ValueError):
    """A setting the CLI needs is missing; the message names it and where to put it."""


def make_store(storage: StorageConfig, client: object | None = None) -> ObjectStore:
    if storage.local_path:
        return LocalStore(storage.local_path)
    assert storage.bucket is not None
    return S3Store(
        client or make_s3_client(storage.endpoint_url, storage.region),
        storage.bucket,
        part_limits=PartLimits(memory=storage.upload_memory_mib * MiB),
    )


def make_catalog(
    config: FleetConfig, cluster: str, host: str, store: ObjectStore | None = None, prefix: str | None = None
) -> Catalog:
    config.find_host(cluster, host)
    return Catalog(store or make_store(config.storage), prefix or config.storage.prefix, cluster, host)


def copy_target(target: StorageConfig, store: ObjectStore | None = None) -> CopyTarget:
    """A storage target as core/backup/copies.py writes to it: a `copies:` entry, or `storage`
    itself when it is re-seeded (`copy --from offsite --to primary`)."""
    lock = target.object_lock
    copies = target if isinstance(target, CopyTargetConfig) else None  # `storage`: binlogs too, one try
    return CopyTarget(
        name=target.name,
        store=store or make_store(target),
        prefix=target.prefix,
        storage_classes=dict(target.storage_class),
        sse=target.sse,
        kms_key_id=target.kms_key_id,
        object_lock_mode=lock.mode if lock else None,
        object_lock_days=lock.retain_days if lock else None,
        binlogs=copies.binlogs if copies else True,
        attempts=copies.copy_attempts if copies else 1,
        retry_seconds=copies.copy_retry_seconds if copies else 0.0,
    )


def target_catalog(config: FleetConfig, cluster: str, host: str, name: str | None) -> Catalog:
    """The host's catalog on the storage target `name` (None: the first target, `storage`)."""
    target = config.target(name) if name else config.storage
    return make_catalog(config, cluster, host, make_store(target), prefix=target.prefix)


def read_sources(config: FleetConfig, cluster: str, host: str, only: str | None = None) -> list[Source]:
    """The host's catalog on each storage target a read path tries, in order: `storage` then the
    `copies` (core/catalog/targets.py), or the target `only` names, alone (`--target-store`)."""
    names = [only] if only else [t.name for t in config.targets()]  # an unknown name: one clear error
    return [Source(n, target_catalog(config, cluster, host, n)) for n in names]


def impact_settings(config: FleetConfig, host: HostConfig) -> ImpactSettings:
    return ImpactSettings.from_dict(config.impact_for(host).model_dump())


def chain_policy(policy: PolicyConfig) -> ChainPolicy:
    return ChainPolicy(policy.full_every, policy.max_chain_length, policy.max_incremental_ratio)


def cli_target(host: HostConfig, source: str) -> MySQLTarget:
    """Credentials without Airflow: a client option file, or a password from the environment."""
    password = None
    if host.password_env:
        password = os.environ.get(host.password_env)
        if password is None:
            raise SetupError(
                f"{source}: host {host.name!r}: environment variable {host.password_env} is not set"
            )
    if not (host.defaults_file or host.socket or host.host):
        raise SetupError(
            f"{source}: host {host.name!r} needs `defaults_file`, `socket` or `host` for the CLI to reach it"
        )
    return MySQLTarget(
        host=host.host,
        port=host.port,
        socket=host.socket,
        user=host.user,
        password=password,
        defaults_file=host.defaults_file,
    )


def read_public_keys(config: FleetConfig) -> list[str]:
    if not config.encryption.enabled:
        return []
    if not config.encryption.public_key_files:
        raise SetupError(
            f"{config.source}: encryption.public_key_files is empty; list the recipients' public keys"
        )
    return [_read(path, "encryption.public_key_files") for path in config.encryption.public_key_files]


def read_private_key(config: FleetConfig, override: str | None = None) -> tuple[str | None, str | None]:
    path = override or config.encryption.private_key_file
    if not path:
        return None, None
    return _read(path, "encryption.private_key_file"), os.environ.get(config.encryption.passphrase_env)


def _read(path: str, field: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise SetupError(f"{field}: cannot read {path}: {exc.strerror}") from exc
