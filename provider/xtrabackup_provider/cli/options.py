"""What every host command takes: where the fleet config is, the host, the store; and the
config built from the file and those flags (flags override the file); how results are printed."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from typing import Any

from ..core.config.load import load_config, parse_config
from ..core.config.schema import CONFIG_ENV, FleetConfig


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="fleet config YAML (default: $XTRABACKUP_FLEET_CONFIG)")
    p.add_argument("--cluster", required=True)
    p.add_argument("--host", required=True, help="host name as in the fleet config")
    p.add_argument("--bucket", help="S3 bucket (overrides the config)")
    p.add_argument("--local-path", help="a directory used as the object store instead of S3")
    p.add_argument("--prefix", help="key prefix (default from config, else 'backups')")
    p.add_argument("--endpoint-url", help="S3 endpoint (MinIO, a test server)")


def output(as_json: bool, data: Any, lines: Iterable[str]) -> None:
    """Print `data` as JSON (`--json`), else the human-readable `lines`."""
    if as_json:
        print(json.dumps(data, indent=2))
        return
    for line in lines:
        print(line)


def utc_time(text: str) -> Any:
    from datetime import UTC, datetime

    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO time: {text!r} (e.g. 2026-12-01T00:00:00Z)") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def load(args: argparse.Namespace) -> FleetConfig:
    """The fleet config from the file, or one built from flags; flags override the file."""
    import os

    if args.config or os.environ.get(CONFIG_ENV):
        raw: dict[str, Any] = load_config(args.config).model_dump(exclude_none=True)
        source = args.config or os.environ[CONFIG_ENV]
    else:
        raw = {"clusters": [{"name": args.cluster, "hosts": [{"name": args.host}]}], "storage": {}}
        source = "command-line flags"
    storage = raw.setdefault("storage", {})
    if args.bucket or args.local_path:
        storage.pop("bucket", None)
        storage.pop("local_path", None)
    for flag, key in (
        ("bucket", "bucket"),
        ("local_path", "local_path"),
        ("prefix", "prefix"),
        ("endpoint_url", "endpoint_url"),
    ):
        if getattr(args, flag, None):
            storage[key] = getattr(args, flag)
    if source == "command-line flags":
        host = raw["clusters"][0]["hosts"][0]
        for flag in ("flavour", "socket", "defaults_file"):
            if getattr(args, flag, None):
                host[flag] = getattr(args, flag)
        if getattr(args, "no_encrypt", False):
            raw["encryption"] = {"enabled": False}
    if getattr(args, "public_key_file", None):
        raw.setdefault("encryption", {})["public_key_files"] = args.public_key_file
    config = parse_config(raw, source)
    config.find_host(args.cluster, args.host)
    return config
