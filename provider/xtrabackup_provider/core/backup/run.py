"""Take one backup end to end: decide, stream, then register the manifest last."""

from __future__ import annotations

__all__ = ["BackupRequest", "run_backup"]

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from ..binlog.identity import IdentityError, ServerIdentity, check_server, checked_copy
from ..catalog.backups import Catalog
from ..catalog.lock import HostLock
from ..catalog.manifest import (
    BACKUP_OBJECT_NAME,
    FORMAT_VERSION,
    PARTS_FORMAT_VERSION,
    CatalogError,
    GateResult,
    Manifest,
    OptionFiles,
    Segment,
    StoredObject,
    new_backup_id,
    stored_segments,
)
from ..catalog.origin import ORIGIN_KEY
from ..catalog.shape import SourceShape
from ..common.children import raise_open_files_limit, require_open_files
from ..common.crashpoints import crash_point
from ..common.files import directory_size
from ..common.tempdirs import private_workdir
from ..db.dialect import dialect_for
from ..db.heartbeat import (
    SOURCE_HEARTBEAT_TABLE,
    lineage_token,
    plant,
    wait_for_heartbeat,
    write_source_heartbeat,
)
from ..db.rowcounts import SnapshotCounter
from ..db.server import MySQLTarget, ServerFacts, data_position, defaults_file, tablespace_count
from ..db.session import Session
from ..db.shape import capture_shape, table_names
from ..engine.argv import BackupOptions, backup_argv
from ..engine.metadata import read_binlog_position, read_checkpoints, read_info
from ..engine.tools import Flavour, ToolVersion, check_tool_for_server, detect_tool, stream_flavour
from ..engine.warnings import not_what_was_asked
from ..pipeline.gpg import GpgHome
from ..pipeline.process import PipelineError
from ..pipeline.split import PartPlan, plan_parts
from ..pipeline.to_parts import stream_to_parts
from ..pipeline.to_store import StreamResult, stream_to_store
from ..storage.base import ARCHIVE_TAGGING, ObjectWriter, PutOptions
from .abandoned import remove_abandoned
from .clone import check_clone, cloned
from .decide import ChainPolicy, Decision, decide
from .impact import AppliedImpact, ImpactSettings, LockWatch, apply_settings
from .lineage import ServerLineage, describe_break, lineage_problems
from .option_files import save_option_files

log = logging.getLogger(__name__)
# What one stored stream became: key, its put options, the stream's result, its role and part number.
# key, options, result, role, part, the segments the store wrote it as (None: one object)
Placed = tuple[
    str, PutOptions, StreamResult, Literal["part", "tail"] | None, int | None, list[Segment] | None
]


class BackupError(RuntimeError):
    """The backup could not be taken; nothing was registered."""


@dataclass
class BackupRequest:
    catalog: Catalog
    target: MySQLTarget
    flavour: Flavour = "mariabackup"
    binary: str | None = None  # the tool; clone: the mysqld that settles the copy (default: on PATH)
    staging_dir: str | None = None  # clone: where the copy is staged on the database host (default: temp dir)
    datadir: str | None = None  # default: the server's @@datadir
    kind: str = "auto"  # "auto" | "full" | "incremental"
    public_keys: list[str] = field(
        default_factory=list
    )  # armored; none = unencrypted (refused unless allowed)
    allow_unencrypted: bool = False
    compression_level: int = 3
    zstd_threads: int = 0  # 0 = one per core
    parallel: int = 2
    # K parts (core/pipeline/split.py): at most this many, one per usable core, one per
    # part_min_bytes of datadir, and only as many as still shrink the largest part. 1: one stream.
    max_parts: int = 1
    part_min_bytes: int = 8 << 30
    storage_classes: dict[str, str] = field(
        default_factory=lambda: {"full": "STANDARD", "incremental": "STANDARD"}
    )
    sse: str | None = None
    kms_key_id: str | None = None
    object_lock_mode: str | None = None  # "GOVERNANCE" | "COMPLIANCE": retention on the backup object
    object_lock_days: int | None = None
    # Under the host lock no other run of this host is live, so every open upload is debris.
    stale_uploads_after: timedelta = timedelta(0)
    policy: ChainPolicy = field(default_factory=ChainPolicy)
    gates: list[GateResult] = field(default_factory=list)
    # A server the host's catalog does not know (core/binlog/identity.py) is refused unless accepted.
    accept_new_server: bool = False
    heartbeat: bool = False  # plant the canary + lineage row (unlogged) before the backup starts
    heartbeat_target: MySQLTarget | None = None  # the source, when backing up a replica
    heartbeat_wait: float = 60  # seconds a replica gets to apply the heartbeat before the backup
    progress: Callable[[int], None] | None = None
    impact: ImpactSettings = field(default_factory=ImpactSettings)  # throttle, nice, ionice, upload cap
    option_files: list[str] = field(default_factory=list)  # the server's my.cnf (its includes follow)
    origin: dict[str, Any] = field(default_factory=dict)  # the Airflow task taking it (catalog/origin.py)


def readable_manifests(catalog: Catalog) -> list[Manifest]:
    problems: list[str] = []
    manifests = catalog.manifests(problems)
    for problem in problems:
        log.warning("ignoring unreadable manifest: %s", problem)
    return manifests


def plan(
    req: BackupRequest, facts: ServerFacts, tool: ToolVersion, now: datetime, manifests: list[Manifest]
) -> Decision:
    """The decision for this run, honouring a forced kind."""
    auto = decide(manifests, req.policy, now, facts.server_uuid, (tool.flavour, tool.major))
    if req.kind == "full":
        # When the policy takes a full anyway, keep its reason.
        return auto if auto.kind == "full" else Decision("full", "a full backup was requested")
    if req.kind == "incremental" and not tool.capabilities.incremental:
        raise BackupError(
            f"an incremental was requested but the {tool.flavour} engine takes full backups only; "
            "ask for a full (kind full or auto)"
        )
    if req.kind == "incremental" and auto.kind != "incremental":
        # Only past the policy's own limits (age, length, size), never onto a chain that does not
        # validate or that another server or tool version made: that could not be restored.
        if auto.continuable is not None:
            return Decision(
                "incremental",
                f"an incremental was requested (policy: {auto.reason})",
                parent=auto.continuable,
            )
        raise BackupError(f"an incremental was requested but {auto.reason}; take a full backup first")
    return auto


def run_backup(req: BackupRequest, now: datetime | None = None) -> Manifest:
    # One run per host at a time, from the decision to the manifest (HostLockBusy otherwise).
    # One session with the server for the whole run (core/db/session.py), opened when first needed.
    with HostLock(req.catalog) as lock, Session(req.target) as db:
        return _run_locked(req, now, lock, db)


# Backup ids have one-second resolution and must sort in the order the backups were taken.
MAX_CLOCK_WAIT_SECONDS = 5
# A worker this far ahead of the store's clock would name its backup in the future, and every run
# of the host from a worker with the right time would be refused until that id is past.
MAX_CLOCK_AHEAD = timedelta(seconds=60)


def _check_clock(catalog: Catalog, lock: HostLock) -> None:
    ahead = lock.clock_ahead()
    if ahead is not None and ahead > MAX_CLOCK_AHEAD:
        raise BackupError(
            f"this worker's clock is {ahead.total_seconds():.0f} s ahead of the store's ({catalog.describe()}): "
            "its backup id would lie in the future and stop the host's other runs until then; sync the "
            "clocks (NTP); nothing was backed up"
        )


def _start_after_newest(catalog: Catalog) -> datetime:
    """Now, in a later second than the newest backup's id (under the host lock): a run that
    follows one that took under a second waits for the next second rather than reuse its id."""
    ids = catalog.backup_ids()
    newest = ids[-1][:16] if ids else ""  # "YYYYmmddTHHMMSSZ"
    deadline = time.monotonic() + MAX_CLOCK_WAIT_SECONDS
    while new_backup_id("full", now := datetime.now(UTC))[:16] <= newest:
        if time.monotonic() > deadline:
            raise BackupError(
                f"the newest backup of {catalog.describe()}, {ids[-1]}, is later than this worker's clock "
                f"({now:%Y-%m-%dT%H:%M:%SZ}); backup ids must follow each other in time: sync the clocks (NTP)"
            )
        time.sleep(0.05)
    return now


def _run_locked(req: BackupRequest, now: datetime | None, lock: HostLock, db: Session) -> Manifest:
    # First: a run refused below (a clock behind, a server down) has still cleaned up after the
    # run whose lock it took, which the next run, finding the lock free, could not prove dead.
    remove_abandoned(req.catalog, lock.dead_holder)
    _check_clock(req.catalog, lock)
    started = _start_after_newest(req.catalog)
    tool = detect_tool(req.flavour, req.binary)
    facts = db.facts
    if tool.capabilities.own_stream:  # clone: its plugin and privileges, before anything starts
        check_clone(db, facts, f"host {req.catalog.cluster}/{req.catalog.host}")
    server = dialect_for(facts.version)
    check_tool_for_server(tool, server.family, server.version)  # before anything starts
    manifests = readable_manifests(req.catalog)
    identity = _check_identity(req, facts, manifests)
    require_open_files(tablespace_count(db) or 0, "tablespaces")  # before anything streams
    decision = plan(req, facts, tool, now or started, manifests)
    if decision.parent is not None:
        _check_parent(decision.parent, facts, tool)
        decision = _check_lineage(req, decision, facts, db)
    log.info("backup kind %s: %s", decision.kind, decision.reason)
    backup_id = new_backup_id(decision.kind, started)
    if req.catalog.store.head(req.catalog.manifest_key(backup_id)) is not None:
        raise BackupError(
            f"backup {backup_id} already exists in {req.catalog.describe()}; another run is active"
        )
    datadir = identity.datadir  # the server's own @@datadir: the tool's check of it must agree
    _abort_stale_uploads(req)
    canary = _heartbeat(req, backup_id, db) if req.heartbeat else {"heartbeat": False}
    where = f"host {req.catalog.cluster}/{req.catalog.host}"
    applied = apply_settings(req.impact, tool, req.parallel, where)
    counter = _row_counter(req, tool, db)
    watch = LockWatch(tool.flavour, on_line=counter.on_line, refuse=not_what_was_asked)
    with counter, GpgHome() as gpg, private_workdir("backup") as work:
        recipients = _recipients(gpg, req)
        before = _shape_before(db)
        try:
            stored = _stream(
                req, db, tool, decision, work, datadir, backup_id, gpg, recipients, applied, watch
            )
        except PipelineError as exc:
            if watch.refused:  # the tool said it is not copying what it was asked to: that is the error
                raise BackupError(
                    f"{where}: {tool.flavour}: {watch.refused}; nothing was registered"
                ) from exc
            raise
        phases = watch.phases()  # every line read, so the counter's reason below is the true one
        _check_copy(req, db, identity, stored, read_binlog_position(work / "lsn").gtid)
        shape = _shape_after(db, before)
        parts_version = len(stored) > 1
        option_files = _option_files(req, backup_id, work, gpg, recipients, where)
        lsn_dir = work / "lsn"
        checkpoints = read_checkpoints(lsn_dir)
        info = read_info(lsn_dir)
        binlog = read_binlog_position(lsn_dir)
        counts = counter.finish(binlog.file, binlog.position)
    if decision.parent and checkpoints.from_lsn != decision.parent.to_lsn:
        raise BackupError(
            f"{backup_id}: the tool started at LSN {checkpoints.from_lsn}, not at parent "
            f"{decision.parent.backup_id}'s to_lsn {decision.parent.to_lsn}; not registering it"
        )
    if checkpoints.to_lsn < checkpoints.from_lsn:
        raise BackupError(
            f"{backup_id}: the tool ended at to_lsn {checkpoints.to_lsn}, below its from_lsn {checkpoints.from_lsn}: "
            "the server's data is not the parent's history (re-seeded?); not registering it, take a full backup"
        )
    manifest = Manifest(
        backup_id=backup_id,
        cluster=req.catalog.cluster,
        host=req.catalog.host,
        kind="full" if decision.kind == "full" else "incremental",
        parent_id=decision.parent_id,
        chain_root=decision.parent.chain_root if decision.parent else backup_id,
        decision_reason=decision.reason,
        engine_flavour=tool.flavour,
        engine_version=tool.text,
        engine_major=tool.major,
        server_version=info.server_version or facts.version,
        server_uuid=facts.server_uuid,
        server_id=facts.server_id,
        from_lsn=checkpoints.from_lsn,
        to_lsn=checkpoints.to_lsn,
        last_lsn=checkpoints.last_lsn,
        binlog_file=binlog.file,
        binlog_position=binlog.position,
        gtid=binlog.gtid,
        started_at=started,
        finished_at=datetime.now(UTC),
        format_version=PARTS_FORMAT_VERSION if parts_version else FORMAT_VERSION,
        objects=stored,
        raw_bytes=sum(o.raw_size for o in stored),
        stored_bytes=sum(o.size for o in stored),
        gates=req.gates,
        estimate_memory=tool.capabilities.estimate_memory,
        extra=canary
        | {"row_counts": counts.summary, "server_identity": identity.record()}
        | ({ORIGIN_KEY: req.origin} if req.origin else {}),
        impact=applied.record(phases),
        option_files=option_files,
        source_shape=shape,
        table_rows=counts.rows,
    )
    crash_point("backup.after_objects")
    lock.confirm(f"registering {backup_id}")  # fencing: a run that lost its lock registers nothing
    req.catalog.write(manifest)
    crash_point("backup.after_manifest")
    log.info(
        "registered %s (%s, %d raw bytes -> %d stored) at %s",
        backup_id,
        manifest.kind,
        manifest.raw_bytes,
        manifest.stored_bytes,
        req.catalog.describe(backup_id),
    )
    return manifest


def _check_identity(req: BackupRequest, facts: ServerFacts, manifests: list[Manifest]) -> ServerIdentity:
    """The server reached is the host's (core/binlog/identity.py), before a byte is streamed."""
    try:
        identity = check_server(
            req.catalog,
            facts,
            req.target,
            manifests=manifests,
            datadir=req.datadir,
            accept_new=req.accept_new_server,
            check_port=True,
        )
    except IdentityError as exc:
        raise BackupError(f"{exc}; nothing was backed up") from None
    log.info("backing up %s: %s", identity.describe(), identity.basis)
    return identity


def _check_copy(
    req: BackupRequest,
    db: Session,
    identity: ServerIdentity,
    stored: list[StoredObject],
    gtid: str | None,
) -> None:
    """What the tool copied is the checked server's: its GTID position lies between the server's
    before and after the stream. Otherwise the objects are deleted and nothing is registered."""
    after = db.refresh()
    problem = checked_copy(gtid, db.facts, after.gtid_current)
    if after.server_uuid != identity.server_uuid:
        problem = f"the connection now reaches {after.server_uuid}"
    if problem is None:
        return
    req.catalog.store.delete([key for obj in stored for key in obj.keys])
    raise BackupError(
        f"host {req.catalog.cluster}/{req.catalog.host}: the backup is not a copy of {identity.describe()}: "
        f"{problem}; its objects were deleted and nothing was registered"
    )


def _shape_before(db: Session) -> tuple[str, set[str]] | None:
    try:
        return table_names(db)
    except Exception as exc:  # noqa: BLE001 - the backup is good without it; restore tests say so
        log.warning("cannot read the source's tables before the backup (%s); recording none", exc)
        return None


def _shape_after(db: Session, before: tuple[str, set[str]] | None) -> SourceShape | None:
    """What the source looked like (catalog/shape.py): information_schema only, never a table scan."""
    if before is None:
        return None
    try:
        return capture_shape(db, before[0], before[1])
    except Exception as exc:  # noqa: BLE001 - the backup is good without it; restore tests say so
        log.warning("cannot read the source's tables after the backup (%s); recording none", exc)
        return None


def _row_counter(req: BackupRequest, tool: ToolVersion, db: Session) -> SnapshotCounter:
    """Exact row counts of the smallest InnoDB tables at the backup's own point, read in a snapshot
    taken while the tool blocks commits (core/db/rowcounts.py), within impact.row_count_seconds."""
    return SnapshotCounter(db, req.impact.row_count_seconds, tool.flavour)


def _abort_stale_uploads(req: BackupRequest) -> None:
    """Multipart uploads a failed run could not abort (endpoint down) are removed by the next run."""
    req.catalog.store.abort_stale_uploads(req.catalog.host_prefix + "/backups/", req.stale_uploads_after)


def _put_options(req: BackupRequest, storage_class: str, expected_size: int | None) -> PutOptions:
    lock_until = None
    if req.object_lock_mode and req.object_lock_days:
        if not req.catalog.store.supports_object_lock:
            raise BackupError(f"Object Lock is configured but {req.catalog.store.location} is not S3")
        lock_until = datetime.now(UTC) + timedelta(days=req.object_lock_days)
    return PutOptions(
        storage_class,
        req.sse,
        req.kms_key_id,
        expected_size,
        lock_mode=req.object_lock_mode if lock_until else None,
        lock_until=lock_until,
        tagging=ARCHIVE_TAGGING,
    )


def _heartbeat(req: BackupRequest, backup_id: str, db: Session) -> dict[str, Any]:
    """Plant this backup's row (canary + lineage token, never logged: core/db/heartbeat.py); with
    a heartbeat_target, the canary is the source's replicated row. What goes into manifest.extra."""
    planted = plant(db, backup_id)
    extra: dict[str, Any] = {"heartbeat": planted.table is not None}
    if planted.table is None:
        log.warning("taking the backup without a canary or lineage row: %s", planted.skipped)
        extra["heartbeat_skipped"] = planted.skipped
    else:
        extra.update(heartbeat_table=planted.table, lineage_token=planted.token)
    if req.heartbeat_target:
        write_source_heartbeat(req.heartbeat_target, backup_id)
        extra.update(heartbeat=True, heartbeat_table=".".join(SOURCE_HEARTBEAT_TABLE))
        if not wait_for_heartbeat(db, backup_id, req.heartbeat_wait):
            # Go on: the backup is still worth having, and a restore test will flag the missing canary.
            log.warning(
                "the replica did not apply heartbeat %s within %.0fs; it is lagging or stopped",
                backup_id,
                req.heartbeat_wait,
            )
    return extra


def _check_lineage(req: BackupRequest, decision: Decision, facts: ServerFacts, db: Session) -> Decision:
    """An incremental only onto the parent's own data history (core/backup/lineage.py): otherwise
    `auto` takes a full and says why, and a requested incremental is refused."""
    parent = decision.parent
    assert parent is not None
    server = ServerLineage(
        facts.server_uuid,
        data_position(db, parent.gtid),
        lineage_token(db, parent.backup_id) if parent.extra.get("lineage_token") else None,
        facts.is_mariadb,
    )
    problems = lineage_problems(parent, server)
    if not problems:
        return decision
    why = describe_break(parent, server, problems)
    if req.kind == "incremental":
        raise BackupError(f"an incremental was requested but {why}; take a full backup")
    log.warning("taking a full backup: %s", why)
    return Decision("full", why)


def _recipients(gpg: GpgHome, req: BackupRequest) -> list[str]:
    if not req.public_keys:
        if not req.allow_unencrypted:
            raise BackupError(
                "no GPG public key configured; backups are encrypted unless allow_unencrypted is set"
            )
        return []
    fprs: list[str] = []
    for n, key in enumerate(req.public_keys):
        fprs += gpg.import_keys(key, f"public key #{n + 1}")
    gpg.check_recipients_usable(fprs)
    return fprs


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def choose_parts(req: BackupRequest, datadir: str, incremental: bool) -> PartPlan | None:
    """The K-part plan for this backup, or None for one stream (K=1: today's object and manifest)."""
    if req.max_parts <= 1:
        return None
    if req.flavour == "clone":  # the parts are planned on the datadir, the clone streams its copy
        log.info("one stream: the clone engine streams its staged copy whole")
        return None
    if req.impact.max_upload_bytes_per_second:
        log.info("one stream: an upload cap (max_upload_bytes_per_second) bounds one writer, not K of them")
        return None
    size = directory_size(datadir) or 0
    by_size = size // req.part_min_bytes if req.part_min_bytes > 0 else req.max_parts
    k = min(req.max_parts, usable_cores(), by_size)
    if k < 2:
        return None
    plan = plan_parts(datadir, k, incremental=incremental)
    return plan if plan.parts > 1 else None


def _stream(
    req: BackupRequest,
    db: Session,
    tool: ToolVersion,
    decision: Decision,
    work: Path,
    datadir: str,
    backup_id: str,
    gpg: GpgHome,
    recipients: list[str],
    applied: AppliedImpact,
    watch: LockWatch,
) -> list[StoredObject]:
    lsn_dir, scratch = work / "lsn", work / "scratch"
    lsn_dir.mkdir()
    scratch.mkdir()
    suffix = ".zst" + (".gpg" if recipients else "")
    storage_class = req.storage_classes.get(decision.kind, "STANDARD")
    plan = choose_parts(req, datadir, incremental=decision.parent is not None)
    opts = BackupOptions(
        datadir=datadir,
        lsn_dir=str(lsn_dir),
        scratch_dir=str(scratch),
        incremental_lsn=decision.parent.to_lsn if decision.parent else None,
        parallel=applied.parallel,
        open_files_limit=raise_open_files_limit(),
        extra_args=tuple(applied.tool_args()),
    )
    encrypt_argv = applied.wrap_gpg(gpg.encrypt_argv(recipients) if recipients else None)
    t0 = time.monotonic()
    with _producer(req, db, tool, opts, lsn_dir) as producer:
        argv = applied.wrap_tool(producer)
        if plan is None:
            key = req.catalog.object_key(backup_id, BACKUP_OBJECT_NAME + suffix)
            options = _put_options(req, storage_class, directory_size(datadir))
            log.info(
                "streaming %s -> zstd(level %d) -> %s -> %s/%s",
                tool.flavour,
                req.compression_level,
                "gpg" if recipients else "no encryption",
                req.catalog.store.location,
                key,
            )
            writer = applied.cap_upload(req.catalog.store.open_writer(key, options))
            result = stream_to_store(
                argv,
                writer,
                encrypt_argv=encrypt_argv,
                level=req.compression_level,
                threads=req.zstd_threads,
                producer_name=f"{tool.flavour} --backup",
                progress=req.progress,
                producer_watch=watch.attach,
                compress_setup=applied.compress_setup(),
            )
            placed: list[Placed] = [(key, options, result, None, None, stored_segments(writer))]
        else:
            placed = _stream_parts(
                req, tool, plan, argv, backup_id, suffix, storage_class, encrypt_argv, applied, watch
            )
    shutil.rmtree(scratch, ignore_errors=True)
    log.info("streamed %d bytes in %.1fs", sum(p[2].raw_bytes for p in placed), time.monotonic() - t0)
    return [
        StoredObject(
            key=key,
            size=result.stored_bytes,
            sha256=result.sha256,
            raw_size=result.raw_bytes,
            compression="zstd",
            encryption="gpg" if recipients else "none",
            recipients=recipients,
            storage_class=storage_class,
            sse=req.sse,
            kms_key_id=req.kms_key_id if req.sse == "aws:kms" else None,
            object_lock_mode=options.lock_mode,
            object_lock_until=options.lock_until,
            role=role,
            part=part,
            segments=segments,
        )
        for key, options, result, role, part, segments in placed
    ]


@contextmanager
def _producer(
    req: BackupRequest, db: Session, tool: ToolVersion, opts: BackupOptions, lsn_dir: Path
) -> Iterator[list[str]]:
    """The argv whose stdout is the backup stream: the tool's, or the clone engine's stream of the
    server's staged copy (core/backup/clone.py), which writes its metadata into `lsn_dir`."""
    if tool.capabilities.own_stream:
        with cloned(db, db.facts, lsn_dir, staging_root=req.staging_dir, mysqld=req.binary) as argv:
            yield argv
        return
    # Percona XtraBackup is a MySQL 8 client: its TLS options are spelled as MySQL's (ssl-mode).
    with defaults_file(req.target, "mysql" if tool.flavour == "xtrabackup" else "mariadb") as creds:
        yield backup_argv(tool, creds, opts)


def part_object_names(parts: int, suffix: str) -> list[str]:
    """The object names of a K-part backup: the data parts in order, then the tail."""
    stem = BACKUP_OBJECT_NAME.removesuffix(".xbstream")
    return [f"{stem}.p{i}of{parts}.xbstream{suffix}" for i in range(parts)] + [
        f"{stem}.tail.xbstream{suffix}"
    ]


def _stream_parts(
    req: BackupRequest,
    tool: ToolVersion,
    plan: PartPlan,
    argv: list[str],
    backup_id: str,
    suffix: str,
    storage_class: str,
    encrypt_argv: list[str] | None,
    applied: AppliedImpact,
    watch: LockWatch,
) -> list[Placed]:
    keys = [req.catalog.object_key(backup_id, name) for name in part_object_names(plan.parts, suffix)]
    options = [_put_options(req, storage_class, size) for size in plan.expected] + [
        _put_options(req, storage_class, None)
    ]
    log.info(
        "streaming %s -> %d parts (largest %.0f%% of the data) -> zstd(level %d) -> %s -> %s/%s",
        tool.flavour,
        plan.parts,
        100 * plan.largest_share,
        req.compression_level,
        "gpg" if encrypt_argv else "no encryption",
        req.catalog.store.location,
        keys[0].rsplit("/", 1)[0],
    )
    writers = []
    try:
        for key, opt in zip(keys, options, strict=True):
            writers.append(req.catalog.store.open_writer(key, opt))
    except BaseException:
        for writer in writers:
            writer.abort()
        raise
    threads = req.zstd_threads or max(1, usable_cores() // plan.parts)
    result = stream_to_parts(
        argv,
        writers[:-1],
        writers[-1],
        encrypt_argv=encrypt_argv,
        flavour=stream_flavour(tool.flavour),
        plan=plan,
        level=req.compression_level,
        threads=threads,
        producer_name=f"{tool.flavour} --backup",
        progress=req.progress,
        producer_watch=watch.attach,
        compress_setup=applied.compress_setup(),
        discard=lambda committed: _discard_committed(
            req, [keys[i] for i in committed], [writers[i] for i in committed]
        ),
    )
    results = [*result.parts, result.tail]
    roles: list[tuple[Literal["part", "tail"], int | None]] = [("part", i) for i in range(plan.parts)] + [
        ("tail", None)
    ]
    return [
        (key, opt, res, role, part, stored_segments(writer))
        for key, opt, res, (role, part), writer in zip(keys, options, results, roles, writers, strict=True)
    ]


def _discard_committed(req: BackupRequest, keys: list[str], writers: list[ObjectWriter]) -> list[str]:
    """Delete the committed streams of a K-part backup whose other parts failed to commit (every
    segment of each); returns the versions Object Lock keeps."""
    doomed = [k for key, w in zip(keys, writers, strict=True) for k in ([s.key for s in w.segments] or [key])]
    log.warning("a part failed to commit: removing the parts committed already: %s", ", ".join(doomed))
    return req.catalog.store.delete(doomed).retained


def _option_files(
    req: BackupRequest, backup_id: str, work: Path, gpg: GpgHome, recipients: list[str], where: str
) -> OptionFiles | None:
    """The server's option files as a side object; a failure is one warning, never the backup's."""
    try:
        return save_option_files(
            req.catalog,
            backup_id,
            req.option_files,
            work,
            encrypt_argv=gpg.encrypt_argv(recipients) if recipients else None,
            recipients=recipients,
            level=req.compression_level,
            where=where,
        )
    except Exception as exc:  # noqa: BLE001 - the backup itself is fine; say what was not saved
        log.warning("%s: the option files were not saved with the backup: %s", where, exc)
        return None


def _check_parent(parent: Manifest, facts: ServerFacts, tool: ToolVersion) -> None:
    if parent.server_uuid != facts.server_uuid:
        raise CatalogError(
            f"parent {parent.backup_id} is from server {parent.server_uuid}, this server is {facts.server_uuid}; "
            "an incremental needs a parent from the same server"
        )
    if (parent.engine_flavour, parent.engine_major) != (tool.flavour, tool.major):
        raise CatalogError(
            f"parent {parent.backup_id} was taken with {parent.engine_flavour} {parent.engine_major}, "
            f"this worker has {tool.flavour} {tool.major}; take a full backup"
        )
