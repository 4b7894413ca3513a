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
from ..core.config.wiring import SetupError, copy_target, make_catalog, target_catalog
from .options import add_common, add_config, utc_time


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "check", help="one line per host: backup age vs RPO, restore tests, binlogs, copies (exit 0/1/2)"
    )
    add_config(p)
    p.add_argument("--cluster", help="only this cluster (default: every cluster)")
    p.add_argument(
        "--target-store",
        metavar="NAME",
        help="judge what this storage target alone holds (default: every target, as a restore reads them)",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--as-of",
        type=utc_time,
        metavar="TIME",
        help="measure ages from this ISO time instead of now (to compare with the Backups view's "
        "`checked_at`, or a saved report)",
    )

    p = sub.add_parser(
        "copy",
        help="copy a host's backups and binlogs to the further storage targets, or re-seed one target from "
        "another (--from, --to)",
    )
    add_common(p)
    p.add_argument("--target-store", help="only this target (default: every target in `copies:`)")
    p.add_argument(
        "--from",
        dest="from_store",
        metavar="NAME",
        help="re-seed: the storage target to copy from (with --to), e.g. offsite after the primary lost its data",
    )
    p.add_argument(
        "--to",
        dest="to_store",
        metavar="NAME",
        help="re-seed: the storage target to fill (the primary included) with every backup and binlog it lacks",
    )
    p.add_argument(
        "--deep",
        action="store_true",
        help="re-seed: also re-read what the destination holds and copy again each object whose sha256 is "
        "not the manifest's (without it, missing or short objects)",
    )
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
    if args.from_store or args.to_store or args.deep:
        return cmd_reseed(args, config)
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


def cmd_reseed(args: argparse.Namespace, config: FleetConfig) -> int:
    """`copy --from A --to B`: exit 0 when B holds everything A does, 1 when something is left out."""
    if not (args.from_store and args.to_store) or args.target_store:
        raise SetupError(
            "a re-seed (--from, --to, --deep) takes --from NAME and --to NAME together, and no --target-store"
        )
    if args.from_store == args.to_store:
        raise SetupError(f"--from and --to both name {args.from_store!r}: name two storage targets")
    source = target_catalog(config, args.cluster, args.host, args.from_store)
    target = copy_target(config.target(args.to_store))
    report = copy_host(
        source, target, source_name=args.from_store, what=args.what, refill=True, deep=args.deep
    )
    if args.json:
        print(json.dumps([report.summary()], indent=2))
    else:
        print(report.line())  # the core logged each problem (what was not copied, and why)
    return 0 if report.ok and not report.problems else 1


def cmd_check(args: argparse.Namespace, config: FleetConfig) -> int:
    from ..core.report.check import check_fleet, exit_code

    checks = check_fleet(config, args.cluster, only=args.target_store, now=args.as_of)
    if args.json:
        print(json.dumps([c.as_dict() for c in checks], indent=2))
    else:
        for c in checks:
            print(c.line())
    return exit_code(checks)


COMMANDS = {"copy": cmd_copy}
FLEET_COMMANDS = {"check": cmd_check}
