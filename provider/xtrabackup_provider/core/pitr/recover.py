"""Point-in-time recovery: the newest backup before the target, then its shipped binlogs up to it.

1. Plan from manifests alone (nothing downloaded): the newest backup whose binlog coordinates
   are before the target, and the contiguous shipped binlogs from its position to the target.
   A recorded gap, a binlog never shipped, or shipped binlogs that end before the target stop
   the restore here, with the reason.
2. Fetch those binlogs (sha256-checked, decrypted, decompressed) into local scratch files.
3. Restore the backup chain into the empty target datadir (core.restore.chain).
4. Replay from the backup's position to the target (core/pitr/applier.py): by default through
   the restored server's own replication applier (the binlogs as its relay logs, parallel
   workers, `START SLAVE UNTIL` the end of the last complete transaction before the target);
   with `replay="pipe"` through ONE `mariadb-binlog` process piped into the sandbox's `mariadb`
   client: `--start-position=<pos> --stop-position=<planned end>` over the binlogs up to the
   planned end's (time: the end of the last transaction stamped before T; not --stop-datetime,
   which also stops at a new file's format event, stamped at a replica's restart after the
   source's transactions it then received), `--start-position=<backup GTID>
   --stop-position=<GTID>` (GTID, MariaDB's GTID mode; inclusive), or
   `--start-position=<pos> --stop-position=<pos>` (FILE:POS, exclusive). Both stop at the same
   transaction.

Grants: restore sandboxes run with --skip-grant-tables (and so --skip-networking), and a
replayed GRANT / CREATE USER fails there. The replay therefore turns the grant tables on with
FLUSH PRIVILEGES from the one privileged session the sandbox allows, creates a throwaway
account with a random password in it, replays as that account (over the socket in a private
0700 directory; the server still has no TCP listener), then drops the account. The restored
root password is never needed, and the replay honours every GRANT it contains.

The sandbox runs without a binlog of its own, so the datadir gets no stray binlog files; the
GTID position reached is computed from the binlogs, reported, and left in the datadir as its
gtid_slave_pos (the applier sets it as it applies, the pipe path sets it at the end, and a target
the backup is already at sets it to the backup's GTID). A `--to-gtid` the backup has already
reached needs no binlog at all: none is planned or fetched.
If anything fails after the restore, the target datadir is emptied again (of what this run wrote:
the run holds the target from its check that it is empty to the end, core/restore/standby_lock.py,
so a second restore into it is refused at once).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..binlog.catalog import BinlogCatalog, BinlogError, BinlogManifest, BinlogSegment, leased_manifest_keys
from ..binlog.events import replay_end
from ..catalog.backups import Catalog
from ..catalog.lease import ReadLease
from ..catalog.manifest import StoredObject, read_stored
from ..catalog.targets import READ_ERRORS, Source, Targets
from ..common.files import sha256_range
from ..common.values import format_gtid_pos, gtid_reached, parse_gtid_pos
from ..pipeline.from_store import stream_from_store
from ..pipeline.gpg import GpgError, GpgHome, passphrase_pipe
from ..pipeline.process import ChecksumMismatch, PipelineError
from ..restore.chain import (
    RestoreRequest,
    check_target,
    empty_dir,
    own_scratch,
    plan_chain,
    restore,
    scratch_lock,
)
from ..restore.server_program import ServerProgramError, check_server_program
from ..restore.sources import Located, NotHere, fetch_with_fallback
from ..restore.standby_lock import target_lock
from ..restore.verify import stream_failure
from .applier import REPLAY_METHODS, replay_binlogs
from .plan import PitrError, PitrPlan, PitrTarget, make_plan

log = logging.getLogger(__name__)


@dataclass
class PitrRequest:
    catalog: Catalog
    target_datadir: Path
    target: PitrTarget
    backup_id: str | None = None  # None: the newest backup before the target
    private_key: str | None = None
    passphrase: str | None = None
    binary: str | None = None  # mariabackup / xtrabackup for the prepare
    binlog_binary: str = "mariadb-binlog"
    client_binary: str = "mariadb"
    scratch_dir: Path | None = None  # default: beside the target
    move_back: bool = True
    max_free_memory_pct: int = 50
    replay: str = "applier"  # or "pipe": mariadb-binlog | mariadb (core/pitr/applier.py)
    replay_threads: int = 4  # the applier's parallel workers (0: the SQL thread alone)
    replay_server_args: list[str] = field(default_factory=list)  # more mariadbd options for the replay
    without_read_lease: bool = False  # go on when the read lease cannot be written (core/catalog/lease.py)
    source_name: str = "primary"  # the name of `catalog`'s storage target
    fallbacks: list[Source] = field(default_factory=list)  # further targets (core/catalog/targets.py)

    def targets(self) -> Targets:
        return Targets.of(self.catalog, self.source_name, self.fallbacks)


@dataclass
class PitrReport:
    backup_id: str
    chain: list[str]
    target: str
    target_datadir: str
    binlogs: list[str]
    start: str  # the backup's binlog position
    reached_file: str = ""
    reached_position: int = 0
    reached_gtid: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    replay: str = ""  # how the binlogs were applied (applier / pipe)
    transactions: int = 0  # transactions replayed
    standby: str = ""  # the standby directory the base came from ("": the chain was restored)
    source: str = ""  # the storage target the plan was read from
    fallbacks: list[str] = field(default_factory=list)  # what came from another target, and why

    def summary(self) -> dict[str, Any]:
        return {
            "backup_id": self.backup_id,
            "target": self.target,
            "binlogs": len(self.binlogs),
            "reached": f"{self.reached_file}:{self.reached_position}",
            "gtid": self.reached_gtid,
        }


def point_in_time_restore(req: PitrRequest, targets: Targets | None = None) -> PitrReport:
    """`targets`: default the request's catalog and fallbacks (a caller that reads them too passes
    its own: the notes and the targets found down are shared)."""
    if req.replay not in REPLAY_METHODS:
        raise PitrError(f"replay {req.replay!r}: use one of {', '.join(REPLAY_METHODS)}")
    targets = targets or req.targets()
    # The target is this run's from its check to the end (core/restore/standby_lock.py).
    with target_lock(req.target_datadir, "point-in-time restore"):
        check_target(req.target_datadir)
        plan = read_plan(targets, req.target, req.backup_id)
        chain = [m.backup_id for m in plan_chain(targets.first.catalog, plan.backup.backup_id)]
        binlogs = [f"{m.server_uuid}/{m.name}" for m in plan.binlogs]
        # Retention keeps the chain and the binlogs while they are read (core/catalog/lease.py).
        with read_lease(req, "point-in-time restore", chain, binlogs, targets.first.catalog) as lease:
            lease.check()
            return recover(req, plan, targets=targets)


def read_plan(targets: Targets, target: PitrTarget, backup_id: str | None) -> PitrPlan:
    """The plan from the first target whose manifests reach `target` (it becomes the first)."""
    return targets.read(
        f"the point-in-time plan to {target.describe()}",
        lambda catalog: make_plan(catalog, target, backup_id),
        errors=(*READ_ERRORS, PitrError, BinlogError),
    )


def read_lease(
    req: PitrRequest, purpose: str, backups: list[str], binlogs: list[str], catalog: Catalog | None = None
) -> ReadLease:
    """The read lease of a point-in-time restore: its backups and binlogs, both checked, on the
    target they are read from (default: the request's catalog)."""
    return binlog_read_lease(catalog or req.catalog, purpose, backups, binlogs, req.without_read_lease)


def binlog_read_lease(
    catalog: Catalog, purpose: str, backups: list[str], binlogs: list[str], unleased_ok: bool = False
) -> ReadLease:
    """A read lease on `catalog` naming backups and binlogs (`<server_uuid>/<binlog>`), both checked
    by `check()`: every PITR read path's, MariaDB's and MySQL's (core/pitr/mysql_pipe.py)."""
    return ReadLease(
        catalog,
        purpose,
        backups,
        binlogs,
        unleased_ok=unleased_ok,
        binlog_manifest=partial(leased_manifest_keys, catalog),
    )


# Puts the plan's backup into the (empty) target datadir, given a scratch directory; returns the
# chain it holds and the timings of its steps. Default: the chain restore (_restore_chain).
RestoreBase = Callable[[PitrRequest, PitrPlan, Path], tuple[list[str], dict[str, float]]]


def _restore_chain(targets: Targets) -> RestoreBase:
    """The chain restore from `targets` (the plan's target first, the others for damaged objects)."""

    def put(req: PitrRequest, plan: PitrPlan, scratch: Path) -> tuple[list[str], dict[str, float]]:
        restored = restore(
            RestoreRequest(
                catalog=targets.first.catalog,
                target_datadir=req.target_datadir,
                backup_id=plan.backup.backup_id,
                private_key=req.private_key,
                passphrase=req.passphrase,
                binary=req.binary,
                scratch_dir=scratch,
                move_back=req.move_back,
                max_free_memory_pct=req.max_free_memory_pct,
                without_read_lease=req.without_read_lease,
            ),
            targets,
        )
        return restored.chain, restored.timings

    return put


def recover(
    req: PitrRequest,
    plan: PitrPlan,
    restore_base: RestoreBase | None = None,
    *,
    alongside: bool = False,
    targets: Targets | None = None,
) -> PitrReport:
    """Fetch the plan's binlogs, put its backup into the target (`restore_base`, default the chain
    restore), replay to the target; under the read lease the caller holds. On failure the target
    is emptied again. `targets`: where the plan was read, first (default: the request's).

    The binlogs are fetched first, so a binlog that cannot be read fails before the chain is
    fetched; `alongside` fetches them while a short base step runs (the standby's copy).

    The target (and a scratch directory the request names) is held for the whole run, as the
    caller that checked it holds it already (core/restore/standby_lock.py)."""
    with target_lock(req.target_datadir, "point-in-time restore"), scratch_lock(req.scratch_dir):
        return _recover(req, plan, restore_base, alongside=alongside, targets=targets)


def _recover(
    req: PitrRequest,
    plan: PitrPlan,
    restore_base: RestoreBase | None,
    *,
    alongside: bool,
    targets: Targets | None,
) -> PitrReport:
    targets = targets or req.targets()
    restore_base = restore_base or _restore_chain(targets)
    backup = plan.backup
    try:
        check_server_program(backup)  # the replay's server opens the restored copy
    except ServerProgramError as exc:
        raise PitrError(f"{exc}; nothing was restored") from None
    scratch = own_scratch(req.scratch_dir, req.target_datadir, "pitr", backup.backup_id)
    report = PitrReport(
        backup.backup_id,
        [],
        req.target.describe(),
        str(req.target_datadir),
        [m.name for m in plan.binlogs],
        f"{backup.binlog_file}:{backup.binlog_position}",
        source=targets.first.name,
        fallbacks=targets.notes,
    )
    existed = req.target_datadir.exists()
    before = set(req.target_datadir.iterdir()) if req.target_datadir.is_dir() else set()
    try:
        if alongside:
            files = _base_and_binlogs(req, plan, restore_base, scratch, report, targets)
        else:
            t0 = time.monotonic()
            files = fetch_binlogs(req, plan.binlogs, scratch / "binlogs", targets)
            report.timings["fetch_binlogs"] = time.monotonic() - t0
            report.chain, timings = restore_base(req, plan, scratch / "restore")
            report.timings.update(timings)
        t0 = time.monotonic()
        replaying = where_replay_stops(plan, files, report)
        if not replaying:
            log.info("backup %s is already at %s: nothing to replay", backup.backup_id, report.target)
        # Also with nothing to replay: it leaves gtid_slave_pos at the GTID reached (promote's fork).
        stop = replay_binlogs(
            req.replay,
            plan,
            files,
            req.target_datadir,
            binlog_binary=req.binlog_binary,
            client_binary=req.client_binary,
            threads=req.replay_threads,
            server_args=req.replay_server_args,
        )
        if stop.transactions:
            report.replay, report.transactions = stop.method or req.replay, stop.transactions
            report.reached_gtid = stop.gtid or report.reached_gtid
        if replaying:  # the replay must have reached an (inclusive) GTID target, not stopped short
            _check_reached(plan, report.reached_gtid if stop.transactions else plan.backup.gtid or "")
        report.timings["replay"] = time.monotonic() - t0
    except BaseException:
        if req.target_datadir.exists() and set(req.target_datadir.iterdir()) - before:
            # Only what this run wrote: the target is held, but not proven empty by every caller.
            empty_dir(req.target_datadir, remove=not existed, keep=before)
            log.error("point-in-time restore failed; emptied %s again", req.target_datadir)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log.info(
        "restored %s and replayed %d binlog(s) to %s: %s:%d, GTID %s",
        backup.backup_id,
        len(files),
        report.target,
        report.reached_file,
        report.reached_position,
        report.reached_gtid or "-",
    )
    return report


def _base_and_binlogs(
    req: PitrRequest,
    plan: PitrPlan,
    restore_base: RestoreBase,
    scratch: Path,
    report: PitrReport,
    targets: Targets,
) -> list[Path]:
    """The base step in this thread while the binlogs are fetched in another; the first failure
    is raised once both have stopped."""

    def fetch() -> list[Path]:
        t0 = time.monotonic()
        try:
            return fetch_binlogs(req, plan.binlogs, scratch / "binlogs", targets)
        finally:
            report.timings["fetch_binlogs (alongside)"] = time.monotonic() - t0

    with ThreadPoolExecutor(1, thread_name_prefix="fetch-binlogs") as pool:
        fetching = pool.submit(fetch)
        try:
            report.chain, timings = restore_base(req, plan, scratch / "restore")
        except BaseException:
            wait([fetching])  # the scratch it writes is removed by the caller
            raise
        report.timings.update(timings)
        return fetching.result()


def _check_reached(plan: PitrPlan, reached: str) -> None:
    """A GTID target is inclusive: a replay that stopped before it (the open binlog is stored as
    the server sent it, so it can end inside the target's transaction) is an error, not a
    restore to some earlier point."""
    target = plan.target
    if target.kind != "gtid" or gtid_reached(parse_gtid_pos(reached), target.gtid_pos()):
        return
    last = plan.binlogs[-1]
    raise PitrError(
        f"the shipped binlogs hold {target.describe()} only in part: {last.name} is stored up to byte "
        f"{last.size}, inside that transaction, so the replay stopped at {reached or '-'}. Retry once "
        "binlog shipping has stored more of it, or name an earlier GTID"
    )


def where_replay_stops(plan: PitrPlan, files: list[Path], report: PitrReport) -> bool:
    """Where the replay will stop, computed from the binlogs themselves (for the report);
    False when the backup is already there (the tool refuses a GTID range that is empty)."""
    target = plan.target
    end = replay_end(
        files,
        plan.backup.binlog_position or 0,
        stop_time=int(target.time.timestamp()) if target.time else None,
        stop_position=target.position,
        stop_gtid=target.gtid_pos() if target.kind == "gtid" else None,
    )
    gtid = parse_gtid_pos(plan.backup.gtid)
    gtid.update(end.last_gtid)
    if files:
        report.reached_file, report.reached_position = end.file, end.position
    else:  # nothing planned: the backup is at the target
        report.reached_file, report.reached_position = (
            plan.backup.binlog_file or "",
            plan.backup.binlog_position or 0,
        )
    report.reached_gtid = format_gtid_pos(gtid)
    start = (plan.backup.binlog_file, plan.backup.binlog_position or 0)
    if target.kind == "gtid":
        return not gtid_reached(parse_gtid_pos(plan.backup.gtid), target.gtid_pos())
    return bool(end.last_gtid) or (end.file, end.position) > start


def fetch_binlogs(
    req: PitrRequest, binlogs: list[BinlogManifest], dest: Path, targets: Targets | None = None
) -> list[Path]:
    """Download, check, decrypt and decompress each binlog (all its segments) into `dest`, each
    segment from the first target that holds it intact (`binlogs` were read from the first)."""
    targets = targets or req.targets()
    origin = targets.first
    dest.mkdir(parents=True, mode=0o700)
    files = []
    with GpgHome() as gpg:
        if any(s.object.encryption == "gpg" for m in binlogs for s in m.segments):
            _import_key(gpg, req, binlogs)
        for m in binlogs:
            path = dest / m.name
            # Decrypted, a binlog may hold `CREATE USER ... IDENTIFIED BY` in clear: owner only.
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            for seg in m.segments:

                def fetch(source: Source, obj: StoredObject, path: Path = path) -> None:
                    _fetch_segment(source.catalog, obj, path, gpg)

                def clear(path: Path = path, offset: int = seg.offset) -> None:
                    os.truncate(path, offset)  # what a failed fetch appended

                locate = segment_on(origin, m, seg)
                fetch_with_fallback(targets, f"binlog {m.name}", locate, fetch, clear)
                if sha256_range(path, seg.offset, seg.raw_size) != seg.raw_sha256:
                    raise PitrError(
                        f"{seg.object.key}: decrypted bytes do not match the manifest's raw sha256"
                    )
            if path.stat().st_size != m.size:
                raise PitrError(f"{m.name}: fetched {path.stat().st_size} bytes, the manifest says {m.size}")
            files.append(path)
    return files


def segment_on(
    origin: Source, m: BinlogManifest, seg: BinlogSegment
) -> Callable[[Source], Located[StoredObject]]:
    """`locate` for one segment of binlog `m` (read from `origin`): the same object (sha256 and
    size) in each target's own manifest of that binlog."""

    def locate(source: Source) -> Located[StoredObject]:
        if source is origin:
            return Located(seg.object, seg.object)
        try:
            there = BinlogCatalog(source.catalog, m.server_uuid).read(m.name, partial=not m.complete)
        except BinlogError as exc:
            raise NotHere(str(exc)) from exc
        for other in there.segments:
            same = (other.object.sha256, other.object.size) == (seg.object.sha256, seg.object.size)
            if other.offset == seg.offset and same:
                return Located(other.object, other.object)
        raise NotHere(f"its {m.name} holds another object at offset {seg.offset} (sha256 differs)")

    return locate


def _fetch_segment(catalog: Catalog, obj: StoredObject, path: Path, gpg: GpgHome) -> None:
    encrypted = obj.encryption == "gpg"
    fd = passphrase_pipe(gpg.passphrase) if encrypted and gpg.passphrase is not None else None
    try:
        stream_from_store(
            read_stored(catalog.store, obj),
            ["dd", f"of={path}", "oflag=append", "conv=notrunc", "bs=1M", "status=none"],
            decrypt_argv=gpg.decrypt_argv(fd) if encrypted else None,
            pass_fds=(fd,) if fd is not None else (),
            expected_sha256=obj.sha256,
            object_name=f"{catalog.store.location}/{obj.key}",
            consumer_name=f"write {path.name}",
        )
    except ChecksumMismatch:
        raise
    except PipelineError as exc:
        raise stream_failure(f"binlog {path.name}", exc, catalog.store, obj) from exc
    finally:
        if fd is not None:
            os.close(fd)


def _import_key(gpg: GpgHome, req: PitrRequest, binlogs: list[BinlogManifest]) -> None:
    if not req.private_key:
        raise PitrError(
            f"the binlogs from {binlogs[0].name} are GPG-encrypted; supply the private key "
            "(gpg connection or --private-key-file)"
        )
    gpg.import_private_key(req.private_key, req.passphrase)
    have = set(gpg.fingerprints(secret=True))
    for m in binlogs:
        for seg in m.segments:
            if (
                seg.object.encryption == "gpg"
                and seg.object.recipients
                and not have & set(seg.object.recipients)
            ):
                raise GpgError(
                    f"binlog {m.name} is encrypted for {', '.join(seg.object.recipients)}, but the private key "
                    f"given is {', '.join(sorted(have)) or 'none'}; supply the matching private key"
                )
