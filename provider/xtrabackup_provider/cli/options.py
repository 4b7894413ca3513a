"""What every host command takes: where the fleet config is, the host, the store; and the
config built from the file and those flags (flags override the file); how results are printed."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from typing import Any

from ..core.config.load import FieldNames, config_path, load_config, parse_config
from ..core.config.schema import CONFIG_ENV, FleetConfig

NEW_SERVER_HELP = (
    "the host's server was rebuilt or moved: accept a server its catalog does not know (server_uuid) as the "
    "host's from now on"
)


class BadArgument(Exception):
    """A command-line value that would do nothing, or something other than asked: `main` prints
    `error: <message>` (one line) and exits 2 before anything is read. Not a ValueError, so that
    argparse lets it through instead of printing its usage."""


def bad(flag: str, value: object, why: str) -> BadArgument:
    """`--flag 'value': why`, the value quoted (a newline or blanks show)."""
    from ..core.common.values import quoted

    return BadArgument(f"{flag} {quoted(value)}: {why}")


def require_values(parser: argparse.ArgumentParser) -> None:
    """Every option that takes a value, in every verb, refuses a blank one: it was read as no
    value (the config's prefix, no filter, every cluster, the default server). A value its type
    refuses is one line naming the flag too (argparse prints its usage first)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                require_values(sub)
        elif action.option_strings and action.nargs != 0:
            action.type = _given(max(action.option_strings, key=len), action.type)


def _given(flag: str, inner: Any) -> Any:
    def given(text: str) -> Any:
        if not text.strip():
            raise bad(flag, text, f"empty; give a value or leave {flag} out")
        if inner is None:
            return text
        try:
            return inner(text)
        except argparse.ArgumentTypeError as exc:  # its message quotes the value
            raise BadArgument(f"{flag}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise bad(flag, text, str(exc)) from None

    given.__name__ = getattr(inner, "__name__", "str")  # argparse names the type in its errors
    return given


def add_common(p: argparse.ArgumentParser) -> None:
    add_config(p)
    p.add_argument("--cluster", required=True)
    p.add_argument("--host", required=True, help="host name as in the fleet config")
    p.add_argument("--bucket", help="S3 bucket (overrides the config)")
    p.add_argument("--local-path", help="a directory used as the object store instead of S3")
    p.add_argument("--prefix", help="key prefix (default from config, else 'backups')")
    p.add_argument("--endpoint-url", help="S3 endpoint (MinIO, a test server)")


TARGET_STORE_HELP = (
    "read this storage target alone (its name in the config: `storage` is 'primary' unless named); "
    "default: `storage`, then each of `copies:` in order where something cannot be read or is damaged"
)


def add_target_store(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target-store", metavar="NAME", help=TARGET_STORE_HELP)


def add_replay(p: argparse.ArgumentParser, what: str) -> None:
    """--replay and --replay-threads: how `what` applies the binlogs."""
    p.add_argument(
        "--replay",
        choices=["applier", "pipe"],
        default="applier",
        help=f"how {what} applies the binlogs: the server's replication applier (default, parallel) or "
        "the family's binlog client piped into its client (mariadb-binlog | mariadb, mysqlbinlog | mysql)",
    )
    p.add_argument(
        "--replay-threads", type=int, default=4, help="the applier's parallel workers (0: one SQL thread)"
    )


def read_from(config: FleetConfig, args: argparse.Namespace, host: str | None = None) -> dict[str, Any]:
    """The fields of a read path's request: the host's catalog on the first storage target to read
    and the others to fall back to (`--target-store NAME`: that one alone). core/catalog/targets.py."""
    from ..core.catalog.targets import read_fields
    from ..core.config.wiring import read_sources

    return read_fields(
        read_sources(config, args.cluster, host or args.host, getattr(args, "target_store", None))
    )


def print_notes(notes: Iterable[str], stream: Any = None) -> None:
    """One `note:` line per fallback to another storage target (core/catalog/targets.py)."""
    for note in notes:
        print(f"note: {note}", file=stream)


CONFIG_HELP = (
    "fleet config YAML (default: $XTRABACKUP_FLEET_CONFIG, else fleet.yaml in Airflow's dags folder)"
)


def add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help=CONFIG_HELP)


def output(as_json: bool, data: Any, lines: Iterable[str]) -> None:
    """Print `data` as JSON (`--json`), else the human-readable `lines`."""
    if as_json:
        print(json.dumps(data, indent=2))
        return
    for line in lines:
        print(line)


def utc_time(text: str) -> Any:
    """argparse type: an ISO 8601 time inside the calendar (UTC if no zone)."""
    from ..core.common.values import parse_utc

    try:
        return parse_utc(text, "time")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def seconds(text: str) -> float:
    """argparse type: a positive, finite number of seconds (at most a year)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 366 * 86400:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds above 0 and at most a year")
    return value


def backup_id(*words: str) -> Any:
    """argparse type: a backup id (20261130T103000Z-full) or one of `words` (latest, all)."""
    from ..core.catalog.manifest import BACKUP_ID_RE

    def check(text: str) -> str:
        if text in words or BACKUP_ID_RE.fullmatch(text):
            return text
        choices = " or ".join(repr(w) for w in words)
        raise argparse.ArgumentTypeError(
            f"{text[:100]!r} is not a backup id (e.g. 20261130T103000Z-full) or {choices}"
        )

    return check


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def load(args: argparse.Namespace) -> FleetConfig:
    """The fleet config from the file (config_path), or, with --bucket / --local-path and no
    --config or $XTRABACKUP_FLEET_CONFIG, one built from flags alone; flags override the file."""
    import os

    if args.config or os.environ.get(CONFIG_ENV) or not (args.bucket or args.local_path):
        raw: dict[str, Any] = load_config(args.config).model_dump(exclude_none=True)
        source = str(config_path(args.config)[0])
    else:
        raw = {"clusters": [{"name": args.cluster, "hosts": [{"name": args.host}]}], "storage": {}}
        source = "command-line flags"
    storage = raw.setdefault("storage", {})
    names: FieldNames = {}  # what a config error names: the flag that set the field
    if args.bucket or args.local_path:
        storage.pop("bucket", None)
        storage.pop("local_path", None)
        names[("storage",)] = "--bucket / --local-path"
    for flag, key in (
        ("bucket", "bucket"),
        ("local_path", "local_path"),
        ("prefix", "prefix"),
        ("endpoint_url", "endpoint_url"),
    ):
        if getattr(args, flag, None):
            storage[key] = getattr(args, flag)
            names[("storage", key)] = _flag(flag)
    if source == "command-line flags":
        names[("clusters", 0, "name")] = "--cluster"
        host = raw["clusters"][0]["hosts"][0]
        for flag in ("flavour", "socket", "defaults_file"):
            if getattr(args, flag, None):
                host[flag] = getattr(args, flag)
                names[("clusters", 0, "hosts", 0, flag)] = _flag(flag)
        names[("clusters", 0, "hosts", 0, "name")] = "--host"
        if getattr(args, "no_encrypt", False):
            raw["encryption"] = {"enabled": False}
    if getattr(args, "public_key_file", None):
        raw.setdefault("encryption", {})["public_key_files"] = args.public_key_file
        names[("encryption", "public_key_files")] = "--public-key-file"
    # The most specific field first: ("storage", "prefix") before ("storage",).
    ordered = dict(sorted(names.items(), key=lambda item: -len(item[0])))
    config = parse_config(raw, source, ordered)
    config.find_host(args.cluster, args.host)
    return config
