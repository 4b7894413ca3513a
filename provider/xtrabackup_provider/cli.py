"""`xtrabackup-provider`: back up, list and restore with the same core, without Airflow.

Settings come from the fleet config the DAGs use (--config or $XTRABACKUP_FLEET_CONFIG), or
from flags alone; flags override the file.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from .cli_binlog import add_binlog_parsers, add_restore_targets, cmd_binlogs, cmd_pitr_restore, pitr_target
from .core.catalog.manifest import CatalogError, manifest_summary
from .core.config.load import load_config, parse_config
from .core.config.schema import CONFIG_ENV, ConfigError, FleetConfig
from .core.config.wiring import (
    SetupError,
    chain_policy,
    cli_target,
    make_catalog,
    read_private_key,
    read_public_keys,
)
from .core.db.server import ServerError
from .core.engine.tools import EngineError
from .core.pipeline.gpg import GpgError
from .core.pipeline.process import PipelineError
from .core.restore.archived import chain_states
from .core.restore.prepare import PrepareError
from .core.storage.base import StorageError
from .core.storage.glacier import request_restores, wait_for_restores, waiting

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


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="fleet config YAML (default: $XTRABACKUP_FLEET_CONFIG)")
    p.add_argument("--cluster", required=True)
    p.add_argument("--host", required=True, help="host name as in the fleet config")
    p.add_argument("--bucket", help="S3 bucket (overrides the config)")
    p.add_argument("--local-path", help="a directory used as the object store instead of S3")
    p.add_argument("--prefix", help="key prefix (default from config, else 'backups')")
    p.add_argument("--endpoint-url", help="S3 endpoint (MinIO, a test server)")


def _add_retention_parser(sub: Any) -> None:
    """`retention plan|apply`: the policy is the fleet config's `retention:` section."""
    p = sub.add_parser("retention", help="show or apply the retention policy (config section `retention:`)")
    rsub = p.add_subparsers(dest="retention_command", required=True)
    plan = rsub.add_parser("plan", help="what the policy keeps and deletes, and why (deletes nothing)")
    apply = rsub.add_parser("apply", help="delete what the plan deletes; a dry run without --confirm")
    for r in (plan, apply):
        _add_common(r)
        r.add_argument("--json", action="store_true", help="the whole plan as JSON")
    plan.add_argument("--at", type=_utc_time, help="plan as of this ISO time instead of now (UTC if no zone)")
    apply.add_argument("--confirm", action="store_true", help="really delete (manifests first)")


def _utc_time(text: str) -> Any:
    from datetime import UTC, datetime

    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO time: {text!r} (e.g. 2026-12-01T00:00:00Z)") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _add_s3_parsers(sub: Any) -> None:
    """`glacier-restore` and `verify` (issue: S3 and Glacier)."""
    p = sub.add_parser("glacier-restore", help="request the restore of a backup chain's archived objects")
    _add_common(p)
    p.add_argument("--backup-id", default="latest", help="backup id, or 'latest' (default)")
    p.add_argument(
        "--tier", choices=["Standard", "Bulk", "Expedited"], help="default: storage.glacier_restore_tier"
    )
    p.add_argument(
        "--days", type=int, help="days the restored copies stay readable (storage.glacier_restore_days)"
    )
    p.add_argument("--wait", action="store_true", help="poll until every object is readable")
    p.add_argument("--poll-interval", type=float, default=60.0, help="seconds between polls with --wait")
    p.add_argument("--timeout", type=float, default=3 * 86400, help="give up waiting after this many seconds")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser(
        "verify", help="check stored backups without restoring them (exit 1 if anything is wrong)"
    )
    _add_common(p)
    p.add_argument("--backup-id", default="all", help="a backup id, 'latest', or 'all' (default)")
    p.add_argument(
        "--deep", action="store_true", help="stream every object: sha256, gpg, zstd, xbstream framing"
    )
    p.add_argument(
        "--private-key-file", help="for --deep on encrypted backups; passphrase from the environment"
    )
    p.add_argument("--json", action="store_true")


def _add_fleet_parsers(sub: Any) -> None:
    """`report` (a cluster) and `pools` (the fleet): settings from the fleet config alone."""
    p = sub.add_parser(
        "report", help="write a self-contained HTML page of a cluster's backups (exit 1 on warnings)"
    )
    p.add_argument("--config", help="fleet config YAML (default: $XTRABACKUP_FLEET_CONFIG)")
    p.add_argument("--cluster", required=True)
    p.add_argument("--out", required=True, type=Path, help="the HTML file to write")
    p = sub.add_parser("pools", help="print the `airflow pools set` commands for the config's pools")
    p.add_argument("--config", help="fleet config YAML (default: $XTRABACKUP_FLEET_CONFIG)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xtrabackup-provider", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("backup", help="take a backup (full, incremental, or as the chain policy decides)")
    _add_common(p)
    p.add_argument("--kind", choices=["auto", "full", "incremental"], default="auto")
    p.add_argument("--flavour", choices=["mariabackup", "xtrabackup"])
    p.add_argument("--socket", help="server unix socket (without a config)")
    p.add_argument("--defaults-file", help="client option file with the credentials (without a config)")
    p.add_argument("--public-key-file", action="append", help="recipient public key (repeatable)")
    p.add_argument("--no-encrypt", action="store_true", help="store unencrypted (not recommended)")

    p = sub.add_parser("list", help="list a host's backups from the catalog")
    _add_common(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("restore", help="restore a backup chain into an empty datadir")
    _add_common(p)
    p.add_argument("--backup-id", default="latest", help="backup id, or 'latest' (default)")
    p.add_argument("--target-datadir", required=True, type=Path)
    p.add_argument(
        "--private-key-file", help="armored private key; passphrase from $XTRABACKUP_GPG_PASSPHRASE"
    )
    p.add_argument(
        "--scratch-dir", type=Path, help="where to extract and prepare (default: beside the target)"
    )
    p.add_argument("--copy-back", action="store_true", help="copy instead of move (keeps nothing extra)")
    p.add_argument("--json", action="store_true")
    add_restore_targets(p)

    p = sub.add_parser(
        "checksum", help="pt-table-checksum on the cluster's source; then the host's checksum gate"
    )
    _add_common(p)
    p.add_argument("--json", action="store_true")

    _add_retention_parser(sub)
    _add_s3_parsers(sub)
    add_binlog_parsers(sub, _add_common)
    _add_fleet_parsers(sub)

    p = sub.add_parser("keygen", help="create a GPG key pair for backups (passphrase from the environment)")
    p.add_argument("--uid", required=True, help='e.g. "MySQL backups <dba@example.com>"')
    p.add_argument("--out-dir", required=True, type=Path, help="writes public.asc and private.asc (0600)")
    p.add_argument("--passphrase-env", default="XTRABACKUP_GPG_PASSPHRASE")
    return parser


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


def cmd_backup(args: argparse.Namespace, config: FleetConfig) -> int:
    from .core.backup.run import BackupRequest, run_backup
    from .core.common.progress import ProgressLogger

    host = config.find_host(args.cluster, args.host)
    policy = config.policy
    manifest = run_backup(
        BackupRequest(
            catalog=make_catalog(config, args.cluster, args.host),
            target=cli_target(host, config.source),
            flavour=host.flavour,
            binary=host.binary,
            datadir=host.datadir,
            kind=args.kind,
            public_keys=read_public_keys(config),
            allow_unencrypted=not config.encryption.enabled,
            compression_level=policy.compression_level,
            zstd_threads=policy.zstd_threads,
            parallel=policy.parallel,
            storage_classes=dict(config.storage.storage_class),
            sse=config.storage.sse,
            kms_key_id=config.storage.kms_key_id,
            object_lock_mode=config.storage.object_lock.mode if config.storage.object_lock else None,
            object_lock_days=config.storage.object_lock.retain_days if config.storage.object_lock else None,
            policy=chain_policy(policy),
            heartbeat=policy.heartbeat,
            progress=ProgressLogger(logging.getLogger("xtrabackup_provider"), f"backup of {args.host}"),
        )
    )
    print(
        f"{manifest.backup_id}\t{manifest.kind}\t{manifest.stored_bytes} bytes stored\t{manifest.decision_reason}"
    )
    return 0


def cmd_list(args: argparse.Namespace, config: FleetConfig) -> int:
    catalog = make_catalog(config, args.cluster, args.host)
    problems: list[str] = []
    rows = manifest_summary(catalog.manifests(problems))
    if args.json:
        print(json.dumps({"backups": rows, "problems": problems}, indent=2))
    else:
        print(f"{'BACKUP ID':24} {'KIND':11} {'PARENT':24} {'STORED':>12} {'RAW':>14}  GTID")
        for r in rows:
            print(
                f"{r['backup_id']:24} {r['kind']:11} {r['parent_id'] or '-':24} {r['stored_bytes']:>12} "
                f"{r['raw_bytes']:>14}  {r['gtid'] or '-'}"
            )
        for problem in problems:
            print(f"WARNING: {problem}", file=sys.stderr)
    return 1 if problems else 0


def cmd_restore(args: argparse.Namespace, config: FleetConfig) -> int:
    from dataclasses import asdict

    from .core.restore.chain import RestoreRequest, restore

    if (target := pitr_target(args)) is not None:
        return cmd_pitr_restore(args, config, target)
    key, passphrase = read_private_key(config, args.private_key_file)
    report = restore(
        RestoreRequest(
            catalog=make_catalog(config, args.cluster, args.host),
            target_datadir=args.target_datadir,
            backup_id=None if args.backup_id == "latest" else args.backup_id,
            private_key=key,
            passphrase=passphrase,
            binary=config.find_host(args.cluster, args.host).binary,
            scratch_dir=args.scratch_dir,
            move_back=not args.copy_back,
            max_free_memory_pct=config.policy.prepare_max_free_memory_pct,
        )
    )
    if args.json:
        print(json.dumps(asdict(report), indent=2))
    else:
        print(f"restored {report.backup_id} (chain {' -> '.join(report.chain)}) into {report.target_datadir}")
        print(f"binlog position: {report.binlog_file}:{report.binlog_position} gtid {report.gtid}")
    return 0


def cmd_checksum(args: argparse.Namespace, config: FleetConfig) -> int:
    """Exit 0 when clean, 1 on differences (or a blocked gate), 2 when the run failed."""
    from dataclasses import asdict

    from .core.config.checksum import run_configured_checksum

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

    from .core.catalog.manifest import dumps
    from .core.retention.apply import apply_plan, plan_host
    from .core.retention.model import plan_table

    catalog = make_catalog(config, args.cluster, args.host)
    plan = plan_host(catalog, config.retention, getattr(args, "at", None))
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
            print(f"deleted {applied['deleted_items']} item(s): {applied['deleted_keys']} object(s)")
    for problem in plan.problems:
        print(f"WARNING: unreadable manifest (its backup is kept): {problem}", file=sys.stderr)
    return 1 if plan.problems else 0


def cmd_glacier_restore(args: argparse.Namespace, config: FleetConfig) -> int:
    """Request restores; with --wait, poll until every object is readable (exit 2 on timeout)."""

    catalog = make_catalog(config, args.cluster, args.host)
    states = chain_states(catalog, None if args.backup_id == "latest" else args.backup_id)
    tier = args.tier or config.storage.glacier_restore_tier
    states = request_restores(catalog.store, states, tier, args.days or config.storage.glacier_restore_days)
    if args.wait and waiting(states):
        keys = [s.key for s in states]
        states = wait_for_restores(
            catalog.store, keys, poll=args.poll_interval, timeout=args.timeout, on_poll=_print_pending
        )
    if args.json:
        print(json.dumps([s.row() for s in states], indent=2))
    else:
        for s in states:
            print(
                f"{s.state:10} {s.storage_class:13} {s.key}"
                + (f"  (until {s.expiry:%Y-%m-%d})" if s.expiry else "")
            )
    return 0


def _print_pending(states: list[Any]) -> None:
    pending = sum(1 for s in states if s.state in ("archived", "restoring"))
    print(f"waiting: {pending} of {len(states)} object(s) still being restored", file=sys.stderr)


def cmd_verify(args: argparse.Namespace, config: FleetConfig) -> int:
    """A report per backup; exit 1 when any backup has a problem."""
    from .core.restore.verify import VerifyRequest, verify

    catalog = make_catalog(config, args.cluster, args.host)
    key, passphrase = read_private_key(config, args.private_key_file) if args.deep else (None, None)
    ids = None if args.backup_id == "all" else [args.backup_id]
    if args.backup_id == "latest":
        ids = catalog.backup_ids()[-1:]
    reports = verify(VerifyRequest(catalog, ids, "deep" if args.deep else "quick", key, passphrase))
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=2))
    else:
        for r in reports:
            print(
                f"{r.backup_id:24} {'OK' if r.ok else 'FAILED':7} {r.mode:6} {'; '.join(r.problems + r.notes)}"
            )
    if not reports:
        print(f"no backups at {catalog.describe()}", file=sys.stderr)
    return 0 if all(r.ok for r in reports) else 1


def cmd_keygen(args: argparse.Namespace) -> int:
    import os

    from .core.pipeline.gpg import generate_key_pair

    passphrase = os.environ.get(args.passphrase_env)
    if not passphrase:
        raise SetupError(f"set {args.passphrase_env} to the passphrase that protects the private key")
    pair = generate_key_pair(args.uid, passphrase)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "public.asc").write_text(pair.public_key)
    fd = os.open(args.out_dir / "private.asc", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(pair.private_key)
    print(f"{pair.fingerprint}\twrote {args.out_dir}/public.asc and private.asc (0600)")
    return 0


COMMANDS = {"backup": cmd_backup, "list": cmd_list, "restore": cmd_restore, "checksum": cmd_checksum}
COMMANDS["retention"] = cmd_retention
COMMANDS["glacier-restore"] = cmd_glacier_restore
COMMANDS["verify"] = cmd_verify
COMMANDS["binlogs"] = cmd_binlogs


def cmd_report(args: argparse.Namespace, config: FleetConfig) -> int:
    from .core.report.html import fmt_seconds, write_report

    report = write_report(config, args.cluster, args.out)
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


FLEET_COMMANDS = {"report": cmd_report, "pools": cmd_pools}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    config: FleetConfig | None = None
    try:
        if args.command == "keygen":
            return cmd_keygen(args)
        if args.command in FLEET_COMMANDS:
            config = load_config(args.config)
            return FLEET_COMMANDS[args.command](args, config)
        config = load(args)
        return COMMANDS[args.command](args, config)
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        # The store translates its own S3 errors (StorageError); this catches a botocore error
        # from a direct client call, so that no S3 failure ends in a traceback either.
        if (message := _s3_failure(exc, config)) is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 2


def _s3_failure(exc: Exception, config: FleetConfig | None) -> str | None:
    """One line for a botocore error: the bucket and endpoint, and what to check; else None."""
    if not type(exc).__module__.startswith("botocore"):
        return None
    from .core.storage.s3 import s3_hint

    storage = config.storage if config is not None else None
    bucket = (storage.bucket if storage else None) or "?"
    endpoint = storage.endpoint_url if storage else None
    hint = s3_hint(exc, bucket, endpoint)
    where = f"S3 bucket {bucket!r} at {endpoint or 'the default AWS S3 endpoint'}"
    return f"{where}: {exc}" + (f". {hint}" if hint else "")


if __name__ == "__main__":
    sys.exit(main())
