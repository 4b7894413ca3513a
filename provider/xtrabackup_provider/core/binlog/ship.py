"""Ship closed binlogs over the replication protocol, compressed and encrypted like backups.

`mariadb-binlog --read-from-remote-server --raw` copies a binlog byte for byte through a client
connection, so shipping needs no access to the datadir and runs on any worker. Each copy is
summarised (times, GTIDs), streamed through zstd and gpg to the store, and registered by a
manifest written last. A binlog is closed when the server lists a later one. A run ships every
closed binlog that has no manifest yet, so a second run ships nothing twice.

Binlogs the server purged before they were shipped are a gap: the run records it (a marker
object that PITR refuses to cross), ships what is still there, and then fails with the names.
Continuous mode (--stop-never) is in binlog_stream.py; it reuses the shipper below.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..catalog.backups import Catalog
from ..catalog.lock import DEFAULT_LEASE, SHIP_LOCK_NAME, HostLock, HostLockBusy
from ..catalog.manifest import Manifest, StoredObject
from ..common import children
from ..common.crashpoints import crash_point
from ..common.files import sha256_range
from ..common.tempdirs import private_dir
from ..common.values import (
    GtidSet,
    binlog_number,
    check_gtid_for,
    format_gtid_pos,
    gtid_form,
    parse_gtid_pos,
)
from ..db.dialect import Dialect, dialect_for
from ..db.server import (
    MySQLTarget,
    ServerError,
    ServerFacts,
    defaults_file,
    query,
)
from ..db.session import Session
from ..pipeline.gpg import GpgHome
from ..pipeline.to_store import stream_to_store
from ..storage.base import ObjectStore, ObjectWriter, PutOptions, WrittenSegment
from ..storage.segments import one_object
from .catalog import (
    BinlogCatalog,
    BinlogError,
    BinlogGap,
    BinlogGapError,
    BinlogIndex,
    BinlogManifest,
    BinlogSegment,
    check_backup_reached,
    check_not_reset,
    find_gap,
    server_uuids,
)
from .events import BinlogSummary, summarize
from .identity import IdentityError, ServerIdentity, check_server
from .timeline import read_timeline

log = logging.getLogger(__name__)

_ER_NO_BINARY_LOGGING = 1381
SMALL_OBJECT = 8 * 1024 * 1024  # raw bytes up to which a segment is buffered and PUT in one request


@dataclass
class ShipRequest:
    catalog: Catalog
    target: MySQLTarget
    public_keys: list[str] = field(default_factory=list)  # armored; none = unencrypted (if allowed)
    allow_unencrypted: bool = False
    binary: str | None = (
        None  # mariadb-binlog / mysqlbinlog; default: the server family's (core/db/dialect.py)
    )
    flush: bool = False  # FLUSH BINARY LOGS first, so the binlog open until now is shipped too
    compression_level: int = 3
    storage_class: str = "STANDARD"
    sse: str | None = None
    kms_key_id: str | None = None
    workdir: str | None = None  # local scratch for the copies (default: the system temp dir)
    replica_server_id: int | None = None  # continuous mode's replication client id
    # A server the host's catalog does not know (core/binlog/identity.py) is refused unless accepted.
    accept_new_server: bool = False
    lease: timedelta = DEFAULT_LEASE  # the host's shipping lock: one shipper at a time (core/catalog/lock.py)


@dataclass
class ShipReport:
    server_uuid: str
    shipped: list[str] = field(default_factory=list)
    already_shipped: int = 0
    gaps: list[str] = field(default_factory=list)
    progress_uploads: int = 0
    raw_bytes: int = 0
    stored_bytes: int = 0
    open_binlog: str | None = None
    # Binlogs another server_id wrote before this server wrote any shipped one: not shipped here.
    not_ours: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Small metadata for XCom and the CLI (names are capped: a first run can ship hundreds)."""
        return {
            "server_uuid": self.server_uuid,
            "shipped_count": len(self.shipped),
            "shipped": self.shipped[:20],
            "last_shipped": self.shipped[-1] if self.shipped else None,
            "already_shipped": self.already_shipped,
            "gaps": self.gaps,
            "progress_uploads": self.progress_uploads,
            "raw_bytes": self.raw_bytes,
            "stored_bytes": self.stored_bytes,
            "open_binlog": self.open_binlog,
            "not_ours": self.not_ours[:20],
        }


def check_origin(where: str, name: str, summary: BinlogSummary, identity: ServerIdentity) -> None:
    """The copy is the checked server's own binlog: its format event names that server_id."""
    if summary.server_id is not None and summary.server_id != identity.server_id:
        raise BinlogError(
            f"{where}: the copy of {name} was written by server_id {summary.server_id}, not by the server "
            f"checked ({identity.describe()}); not shipping it"
        )


_CONFIGURE = "set the host's `binlog_binary` in the fleet config (or --binary)"


def binlog_tool(binary: str | None, facts: ServerFacts, where: str = "") -> str:
    """The binlog client for this server: the one configured, else the server family's own. One of
    the other family (MariaDB's mysqlbinlog against MySQL, MySQL's against MariaDB) or older than a
    MySQL server is refused here, before anything is copied, naming both versions: it would fail on
    the first binlog, or misread it."""
    return check_binlog_client(binary, facts.version, where)


def check_binlog_client(
    binary: str | None, version: str, where: str = "", done: str = "nothing was shipped"
) -> str:
    """binlog_tool for a server known by its version string (a backup's `server_version`)."""
    dialect = dialect_for(version)
    tool = binary or dialect.binlog_client
    found = shutil.which(tool)
    if found is None:
        raise BinlogError(
            f"{tool} not found on this worker; install {dialect.name.split()[0]}'s client tools "
            f"({dialect.binlog_client}) or {_CONFIGURE}"
        )
    try:
        proc = children.run(
            [found, "--no-defaults", "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BinlogError(
            f"{found} --version failed ({exc}); {_CONFIGURE} to a working binlog client"
        ) from None
    problem = dialect.binlog_client_problem(found, proc.stdout or proc.stderr or "")
    if problem:
        raise BinlogError(f"{where or 'binlog shipping'}: {problem}, and {_CONFIGURE}; {done}")
    return tool


def download_argv(
    binary: str,
    credentials_file: str,
    dest_dir: Path,
    first: str,
    *,
    stop_never: bool = False,
    replica_server_id: int | None = None,
    id_option: str = "--stop-never-slave-server-id",
) -> list[str]:
    """argv copying binlog `first` (and with --stop-never every later one, live) into dest_dir.
    The tool reads the 0600 defaults file alone (the first option, or it is ignored): a host's
    ~/.my.cnf or [mysqlbinlog] group cannot point it at another server."""
    argv = [
        binary,
        f"--defaults-file={credentials_file}",
        "--read-from-remote-server",
        "--raw",
        f"--result-file={dest_dir}/",
    ]
    if stop_never:
        argv.append("--stop-never")
        if replica_server_id is not None:
            argv.append(f"{id_option}={replica_server_id}")  # the dialect's binlog_follow_id_option
    return [*argv, first]


def server_binlogs(target: MySQLTarget | Session) -> list[tuple[str, int]]:
    """SHOW BINARY LOGS: (name, size), oldest first; the last one is open."""
    import MySQLdb

    try:
        rows = query(target, "SHOW BINARY LOGS")
    except MySQLdb.Error as exc:
        if exc.args and exc.args[0] == _ER_NO_BINARY_LOGGING:
            raise BinlogError(
                f"{target.address}: binary logging is off; enable log_bin in the server's config for "
                "binlog shipping and point-in-time recovery"
            ) from exc
        raise ServerError(f"{target.address}: SHOW BINARY LOGS failed: {exc}") from exc
    return [(str(r[0]), int(r[1])) for r in rows]


def master_position(target: MySQLTarget | Session, dialect: Dialect | None = None) -> tuple[str, int]:
    """The binlog being written and its size now (the dialect's binlog status statement: MySQL 8.4
    removed SHOW MASTER STATUS)."""
    if dialect is None:
        dialect = dialect_for(str(query(target, "SELECT @@version")[0][0]))
    rows = query(target, dialect.binlog_status)
    if not rows:
        raise BinlogError(f"{target.address}: {dialect.binlog_status} is empty; is binary logging on?")
    return str(rows[0][0]), int(rows[0][1])


def _when(epoch: int | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, UTC) if epoch is not None else None


def check_same_file(where: str, stored: BinlogManifest, summary: BinlogSummary) -> None:
    """The server's binlog must be the file stored under its name: its first event (the format
    event, stamped when the server created the file) must carry the same time. A file created
    later under an old name starts a new history (RESET MASTER, a datadir re-seeded from another
    server's backup holds no binlogs, so they restart at .000001): storing it would replace the
    binlogs that earlier backups' point-in-time recovery reads, so it is refused, naming both."""
    created = _when(summary.first_time)
    if created is None or stored.first_event_time is None or created == stored.first_event_time:
        return
    raise BinlogError(
        f"{where}: the server's {stored.name} was created at {created:%Y-%m-%d %H:%M:%S} UTC, the {stored.name} "
        f"stored for it at {stored.first_event_time:%Y-%m-%d %H:%M:%S} UTC: the server's binlogs were reset "
        "(RESET MASTER?) or its datadir was replaced (re-seeded), and the stored history is kept for the "
        "point-in-time recovery of earlier backups. Give the server a server_id of its own (its binlogs then "
        "go to a directory of their own) and take a full backup"
    )


class BinlogShipper:
    """One shipping run against one server: its identity, the storage index, the encryption keys;
    it reads the server through one session (core/db/session.py), the binlog client logs in itself."""

    def __init__(self, req: ShipRequest) -> None:
        self.req = req
        self.db = Session(req.target)
        try:
            self.facts = self.db.facts
            self.identity = check_server(
                req.catalog, self.facts, req.target, accept_new=req.accept_new_server
            )
            self.dialect = self.db.dialect
            self.binary = binlog_tool(req.binary, self.facts, f"{req.target.address} ({self.dialect.name})")
        except IdentityError as exc:
            self.db.close()
            raise BinlogError(f"{exc}; no binlog was shipped") from None
        except BaseException:
            self.db.close()
            raise
        log.info("shipping the binlogs of %s: %s", self.identity.describe(), self.identity.basis)
        # mariadb-binlog reads MariaDB's client options, mysqlbinlog MySQL 8's (the TLS spelling).
        self.client = self.dialect.client_family
        self.bcat = BinlogCatalog(req.catalog, self.facts.server_uuid)
        # One shipper of the host at a time; a run that lost the lock registers nothing (fencing), and
        # its objects' keys are its own (upload_id), so no manifest ever names another run's bytes.
        self.lock = HostLock(req.catalog, req.lease, purpose="binlog shipping", name=SHIP_LOCK_NAME)
        self.upload_id = upload_id(self.lock.token)
        self.report = ShipReport(self.facts.server_uuid)
        self.gpg = GpgHome()
        self.recipients: list[str] = []
        self.scratch = private_dir("binlog", req.workdir)  # 0700

    def __enter__(self) -> BinlogShipper:
        try:
            self.lock.acquire()
            for token in self.lock.dead_before:  # the holder proven dead, and those it took on
                if removed := self.bcat.remove_uploads_of(upload_id(token)):
                    log.warning(
                        "removed what a killed shipping run left unregistered: %s", ", ".join(removed)
                    )
            self.recipients = _import_recipients(self.gpg, self.req.public_keys, self.req.allow_unencrypted)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()
        self.gpg.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self.lock.etag is not None:
            self.lock.release()

    @property
    def where(self) -> str:
        return f"{self.req.target.address} (server {self.facts.server_uuid})"

    # -- batch ---------------------------------------------------------------------------------
    def run_batch(self) -> ShipReport:
        if self.req.flush:
            query(self.db, "FLUSH BINARY LOGS")
        logs = server_binlogs(self.db)
        index = self.index()
        closed = dict(logs[:-1])
        check_not_reset(index, logs, self.where)
        if not index.complete and not index.partial:  # nothing shipped: its backups tell its history
            check_backup_reached(self.newest_backup(), logs, self.where)
        gap = self.record_gap(index, [name for name, _ in logs])
        for name, size in closed.items():
            if name in index.complete:
                self.report.already_shipped += 1
                self.drop_stale_partial(index, name)
                continue
            path = self.download(name)
            summary = summarize(path)
            self.check_closed(name, summary, size)
            partial = index.partial.get(name)
            if partial is not None:
                check_same_file(self.where, partial, summary)
            if self.not_ours(name, summary, index):
                path.unlink()
                continue
            self.ship_complete(path, name, summary, partial)
            path.unlink()
        self.report.open_binlog = logs[-1][0] if logs else None
        if gap is not None:
            raise self.gap_error(gap)
        return self.report

    def newest_backup(self) -> Manifest | None:
        """The newest backup of this server with binlog coordinates (unreadable manifests skipped)."""
        mine = [
            m
            for m in self.req.catalog.manifests(problems=[])
            if m.server_uuid == self.facts.server_uuid and m.binlog_file
        ]
        return max(mine, key=lambda m: m.backup_id, default=None)

    def drop_stale_partial(self, index: BinlogIndex, name: str) -> None:
        """A partial manifest beside its binlog's complete one: a run killed between registering the
        binlog and dropping the partial left it (binlog.after_complete); nothing else ever would."""
        if name in index.partial:
            try:
                self.bcat.drop_partial(index.partial[name])
            except BinlogError as exc:  # unreadable: its segments are unknown, the manifest stays
                log.warning("could not drop the stale partial manifest of %s: %s", name, exc)
                return
            log.warning("dropped the partial manifest of %s, stored complete by an interrupted run", name)

    def not_ours(self, name: str, summary: BinlogSummary, index: BinlogIndex) -> bool:
        """A binlog another server_id wrote before this server's first shipped binlog (or before
        any): the server_id changed (a re-seeded or restored server given one of its own), and the
        files before the change are the old server's history. Skipped, not refused: refusing them
        would ship none of this server's binlogs, or none after its first run that shipped one
        (chaos seed 120503), until they are purged. From this server's first shipped binlog on,
        another server_id is refused (check_origin): the connection reached another server."""
        if summary.server_id in (None, self.identity.server_id):
            return False
        ours = [binlog_number(n) for n in (*index.complete, *index.partial, *self.report.shipped)]
        if ours and binlog_number(name) >= min(ours):
            return False
        log.warning(
            "%s was written by server_id %s, before this server (%s) wrote its first binlog shipped "
            "here: it is that server's history, not shipped as this one's; a point-in-time recovery of "
            "that server's backups ends at its last shipped binlog",
            name,
            summary.server_id,
            self.identity.describe(),
        )
        self.report.not_ours.append(name)
        return True

    def check_closed(self, name: str, summary: BinlogSummary, size: int) -> None:
        """A closed binlog's copy must hold every byte the server lists for it. It ends with a rotate
        or stop event, unless the server died while writing it (a kill, an OOM kill): then it ends
        with its last complete event, and the server, restarted, lists exactly those bytes."""
        if summary.size != size:
            raise BinlogError(
                f"{self.where}: the copy of {name} is {summary.size} bytes ending with event type "
                f"{summary.last_type}; the server lists {size} bytes and the binlog is closed. Not shipping it"
            )
        if not summary.closed:
            log.warning(
                "%s ends without a rotate or stop event: the server stopped without closing it (a crash); "
                "shipping its %d bytes, which the restarted server lists as the whole binlog",
                name,
                size,
            )

    def index(self) -> BinlogIndex:
        index = self.bcat.index()
        for problem in index.problems:
            log.warning("ignoring unreadable binlog manifest: %s", problem)
        return index

    def record_gap(self, index: BinlogIndex, server_logs: list[str]) -> BinlogGap | None:
        gap = find_gap(index, server_logs)
        if gap is None:
            return None
        self.lock.confirm("recording the gap")
        key = self.bcat.write_gap(gap)
        crash_point("binlog.after_gap")
        index.gaps.append(gap)
        self.report.gaps.append(f"{gap.first_missing}..{gap.last_missing}")
        log.error("binlog gap recorded at %s/%s: %s", self.bcat.store.location, key, gap.describe())
        return gap

    def gap_error(self, gap: BinlogGap) -> BinlogGapError:
        return BinlogGapError(
            f"{self.where}: binlogs {gap.first_missing}..{gap.last_missing} were purged on the server "
            f"before they were shipped (last shipped {gap.last_shipped}, the server's oldest is "
            f"{gap.server_oldest}). The gap is recorded at {self.bcat.describe()}/gaps/ and point-in-time "
            "recovery will not cross it: take a new full backup now, and ship more often or keep binlogs "
            f"longer (expire_logs_days). The {len(self.report.shipped)} binlog(s) after the gap were shipped"
        )

    def download(self, name: str) -> Path:
        with defaults_file(self.req.target, self.client) as creds:
            argv = download_argv(self.binary, creds, self.scratch, name)
            proc = children.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        path = self.scratch / name
        if proc.returncode != 0 or not path.is_file():
            raise BinlogError(
                f"{self.binary} could not copy {name} from {self.where} ({children.how_ended(proc.returncode)}): "
                f"{children.summarize_stderr(proc.stderr) or '(no stderr)'}. The user needs REPLICATION SLAVE and "
                "BINLOG MONITOR (REPLICATION CLIENT); if the server purged it meanwhile, the next run records the gap"
            )
        return path

    # -- uploads -------------------------------------------------------------------------------
    def ship_complete(
        self, path: Path, name: str, summary: BinlogSummary, partial: BinlogManifest | None
    ) -> BinlogManifest:
        check_origin(self.where, name, summary, self.identity)
        encrypted = bool(self.recipients)
        key = self.bcat.object_key(name, encrypted, self.upload_id)
        segment = self.upload_range(path, key, 0, summary.size)
        manifest = self.manifest(name, summary, [segment], complete=True)
        crash_point("binlog.after_object")
        self._confirm(f"registering {name}", [segment])
        self.bcat.write_manifest(manifest)
        crash_point("binlog.after_complete")
        self.bcat.drop_partial(partial)
        self.report.shipped.append(name)
        log.info(
            "shipped %s: %d bytes -> %d stored, GTIDs %s",
            name,
            summary.size,
            segment.object.size,
            manifest.gtid_set or f"{manifest.gtid_first or '-'}..{manifest.gtid_last or '-'}",
        )
        return manifest

    def ship_progress(
        self,
        path: Path,
        name: str,
        summary: BinlogSummary,
        partial: BinlogManifest | None,
        covers_until: datetime | None,
    ) -> BinlogManifest:
        """Store the open binlog's bytes since the last progress upload as one more segment."""
        check_origin(self.where, name, summary, self.identity)
        start = partial.size if partial else 0
        new = []
        if summary.size > start:
            key = self.bcat.segment_key(name, start, bool(self.recipients), self.upload_id)
            new.append(self.upload_range(path, key, start, summary.size - start))
            crash_point("binlog.after_segment")
        segments = (list(partial.segments) if partial else []) + new
        manifest = self.manifest(name, summary, segments, complete=False, covers_until=covers_until)
        self._confirm(f"registering the progress of {name}", new)
        self.bcat.write_manifest(manifest, new if partial else None)
        self.report.progress_uploads += 1
        return manifest

    def _confirm(self, action: str, uploaded: list[BinlogSegment]) -> None:
        """Fencing before a manifest. A run that lost the lock (taken over while it was paused past
        its lease) removes what it has just uploaded before it stops: those keys are its own (its
        upload id), no manifest names them, and no run removes them later, as its holder is not
        proven dead (found by the chaos fault pause_shipper)."""
        try:
            self.lock.confirm(action)
        except HostLockBusy:
            keys = [key for segment in uploaded for key in segment.object.keys]
            try:
                if keys:
                    self.bcat.store.delete(keys)
            except Exception as exc:  # noqa: BLE001 - never mask the refusal
                log.warning(
                    "could not remove %s, uploaded by this run that lost its lock: %s", ", ".join(keys), exc
                )
            raise

    def upload_range(self, path: Path, key: str, offset: int, size: int) -> BinlogSegment:
        raw_sha = sha256_range(path, offset, size)
        producer = [
            "dd",
            f"if={path}",
            "iflag=skip_bytes,count_bytes",
            f"skip={offset}",
            f"count={size}",
            "bs=1M",
            "status=none",
        ]
        req = self.req
        options = PutOptions(req.storage_class, req.sse, req.kms_key_id, expected_size=size)
        writer: ObjectWriter = (
            _SmallWriter(self.bcat.store, key, options)
            if size <= SMALL_OBJECT
            else self.bcat.store.open_writer(key, options)
        )
        result = stream_to_store(
            producer,
            writer,
            encrypt_argv=self.gpg.encrypt_argv(self.recipients) if self.recipients else None,
            level=req.compression_level,
            producer_name=f"read {path.name}",
        )
        one_object(self.bcat.store, writer, key)
        if result.raw_bytes != size:
            raise BinlogError(f"{key}: read {result.raw_bytes} bytes of {path.name}, expected {size}")
        self.report.raw_bytes += size
        self.report.stored_bytes += result.stored_bytes
        return BinlogSegment(
            offset=offset,
            raw_size=size,
            raw_sha256=raw_sha,
            object=StoredObject(
                key=key,
                size=result.stored_bytes,
                sha256=result.sha256,
                raw_size=size,
                compression="zstd",
                encryption="gpg" if self.recipients else "none",
                recipients=self.recipients,
                storage_class=req.storage_class,
                sse=req.sse,
            ),
        )

    def manifest(
        self,
        name: str,
        summary: BinlogSummary,
        segments: list[BinlogSegment],
        *,
        complete: bool,
        covers_until: datetime | None = None,
    ) -> BinlogManifest:
        cat = self.req.catalog
        if summary.mysql_unread_at is not None:
            log.warning(
                "%s: the GTIDs of the event at offset %d cannot be read (mysqlbinlog -v shows them): its manifest's "
                "GTID sets lack them, and a wait for them never counts it as shipped",
                name,
                summary.mysql_unread_at,
            )
        return BinlogManifest(
            name=name,
            cluster=cat.cluster,
            host=cat.host,
            server_uuid=self.facts.server_uuid,
            server_id=self.facts.server_id,
            complete=complete,
            size=summary.size,
            sha256=segments[0].raw_sha256 if complete else None,
            events=summary.events,
            first_event_time=_when(summary.first_time),
            last_event_time=_when(summary.last_time),
            # A closed binlog holds everything up to its last event (the rotate); an open one up
            # to the moment the caller saw the server's position inside what was stored.
            covers_until=_when(summary.last_time) if complete else covers_until,
            gtid_start=format_gtid_pos(summary.gtid_start),
            gtid_first=format_gtid_pos(summary.gtid_first),
            gtid_last=format_gtid_pos(summary.gtid_last),
            gtid_set_before=str(summary.mysql_before or ""),
            gtid_set=str(summary.mysql_gtid_set),
            segments=segments,
            shipped_at=datetime.now(UTC),
        )


class _SmallWriter:
    """One PUT for a small object (most progress segments): a multipart upload costs three requests."""

    def __init__(self, store: ObjectStore, key: str, options: PutOptions) -> None:
        self.store, self.key, self.options = store, key, options
        self.buffer = bytearray()
        self.segments: list[WrittenSegment] = []  # one PUT: one object

    def write(self, data: bytes) -> None:
        self.buffer += data

    def commit(self) -> int:
        self.store.put_bytes(self.key, bytes(self.buffer), self.options)
        return len(self.buffer)

    def abort(self) -> None:
        self.buffer.clear()


def upload_id(lock_token: str) -> str:
    """The tag in the keys of a shipping run's objects: its lock token's, so the run that takes the
    lock over from a holder proven dead knows which unregistered objects were that holder's."""
    return lock_token[:8]


def _import_recipients(gpg: GpgHome, public_keys: list[str], allow_unencrypted: bool) -> list[str]:
    if not public_keys:
        if not allow_unencrypted:
            raise BinlogError(
                "no GPG public key configured; binlogs are encrypted like backups unless allow_unencrypted is set"
            )
        return []
    fprs: list[str] = []
    for n, key in enumerate(public_keys):
        fprs += gpg.import_keys(key, f"public key #{n + 1}")
    gpg.check_recipients_usable(fprs)
    return fprs


def ship_binlogs(req: ShipRequest) -> ShipReport:
    """Ship every closed binlog not yet in storage; raise BinlogGapError after recording a gap."""
    with BinlogShipper(req) as shipper:
        return shipper.run_batch()


# ---------------------------------------------------------------------------------------------
# lag: is everything up to a point shipped?


@dataclass(frozen=True)
class LagTarget:
    server_uuid: str
    file: str | None = None
    position: int | None = None
    gtid: str | None = None

    def describe(self) -> str:
        return f"GTID {self.gtid}" if self.gtid else f"{self.file}:{self.position}"


def lag_target(target: MySQLTarget, gtid: str | None = None) -> LagTarget:
    """The point to wait for: the given GTID, or the server's current binlog position."""
    with Session(target) as db:
        facts, dialect = db.facts, db.dialect
        if gtid:
            try:
                check_gtid_for(
                    gtid, dialect.family, "gtid", f"the server at {target.address} ({dialect.name})"
                )
            except ValueError as exc:
                raise BinlogError(str(exc)) from None
            return LagTarget(facts.server_uuid, gtid=gtid)
        file, position = master_position(db, dialect)
        return LagTarget(facts.server_uuid, file, position)


def is_shipped(catalog: Catalog, point: LagTarget) -> bool:
    index = BinlogCatalog(catalog, point.server_uuid).index()
    if point.gtid:
        if gtid_form(point.gtid) == "mysql":
            return index.covers_gtid(GtidSet.parse(point.gtid, "gtid"))
        return index.covers_gtid(parse_gtid_pos(point.gtid))
    assert point.file is not None and point.position is not None
    return index.covers_position(point.file, point.position)


def list_binlogs(catalog: Catalog) -> dict[str, Any]:
    """Every shipped binlog and gap of a host, per server, as small JSON-able rows."""
    servers = []
    for uuid in server_uuids(catalog):
        index = BinlogCatalog(catalog, uuid).index()
        rows = [
            {
                "name": m.name,
                "complete": m.complete,
                "size": m.size,
                "stored_bytes": m.stored_bytes,
                "segments": len(m.segments),
                "first_event_time": m.first_event_time.isoformat() if m.first_event_time else None,
                "last_event_time": m.last_event_time.isoformat() if m.last_event_time else None,
                "gtid_first": m.gtid_first,
                "gtid_last": m.gtid_last,
                "gtid_set": m.gtid_set,  # MySQL: the GTIDs it holds
            }
            for m in index.shipped()
        ]
        gaps = [g.describe() for g in index.gaps]
        try:
            record = read_timeline(catalog, uuid)
        except BinlogError as exc:
            record, index.problems = None, [*index.problems, str(exc)]
        timeline = (
            {"parent_server_uuid": record.parent_server_uuid, "fork_gtid": record.fork_gtid}
            | {"start_gtid": record.start_gtid, "promoted_at": record.promoted_at.isoformat()}
            if record
            else None
        )
        servers.append(
            {
                "server_uuid": uuid,
                "timeline": timeline,
                "binlogs": rows,
                "gaps": gaps,
                "problems": index.problems,
            }
        )
    return {"servers": servers}
