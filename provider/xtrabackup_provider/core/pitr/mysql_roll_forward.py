"""The restore test's roll-forward of a MySQL backup (a clone) over the host's shipped binlogs.

Every transaction shipped after the backup is applied to the restored, stopped datadir by the
replay method asked for, as MySQL's point-in-time recovery does: "applier" (the default) makes the
fetched binlogs the relay logs of a sandbox on it and its SQL thread applies them
(core/pitr/mysql_applier.py); "pipe" starts it once more (socket only, its own binlog off, so
nothing it runs gets a GTID of its own) and pipes MySQL's own mysqlbinlog into it
(core/pitr/mysql_pipe.py). Either skips by GTID what the copy holds. The
copy's gtid_executed afterwards must be the backup's GTID set plus every set the shipped binlogs
hold: a backup whose GTID set is wrong makes the replay fail (a row event finds its row missing or
already there) or reach another set, and a binlog missing from the catalog stops it short. A binlog
written while gtid_mode was not ON (its transactions have no GTIDs) fails the check by name: the
sets could not tell what it holds, and a GTID replay cannot apply it.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from ..binlog.catalog import BinlogCatalog, BinlogManifest, server_uuids
from ..catalog.backups import Catalog
from ..catalog.manifest import CatalogError, Manifest
from ..catalog.targets import Targets
from ..common.tempdirs import private_dir
from ..common.values import GtidSet
from ..db.dialect import dialect_for
from ..db.sandbox import SandboxServer
from ..restore.evidence import CheckResult
from .applier import REPLAY_METHODS
from .mysql_applier import apply_relay_mysql
from .mysql_pipe import REPLAY_SERVER_ID, fetch_shipped, replay_mysql, without_gtids, without_gtids_reason
from .plan import PitrError, PitrTarget
from .replay import ReplayError, replay_session
from .roll_targets import NotRolled, first_rolling, roll_lease

log = logging.getLogger(__name__)

NAME = "roll_forward"


def mysql_roll_forward(
    catalog: Catalog,
    datadir: Path,
    manifest: Manifest,
    scratch: Path,
    *,
    private_key: str | None = None,
    passphrase: str | None = None,
    replay: str = "applier",
    replay_threads: int = 4,
    targets: Targets | None = None,
    without_read_lease: bool = False,
) -> CheckResult:
    """Roll the restored MySQL copy in `datadir` forward to the newest shipped GTID set, by
    `replay` ("applier" or "pipe"). `targets`: the host's storage targets (default `catalog`
    alone), read as MariaDB's roll-forward reads them (core/pitr/roll_targets.py); the note says
    which copy a binlog came from. The binlogs are read under a read lease (roll_targets.roll_lease;
    `without_read_lease`: go on when it cannot be written)."""
    targets = targets or Targets.of(catalog)
    result = _roll_forward(
        targets,
        datadir,
        manifest,
        scratch,
        private_key,
        passphrase,
        replay,
        replay_threads,
        without_read_lease,
    )
    if targets.notes:
        result.note = "; ".join([result.note, *targets.notes]).strip("; ")
    return result


def _shipped_on(catalog: Catalog, manifest: Manifest) -> list[BinlogManifest]:
    """The binlogs on `catalog` from the backup's binlog on; NotRolled with the check's result when
    they cannot roll the backup forward."""
    servers = server_uuids(catalog)
    if not servers:
        raise NotRolled(CheckResult.skipped(NAME, "not run: this host ships no binlogs"))
    if manifest.server_uuid not in servers:
        raise NotRolled(
            CheckResult.of(
                NAME,
                [
                    f"this host's shipped binlogs are of server(s) {', '.join(servers)}, none of them the "
                    f"backup's server {manifest.server_uuid}: the backup does not belong to this host's binlog history"
                ],
            )
        )
    if not manifest.binlog_file:
        raise NotRolled(
            CheckResult.of(NAME, [f"backup {manifest.backup_id} records no binlog position to start from"])
        )
    chain, why = BinlogCatalog(catalog, manifest.server_uuid).index().chain_from(manifest.binlog_file)
    if not chain:
        raise NotRolled(
            CheckResult.of(NAME, [f"backup {manifest.backup_id} starts at {manifest.binlog_file}, but {why}"])
        )
    anonymous = next((m for m in chain if without_gtids(m)), None)
    if anonymous is not None:
        raise NotRolled(
            CheckResult.of(NAME, [without_gtids_reason(anonymous, "the restore test's roll-forward")])
        )
    return chain


def _roll_forward(
    targets: Targets,
    datadir: Path,
    manifest: Manifest,
    scratch: Path,
    private_key: str | None,
    passphrase: str | None,
    replay: str,
    replay_threads: int,
    without_read_lease: bool = False,
) -> CheckResult:
    if replay not in REPLAY_METHODS:
        return CheckResult.of(NAME, [f"replay {replay!r}: use one of {', '.join(REPLAY_METHODS)}"])
    try:
        chain = first_rolling(targets, manifest, _shipped_on)
    except NotRolled as exc:
        return exc.result
    start = GtidSet.parse(manifest.gtid, "the backup's GTID set")
    want = start
    for m in chain:
        want = want | m.gtid_sets()[1]
    if want == start:
        return CheckResult.of(
            NAME, [], f"nothing shipped after the backup (GTID {start or '-'})", gtid=str(start)
        )
    scratch.mkdir(parents=True, exist_ok=True)  # the restore test names it, this check makes it
    work = private_dir("mysqlpitr", str(scratch))
    try:
        # Retention keeps what the roll-forward reads until its replay ends.
        with roll_lease(targets, chain, without_read_lease):
            files = fetch_shipped(
                targets, manifest, PitrTarget.at_gtid(str(want)), work, private_key, passphrase, chain
            )
            reached, how = _replay(datadir, manifest, scratch, files, want, replay, replay_threads)
    except (PitrError, ReplayError, CatalogError) as exc:  # CatalogError: the lease's
        return CheckResult.of(NAME, [str(exc)], replayed=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    note = (
        f"{len(chain)} binlog(s) shipped from {manifest.binlog_file}, GTID {start or '-'} -> {reached or '-'} "
        f"({how})"
    )
    if reached != want:
        return CheckResult.of(
            NAME,
            [f"the replay reached GTID set {reached or '-'}, the shipped binlogs' newest is {want}"],
            note,
            gtid=str(reached),
            replay=how,
            replayed=True,
        )
    log.info("rolled %s forward: %s", manifest.backup_id, note)
    return CheckResult.of(NAME, [], note, gtid=str(reached), binlogs=len(chain), replay=how, replayed=True)


def _replay(
    datadir: Path,
    manifest: Manifest,
    scratch: Path,
    files: list[Path],
    want: GtidSet,
    replay: str,
    threads: int,
) -> tuple[GtidSet, str]:
    """Apply `files` to the stopped copy in `datadir` up to `want`; its gtid_executed after and how."""
    target = PitrTarget.at_gtid(str(want))
    if replay == "applier":
        reached, stop = apply_relay_mysql(datadir, files, target, threads=threads)
        if not stop.hole:  # none: `want` is every shipped set, it leaves nothing out
            return reached, f"applier: {max(threads, 1)} worker(s), {stop.transactions} transaction(s)"
        log.info("%s, and the applier applies in binlog order: replaying with the pipe", stop.hole)
    dialect = dialect_for(manifest.server_version or "8.4.0")
    server = SandboxServer.on_datadir(
        datadir,
        scratch / "sb",
        server_id=REPLAY_SERVER_ID,
        family="mysql",
        log_bin=False,
        extra_args=[dialect.skip_replica_start_option],
    )
    server.start()
    try:
        db, _ = replay_session(server, "xbp")  # replayed GRANTs need the grant tables on
        with db:  # the replay's one session with the server
            reached = replay_mysql(
                db, files, target, binlog_binary=dialect.binlog_client, client_binary=dialect.client
            )
    finally:
        server.stop()
    return reached, "pipe: mysqlbinlog | mysql"
