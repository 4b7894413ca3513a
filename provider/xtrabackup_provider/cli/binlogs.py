"""The binlog commands: `binlogs ship|list|events`, the point-in-time targets of `restore`
(`--to-time|--to-gtid|--to-position`) and how its binlogs are replayed (`--replay`), and
`promote` (the restored server becomes the new primary, on a new timeline)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..core.config.schema import BinlogConfig, FleetConfig
from ..core.config.wiring import cli_target, make_catalog, read_private_key, read_public_keys
from .event_filters import (
    check_window,
    grep_pattern,
    gtid_position,
    schema_name,
    server_uuid,
    statement_kinds,
    table_name,
)
from .options import (
    NEW_SERVER_HELP,
    add_common,
    add_replay,
    add_target_store,
    backup_id,
    output,
    print_notes,
    read_from,
    seconds,
    utc_time,
)


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("binlogs", help="ship or list a host's binlogs (point-in-time recovery)")
    bsub = p.add_subparsers(dest="binlogs_command", required=True)
    ship = bsub.add_parser("ship", help="ship every closed binlog not yet stored (or follow the server)")
    add_common(ship)
    ship.add_argument(
        "--flush", action="store_true", help="FLUSH BINARY LOGS first: the open binlog ships too"
    )
    ship.add_argument(
        "--continuous", type=seconds, metavar="SECONDS", help="then follow the server live for this long"
    )
    ship.add_argument(
        "--progress-interval", type=seconds, default=10.0, help="continuous: seconds between uploads"
    )
    ship.add_argument("--flavour", choices=["mariabackup", "xtrabackup"])
    ship.add_argument("--socket", help="server unix socket (without a config)")
    ship.add_argument("--defaults-file", help="client option file with the credentials (without a config)")
    ship.add_argument("--public-key-file", action="append", help="recipient public key (repeatable)")
    ship.add_argument("--no-encrypt", action="store_true", help="store unencrypted (not recommended)")
    ship.add_argument(
        "--binary",
        help="the binlog client (default: the host's binlog_binary, the cluster's binlogs.binary, else the server "
        "family's own: mariadb-binlog or mysqlbinlog)",
    )
    ship.add_argument("--workdir", help="local scratch for the binlog copies (default: the temp dir)")
    ship.add_argument("--new-server", action="store_true", help=NEW_SERVER_HELP)
    lst = bsub.add_parser("list", help="list the shipped binlogs and recorded gaps on every storage target")
    add_common(lst)
    add_target_store(lst)
    lst.add_argument("--json", action="store_true")
    ev = bsub.add_parser(
        "events",
        help="one line per shipped transaction (time, GTID, position, what it did) with the --to-gtid that "
        "stops right before it",
    )
    add_common(ev)
    ev.add_argument("--since", type=utc_time, help="from this time (ISO 8601, UTC without an offset)")
    ev.add_argument("--until", type=utc_time, help="up to this time")
    ev.add_argument(
        "--gtid-from",
        type=gtid_position("--gtid-from"),
        help="from this GTID on (per domain, inclusive), e.g. 0-1-100",
    )
    ev.add_argument("--gtid-to", type=gtid_position("--gtid-to"), help="up to this GTID (inclusive)")
    ev.add_argument(
        "--schema",
        action="append",
        default=[],
        type=schema_name,
        help="transactions touching this schema (repeatable)",
    )
    ev.add_argument(
        "--table",
        action="append",
        default=[],
        type=table_name,
        help="transactions touching SCHEMA.TABLE or TABLE (repeatable)",
    )
    ev.add_argument(
        "--kind",
        action="append",
        default=[],
        type=statement_kinds,
        help="statement kinds, comma-separated or repeated: DROP,TRUNCATE,ALTER,DELETE,UPDATE,INSERT,CREATE,RENAME...",
    )
    ev.add_argument(
        "--grep", type=grep_pattern, help="a regular expression the statement or summary must match"
    )
    ev.add_argument(
        "--backup-id",
        type=backup_id(),
        help="without a window: from this backup's position (default: the newest)",
    )
    ev.add_argument(
        "--server",
        type=server_uuid,
        help="the server uuid whose binlogs to read (default: the newest backup's)",
    )
    ev.add_argument(
        "--private-key-file", help="armored private key; passphrase from $XTRABACKUP_GPG_PASSPHRASE"
    )
    ev.add_argument("--scratch-dir", help="where one binlog at a time is decrypted (default: the temp dir)")
    add_target_store(ev)
    ev.add_argument("--json", action="store_true", help="one JSON object per line")
    ev.set_defaults(check_args=check_window)


def add_promote_parser(sub: Any) -> None:
    p = sub.add_parser(
        "promote",
        help="make a server restored to a point in time (or a detached replica) the new primary, on a new timeline",
    )
    add_common(p)
    p.add_argument("--socket", help="the restored server's unix socket (instead of the config's host)")
    p.add_argument(
        "--defaults-file",
        help="client option file reaching the restored server (instead of the config's host)",
    )
    p.add_argument(
        "--parent",
        metavar="SERVER_UUID",
        help="the old timeline (default: the server of the backup PITR used)",
    )
    p.add_argument(
        "--reached-gtid",
        help="the GTID the data holds (default: MariaDB's gtid_slave_pos, left by the PITR; MySQL's gtid_executed, "
        "which a given set must equal)",
    )
    p.add_argument(
        "--margin",
        type=int,
        default=1_000_000,
        help="MariaDB: the new GTIDs start above the old timeline's highest, rounded up to a multiple of this "
        "(MySQL's new server_uuid needs no jump)",
    )
    p.add_argument("--json", action="store_true")


def cmd_promote(args: argparse.Namespace, config: FleetConfig) -> int:
    from ..core.pitr.promote import PromoteRequest, promote

    host = config.find_host(args.cluster, args.host)
    if args.socket or args.defaults_file:  # the restored server, wherever it runs for now
        host = host.model_copy(
            update={"socket": args.socket, "defaults_file": args.defaults_file, "host": None}
        )
    report = promote(
        PromoteRequest(
            catalog=make_catalog(config, args.cluster, args.host),
            target=cli_target(host, config.source),
            parent=args.parent,
            reached_gtid=args.reached_gtid,
            margin=args.margin,
        )
    )
    t = report.timeline
    lines = [
        f"{'already promoted' if report.already else 'promoted'}: {t.server_uuid} (server_id {t.server_id}) "
        f"is a new timeline forked from {t.parent_server_uuid} at {t.fork_gtid}",
        f"{report.state_name}={t.binlog_state}",
        f"replicas of the new primary start at: {report.replicas_start}",
        "next: binlogs ship, then a full backup (the first backup of a new timeline is always full)",
    ]
    output(args.json, report.summary(), lines)
    return 0


def add_restore_targets(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--to-time", help="point in time, ISO 8601 (UTC if no offset; binlogs have 1 s resolution)"
    )
    group.add_argument(
        "--to-gtid",
        help="replay up to and including this GTID (MariaDB, e.g. 0-1-42) or GTID set (MySQL, e.g. uuid:1-42)",
    )
    group.add_argument(
        "--to-position", metavar="FILE:POS", help="replay the events before this binlog position"
    )
    add_replay(p, "the point-in-time restore")


def cmd_binlogs(args: argparse.Namespace, config: FleetConfig) -> int:
    if args.binlogs_command == "list":
        from ..core.binlog.shipped import list_binlogs_on
        from ..core.catalog.targets import Targets
        from ..core.config.wiring import read_sources

        sources = read_sources(config, args.cluster, args.host, args.target_store)
        return _print_listing(list_binlogs_on(Targets(sources)), args.json)
    if args.binlogs_command == "events":
        return cmd_events(args, config)
    from ..core.binlog.follow import ship_continuous
    from ..core.binlog.ship import ShipRequest, ship_binlogs

    settings = config.cluster(args.cluster).binlogs or BinlogConfig()
    host = config.find_host(args.cluster, args.host)
    req = ShipRequest(
        catalog=make_catalog(config, args.cluster, args.host),
        target=cli_target(host, config.source),
        public_keys=read_public_keys(config),
        allow_unencrypted=not config.encryption.enabled,
        binary=args.binary or host.binlog_binary or settings.binary,
        flush=args.flush,
        compression_level=config.policy.compression_level,
        storage_class=settings.storage_class,
        sse=config.storage.sse,
        kms_key_id=config.storage.kms_key_id,
        workdir=args.workdir,
        accept_new_server=args.new_server,
    )
    if args.continuous:
        report = ship_continuous(req, args.continuous, args.progress_interval)
    else:
        report = ship_binlogs(req)
    print(
        f"shipped {len(report.shipped)} binlog(s) {' '.join(report.shipped)}; {report.already_shipped} already "
        f"stored; open binlog {report.open_binlog or '-'} ({report.progress_uploads} progress uploads)",
        flush=True,
    )
    from .monitor import copy_to_targets

    copy_to_targets(config, args.cluster, args.host, "binlogs")  # closed binlogs, once registered
    return 0


def cmd_events(args: argparse.Namespace, config: FleetConfig) -> int:
    from pathlib import Path

    from ..core.pitr.moments import MomentFilter, MomentsRequest, list_moments

    gtid_from, gtid_to = args.gtid_from or {}, args.gtid_to or {}  # parsed and checked (event_filters)
    kinds = {kind for listed in args.kind for kind in listed}
    key, passphrase = read_private_key(config, args.private_key_file)
    request = MomentsRequest(
        **read_from(config, args),
        filter=MomentFilter(
            args.since, args.until, gtid_from, gtid_to, set(args.schema), set(args.table), kinds, args.grep
        ),
        private_key=key,
        passphrase=passphrase,
        server_uuid=args.server,
        backup_id=args.backup_id,
        scratch_dir=Path(args.scratch_dir) if args.scratch_dir else None,
    )
    count = 0
    for moment in list_moments(request):
        print(json.dumps(moment.as_dict()) if args.json else moment.line(), flush=True)
        count += 1
    if not count:
        print("no transaction matches", file=sys.stderr)
    print_notes(request.notes, sys.stderr)  # stdout holds the transactions alone
    return 0


def _print_listing(listing: dict[str, Any], as_json: bool) -> int:
    """Exit 1 when a storage target or a manifest could not be read (the rest is listed)."""
    problems = listing["problems"] + [p for server in listing["servers"] for p in server["problems"]]
    if as_json:
        print(json.dumps(listing, indent=2))
        return 1 if problems else 0
    many = len(listing["targets"]) > 1
    for server in listing["servers"]:
        t = server.get("timeline")
        fork = (
            f" (promoted {t['promoted_at'][:19]}: forked from {t['parent_server_uuid']} at {t['fork_gtid']})"
            if t
            else ""
        )
        print(f"server {server['server_uuid']}{fork}")
        print(
            f"  {'BINLOG':24} {'STATE':8} {'SIZE':>12} {'STORED':>12}  LAST EVENT           GTIDS"
            + ("  TARGETS" if many else "")
        )
        for b in server["binlogs"]:
            state = "complete" if b["complete"] else "open"
            print(
                f"  {b['name']:24} {state:8} {b['size']:>12} {b['stored_bytes']:>12}  "
                f"{(b['last_event_time'] or '-')[:19]:20} {_gtids(b)}"
                + (f"  {','.join(b['targets'])}" if many else "")
            )
        for gap in server["gaps"]:
            print(f"  GAP {gap}")
    for problem in problems:
        print(f"WARNING: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _gtids(row: dict[str, Any]) -> str:
    """MySQL: the GTID set the binlog holds; MariaDB: its first..last GTID per domain."""
    if row.get("gtid_set"):
        return str(row["gtid_set"])
    return f"{row['gtid_first'] or '-'}..{row['gtid_last'] or '-'}"


def pitr_target(args: argparse.Namespace) -> Any:
    """The PitrTarget the restore flags name, or None for a plain restore."""
    from ..core.pitr.plan import PitrTarget

    if getattr(args, "to_time", None):
        return PitrTarget.at_time(args.to_time)
    if getattr(args, "to_gtid", None):
        return PitrTarget.at_gtid(args.to_gtid)
    if getattr(args, "to_position", None):
        return PitrTarget.at_position(args.to_position)
    return None


def _mysql_pitr_restore(args: argparse.Namespace, req: Any) -> int:
    """A MySQL host's backup, restored and replayed to the target (core/pitr/mysql_pipe.py)."""
    from dataclasses import asdict

    from ..core.pitr.mysql_pipe import mysql_point_in_time_restore

    report = mysql_point_in_time_restore(req)
    if args.json:
        print(json.dumps(asdict(report), indent=2))
        return 0
    print(
        f"restored {report.backup_id} (chain {' -> '.join(report.chain)}) from target {report.source} into "
        f"{report.target_datadir}"
    )
    print(
        f"replayed {len(report.binlogs)} binlog(s) from GTID set {report.start_gtid or '-'} to {report.target} "
        f"({report.replay})"
    )
    print(f"reached GTID set {report.reached_gtid or '-'}")
    if report.reached_gtid:
        print(f"to make it a replica: SET GLOBAL gtid_purged = '{report.reached_gtid}'")
    print_notes(report.fallbacks)
    return 0


def restore_source(args: argparse.Namespace, config: FleetConfig) -> dict[str, Any]:
    """What a point-in-time restore reads and how, from the restore flags: the storage targets, the
    backup, the private key, the tools, the scratch dir and the replay (PitrRequest, TableRestoreRequest)."""
    key, passphrase = read_private_key(config, args.private_key_file)
    settings = config.cluster(args.cluster).binlogs or BinlogConfig()
    host = config.find_host(args.cluster, args.host)
    return {
        **read_from(config, args),
        "backup_id": None if args.backup_id == "latest" else args.backup_id,
        "private_key": key,
        "passphrase": passphrase,
        "binary": host.binary,
        "binlog_binary": host.binlog_binary
        or settings.binary
        or ("mariadb-binlog" if host.flavour == "mariabackup" else "mysqlbinlog"),
        "scratch_dir": args.scratch_dir,
        "max_free_memory_pct": config.policy.prepare_max_free_memory_pct,
        "replay": args.replay,
        "replay_threads": args.replay_threads,
    }


def cmd_pitr_restore(args: argparse.Namespace, config: FleetConfig, target: Any) -> int:
    from dataclasses import asdict

    from ..core.pitr.from_standby import standby_point_in_time_restore
    from ..core.pitr.recover import PitrRequest, point_in_time_restore

    req = PitrRequest(
        target_datadir=args.target_datadir,
        target=target,
        move_back=not args.copy_back,
        without_read_lease=args.without_read_lease,
        **restore_source(args, config),
    )
    if getattr(args, "from_standby", None):
        report = standby_point_in_time_restore(req, args.from_standby, move=args.move_standby)
    elif config.find_host(args.cluster, args.host).flavour != "mariabackup":
        return _mysql_pitr_restore(args, req)
    else:
        report = point_in_time_restore(req)
    if args.json:
        print(json.dumps(asdict(report), indent=2))
        return 0
    source = f"standby {report.standby}" if report.standby else f"target {report.source}"
    print(
        f"restored {report.backup_id} (chain {' -> '.join(report.chain)}) from {source} into {report.target_datadir}"
    )
    print(
        f"replayed {report.transactions} transaction(s) of {len(report.binlogs)} binlog(s) from {report.start} "
        f"to {report.target}" + (f" ({report.replay})" if report.replay else "")
    )
    print(f"reached {report.reached_file}:{report.reached_position}, GTID {report.reached_gtid or '-'}")
    if report.reached_gtid:
        print(f"to make it a replica: SET GLOBAL gtid_slave_pos = '{report.reached_gtid}'")
    print_notes(report.fallbacks)
    return 0


COMMANDS = {"binlogs": cmd_binlogs, "promote": cmd_promote}
