"""The commands that watch and copy: `check` (is every host's recovery still possible: exit 0 ok,
1 warning, 2 critical) and `copy` (bring the further storage targets up to date), and the copy
step that `backup` and `binlogs ship` run after they registered on the first target."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..core.backup.copies import CopyReport, What, copy_host
from ..core.config.schema import FleetConfig
from ..core.config.wiring import copy_target, make_catalog
from .options import add_common, add_config


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "check", help="one line per host: backup age vs RPO, restore tests, binlogs, copies (exit 0/1/2)"
    )
    add_config(p)
    p.add_argument("--cluster", help="only this cluster (default: every cluster)")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("copy", help="copy a host's backups and binlogs to the further storage targets")
    add_common(p)
    p.add_argument("--target-store", help="only this target (default: every target in `copies:`)")
    p.add_argument("--what", choices=["all", "backups", "binlogs"], default="all")
    p.add_argument("--json", action="store_true")


def copy_to_targets(
    config: FleetConfig, cluster: str, host: str, what: What = "all", only: str | None = None
) -> list[CopyReport]:
    """Copy the host to each further target (after its registration on the first); the core logs
    one line each. Never raises for a target that cannot be reached: its report says what is behind."""
    if only:
        config.target(only)  # a name that is not a target is a clear error
    source = make_catalog(config, cluster, host)
    reports = []
    for target in config.copies:
        if only and target.name != only:
            continue
        reports.append(copy_host(source, copy_target(target), source_name=config.storage.name, what=what))
    return reports


def cmd_copy(args: argparse.Namespace, config: FleetConfig) -> int:
    """Exit 0 when every target is up to date, 1 when something is still behind."""
    if not config.copies:
        print(f"{config.source}: no further storage targets (`copies:`) are configured", file=sys.stderr)
        return 0
    reports = copy_to_targets(config, args.cluster, args.host, args.what, args.target_store)
    if args.json:
        print(json.dumps([r.summary() for r in reports], indent=2))
    else:
        for r in reports:
            print(r.line())
    return 0 if all(r.ok for r in reports) else 1


def cmd_check(args: argparse.Namespace, config: FleetConfig) -> int:
    from ..core.report.check import check_fleet, exit_code

    checks = check_fleet(config, args.cluster)
    if args.json:
        print(json.dumps([c.as_dict() for c in checks], indent=2))
    else:
        for c in checks:
            print(c.line())
    return exit_code(checks)


COMMANDS = {"copy": cmd_copy}
FLEET_COMMANDS = {"check": cmd_check}
