"""The commands that prove backups by using them: `restore-test` (a level's checks on a scratch
restore) and `provision-replica` (a new replica built from a backup)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..core.config.schema import FleetConfig
from ..core.config.wiring import SetupError, cli_target, read_private_key
from .options import add_common, add_replay, add_target_store, print_notes, read_from


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "restore-test", help="restore a backup into scratch and check it (exit 1 if a check fails)"
    )
    add_common(p)
    p.add_argument("--backup-id", default="latest", help="backup id, or 'latest' (default)")
    p.add_argument(
        "--level",
        choices=["quick", "full", "deep"],
        default="quick",
        help="quick: page checksums, source shape, canary, a CHECK TABLE sample; full: + every table and the "
        "shipped binlogs rolled forward; deep: + a replica of the source, compared by pt-table-checksum",
    )
    p.add_argument("--workdir", type=Path, help="scratch parent (default: the cluster's restore_workdir)")
    p.add_argument(
        "--private-key-file", help="armored private key; passphrase from $XTRABACKUP_GPG_PASSPHRASE"
    )
    p.add_argument(
        "--no-report", action="store_true", help="do not write restore-report.json beside the backup"
    )
    add_replay(p, "a MySQL (clone) backup's roll-forward (MariaDB's pipes mariadb-binlog | mariadb)")
    p.add_argument(
        "--without-read-lease",
        action="store_true",
        help="go on when the read lease cannot be written (retention may then delete what this test reads)",
    )
    add_target_store(p)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser(
        "provision-replica",
        help="build this host as a replica of the cluster's source from a backup (its datadir must be empty)",
    )
    add_common(p)
    p.add_argument(
        "--from-host", help="whose backups (default: provision.from_host, else the replication source)"
    )
    p.add_argument("--backup-id", default="latest", help="backup id, or 'latest' (default)")
    p.add_argument("--target-datadir", type=Path, help="default: the host's `datadir`")
    p.add_argument(
        "--private-key-file", help="armored private key; passphrase from $XTRABACKUP_GPG_PASSPHRASE"
    )
    p.add_argument("--no-wait", action="store_true", help="start replication and return without waiting")
    p.add_argument("--no-checksum", action="store_true", help="skip the pt-table-checksum gate")
    p.add_argument(
        "--clean-on-failure",
        action="store_true",
        help="after a failure past the restore, also empty the datadir (the new server is always stopped)",
    )
    p.add_argument(
        "--max-lag-seconds", type=float, help="caught up below this lag (replication.max_lag_seconds)"
    )
    add_target_store(p)
    p.add_argument("--json", action="store_true")


def cmd_restore_test(args: argparse.Namespace, config: FleetConfig) -> int:
    from ..core.common.tempdirs import private_dir
    from ..core.config.replication import cli_deep_compare
    from ..core.db.sandbox import stop_orphans
    from ..core.pitr.roll_forward import ShippedBinlogs
    from ..core.restore.restore_test import RestoreTestRequest, run_restore_test

    cluster = config.cluster(args.cluster)
    host = config.find_host(args.cluster, args.host)
    read = read_from(config, args)  # the same sources for the restore and the roll-forward
    key, passphrase = read_private_key(config, args.private_key_file)
    root = args.workdir or Path(cluster.restore_workdir)
    root.mkdir(parents=True, exist_ok=True)
    report = run_restore_test(
        RestoreTestRequest(
            **read,
            workdir=private_dir("rt", root, on_sweep=stop_orphans),  # swept, with its sandbox, if killed
            backup_id=None if args.backup_id == "latest" else args.backup_id,
            private_key=key,
            passphrase=passphrase,
            level=args.level,
            binary=host.binary,
            write_report=not args.no_report,
            without_read_lease=args.without_read_lease,
            roll_forward=ShippedBinlogs(
                read["catalog"],
                key,
                passphrase,
                source_name=read["source_name"],
                fallbacks=read["fallbacks"],
                replay=args.replay,
                replay_threads=args.replay_threads,
                without_read_lease=args.without_read_lease,
            ),
            deep=cli_deep_compare(config, args.cluster) if args.level == "deep" else None,
        )
    )
    if args.json:
        print(json.dumps(asdict(report), indent=2, default=str))
    else:
        for r in report.results:
            print(f"{r['name']:16} {r['status'].upper():7} {'; '.join(r['reasons']) or r['note']}")
        print(report.headline())
        print_notes(report.fallbacks)
    return 0 if report.passed else 1


def cmd_provision_replica(args: argparse.Namespace, config: FleetConfig) -> int:
    from ..core.config.replication import (
        cli_replication_source,
        cluster_replication,
        host_dsn,
        provision_checksum,
    )
    from ..core.restore.provision import ProvisionRequest, provision_replica

    cluster = config.cluster(args.cluster)
    host = config.find_host(args.cluster, args.host)
    settings = host.provision
    if settings is None:
        raise SetupError(
            f"{config.source}: host {host.name!r} has no `provision` section (start_command, owner...): "
            "say how its server is started before building it as a replica"
        )
    rep = cluster_replication(config, args.cluster)
    if rep.source.name == host.name:
        raise SetupError(f"{config.source}: host {host.name!r} is the replication source itself")
    from_host = args.from_host or settings.from_host or rep.source.name
    config.find_host(args.cluster, from_host)
    datadir = args.target_datadir or (Path(host.datadir) if host.datadir else None)
    if datadir is None:
        raise SetupError(f"{config.source}: host {host.name!r} has no `datadir`; pass --target-datadir")
    key, passphrase = read_private_key(config, args.private_key_file)
    check = settings.checksum and not args.no_checksum
    report = provision_replica(
        ProvisionRequest(
            **read_from(config, args, from_host),
            target_datadir=datadir,
            source=cli_replication_source(config, args.cluster),
            source_admin=cli_target(rep.source, config.source),
            replica=cli_target(host, config.source),
            start_command=list(settings.start_command),
            backup_id=None if args.backup_id == "latest" else args.backup_id,
            private_key=key,
            passphrase=passphrase,
            binary=host.binary,
            owner=settings.owner,
            max_free_memory_pct=config.policy.prepare_max_free_memory_pct,
            wait=not args.no_wait,
            max_lag_seconds=args.max_lag_seconds
            if args.max_lag_seconds is not None
            else rep.settings.max_lag_seconds,
            catch_up_timeout=rep.settings.catch_up_timeout_minutes * 60,
            poll_seconds=rep.settings.poll_seconds,
            clean_on_failure=args.clean_on_failure,
            binlog_binary=cluster.binlogs.binary if cluster.binlogs else None,
            checksum=provision_checksum(cluster, host_dsn(host, config.source))
            if check and not args.no_wait
            else None,
        )
    )
    summary = report.summary()
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        caught = (
            f"caught up at {summary['caught_up_gtid']} in {summary['caught_up_seconds']}s (lag {summary['lag_seconds']}s)"
            if report.caught_up
            else "replication started; not waited for"
        )
        checked = (
            f"; pt-table-checksum: {summary['checksum']['tables']} table(s) equal"
            if summary["checksum"]
            else ""
        )
        print(
            f"{host.name}: built from {report.backup_id} at GTID {report.gtid_start or '-'}; {caught}{checked}"
        )
        print_notes(report.fallbacks)
    return 0


COMMANDS = {"restore-test": cmd_restore_test, "provision-replica": cmd_provision_replica}
