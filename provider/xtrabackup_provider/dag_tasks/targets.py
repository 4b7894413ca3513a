"""The storage targets as the shipped DAGs pass them to operators: each a dict of JSON-like values
(`name`, `bucket` or `local_path`, `prefix`, `aws_conn_id`), the first (`storage`) first."""

from __future__ import annotations

from typing import Any

from ..core.config.schema import FleetConfig, StorageConfig


def target_args(target: StorageConfig) -> dict[str, Any]:
    return {
        "name": target.name,
        "bucket": target.bucket,
        "local_path": target.local_path,
        "prefix": target.prefix,
        "aws_conn_id": target.aws_conn_id,
    }


def read_targets(config: FleetConfig) -> dict[str, Any]:
    """The arguments of an operator that reads backups (operators/base.py TargetReadingOperator):
    the first target's name, and the `copies` to fall back to in order."""
    return {"storage_name": config.storage.name, "fallback_targets": [target_args(t) for t in config.copies]}
