"""The fleet commands: `checksum` (pt-table-checksum and a replica's gate), `retention plan|apply`,
`report` (a cluster's HTML page) and `pools` (the Airflow pools the DAGs use)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..core.config.schema import FleetConfig
from ..core.config.wiring import target_catalog
from .options import add_common, add_config, add_target_store, utc_time


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "checksum", help="pt-table-checksum on the cluster's source; then the host's checksum gate"
    )
    add_common(p)
    p.add_argument("--json", action="store_true")

    _add_retention_parser(sub)
    _add_fleet_parsers(sub)


def _add_retention_parser(sub: Any) -> None:
    """`retention plan|apply`: the policy is the fleet config's `retention:` section."""
    p = sub.add_parser("retention", help="show or apply the retention policy (config section `retention:`)")
    rsub = p.add_subparsers(dest="retention_command", required=True)
    plan = rsub.add_parser("plan", help="what the policy keeps and deletes, and why (deletes nothing)")
    apply = rsub.add_parser("apply", help="delete what the plan deletes; a dry run without --confirm")
    for r in (plan, apply):
        add_common(r)
        r.add_argument("--json", action="store_true", help="the whole plan as JSON")
        r.add_argument("--target-store", help="a further storage target: its catalog and its own policy")
    plan.add_argument("--at", type=utc_time, help="plan as of this ISO time instead of now (UTC if no zone)")
    apply.add_argument("--confirm", action="store_true", help="really delete (manifests first)")


def _add_fleet_parsers(sub: Any) -> None:
    """`report` (a cluster) and `pools` (the fleet): settings from the fleet config alone."""
    p = sub.add_parser(
        "report", help="write a self-contained HTML page of a cluster's backups (exit 1 on warnings)"
    )
    add_config(p)
    p.add_argument("--cluster", required=True)
    p.add_argument("--out", required=True, type=Path, help="the HTML file to write")
    add_target_store(p)
    p = sub.add_parser("pools", help="print the `airflow pools set` commands for the config's pools")
    add_config(p)


def cmd_checksum(args: argparse.Namespace, config: FleetConfig) -> int:
    """Exit 0 when clean, 1 on differences (or a blocked gate), 2 when the run failed."""
    from dataclasses import asdict

    from ..core.config.checksum import run_configured_checksum

    run, verdict = run_configured_checksum(config, args.cluster, args.host)
    if args.json:
        out = {"checksum": run.summary(), "tables": [asdict(t) for t in run.tables]}
        print(json.dumps(out | {"gate": verdict.xcom() if verdict else None}, indent=2))
    else:
        print(f"{'TABLE':48} {'ROWS':>12} {'CHUNKS':>7} {'DIFFS':>6} {'SKIPPED':>8}")
        for t in run.tables:
            print(f"{t.table:48} {t.rows:>12} {t.chunks:>7} {t.diffs:>6} {t.skipped:>8}")
        for line in run.problems + run.warnings:
            print(f"WARNING: {line}", file=sys.stderr)
        if run.differing:
            print(f"DIFFERENCES in: {', '.join(t.table for t in run.differing)}")
        if verdict:
            print(f"gate: {verdict.outcome}: {verdict.message()}")
    if run.problems:
        return 2
    return 0 if run.ok and (verdict is None or verdict.outcome == "pass") else 1


def cmd_retention(args: argparse.Namespace, config: FleetConfig) -> int:
    """Print the plan (and apply it with `apply --confirm`); exit 1 when a manifest was unreadable."""
    from dataclasses import asdict

    from ..core.catalog.manifest import dumps
    from ..core.retention.apply import apply_plan, plan_host
    from ..core.retention.model import plan_table

    catalog = target_catalog(config, args.cluster, args.host, args.target_store)
    policy = getattr(config.target(args.target_store), "retention", None) if args.target_store else None
    plan = plan_host(catalog, policy or config.retention, getattr(args, "at", None))
    applied = None
    if args.retention_command == "apply":
        applied = apply_plan(catalog, plan, confirm=args.confirm).summary(max_names=len(plan.items))
    if args.json:
        out = {"summary": plan.summary(), "items": [asdict(i) for i in plan.items], "problems": plan.problems}
        print(dumps(out | ({"applied": applied} if applied else {})))
    else:
        print(plan_table(plan, limit=len(plan.items)))
        if applied and applied["dry_run"]:
            print(f"dry run: {len(plan.deletes)} item(s) would be deleted; add --confirm to delete them")
        elif applied:
            print(
                f"deleted {applied['deleted_items']} item(s): {applied['deleted_keys']} object(s), "
                f"freed {applied['freed_bytes']:,} bytes"
            )
            for retained in applied["retained"]:
                print(f"kept under Object Lock: {retained}")
            for name in applied["kept_leased"]:
                print(f"kept the data of {name}: a restore started reading it meanwhile")
    for problem in plan.problems:
        print(f"WARNING: unreadable manifest (its backup is kept): {problem}", file=sys.stderr)
    return 1 if plan.problems else 0


def cmd_report(args: argparse.Namespace, config: FleetConfig) -> int:
    from ..core.report.html import fmt_seconds, write_report

    report = write_report(config, args.cluster, args.out, only=args.target_store)
    for h in report.hosts:
        verified = h.last_verified.backup_id if h.last_verified else "never"
        lag = fmt_seconds(h.binlog.lag_seconds) if h.binlog else "n/a"
        print(f"{h.host}\t{len(h.backups)} backup(s)\tlast verified restore: {verified}\tbinlog lag: {lag}")
        for problem in h.problems:
            print(f"WARNING: {h.host}: {problem}", file=sys.stderr)
    print(f"wrote {args.out}")
    return 1 if any(h.problems for h in report.hosts) else 0


def cmd_pools(args: argparse.Namespace, config: FleetConfig) -> int:
    """One `airflow pools set` line per pool, with a description naming the tasks that use it."""
    import shlex

    for pool in config.pools():
        users = [c.name for c in config.clusters if (p := config.backup_pool(c)) and p.name == pool.name]
        uses = [f"backups of cluster(s) {', '.join(users)}"] if users else []
        if config.storage.pool and config.storage.pool.name == pool.name:
            uses.append("retention")
        text = pool.description or "xtrabackup-provider: " + "; ".join(uses)
        print(shlex.join(["airflow", "pools", "set", pool.name, str(pool.slots), text]))
    if not config.pools():
        print(f"# {config.source}: no pools set (clusters[].backup_pool, storage.pool)", file=sys.stderr)
    return 0


COMMANDS = {"checksum": cmd_checksum, "retention": cmd_retention}
# These read the fleet config alone: no host, no flags for the store.
FLEET_COMMANDS = {"report": cmd_report, "pools": cmd_pools}
