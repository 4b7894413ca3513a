"""Loading the fleet config: YAML from a file, validated, with errors that name the file and field."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .schema import CONFIG_ENV, ConfigError, FleetConfig

# A field path -> what the user set it with (a CLI flag), to name that instead of the path.
FieldNames = dict[tuple[str | int, ...], str]


def _format_errors(exc: ValidationError, source: str, names: FieldNames | None = None) -> str:
    """One line (the CLI prints it after `error: `, a DAG import error shows it): every field."""
    problems = []
    for err in exc.errors()[:10]:
        loc = tuple(err["loc"])
        named = next((name for field, name in (names or {}).items() if loc[: len(field)] == field), None)
        path = named or ".".join(str(p) for p in loc) or "(top level)"
        problems.append(f"{path}: {err['msg']}")
    return f"{source}: invalid fleet config: " + "; ".join(problems)


def parse_config(data: Any, source: str = "<config>", names: FieldNames | None = None) -> FleetConfig:
    """Validate a config; `names` says which fields came from flags, for the error to name them."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the fleet config must be a YAML mapping with storage/clusters keys")
    try:
        config = FleetConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source, names)) from None
    config._source = source
    return config


CONFIG_NAME = "fleet.yaml"


def airflow_dags_folder() -> Path:
    """Airflow's `[core] dags_folder` as Airflow reads it, without importing Airflow (the CLI runs
    where Airflow may not be installed): $AIRFLOW__CORE__DAGS_FOLDER, else the value in airflow.cfg
    ($AIRFLOW_CONFIG, else $AIRFLOW_HOME/airflow.cfg), else $AIRFLOW_HOME/dags (AIRFLOW_HOME: ~/airflow)."""
    import configparser

    home = Path(os.path.expanduser(os.environ.get("AIRFLOW_HOME") or "~/airflow"))
    folder = os.environ.get("AIRFLOW__CORE__DAGS_FOLDER")
    if not folder:
        cfg = configparser.ConfigParser(interpolation=None, strict=False)
        with contextlib.suppress(OSError, configparser.Error, UnicodeDecodeError):
            cfg.read(os.environ.get("AIRFLOW_CONFIG") or home / "airflow.cfg", encoding="utf-8")
        folder = cfg.get("core", "dags_folder", fallback="").replace("{AIRFLOW_HOME}", str(home))
    return Path(os.path.expandvars(os.path.expanduser(folder))) if folder else home / "dags"


def config_path(path: str | Path | None = None, dags_folder: str | Path | None = None) -> tuple[Path, str]:
    """Where the fleet config is, and how it was chosen: `path` (--config), else
    $XTRABACKUP_FLEET_CONFIG, else fleet.yaml in `dags_folder` (a DAG file's own folder; for the
    CLI Airflow's dags folder, where the DAG files are), never relative to the installed package."""
    if path:
        return Path(path), "--config"
    if env := os.environ.get(CONFIG_ENV):
        return Path(env), f"${CONFIG_ENV}"
    folder = Path(dags_folder) if dags_folder else airflow_dags_folder()
    return folder / CONFIG_NAME, "default"


def load_config(path: str | Path | None = None, *, dags_folder: str | Path | None = None) -> FleetConfig:
    """Load the fleet config (where: config_path), validated; errors name the file and the field.

    The shipped DAG files read the same file: one process (a DagBag, `airflow dags list`) parses
    it once per version of the file. Callers must not modify the returned config."""
    resolved, how = config_path(path, dags_folder)
    try:
        raw = resolved.read_bytes()
    except OSError as exc:
        raise ConfigError(_unreadable(resolved, how, exc)) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{resolved}: not UTF-8 text (byte {exc.start} is {raw[exc.start : exc.start + 1]!r}); save it as UTF-8"
        ) from None
    key = (str(resolved.resolve()), hashlib.sha256(raw).hexdigest())
    if (cached := _LOADED.get(key)) is None:
        cached = _LOADED[key] = _parse_text(text, resolved)
    return cached


def _unreadable(resolved: Path, how: str, exc: OSError) -> str:
    if how == "default" and isinstance(exc, FileNotFoundError):
        return (
            f"{resolved}: no fleet config there (the default: {CONFIG_NAME} next to the DAG files); write it "
            f"there, or name another file with ${CONFIG_ENV} (the CLI: --config)"
        )
    return f"{resolved} (from {how}): cannot read the fleet config: {exc.strerror or exc}"


_LOADED: dict[tuple[str, str], FleetConfig] = {}


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader (the C one is ~10x faster: DAG files parse this on every dag-processor
    pass), refusing a key given twice in one mapping: YAML would silently keep the last one."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, list | dict):
                continue  # unhashable: the schema refuses it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found key {key!r} twice",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _parse_text(text: str, resolved: Path) -> FleetConfig:
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).replace(' in "<unicode string>"', "").split())
        raise ConfigError(f"{resolved}: not valid YAML: {detail}") from exc
    except RecursionError:
        raise ConfigError(f"{resolved}: not valid YAML: nested too deeply") from None
    return parse_config(data, str(resolved))
