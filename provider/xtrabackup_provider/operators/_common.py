"""Lookups every storage-backed operator does the same way: the host's catalog, the private key."""

from __future__ import annotations

from typing import Any

from ..core.catalog import Catalog


def host_catalog(op: Any) -> Catalog:
    """The catalog of `op.cluster/op.host` in the operator's bucket (or local_path) under `op.prefix`."""
    from ..hooks.storage import BackupStorageHook

    store = BackupStorageHook(op.aws_conn_id, op.bucket, getattr(op, "local_path", None))
    return store.get_catalog(op.prefix, op.cluster, op.host)


def private_key(gpg_conn_id: str | None) -> tuple[str | None, str | None]:
    """(armored private key, passphrase) from a gpg_keys connection; (None, None) without one."""
    from ..hooks.gpg import GpgKeysHook

    return GpgKeysHook(gpg_conn_id).private_key() if gpg_conn_id else (None, None)
