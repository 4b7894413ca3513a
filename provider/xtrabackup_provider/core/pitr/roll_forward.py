"""Roll a restored copy forward over the host's shipped binlogs, for the restore test.

Every shipped binlog from the backup's position to the newest shipped point (the open binlog's
shipped part included) is fetched (sha256-checked, decrypted) and replayed into the stopped,
restored datadir with the point-in-time recovery's own steps (recover.fetch_binlogs,
recover.where_replay_stops, replay.replay). The GTID reached must equal the newest GTID the
binlog catalog records. That proves the backup and the binlogs fit: a backup whose position is
wrong makes the replay fail (a row event finds its row missing or already there), a binlog
missing from the catalog stops it short of the newest, a backup of another server has no
binlogs here at all.
"""

from __future__ import annotations

__all__ = ["ShippedBinlogs"]

import logging
from dataclasses import dataclass, field
from pathlib import Path

from ..binlog.catalog import BinlogCatalog, BinlogError, BinlogIndex, BinlogManifest, server_uuids
from ..catalog.backups import Catalog
from ..catalog.manifest import CatalogError, Manifest
from ..catalog.targets import Source, Targets
from ..common.values import binlog_number, format_gtid_pos, parse_gtid_pos
from ..restore.evidence import CheckResult
from .mysql_roll_forward import mysql_roll_forward
from .plan import PitrPlan, PitrTarget
from .recover import PitrReport, PitrRequest, fetch_binlogs, where_replay_stops
from .replay import replay
from .roll_targets import NotRolled as _NotRolled
from .roll_targets import first_rolling, roll_lease

log = logging.getLogger(__name__)

NAME = "roll_forward"


@dataclass
class ShippedBinlogs:
    """The restore test's roll-forward (core.restore.restore_test.RollForward) over the host's
    shipped binlogs on `catalog`'s target, or on `fallbacks` (core/catalog/targets.py) when that
    one cannot be read or cannot roll the backup forward."""

    catalog: Catalog
    private_key: str | None = None
    passphrase: str | None = field(default=None, repr=False)
    binlog_binary: str = "mariadb-binlog"
    client_binary: str = "mariadb"
    source_name: str = "primary"
    fallbacks: list[Source] = field(default_factory=list)
    replay: str = "applier"  # MySQL (a clone backup): or "pipe" (core/pitr/mysql_roll_forward.py)
    replay_threads: int = 4
    without_read_lease: bool = False  # go on when the read lease cannot be written (core/catalog/lease.py)

    def __call__(self, datadir: Path, manifest: Manifest, scratch: Path) -> CheckResult:
        if manifest.engine_flavour == "clone":  # MySQL's binlogs: MySQL's applier or pipe
            return mysql_roll_forward(
                self.catalog,
                datadir,
                manifest,
                scratch,
                private_key=self.private_key,
                passphrase=self.passphrase,
                replay=self.replay,
                replay_threads=self.replay_threads,
                targets=Targets.of(self.catalog, self.source_name, self.fallbacks),
                without_read_lease=self.without_read_lease,
            )
        targets = Targets.of(self.catalog, self.source_name, self.fallbacks)
        try:
            chain, want = _newest_on(targets, manifest)
            if chain:
                # Retention keeps what the roll-forward reads until its replay ends.
                with roll_lease(targets, chain, self.without_read_lease):
                    result = self._roll(datadir, manifest, scratch, chain, want, targets)
            else:
                result = CheckResult.of(
                    NAME, [], f"nothing shipped after the backup (GTID {want or '-'})", gtid=want
                )
        except _NotRolled as exc:
            result = exc.result
        except (BinlogError, CatalogError) as exc:  # CatalogError: the lease's (core/catalog/lease.py)
            result = CheckResult.of(NAME, [str(exc)])
        if targets.notes:
            result.note = "; ".join([result.note, *targets.notes]).strip("; ")
        return result

    def _roll(
        self,
        datadir: Path,
        manifest: Manifest,
        scratch: Path,
        chain: list[BinlogManifest],
        want: str,
        targets: Targets,
    ) -> CheckResult:
        target = PitrTarget.at_gtid(want)
        plan = PitrPlan(manifest, chain, target)
        request = PitrRequest(
            self.catalog, datadir, target, private_key=self.private_key, passphrase=self.passphrase
        )
        files = fetch_binlogs(request, chain, scratch / "binlogs", targets)
        report = PitrReport(
            manifest.backup_id,
            [],
            target.describe(),
            str(datadir),
            [m.name for m in chain],
            f"{manifest.binlog_file}:{manifest.binlog_position}",
        )
        if where_replay_stops(plan, files, report):
            replay(datadir, [*plan.replay_args(), *map(str, files)], self.binlog_binary, self.client_binary)
        note = (
            f"{len(files)} binlog(s) replayed, {manifest.binlog_file}:{manifest.binlog_position} -> "
            f"{report.reached_file}:{report.reached_position}, GTID {manifest.gtid or '-'} -> {report.reached_gtid}"
        )
        if report.reached_gtid != want:
            return CheckResult.of(
                NAME,
                [
                    f"the replay reached GTID {report.reached_gtid or '-'}, the binlog catalog's newest is {want}"
                ],
                note,
                gtid=report.reached_gtid,
                replayed=True,
            )
        log.info("rolled %s forward: %s", manifest.backup_id, note)
        return CheckResult.of(NAME, [], note, gtid=report.reached_gtid, binlogs=len(files), replayed=True)


def _newest_on(targets: Targets, manifest: Manifest) -> tuple[list[BinlogManifest], str]:
    """_to_newest on the first target where it succeeds (core/pitr/roll_targets.py)."""
    return first_rolling(targets, manifest, _to_newest)


def _to_newest(catalog: Catalog, manifest: Manifest) -> tuple[list[BinlogManifest], str]:
    """The binlogs on `catalog` from the backup to the newest shipped point and the GTID there (no
    binlogs: nothing was shipped after it); _NotRolled with the check's result when they cannot
    roll the backup forward."""
    servers = server_uuids(catalog)
    if not servers:
        raise _NotRolled(CheckResult.skipped(NAME, "not run: this host ships no binlogs"))
    if manifest.server_uuid not in servers:
        raise _NotRolled(
            CheckResult.of(
                NAME,
                [
                    f"this host's shipped binlogs are of server(s) {', '.join(servers)}, none of them the backup's "
                    f"server {manifest.server_uuid}: the backup does not belong to this host's binlog history"
                ],
            )
        )
    if not manifest.binlog_file or manifest.binlog_position is None:
        raise _NotRolled(
            CheckResult.of(NAME, [f"backup {manifest.backup_id} records no binlog position to start from"])
        )
    chain, problem = _contiguous(BinlogCatalog(catalog, manifest.server_uuid).index(), manifest)
    if problem:
        raise _NotRolled(CheckResult.of(NAME, [problem]))
    newest = parse_gtid_pos(manifest.gtid)
    for m in chain:
        newest.update(parse_gtid_pos(m.gtid_last))
    want = format_gtid_pos(newest)
    if want == format_gtid_pos(parse_gtid_pos(manifest.gtid)):
        return [], want  # nothing shipped after the backup
    return chain, want


def _contiguous(index: BinlogIndex, manifest: Manifest) -> tuple[list[BinlogManifest], str]:
    """The shipped binlogs from the backup's position to the newest one, or why they do not reach it."""
    assert manifest.binlog_file and manifest.binlog_position is not None
    chain, why = index.chain_from(manifest.binlog_file)
    start = f"{manifest.binlog_file}:{manifest.binlog_position}"
    if not chain:
        return [], f"backup {manifest.backup_id} starts at {start}, but {why}"
    if chain[0].size < manifest.binlog_position:
        return (
            [],
            f"backup {manifest.backup_id} starts at {start}, but only {chain[0].size} bytes of it are shipped",
        )
    names = index.names()
    base, last = binlog_number(chain[-1].name)
    later = [n for n in names if binlog_number(n)[0] == base and binlog_number(n)[1] > last]
    if later:
        return [], (
            f"the shipped binlogs after backup {manifest.backup_id} ({start}) stop at {chain[-1].name}: {why}; "
            f"the newest shipped binlog {later[-1]} cannot be reached"
        )
    return chain, ""
