"""`standby refresh`: bring a host's prepared standby up to its newest backup, as the backup DAG's
standby task does after each backup (core/restore/standby.py). Restoring from it is `restore
--from-standby DIR` (with --to-*: rolled forward over the shipped binlogs)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..core.config.schema import FleetConfig
from ..core.config.wiring import SetupError, read_private_key
from ..core.restore.standby_lock import DEFAULT_WAIT_SECONDS
from .options import add_common, add_target_store, print_notes, read_from, seconds


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("standby", help="the prepared standby copy of a host's newest chain")
    ssub = p.add_subparsers(dest="standby_command", required=True)
    refresh = ssub.add_parser(
        "refresh", help="apply the host's new backups to its standby (rebuilt when its chain changed)"
    )
    add_common(refresh)
    refresh.add_argument(
        "--standby-dir",
        type=Path,
        help="the standby directory (default: the host's standby_dir in the config)",
    )
    refresh.add_argument(
        "--private-key-file", help="armored private key; passphrase from $XTRABACKUP_GPG_PASSPHRASE"
    )
    refresh.add_argument(
        "--lock-wait",
        type=seconds,
        default=DEFAULT_WAIT_SECONDS,
        help=f"seconds to wait while another run holds the standby (default {DEFAULT_WAIT_SECONDS:.0f})",
    )
    refresh.add_argument(
        "--without-read-lease",
        action="store_true",
        help="go on when the read lease cannot be written (retention may then delete what this reads)",
    )
    add_target_store(refresh)
    refresh.add_argument("--json", action="store_true")


def cmd_standby(args: argparse.Namespace, config: FleetConfig) -> int:
    from ..core.restore.standby import update_standby

    host = config.find_host(args.cluster, args.host)
    directory = args.standby_dir or (Path(host.standby_dir) if host.standby_dir else None)
    if directory is None:
        raise SetupError(
            f"host {args.cluster}/{args.host} has no standby_dir in {config.source}; set it there or pass --standby-dir"
        )
    key, passphrase = read_private_key(config, args.private_key_file)
    update = update_standby(
        directory=directory,
        **read_from(config, args),
        private_key=key,
        passphrase=passphrase,
        binary=host.binary,
        lock_wait=args.lock_wait,
        without_read_lease=args.without_read_lease,
    )
    if args.json:
        print(json.dumps(asdict(update), indent=2, default=str))
        return 0
    done = f"applied {', '.join(update.applied_now)}" if update.applied_now else "nothing new to apply"
    rebuilt = " (rebuilt)" if update.rebuilt else ""
    print(
        f"standby {update.directory}{rebuilt}: {done}; holds {update.newest} (chain {update.chain_root}), "
        f"read from target {update.source}"
    )
    print_notes(update.fallbacks)
    return 0


COMMANDS = {"standby": cmd_standby}
