"""Point-in-time replay on MySQL by the pipe: MySQL's own `mysqlbinlog` over the shipped binlog
copies into MySQL's `mysql` client, stopped by MySQL's own means.

MySQL replays by GTID: every transaction carries `SET @@SESSION.GTID_NEXT= 'uuid:N'`, and a server
skips a GTID it has executed. So the start is not a binlog position but the GTID set the restored
server holds (a backup's `gtid_executed`): `--exclude-gtids` leaves it out, whatever binlog it
is in. The stop:
- a GTID set (`--to-gtid`, e.g. `uuid:1-41` that `binlogs events` prints as "stop before"):
  `--include-gtids`, only the transactions of that set are replayed;
- a time: the end of the last complete transaction before the first transaction event stamped
  at or after it (the applier's plan, core/pitr/mysql_applier.py), as `--stop-position` in that
  transaction's binlog, the last one given: not `--stop-datetime`, which also stops at a file's
  own events (Format_description, Previous_gtids), stamped at a replica's restart after the
  source's earlier transactions it then receives (events.FILE_EVENTS), left out silently;
- a position FILE:POS: the files up to FILE, `--stop-position` in the last one.

`replay_from_backup` takes a server restored from a MySQL backup (the clone engine's) forward:
the shipped binlogs from the backup's binlog position until one reaches the target, fetched and
checked as PITR fetches them, then replayed as above. `mysql_point_in_time_restore` is what
`restore --to-*` runs for a MySQL host: the backup before the target, restored by the restore verb,
a socket-only server started on it, the replay, the server stopped. Proven on MySQL 9.7
(tests/mysql/test_binlog_mysql_pitr.py)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..binlog.catalog import BinlogCatalog, BinlogError, BinlogManifest, server_uuids
from ..binlog.ship import check_binlog_client
from ..catalog.backups import Catalog
from ..catalog.manifest import Manifest
from ..catalog.targets import READ_ERRORS, Targets
from ..common.tempdirs import private_dir
from ..common.values import GtidSet, binlog_number, check_gtid_for, gtid_form
from ..db.sandbox import SandboxServer, stop_orphans
from ..db.server import MySQLTarget, defaults_file
from ..db.session import Session
from .applier import REPLAY_METHODS
from .mysql_applier import apply_relay_mysql, plan_mysql_stop, program_dialect
from .plan import PitrError, PitrTarget
from .recover import PitrRequest, binlog_read_lease, fetch_binlogs
from .replay import drop_account, reader_argv, replay_session, run_replay

log = logging.getLogger(__name__)
_MAX_PACKET = "--max-allowed-packet=1G"  # a row event of a big transaction is one statement


def mysql_reader_args(
    target: PitrTarget, holds: GtidSet, files: list[Path], end: int | None = None
) -> list[str]:
    """mysqlbinlog's options (the files follow them) replaying `files` onto a server that holds
    `holds`, up to `target` (a MySQL GTID set, or a position in the last file); a time target
    ends at `end` in the last file (time_stop: the planned end of its last transaction)."""
    args = [f"--exclude-gtids={holds}"] if holds else []
    if target.kind == "time":
        assert end is not None, "a time target is planned first (time_stop)"
        args.append(f"--stop-position={end}")
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


def time_stop(target: PitrTarget, holds: GtidSet, files: list[Path]) -> tuple[list[Path], int | None]:
    """For a time target: the files up to the one the last transaction before it ends in, and
    that end (its --stop-position); no files when none is. Other targets: `files`, None."""
    if target.kind != "time":
        return files, None
    end = plan_mysql_stop(files, target, holds).end
    if end is None:
        return [], None
    names = [p.name for p in files]
    return files[: names.index(end[0]) + 1], end[1]


def replay_mysql(
    server: MySQLTarget | Session,
    files: list[Path],
    target: PitrTarget,
    *,
    binlog_binary: str = "mysqlbinlog",
    client_binary: str = "mysql",
) -> GtidSet:
    """Replay the local binlog copies `files` (consecutive, oldest first) into the MySQL server
    `server` up to `target`, skipping what it holds already; returns its gtid_executed after.
    The server is read through one session: the caller's, or one of its own for a MySQLTarget."""
    with _session(server) as db:
        dialect = db.dialect
        if dialect.is_mariadb:
            raise PitrError(
                f"{db.address} runs {dialect.name}: this replay is MySQL's (mysqlbinlog into mysql)"
            )
        executed = f"SELECT {dialect.gtid_executed_variable}"
        holds = GtidSet.parse(str(db.query(executed)[0][0] or ""))
        files, end = time_stop(target, holds, files_to(target, files))
        if not files:
            return holds  # no transaction before the time: nothing to replay
        args = mysql_reader_args(target, holds, files, end)
        with defaults_file(db.target, dialect.client_family) as creds:
            # The client reads our 0600 option file alone (the first option): no host file steers it.
            client = [client_binary, f"--defaults-file={creds}", "--binary-mode", "--batch", _MAX_PACKET]
            run_replay(reader_argv(binlog_binary, [*args, *map(str, files)]), client)
        return GtidSet.parse(str(db.query(executed)[0][0] or ""))


@contextmanager
def _session(server: MySQLTarget | Session) -> Iterator[Session]:
    """The caller's session, left open, or one for a MySQLTarget, closed afterwards."""
    if isinstance(server, Session):
        yield server
        return
    with Session(server) as db:
        yield db


def _check_known_servers(catalog: Catalog, backups: list[Manifest], wanted: GtidSet, whose: str) -> None:
    """PitrError naming the servers of `wanted` that are none of the host's own and whose
    transactions no backup and no shipped binlog of the host holds: no replay can reach them (a set
    of another host, a typo), so say so rather than that no backup is before it. The binlogs are
    read only when the backups do not know them."""
    known = {m.server_uuid for m in backups} | {s for m in backups for s in _servers(GtidSet.parse(m.gtid))}
    unknown = _servers(wanted) - known
    hosts = server_uuids(catalog) if unknown else []
    unknown -= set(hosts)
    for uuid in hosts if unknown else []:
        for m in BinlogCatalog(catalog, uuid).index().shipped():
            before, held = m.gtid_sets()
            unknown -= _servers(before | held)
    if unknown:
        raise PitrError(
            f"--to-gtid names server {', '.join(sorted(unknown))}, whose transactions no backup or shipped binlog "
            f"of {whose} holds (another host's GTID set, or binlogs not shipped yet: `binlogs ship --flush`); "
            "give this host's set, as `binlogs events` prints it"
        )


def _servers(gtids: GtidSet) -> set[str]:
    return {source.partition(":")[0] for source in gtids.intervals()}  # a tagged GTID's uuid


def binlogs_to(catalog: Catalog, backup: Manifest, target: PitrTarget) -> list[BinlogManifest]:
    """The shipped binlogs from `backup`'s binlog to the first that reaches `target`, contiguous;
    PitrError naming what is missing otherwise."""
    if not backup.binlog_file:
        raise PitrError(f"backup {backup.backup_id} recorded no binlog position: nothing to replay from")
    chain, why = BinlogCatalog(catalog, backup.server_uuid).index().chain_from(backup.binlog_file)
    for n, m in enumerate(chain):
        if without_gtids(m):
            raise PitrError(without_gtids_reason(m, "point-in-time recovery (nothing was restored)"))
        if _reaches(m, target):
            return chain[: n + 1]
    end = chain[-1].name if chain else backup.binlog_file
    raise PitrError(
        f"the binlogs shipped after backup {backup.backup_id} ({backup.server_uuid}) end at {end} before "
        f"{target.describe()} ({why}); ship them (binlogs ship --flush) or give an earlier target"
    )


# A MySQL binlog that holds no transaction has a Format_description, a Previous_gtids and a
# Rotate or Stop event; any transaction adds at least a GTID (or Anonymous_gtid), a BEGIN or DDL
# and its commit. So more events and no GTID set recorded: transactions written without GTIDs.
_EMPTY_BINLOG_EVENTS = 3


def without_gtids(m: BinlogManifest) -> bool:
    """Whether the shipped MySQL binlog `m` holds transactions without GTIDs (written while the
    server's gtid_mode was not ON: its manifest records no GTID set, `binlogs list` shows `-..-`)."""
    return not m.gtid_set and not m.gtid_first and m.events > _EMPTY_BINLOG_EVENTS


def without_gtids_reason(m: BinlogManifest, what: str) -> str:
    """One line: why `what` (e.g. "MySQL's point-in-time recovery; nothing was restored") cannot
    replay `m`, and what to do."""
    return (
        f"binlog {m.name} of server {m.server_uuid} holds transactions without GTIDs (written while gtid_mode "
        f"was not ON; `binlogs list` shows -..-): {what} replays MySQL binlogs by GTID; set gtid_mode=ON "
        "(with enforce_gtid_consistency=ON), then take a new backup and recover from it"
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
    catalog: Catalog | Targets,
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
    removed afterwards. `catalog`: the host's catalog, or its storage targets (fetch_shipped)."""
    scratch = private_dir("mysqlpitr", str(scratch_dir) if scratch_dir else None)
    try:
        files = fetch_shipped(catalog, backup, target, scratch, private_key, passphrase)
        return replay_mysql(server, files, target, binlog_binary=binlog_binary, client_binary=client_binary)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def fetch_shipped(
    catalog: Catalog | Targets,
    backup: Manifest,
    target: PitrTarget,
    scratch: Path,
    private_key: str | None = None,
    passphrase: str | None = None,
    binlogs: list[BinlogManifest] | None = None,
) -> list[Path]:
    """The binlogs shipped after `backup` up to the first that reaches `target` (`binlogs`: those
    already planned), fetched and checked into `scratch`/binlogs (the caller removes `scratch`).
    Given the host's storage targets (core/catalog/targets.py), every copy is read as MariaDB's PITR
    reads it: the list from the first target whose binlogs reach the target, each binlog from the
    first target that holds it intact (the run's notes say which)."""
    targets = catalog if isinstance(catalog, Targets) else Targets.of(catalog)
    if binlogs is None:
        binlogs = targets.read(
            f"the binlogs shipped after backup {backup.backup_id}",
            lambda c: binlogs_to(c, backup, target),
            errors=_PLAN_ERRORS,
        )
    fetch = PitrRequest(
        targets.first.catalog, scratch, target, private_key=private_key, passphrase=passphrase
    )
    return fetch_binlogs(fetch, binlogs, scratch / "binlogs", targets)


_PLAN_ERRORS = (*READ_ERRORS, PitrError, BinlogError)  # a target whose manifests cannot plan: try the next


def read_mysql_plan(
    targets: Targets,
    target: PitrTarget,
    backup_id: str | None = None,
    check: Callable[[Manifest], None] | None = None,
) -> tuple[Manifest, list[BinlogManifest]]:
    """The MySQL backup before `target` (or the one named) and the shipped binlogs from it to the
    target, from the first storage target whose manifests reach it; that target becomes the first
    (MariaDB's read_plan, core/pitr/recover.py). PitrError of the first target when none does.
    `check(backup)` runs before the binlogs are planned (what this worker lacks is said first)."""

    def plan(catalog: Catalog) -> tuple[Manifest, list[BinlogManifest]]:
        backup = choose_mysql_backup(catalog, target, backup_id)
        if check is not None:
            check(backup)
        return backup, binlogs_to(catalog, backup, target)

    return targets.read(f"the point-in-time plan to {target.describe()}", plan, errors=_PLAN_ERRORS)


@contextmanager
def mysql_read_lease(
    targets: Targets, purpose: str, backup: Manifest, binlogs: list[BinlogManifest], unleased_ok: bool = False
) -> Iterator[None]:
    """Retention keeps `backup`'s chain and `binlogs` while a run reads them (core/catalog/lease.py),
    on the target the plan was read from, as every MariaDB PITR does; one deleted before the
    lease was written is refused before anything is fetched."""
    from ..restore.chain import plan_chain

    catalog = targets.first.catalog
    chain = [m.backup_id for m in plan_chain(catalog, backup.backup_id)]
    names = [f"{m.server_uuid}/{m.name}" for m in binlogs]
    with binlog_read_lease(catalog, purpose, chain, names, unleased_ok) as lease:
        lease.check()
        yield


REPLAY_SERVER_ID = 4_100_000_001  # the restored copy's server_id while it replays (no replica sees it)


@dataclass
class MysqlPitrReport:
    backup_id: str
    chain: list[str]
    target_datadir: str
    source: str
    target: str
    binlogs: list[str] = field(default_factory=list)
    start_gtid: str = ""  # what the backup held
    reached_gtid: str = ""  # gtid_executed after the replay
    replay: str = "pipe: mysqlbinlog | mysql"
    fallbacks: list[str] = field(default_factory=list)


def _is_mysql(m: Manifest) -> bool:
    try:
        form = gtid_form(m.gtid)
    except ValueError:
        form = None
    return form == "mysql" or (
        form is None and "mariadb" not in m.server_version.lower() and bool(m.server_version)
    )


def choose_mysql_backup(catalog: Catalog, target: PitrTarget, backup_id: str | None = None) -> Manifest:
    """The newest MySQL backup before `target` (or the one named), with binlog coordinates."""
    usable = [
        m for m in catalog.manifests([]) if m.binlog_file and m.binlog_position is not None and _is_mysql(m)
    ]
    if target.kind == "gtid":
        whose = f"host {catalog.cluster}/{catalog.host}"
        try:
            check_gtid_for(target.gtid or "", "mysql", "--to-gtid", whose)
            wanted = GtidSet.parse(target.gtid, "--to-gtid")
        except ValueError as exc:
            raise PitrError(str(exc)) from None
        _check_known_servers(catalog, usable, wanted, whose)

    def before(m: Manifest) -> bool:
        if target.kind == "gtid":
            return GtidSet.parse(m.gtid) <= wanted
        if target.kind == "time":
            assert target.time is not None
            return m.finished_at <= target.time
        assert m.binlog_file and target.file and target.position is not None
        mine, theirs = binlog_number(m.binlog_file), binlog_number(target.file)
        return mine[0] == theirs[0] and (mine[1], m.binlog_position or 0) <= (theirs[1], target.position)

    if backup_id:
        chosen = next((m for m in usable if m.backup_id == backup_id), None)
        if chosen is None:
            raise PitrError(
                f"backup {backup_id} is no MySQL backup with binlog coordinates in {catalog.describe()}"
            )
        if not before(chosen):
            raise PitrError(f"backup {backup_id} holds more than {target.describe()}; pick an older one")
        return chosen
    found = [m for m in usable if before(m)]
    if not found:
        hint = (
            ": a MySQL --to-gtid is the whole GTID set to reach, as `binlogs events` prints it to stop before a "
            "transaction, not one GTID"
            if target.kind == "gtid" and usable
            else ""
        )
        raise PitrError(
            f"no MySQL backup of {catalog.describe()} is before {target.describe()} (usable: {len(usable)}); "
            f"point-in-time recovery starts from a backup taken before the target{hint}"
        )
    return max(found, key=lambda m: m.backup_id)


def mysql_point_in_time_restore(req: PitrRequest) -> MysqlPitrReport:
    """Restore the MySQL backup before `req.target` into `req.target_datadir` and replay the shipped
    binlogs up to the target in a socket-only server started on it. What could make the replay
    fail (the binlogs, the client) is checked before anything is restored; the target is held for
    the whole run, and emptied again of what this run wrote when the replay fails."""
    from ..restore.standby_lock import target_lock

    with target_lock(req.target_datadir, "point-in-time restore"):
        return _mysql_point_in_time_restore(req)


def _mysql_point_in_time_restore(req: PitrRequest) -> MysqlPitrReport:
    from ..restore.server_program import ServerProgramError, check_server_program

    if req.replay not in REPLAY_METHODS:
        raise PitrError(f"replay {req.replay!r}: use one of {', '.join(REPLAY_METHODS)}")
    targets = req.targets()
    try:
        # The replay's server opens the restored copy, and the binlogs are shipped far enough:
        # both refused before the restore.
        backup, binlogs = read_mysql_plan(targets, req.target, req.backup_id, check_server_program)
    except ServerProgramError as exc:
        raise PitrError(f"{exc}; nothing was restored") from None
    binlog_binary = req.binlog_binary if req.binlog_binary != "mariadb-binlog" else "mysqlbinlog"
    client = req.client_binary if req.client_binary != "mariadb" else "mysql"
    try:
        binlog_binary = check_binlog_client(
            binlog_binary,
            backup.server_version or "8.4.0",
            f"backup {backup.backup_id}",
            "nothing was restored",
        )
    except BinlogError as exc:
        raise PitrError(str(exc)) from None
    with mysql_read_lease(targets, "point-in-time restore", backup, binlogs, req.without_read_lease):
        return _restore_and_replay(req, targets, backup, binlogs, binlog_binary, client)


def _restore_and_replay(
    req: PitrRequest,
    targets: Targets,
    backup: Manifest,
    binlogs: list[BinlogManifest],
    binlog_binary: str,
    client: str,
) -> MysqlPitrReport:
    """The planned `backup` restored and `binlogs` replayed, each object from the first of `targets`
    holding it intact, under the caller's read lease; on failure the target is emptied again."""
    from ..restore.chain import RestoreRequest, empty_dir, restore

    existed = req.target_datadir.exists()
    before = set(req.target_datadir.iterdir()) if req.target_datadir.is_dir() else set()
    restored = restore(
        RestoreRequest(
            catalog=targets.first.catalog,
            target_datadir=req.target_datadir,
            backup_id=backup.backup_id,
            private_key=req.private_key,
            passphrase=req.passphrase,
            binary=req.binary,
            scratch_dir=req.scratch_dir,
            move_back=req.move_back,
            max_free_memory_pct=req.max_free_memory_pct,
            source_name=targets.first.name,
            without_read_lease=req.without_read_lease,
        ),
        targets,
    )
    if req.scratch_dir:  # the restore above removed the scratch directory it was given
        req.scratch_dir.mkdir(parents=True, exist_ok=True)
    scratch = private_dir("mysqlpitr", str(req.scratch_dir) if req.scratch_dir else None)
    try:
        files = fetch_shipped(targets, backup, req.target, scratch, req.private_key, req.passphrase, binlogs)
        reached, how = _replay_restored(req, files, binlog_binary, client)
    except BaseException:
        if req.target_datadir.exists() and set(req.target_datadir.iterdir()) - before:
            empty_dir(req.target_datadir, remove=not existed, keep=before)  # only what this run wrote
            log.error("point-in-time restore failed; emptied %s again", req.target_datadir)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return MysqlPitrReport(
        backup_id=backup.backup_id,
        chain=restored.chain,
        target_datadir=str(req.target_datadir),
        source=restored.source,
        target=req.target.describe(),
        binlogs=[m.name for m in binlogs],
        start_gtid=backup.gtid or "",
        reached_gtid=str(reached),
        replay=how,
        fallbacks=targets.notes,
    )


def _replay_restored(
    req: PitrRequest, files: list[Path], binlog_binary: str, client: str
) -> tuple[GtidSet, str]:
    """Replay `files` into the stopped, restored `req.target_datadir` by `req.replay`; returns its
    gtid_executed after and how it was replayed. The applier hands a GTID set with a hole to the pipe."""
    if req.replay == "applier":
        reached, stop = apply_relay_mysql(
            Path(req.target_datadir),
            files_to(req.target, files),
            req.target,
            threads=req.replay_threads,
            server_args=req.replay_server_args,
        )
        if not stop.hole:
            return (
                reached,
                f"applier: {max(req.replay_threads, 1)} worker(s), {stop.transactions} transaction(s)",
            )
        log.info("%s, and the applier applies in binlog order: replaying with the pipe", stop.hole)
    basedir = private_dir("replay", "/tmp", on_sweep=stop_orphans)  # 0700; a short socket path
    try:
        # No binlog of its own (the copy gets no stray binlog), and a copy of a replica does not
        # start replicating from its source while it replays.
        server = SandboxServer.on_datadir(
            Path(req.target_datadir),
            basedir,
            server_id=REPLAY_SERVER_ID,
            family="mysql",
            log_bin=False,
            extra_args=[program_dialect().skip_replica_start_option, *req.replay_server_args],
        )
        server.start()
        try:
            # Replayed CREATE USER / GRANT need the grant tables on: a throwaway account, dropped
            # after, and one session the replay reads the server through.
            db, account = replay_session(server)
            with db:
                reached = replay_mysql(
                    db, files, req.target, binlog_binary=binlog_binary, client_binary=client
                )
                drop_account(db, account)
        finally:
            server.stop()
    finally:
        shutil.rmtree(basedir, ignore_errors=True)
    return reached, "pipe: mysqlbinlog | mysql"
