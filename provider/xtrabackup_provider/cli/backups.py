"""The backup commands: `backup`, `list`, `restore` (a chain, or to a point in time), `verify`,
`glacier-restore`, and `keygen` for the backup key pair."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from ..core.catalog.manifest import CatalogError
from ..core.catalog.targets import Targets, list_backups
from ..core.common import secretenv
from ..core.config.schema import FleetConfig
from ..core.config.wiring import (
    SetupError,
    chain_policy,
    cli_target,
    impact_settings,
    make_catalog,
    read_private_key,
    read_public_keys,
    read_sources,
    target_catalog,
)
from ..core.restore.archived import chain_states
from ..core.restore.option_files import option_files_dir
from ..core.storage.base import StorageError
from ..core.storage.glacier import request_restores, wait_for_restores, waiting
from .binlogs import add_restore_targets, cmd_pitr_restore, pitr_target, restore_source
from .monitor import copy_to_targets
from .options import (
    NEW_SERVER_HELP,
    add_common,
    add_target_store,
    backup_id,
    output,
    print_notes,
    read_from,
    seconds,
)


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("backup", help="take a backup (full, incremental, or as the chain policy decides)")
    add_common(p)
    p.add_argument("--kind", choices=["auto", "full", "incremental"], default="auto")
    p.add_argument("--flavour", choices=["mariabackup", "xtrabackup"])
    p.add_argument("--socket", help="server unix socket (without a config)")
    p.add_argument("--defaults-file", help="client option file with the credentials (without a config)")
    p.add_argument("--public-key-file", action="append", help="recipient public key (repeatable)")
    p.add_argument("--no-encrypt", action="store_true", help="store unencrypted (not recommended)")
    p.add_argument(
        "--throttle", type=int, help="the tool's --throttle for this run (default: the host's impact)"
    )
    p.add_argument(
        "--no-copies", action="store_true", help="do not copy to `copies:` now (`copy` catches up)"
    )
    p.add_argument("--new-server", action="store_true", help=NEW_SERVER_HELP)

    p = sub.add_parser("list", help="list a host's backups on every storage target")
    add_common(p)
    add_target_store(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("restore", help="restore a backup chain into an empty datadir")
    add_common(p)
    p.add_argument(
        "--backup-id", default="latest", type=backup_id("latest"), help="backup id, or 'latest' (default)"
    )
    p.add_argument("--target-datadir", required=True, type=Path, help="an empty or new directory")
    p.add_argument(
        "--create-parents", action="store_true", help="create the target's parent directories if missing"
    )
    p.add_argument(
        "--private-key-file", help="armored private key; passphrase from $XTRABACKUP_GPG_PASSPHRASE"
    )
    p.add_argument(
        "--scratch-dir", type=Path, help="where to extract and prepare (default: beside the target)"
    )
    p.add_argument("--copy-back", action="store_true", help="copy instead of move (keeps nothing extra)")
    add_target_store(p)
    p.add_argument(
        "--from-standby",
        type=Path,
        metavar="DIR",
        help="restore the prepared standby copy kept in DIR (checked against the catalog) instead of the chain; "
        "with --to-*: then replay the shipped binlogs from its backup to that point",
    )
    p.add_argument(
        "--allow-older-standby",
        action="store_true",
        help="with --from-standby: restore it even if newer backups exist that it does not hold",
    )
    p.add_argument(
        "--move-standby",
        action="store_true",
        help="with --from-standby: move its files instead of copying them (faster; the standby is rebuilt later)",
    )
    p.add_argument(
        "--without-read-lease",
        action="store_true",
        help="go on when the read lease cannot be written (retention may then delete what this restore reads)",
    )
    p.add_argument("--json", action="store_true")
    add_restore_targets(p)

    p = sub.add_parser(
        "restore-table",
        help="put tables back as they were at a point in time, under new names, into a live server",
    )
    add_common(p)
    p.add_argument("--table", action="append", required=True, metavar="DB.TABLE", help="a table (repeatable)")
    p.add_argument(
        "--as",
        dest="new_names",
        action="append",
        default=[],
        metavar="DB.NEW",
        help="its new name, one per --table in order (default: DB.TABLE_restored); must not exist",
    )
    p.add_argument(
        "--into-host",
        help="the fleet-config host that receives the tables (default: --host); run on that host",
    )
    p.add_argument(
        "--backup-id",
        default="latest",
        type=backup_id("latest"),
        help="restore from this backup (default: the newest before the target)",
    )
    p.add_argument(
        "--private-key-file", help="armored private key; passphrase from $XTRABACKUP_GPG_PASSPHRASE"
    )
    p.add_argument(
        "--scratch-dir",
        type=Path,
        help="where the whole backup is restored and replayed first (needs its size; default: the temp dir)",
    )
    add_target_store(p)
    p.add_argument("--json", action="store_true")
    add_restore_targets(p)

    p = sub.add_parser("glacier-restore", help="request the restore of a backup chain's archived objects")
    add_common(p)
    p.add_argument(
        "--backup-id", default="latest", type=backup_id("latest"), help="backup id, or 'latest' (default)"
    )
    p.add_argument(
        "--tier", choices=["Standard", "Bulk", "Expedited"], help="default: storage.glacier_restore_tier"
    )
    p.add_argument(
        "--days",
        type=int,
        choices=range(1, 366),
        metavar="1..365",
        help="days the restored copies stay readable (storage.glacier_restore_days)",
    )
    p.add_argument("--wait", action="store_true", help="poll until every object is readable")
    p.add_argument("--poll-interval", type=seconds, default=60.0, help="seconds between polls with --wait")
    p.add_argument(
        "--timeout", type=seconds, default=3 * 86400, help="give up waiting after this many seconds"
    )
    add_target_store(p)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser(
        "verify", help="check stored backups without restoring them (exit 1 if anything is wrong)"
    )
    add_common(p)
    p.add_argument(
        "--backup-id",
        default="all",
        type=backup_id("latest", "all"),
        help="a backup id, 'latest', or 'all' (default)",
    )
    p.add_argument(
        "--deep", action="store_true", help="stream every object: sha256, gpg, zstd, xbstream framing"
    )
    p.add_argument(
        "--private-key-file", help="for --deep on encrypted backups; passphrase from the environment"
    )
    p.add_argument(
        "--target-store",
        default="all",
        metavar="NAME",
        help="verify this storage target alone; default 'all': each target's copy is verified on its own",
    )
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("keygen", help="create a GPG key pair for backups (passphrase from the environment)")
    p.add_argument("--uid", required=True, help='e.g. "MySQL backups <dba@example.com>"')
    p.add_argument("--out-dir", required=True, type=Path, help="writes public.asc and private.asc (0600)")
    p.add_argument("--passphrase-env", default="XTRABACKUP_GPG_PASSPHRASE")


def cmd_backup(args: argparse.Namespace, config: FleetConfig) -> int:
    from dataclasses import replace

    from ..core.backup.run import BackupRequest, run_backup
    from ..core.common.progress import ProgressLogger

    host = config.find_host(args.cluster, args.host)
    policy = config.policy
    impact = impact_settings(config, host)
    if args.throttle is not None:
        impact = replace(impact, throttle=args.throttle)
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
            max_parts=policy.max_parts,
            part_min_bytes=int(policy.part_min_gib * (1 << 30)),
            storage_classes=dict(config.storage.storage_class),
            sse=config.storage.sse,
            kms_key_id=config.storage.kms_key_id,
            object_lock_mode=config.storage.object_lock.mode if config.storage.object_lock else None,
            object_lock_days=config.storage.object_lock.retain_days if config.storage.object_lock else None,
            policy=chain_policy(policy),
            heartbeat=policy.heartbeat,
            progress=ProgressLogger(logging.getLogger("xtrabackup_provider"), f"backup of {args.host}"),
            impact=impact,
            option_files=list(host.option_files),
            accept_new_server=args.new_server,
        )
    )
    print(
        f"{manifest.backup_id}\t{manifest.kind}\t{manifest.stored_bytes} bytes stored\t{manifest.decision_reason}",
        flush=True,
    )
    if not args.no_copies:
        copy_to_targets(config, args.cluster, args.host)  # after the registration: never fails the backup
    return 0


def cmd_list(args: argparse.Namespace, config: FleetConfig) -> int:
    """Every backup on the host's storage targets (a row from the first target that has it, and on
    which targets it is); a target or manifest that cannot be read is a warning and exit 1."""
    problems: list[str] = []
    sources = read_sources(config, args.cluster, args.host, args.target_store)
    rows, targets = list_backups(Targets(sources), problems)
    if args.json:
        print(json.dumps({"backups": rows, "targets": targets, "problems": problems}, indent=2))
    else:
        many = len(targets) > 1
        print(
            f"{'BACKUP ID':24} {'KIND':11} {'PARENT':24} {'STORED':>12} {'RAW':>14}  {'GTID':16}"
            + ("  TARGETS" if many else "")
        )
        for r in rows:
            print(
                f"{r['backup_id']:24} {r['kind']:11} {r['parent_id'] or '-':24} {r['stored_bytes']:>12} "
                f"{r['raw_bytes']:>14}  {r['gtid'] or '-':16}"
                + (f"  {','.join(r['targets'])}" if many else "")
            )
        for problem in problems:
            print(f"WARNING: {problem}", file=sys.stderr)
    return 1 if problems else 0


def cmd_restore(args: argparse.Namespace, config: FleetConfig) -> int:
    from dataclasses import asdict

    from ..core.restore.chain import RestoreRequest, restore

    parent = args.target_datadir.parent
    if not parent.is_dir() and not args.create_parents:
        raise SetupError(
            f"--target-datadir {args.target_datadir}: its parent {parent} does not exist (a typo?); "
            "create it, or pass --create-parents"
        )
    if (target := pitr_target(args)) is not None:
        return cmd_pitr_restore(args, config, target)  # from the chain, or from --from-standby
    if args.from_standby:
        return cmd_standby_restore(args, config)
    key, passphrase = read_private_key(config, args.private_key_file)
    report = restore(
        RestoreRequest(
            **read_from(config, args),
            target_datadir=args.target_datadir,
            backup_id=None if args.backup_id == "latest" else args.backup_id,
            private_key=key,
            passphrase=passphrase,
            binary=config.find_host(args.cluster, args.host).binary,
            scratch_dir=args.scratch_dir,
            move_back=not args.copy_back,
            max_free_memory_pct=config.policy.prepare_max_free_memory_pct,
            without_read_lease=args.without_read_lease,
        )
    )
    if args.json:
        print(json.dumps(asdict(report), indent=2))
    else:
        print(
            f"restored {report.backup_id} (chain {' -> '.join(report.chain)}) from target {report.source} "
            f"into {report.target_datadir}"
        )
        print(f"binlog position: {report.binlog_file}:{report.binlog_position} gtid {report.gtid}")
        if report.gtid:
            print(replica_advice(config.find_host(args.cluster, args.host).flavour, report.gtid))
        print_notes(report.fallbacks)
        if report.option_files:
            where = option_files_dir(args.target_datadir)
            print(f"the server's option files of {report.backup_id} ({len(report.option_files)}): {where}")
    return 0


def replica_advice(flavour: str, gtid: str) -> str:
    """How the restored copy becomes a replica: MariaDB's start from gtid_slave_pos; a MySQL
    XtraBackup copy is told its GTIDs through gtid_purged; a clone copy holds them already."""
    if flavour == "clone":
        return (
            f"to make it a replica: its gtid_executed already holds {gtid}; CHANGE REPLICATION SOURCE TO ... "
            "SOURCE_AUTO_POSITION = 1, then START REPLICA"
        )
    variable = "gtid_slave_pos" if flavour == "mariabackup" else "gtid_purged"
    return f"to make it a replica: SET GLOBAL {variable} = '{gtid}'"


def cmd_standby_restore(args: argparse.Namespace, config: FleetConfig) -> int:
    from dataclasses import asdict

    from ..core.restore.standby import restore_standby

    if args.backup_id not in ("latest", None):
        raise SetupError("--from-standby restores the backup the standby holds; leave out --backup-id")
    key, passphrase = read_private_key(config, args.private_key_file)
    # The catalog proves what the standby holds: the first storage target that can be read.
    report = restore_standby(
        directory=args.from_standby,
        target_datadir=args.target_datadir,
        **read_from(config, args),
        private_key=key,
        passphrase=passphrase,
        binary=config.find_host(args.cluster, args.host).binary,
        allow_older=args.allow_older_standby,
        move=args.move_standby,
        without_read_lease=args.without_read_lease,
    )
    if args.json:
        print(json.dumps(asdict(report), indent=2))
        return 0
    print_notes(report.fallbacks)
    if report.applied_first:
        print(f"applied the newer incremental(s) {', '.join(report.applied_first)} to the standby first")
    if report.older:
        print(f"WARNING: {report.older}")
    how = "moved" if report.moved else "copied"
    print(
        f"restored {report.backup_id} (chain {' -> '.join(report.chain)}) from standby {report.standby_dir}, "
        f"{how} into {report.target_datadir}"
    )
    print(f"binlog position: {report.binlog_file}:{report.binlog_position} gtid {report.gtid}")
    return 0


def cmd_restore_table(args: argparse.Namespace, config: FleetConfig) -> int:
    from dataclasses import asdict

    from ..core.pitr.table import TableRestoreRequest, restore_tables

    into = config.find_host(args.cluster, args.into_host or args.host)
    report = restore_tables(
        TableRestoreRequest(
            live=cli_target(into, config.source),
            tables=args.table,
            new_names=args.new_names,
            target=pitr_target(args),
            **restore_source(args, config),
        )
    )
    if args.json:
        print(json.dumps(asdict(report), indent=2))
        return 0
    replayed = f", binlogs applied by {report.replay}" if report.replay else ""
    print(
        f"restored from {report.backup_id} at {report.target} (GTID {report.reached_gtid or '-'}{replayed}) "
        f"into {report.live}:"
    )
    for t in report.tables:
        parts = f", partitions {', '.join(t.partitions)}" if t.partitions else ""
        print(f"  {t.source} -> {t.created}  {t.digest}{parts}")
        if t.dropped_foreign_keys:
            print(f"    foreign keys not copied: {', '.join(t.dropped_foreign_keys)}")
    print(
        "the new tables are not in the binlog: copy rows back with SET SESSION binlog_format=ROW (see RUNBOOK)"
    )
    print_notes(report.fallbacks)
    return 0


def cmd_glacier_restore(args: argparse.Namespace, config: FleetConfig) -> int:
    """Request restores; with --wait, poll until every object is readable (exit 2 on timeout). On
    the first storage target whose catalog resolves the chain (or the --target-store named)."""
    targets = Targets(read_sources(config, args.cluster, args.host, args.target_store))
    wanted = None if args.backup_id == "latest" else args.backup_id
    states = targets.read(f"the chain of {args.backup_id}", lambda catalog: chain_states(catalog, wanted))
    store, where = targets.first.catalog.store, config.target(targets.first.name)
    tier = args.tier or where.glacier_restore_tier
    states = request_restores(store, states, tier, args.days or where.glacier_restore_days)
    print_notes(targets.notes, sys.stderr if args.json else None)
    if args.wait and waiting(states):
        keys = [s.key for s in states]
        states = wait_for_restores(
            store, keys, poll=args.poll_interval, timeout=args.timeout, on_poll=_print_pending
        )
    until = (f"  (until {s.expiry:%Y-%m-%d})" if s.expiry else "" for s in states)
    lines = (f"{s.state:10} {s.storage_class:13} {s.key}{u}" for s, u in zip(states, until, strict=True))
    output(args.json, [s.row() for s in states], lines)
    return 0


def _print_pending(states: list[Any]) -> None:
    pending = sum(1 for s in states if s.state in ("archived", "restoring"))
    print(f"waiting: {pending} of {len(states)} object(s) still being restored", file=sys.stderr)


def cmd_verify(args: argparse.Namespace, config: FleetConfig) -> int:
    """A report per backup; exit 1 when any backup has a problem."""
    from ..core.restore.verify import VerifyRequest, selected_ids, verify

    key, passphrase = read_private_key(config, args.private_key_file) if args.deep else (None, None)
    names = [t.name for t in config.targets()] if args.target_store == "all" else [args.target_store]
    rows: list[dict[str, Any]] = []
    lines: list[str] = []
    ok = True
    for name in names:
        catalog = target_catalog(config, args.cluster, args.host, name)
        where = f"{name:10} " if len(config.targets()) > 1 else ""
        try:
            ids = selected_ids(catalog, args.backup_id)
            reports = verify(VerifyRequest(catalog, ids, "deep" if args.deep else "quick", key, passphrase))
        except (StorageError, CatalogError) as exc:
            if len(names) == 1:
                raise  # one target: the one `error:` line and exit 2, as for any unreadable store
            lines.append(f"{where}cannot verify {catalog.describe()}: {exc}")
            rows.append({"target": name, "error": str(exc)})
            ok = False
            continue
        lines += [
            f"{where}{r.backup_id:24} {'OK' if r.ok else 'FAILED':7} {r.mode:6} {'; '.join(r.problems + r.notes)}"
            for r in reports
        ]
        rows += [r.as_dict() | {"target": name} for r in reports]
        ok = ok and all(r.ok for r in reports)
        if not reports:
            print(f"no backups at {catalog.describe()}", file=sys.stderr)
    output(args.json, rows, lines)
    return 0 if ok else 1


def cmd_keygen(args: argparse.Namespace) -> int:
    import os

    from ..core.pipeline.gpg import generate_key_pair

    passphrase = secretenv.get(args.passphrase_env)
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


COMMANDS = {
    "backup": cmd_backup,
    "list": cmd_list,
    "restore": cmd_restore,
    "restore-table": cmd_restore_table,
    "glacier-restore": cmd_glacier_restore,
    "verify": cmd_verify,
}
