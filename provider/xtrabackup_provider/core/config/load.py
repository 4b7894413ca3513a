"""Loading the fleet config: YAML from a file, validated, with errors that name the file and field."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    ValidationError,
)

from .schema import CONFIG_ENV, ConfigError, FleetConfig


def _format_errors(exc: ValidationError, source: str) -> str:
    """One line (the CLI prints it after `error: `, a DAG import error shows it): every field."""
    problems = []
    for err in exc.errors()[:10]:
        path = ".".join(str(p) for p in err["loc"]) or "(top level)"
        problems.append(f"{path}: {err['msg']}")
    return f"{source}: invalid fleet config: " + "; ".join(problems)


def parse_config(data: Any, source: str = "<config>") -> FleetConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the fleet config must be a YAML mapping with storage/clusters keys")
    try:
        config = FleetConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source)) from None
    config._source = source
    return config


def load_config(path: str | Path | None = None) -> FleetConfig:
    """Load the fleet config from `path`, $XTRABACKUP_FLEET_CONFIG, or dags/config/fleet.yaml.

    The four shipped DAG files read the same file: one process (a DagBag, `airflow dags list`)
    parses it once per version of the file. Callers must not modify the returned config."""
    resolved = Path(
        path or os.environ.get(CONFIG_ENV) or Path(__file__).parents[3] / "dags/config/fleet.yaml"
    )
    try:
        text = resolved.read_text()
    except OSError as exc:
        raise ConfigError(
            f"cannot read fleet config {resolved}: {exc.strerror}; set {CONFIG_ENV} or --config"
        ) from exc
    key = (str(resolved.resolve()), hashlib.sha256(text.encode()).hexdigest())
    if (cached := _LOADED.get(key)) is None:
        cached = _LOADED[key] = _parse_text(text, resolved)
    return cached


_LOADED: dict[tuple[str, str], FleetConfig] = {}


def _parse_text(text: str, resolved: Path) -> FleetConfig:
    try:
        # The C loader is ~10x faster: DAG files parse this on every dag-processor pass.
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
    except yaml.YAMLError as exc:
        raise ConfigError(f"{resolved}: not valid YAML: {exc}") from exc
    return parse_config(data, str(resolved))
