"""The restore test's roll-forward of a MySQL backup (a clone) over the host's shipped binlogs.

The restored, stopped datadir is started once more (socket only, its own binlog off, so nothing it
runs gets a GTID of its own) and every transaction shipped after the backup is piped into it by
MySQL's own mysqlbinlog (core/pitr/mysql_pipe.py: what the copy holds is skipped by GTID). The
copy's gtid_executed afterwards must be the backup's GTID set plus every set the shipped binlogs
hold: a backup whose GTID set is wrong makes the replay fail (a row event finds its row missing or
already there) or reach another set, and a binlog missing from the catalog stops it short.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..binlog.catalog import BinlogCatalog, BinlogManifest, server_uuids
from ..catalog.backups import Catalog
from ..catalog.manifest import Manifest
from ..catalog.targets import Targets
from ..common.values import GtidSet
from ..db.dialect import dialect_for
from ..db.sandbox import SandboxServer, privileged_account
from ..restore.evidence import CheckResult
from .mysql_pipe import REPLAY_SERVER_ID, replay_from_backup
from .plan import PitrError, PitrTarget
from .replay import ReplayError
from .roll_targets import NotRolled, first_rolling

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
    targets: Targets | None = None,
) -> CheckResult:
    """Roll the restored MySQL copy in `datadir` forward to the newest shipped GTID set.
    `targets`: the host's storage targets (default `catalog` alone), read as MariaDB's roll-forward
    reads them (core/pitr/roll_targets.py); the note says which copy a binlog came from."""
    targets = targets or Targets.of(catalog)
    result = _roll_forward(targets, datadir, manifest, scratch, private_key, passphrase)
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
    return chain


def _roll_forward(
    targets: Targets,
    datadir: Path,
    manifest: Manifest,
    scratch: Path,
    private_key: str | None,
    passphrase: str | None,
) -> CheckResult:
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
        account = privileged_account(server)  # replayed GRANTs need the grant tables on
        reached = replay_from_backup(
            targets,
            manifest,
            account,
            PitrTarget.at_gtid(str(want)),
            scratch_dir=scratch,
            private_key=private_key,
            passphrase=passphrase,
            binlog_binary=dialect.binlog_client,
            client_binary=dialect.client,
        )
    except (PitrError, ReplayError) as exc:
        return CheckResult.of(NAME, [str(exc)], replayed=True)
    finally:
        server.stop()
    note = (
        f"{len(chain)} binlog(s) shipped from {manifest.binlog_file}, GTID {start or '-'} -> {reached or '-'}"
    )
    if reached != want:
        return CheckResult.of(
            NAME,
            [f"the replay reached GTID set {reached or '-'}, the shipped binlogs' newest is {want}"],
            note,
            gtid=str(reached),
            replayed=True,
        )
    log.info("rolled %s forward: %s", manifest.backup_id, note)
    return CheckResult.of(NAME, [], note, gtid=str(reached), binlogs=len(chain), replayed=True)
