"""`xtrabackup-provider`: back up, list and restore with the same core, without Airflow.

Settings come from the fleet config the DAGs use (--config, else $XTRABACKUP_FLEET_CONFIG, else
fleet.yaml in Airflow's dags folder), or from flags alone (--bucket / --local-path without a
config); flags override the file.
"""

from __future__ import annotations

import argparse
import logging
import sys

from ..core.catalog.manifest import CatalogError
from ..core.common import secretenv
from ..core.config.load import load_config
from ..core.config.schema import ConfigError, FleetConfig
from ..core.config.wiring import SetupError
from ..core.db.server import ServerError
from ..core.engine.tools import EngineError
from ..core.pipeline.gpg import GpgError, PassphraseRequired
from ..core.pipeline.process import PipelineError
from ..core.restore.prepare import PrepareError
from ..core.storage.base import StorageError
from . import backups, binlogs, fleet, install, monitor, replicas, standby
from .options import BadArgument, load, require_values

USER_ERRORS = (
    ConfigError,
    SetupError,
    CatalogError,
    GpgError,
    EngineError,
    ServerError,
    PipelineError,
    PrepareError,
    StorageError,
    RuntimeError,
)


COMMANDS = {
    **backups.COMMANDS,
    **binlogs.COMMANDS,
    **fleet.COMMANDS,
    **monitor.COMMANDS,
    **replicas.COMMANDS,
    **standby.COMMANDS,
}
FLEET_COMMANDS = {**fleet.FLEET_COMMANDS, **monitor.FLEET_COMMANDS}  # the fleet config alone
# Libraries whose INFO lines mean nothing to a DBA; -v shows them.
QUIET_LIBRARIES = ("botocore", "boto3", "s3transfer", "urllib3")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xtrabackup-provider", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    backups.add_parsers(sub)
    binlogs.add_parsers(sub)
    binlogs.add_promote_parser(sub)
    fleet.add_parsers(sub)
    monitor.add_parsers(sub)
    replicas.add_parsers(sub)
    standby.add_parsers(sub)
    install.add_parsers(sub)
    require_values(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if check := getattr(args, "check_args", None):  # what one argument alone cannot tell
            check(args)
    except BadArgument as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose:
        for library in QUIET_LIBRARIES:  # "Found credentials in environment variables." and the like
            logging.getLogger(library).setLevel(logging.WARNING)
    config: FleetConfig | None = None
    try:
        with secretenv.held():  # no library's child sees a secret in our environment
            if args.command == "keygen":
                return backups.cmd_keygen(args)
            if args.command == "install-dags":
                return install.cmd_install_dags(args)
            if args.command in FLEET_COMMANDS:
                config = _holding(load_config(args.config))
                return FLEET_COMMANDS[args.command](args, config)
            config = _holding(load(args))
            return COMMANDS[args.command](args, config)
    except PassphraseRequired as exc:
        # The CLI passes no passphrase only when its variable is unset.
        name = config.encryption.passphrase_env if config else "XTRABACKUP_GPG_PASSPHRASE"
        print(f"error: {name} is not set: {exc}; export it (never put it on a command line)", file=sys.stderr)
        return 2
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        # Last resort for a file or a value no check foresaw: one line still (-v shows where).
        logging.getLogger(__name__).debug("the error came from here", exc_info=True)
        where = f": {exc.filename}" if isinstance(exc, OSError) and exc.filename else ""
        print(
            f"error: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}{where}",
            file=sys.stderr,
        )
        return 2
    except Exception as exc:
        # A server error no verb handled (a missing privilege, a lock wait, a lost connection during
        # a statement): one line naming the server and statement (core/db/errors.py), for any verb.
        # The store translates its own S3 errors (StorageError); a botocore error from a direct
        # client call is said in one line too.
        if (message := _server_failure(exc, args) or _s3_failure(exc, config)) is None:
            raise
        logging.getLogger(__name__).debug("the error came from here", exc_info=True)
        print(f"error: {message}", file=sys.stderr)
        return 2


def _holding(config: FleetConfig) -> FleetConfig:
    """The config, once the variables it names (passwords, the passphrase) are held too (a config
    loaded before, from the cache, was not parsed again)."""
    secretenv.hold(secretenv.names_in(config.model_dump()))
    return config


def _server_failure(exc: Exception, args: argparse.Namespace) -> str | None:
    """One line for a MySQLdb error: the verb and host, then the server, statement and what to do."""
    from ..core.db.errors import describe, is_server_error

    if not is_server_error(exc):
        return None
    verb = " ".join(str(v) for v in (args.command, getattr(args, f"{args.command}_command", None)) if v)
    cluster, host = getattr(args, "cluster", None), getattr(args, "host", None)
    where = f" for {cluster}/{host}" if cluster and host else f" for cluster {cluster}" if cluster else ""
    return f"{verb}{where}: {describe(exc)}"


def _s3_failure(exc: Exception, config: FleetConfig | None) -> str | None:
    """One line for a botocore error: the bucket and endpoint, and what to check; else None."""
    if not type(exc).__module__.startswith("botocore"):
        return None
    from ..core.storage.s3 import s3_hint

    storage = config.storage if config is not None else None
    bucket = (storage.bucket if storage else None) or "?"
    endpoint = storage.endpoint_url if storage else None
    hint = s3_hint(exc, bucket, endpoint)
    where = f"S3 bucket {bucket!r} at {endpoint or 'the default AWS S3 endpoint'}"
    return f"{where}: {exc}" + (f". {hint}" if hint else "")


if __name__ == "__main__":
    sys.exit(main())
