"""Point-in-time replay on MySQL by the pipe: MySQL's own `mysqlbinlog` over the shipped binlog
copies into MySQL's `mysql` client, stopped by MySQL's own means.

MySQL replays by GTID: every transaction carries `SET @@SESSION.GTID_NEXT= 'uuid:N'`, and a server
skips a GTID it has executed. So the start is not a binlog position but the GTID set the restored
server holds (a backup's `gtid_executed`): `--exclude-gtids` leaves it out, whatever binlog it
is in. The stop:
- a GTID set (`--to-gtid`, e.g. `uuid:1-41` that `binlogs events` prints as "stop before"):
  `--include-gtids`, only the transactions of that set are replayed;
- a time: `--stop-datetime` (read in UTC: the replay runs with TZ=UTC), the first event stamped
  at or after it and everything later are not replayed;
- a position FILE:POS: the files up to FILE, `--stop-position` in the last one.

`replay_from_backup` takes a server restored from a MySQL backup (the clone engine's) forward:
the shipped binlogs from the backup's binlog position until one reaches the target, fetched and
checked as PITR fetches them, then replayed as above. Proven on MySQL 9.7
(tests/mysql/test_binlog_mysql_pitr.py); the `restore --to-*` command does not call it yet."""

from __future__ import annotations

import shutil
from pathlib import Path

from ..binlog.catalog import BinlogCatalog, BinlogManifest
from ..catalog.backups import Catalog
from ..catalog.manifest import Manifest
from ..common.tempdirs import private_dir
from ..common.values import GtidSet, binlog_number
from ..db.dialect import dialect_for
from ..db.server import MySQLTarget, defaults_file, query
from .plan import PitrError, PitrTarget
from .recover import PitrRequest, fetch_binlogs
from .replay import reader_argv, run_replay

_MAX_PACKET = "--max-allowed-packet=1G"  # a row event of a big transaction is one statement


def mysql_reader_args(target: PitrTarget, holds: GtidSet, files: list[Path]) -> list[str]:
    """mysqlbinlog's options (the files follow them) replaying `files` onto a server that holds
    `holds`, up to `target` (a time, a MySQL GTID set, or a position in the last file)."""
    args = [f"--exclude-gtids={holds}"] if holds else []
    if target.kind == "time":
        assert target.time is not None
        args.append(f"--stop-datetime={target.time:%Y-%m-%d %H:%M:%S}")
    elif target.kind == "gtid":
        assert target.gtid is not None
        try:
            args.append(f"--include-gtids={GtidSet.parse(target.gtid, '--to-gtid')}")
        except ValueError as exc:
            raise PitrError(f"{exc}; MySQL replays to a MySQL GTID set") from None
    else:
        assert target.file is not None and target.position is not None
        if not files or files[-1].name != target.file:
            raise PitrError(
                f"--to-position {target.file}:{target.position}: the last binlog replayed must be {target.file}"
            )
        args.append(f"--stop-position={target.position}")
    return args


def files_to(target: PitrTarget, files: list[Path]) -> list[Path]:
    """The binlog copies a position target needs (up to its file); all of them otherwise."""
    if target.kind != "position":
        return files
    assert target.file is not None
    wanted = binlog_number(target.file)
    return [f for f in files if binlog_number(f.name) <= wanted]


def replay_mysql(
    server: MySQLTarget,
    files: list[Path],
    target: PitrTarget,
    *,
    binlog_binary: str = "mysqlbinlog",
    client_binary: str = "mysql",
) -> GtidSet:
    """Replay the local binlog copies `files` (consecutive, oldest first) into the MySQL server
    `server` up to `target`, skipping what it holds already; returns its gtid_executed after."""
    dialect = dialect_for(str(query(server, "SELECT @@version")[0][0]))
    if dialect.is_mariadb:
        raise PitrError(
            f"{server.address} runs {dialect.name}: this replay is MySQL's (mysqlbinlog into mysql)"
        )
    holds = GtidSet.parse(str(query(server, f"SELECT {dialect.gtid_executed_variable}")[0][0] or ""))
    files = files_to(target, files)
    args = mysql_reader_args(target, holds, files)
    with defaults_file(server, dialect.client_family) as creds:
        # The client reads our 0600 option file alone (the first option): no host file steers it.
        client = [client_binary, f"--defaults-file={creds}", "--binary-mode", "--batch", _MAX_PACKET]
        run_replay(reader_argv(binlog_binary, [*args, *map(str, files)]), client)
    return GtidSet.parse(str(query(server, f"SELECT {dialect.gtid_executed_variable}")[0][0] or ""))


def binlogs_to(catalog: Catalog, backup: Manifest, target: PitrTarget) -> list[BinlogManifest]:
    """The shipped binlogs from `backup`'s binlog to the first that reaches `target`, contiguous;
    PitrError naming what is missing otherwise."""
    if not backup.binlog_file:
        raise PitrError(f"backup {backup.backup_id} recorded no binlog position: nothing to replay from")
    chain, why = BinlogCatalog(catalog, backup.server_uuid).index().chain_from(backup.binlog_file)
    for n, m in enumerate(chain):
        if _reaches(m, target):
            return chain[: n + 1]
    end = chain[-1].name if chain else backup.binlog_file
    raise PitrError(
        f"the binlogs shipped after backup {backup.backup_id} ({backup.server_uuid}) end at {end} before "
        f"{target.describe()} ({why}); ship them (binlogs ship --flush) or give an earlier target"
    )


def _reaches(m: BinlogManifest, target: PitrTarget) -> bool:
    if target.kind == "time":
        assert target.time is not None
        seen = [t for t in (m.covers_until, m.last_event_time) if t is not None]
        return bool(seen) and max(seen) >= target.time
    if target.kind == "gtid":
        before, held = m.gtid_sets()
        return GtidSet.parse(target.gtid, "--to-gtid") <= before | held
    return m.name == target.file


def replay_from_backup(
    catalog: Catalog,
    backup: Manifest,
    server: MySQLTarget,
    target: PitrTarget,
    *,
    scratch_dir: Path | None = None,
    private_key: str | None = None,
    passphrase: str | None = None,
    binlog_binary: str = "mysqlbinlog",
    client_binary: str = "mysql",
) -> GtidSet:
    """Take `server` (restored from `backup`, running) to `target` with the binlogs shipped after
    the backup; returns its gtid_executed after. The copies live in a private scratch directory,
    removed afterwards."""
    needed = binlogs_to(catalog, backup, target)
    scratch = private_dir("mysqlpitr", str(scratch_dir) if scratch_dir else None)
    try:
        fetch = PitrRequest(catalog, scratch, target, private_key=private_key, passphrase=passphrase)
        files = fetch_binlogs(fetch, needed, scratch / "binlogs")
        return replay_mysql(server, files, target, binlog_binary=binlog_binary, client_binary=client_binary)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
