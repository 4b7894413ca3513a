"""Restore a backup chain: validate from manifests, fetch + verify + extract in parallel,
prepare on scratch copies, then copy-back/move-back into an empty datadir.

The target datadir is touched only after every object passed its sha256 and every prepare
step succeeded; if copy-back fails, what it wrote is removed again. The run holds the target (a
lock file beside it: core/restore/standby_lock.py) from its check that the target is empty to the
end, so a second restore into it is refused at once and never removes what the first one wrote.
"""

from __future__ import annotations

__all__ = ["restore", "fetch_one"]

import logging
import os
import shutil
import threading
import time
from collections.abc import Collection
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from ..catalog.backups import Catalog
from ..catalog.lease import ReadLease
from ..catalog.manifest import Manifest, StoredObject, read_stored
from ..catalog.targets import Targets
from ..common import children
from ..common.progress import ProgressLogger
from ..common.tempdirs import private_dir
from ..engine.argv import PrepareStep, copy_back_argv, extract_argv
from ..engine.metadata import CHECKPOINT_FILES, find_metadata
from ..engine.tools import ToolVersion, detect_tool
from ..pipeline.from_store import Cancelled, cancellable, stream_from_store
from ..pipeline.gpg import GpgError, GpgHome, passphrase_pipe
from ..pipeline.process import ChecksumMismatch, PipelineError
from ..storage.base import ARCHIVE_CLASSES, StorageError
from . import prepare
from .errors import RestoreError as RestoreError  # its old home: everyone imports it from here
from .option_files import restore_option_files
from .sources import Source, backup_on, clear_dir, fetch_with_fallback
from .standby_lock import target_lock
from .verify import stream_failure

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class RestoreRequest:
    catalog: Catalog
    target_datadir: Path
    backup_id: str | None = None  # None: the newest backup
    private_key: str | None = None
    passphrase: str | None = None
    binary: str | None = None
    scratch_dir: Path | None = None  # default: next to the target, so move-back is a rename
    move_back: bool = True
    parallel_downloads: int | None = None  # objects streamed at once; None: default_parallel_downloads()
    use_memory: int | None = None
    max_free_memory_pct: int = 50
    keep_scratch: bool = False
    progress_seconds: float = 10.0  # fetch progress (bytes, rate, ETA) is logged at most this often
    source_name: str = "primary"  # the name of `catalog`'s storage target
    fallbacks: list[Source] = field(default_factory=list)  # further targets (core/catalog/targets.py)
    option_files: bool = (
        True  # write the saved option files next to the target (core/restore/option_files.py)
    )
    without_read_lease: bool = False  # go on when the read lease cannot be written (core/catalog/lease.py)


@dataclass
class RestoreReport:
    backup_id: str
    chain: list[str]
    target_datadir: str
    stored_bytes: int = 0
    raw_bytes: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    prepare_argv: list[list[str]] = field(default_factory=list)
    binlog_file: str | None = None
    binlog_position: int | None = None
    gtid: str | None = None
    source: str = ""  # the storage target the chain was read from
    fallbacks: list[str] = field(default_factory=list)  # what came from another target, and why
    option_files: list[str] = field(default_factory=list)  # the saved option files written


def default_parallel_downloads() -> int:
    """Objects streamed at once unless the request says: one per usable core, 2 to 4.

    Each object's gpg | zstd -d | extractor keeps about a core busy, so more objects than cores only
    split the CPU between them and slow the largest object (the full, the critical path). On a 2-core
    worker, 2 at a time fetched the restore_rto bench's 7-object chain in 4.2 s against 4.6 s with 4
    (fetch only, medians of 4 alternating runs). At least 2, so one object's start and tail overlap
    with another's."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 2
    return max(2, min(4, cores))


def plan_chain(catalog: Catalog, backup_id: str | None) -> list[Manifest]:
    """The validated chain to restore; raises before anything is downloaded."""
    return catalog.chain(backup_id) if backup_id else catalog.latest_chain()


def read_chain(targets: Targets, backup_id: str | None) -> list[Manifest]:
    """The validated chain, from the first target whose manifests resolve it (it becomes the
    first target: the objects are fetched from there first)."""
    what = f"the chain of {backup_id or 'the newest backup'}"
    return targets.read(what, lambda catalog: plan_chain(catalog, backup_id))


def check_target(target: Path) -> None:
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise RestoreError(
            f"target datadir {target} is not an empty directory; restore never overwrites data"
        )


def request_targets(req: RestoreRequest) -> Targets:
    return Targets.of(req.catalog, req.source_name, req.fallbacks)


def restore(req: RestoreRequest, targets: Targets | None = None) -> RestoreReport:
    """Restore the chain `req` names; `targets` (default: the request's catalog and fallbacks)
    when the caller reads from them too (PITR: its notes and the targets found down are shared)."""
    targets = targets or request_targets(req)
    chain = read_chain(targets, req.backup_id)
    # The target is this run's from its check to the end (core/restore/standby_lock.py): a second
    # restore into it is refused at once instead of restoring into it too.
    with target_lock(req.target_datadir, "restore"), scratch_lock(req.scratch_dir):
        check_target(req.target_datadir)
        # Retention keeps what a running restore reads (core/catalog/lease.py): on the target the
        # chain comes from (a further target an object falls back to is read without a lease).
        ids = [m.backup_id for m in chain]
        with ReadLease(targets.first.catalog, "restore", ids, unleased_ok=req.without_read_lease) as lease:
            lease.check()
            return _restore(req, chain, targets)


def scratch_lock(given: Path | None) -> AbstractContextManager[None]:
    """A scratch directory the user gave is held like a target (two restores given the same one
    would extract into it together, and each removes it at the end); a default one is private."""
    return nullcontext() if given is None else target_lock(given, "restore", "scratch directory")


def _restore(req: RestoreRequest, chain: list[Manifest], targets: Targets) -> RestoreReport:
    origin = targets.first
    _check_not_archived(origin.catalog, chain, others=targets.many)
    tool = _prepare_tool(chain, req.binary)
    last = chain[-1]
    report = RestoreReport(
        last.backup_id,
        [m.backup_id for m in chain],
        str(req.target_datadir),
        binlog_file=last.binlog_file,
        binlog_position=last.binlog_position,
        gtid=last.gtid,
        source=origin.name,
        fallbacks=targets.notes,
    )
    scratch = own_scratch(req.scratch_dir, req.target_datadir, "restore", last.backup_id)
    # An applied incremental directory is consumed: it is removed in this thread while the next
    # prepare step (or the move-back) runs, instead of all of them after the move-back.
    discarder = ThreadPoolExecutor(1, thread_name_prefix="discard")
    try:
        t0 = time.monotonic()
        dirs = fetch_chain(req, chain, tool, scratch, report, targets)
        report.timings["fetch_extract"] = time.monotonic() - t0
        t0 = time.monotonic()
        tuning = prepare.tuning_for(
            tool,
            dirs,
            max_free_pct=req.max_free_memory_pct,
            use_memory=req.use_memory,
            estimated=chain[0].estimate_memory,
        )

        def applied(step: PrepareStep) -> None:
            if step.incremental_dir and not req.keep_scratch:
                discarder.submit(_discard, Path(step.incremental_dir))

        steps = prepare.run_chain(tool, dirs[0], dirs[1:], tuning, applied=applied)
        report.prepare_argv = [s.argv for s in steps]
        report.timings["prepare"] = time.monotonic() - t0
        t0 = time.monotonic()
        copy_back(tool, dirs[0], req.target_datadir, move=req.move_back)
        report.timings["copy_back"] = time.monotonic() - t0
    finally:
        t0 = time.monotonic()
        discarder.shutdown(wait=True)
        if not req.keep_scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        report.timings["scratch_cleanup"] = time.monotonic() - t0
    if req.option_files and last.option_files:
        report.option_files = restore_option_files(
            origin.catalog, last, req.target_datadir, req.private_key, req.passphrase
        )
    log.info("restored %s (chain %s) into %s", last.backup_id, " -> ".join(report.chain), req.target_datadir)
    return report


def own_scratch(given: Path | None, target: Path, kind: str, backup_id: str) -> Path:
    """The scratch directory of a restore: `given`, which must be empty, or by default a private
    one beside the target (so move-back is a rename), named after this process so that the next
    restore there removes it if this one is killed."""
    if given is None:
        target.parent.mkdir(parents=True, exist_ok=True)
        return private_dir(kind, target.parent, label=backup_id, hidden=True)
    if given.exists() and any(given.iterdir()):
        raise RestoreError(f"scratch directory {given} is not empty (an earlier restore?); remove it first")
    given.mkdir(parents=True, exist_ok=True)
    return given


def _discard(directory: Path) -> None:
    """Remove an incremental directory that prepare has applied (nothing reads it again)."""
    started = time.monotonic()
    shutil.rmtree(directory, ignore_errors=True)
    log.debug("removed the applied %s in %.2fs", directory, time.monotonic() - started)


def _prepare_tool(chain: list[Manifest], binary: str | None) -> ToolVersion:
    root = chain[0]
    tool = detect_tool(root.engine_flavour, binary)
    if tool.major != root.engine_major:
        raise RestoreError(
            f"chain {root.backup_id} was taken with {root.engine_flavour} {root.engine_version}; this worker has "
            f"{tool.text}. Prepare with the same {root.engine_major} series"
        )
    return tool


def _check_not_archived(catalog: Catalog, chain: list[Manifest], others: bool = False) -> None:
    """Before anything is downloaded: no object is archived, and (unless other targets can stand
    in: core/restore/sources.py) every object is stored at its size."""
    for m in chain:
        for obj in (p for o in m.objects for p in o.pieces()):  # every segment of every object
            info = catalog.store.head(obj.key)
            if others and (info is None or info.size != obj.size):
                continue
            if info is None:
                raise RestoreError(
                    f"backup {m.backup_id}: object {obj.key} is missing from {catalog.store.location}"
                )
            if info.size != obj.size:
                raise RestoreError(
                    f"backup {m.backup_id}: object {obj.key} is {info.size} bytes, the manifest says {obj.size}"
                )
            restored = info.restore is not None and 'ongoing-request="false"' in info.restore
            if info.storage_class in ARCHIVE_CLASSES and not restored:
                raise RestoreError(
                    f"backup {m.backup_id}: {obj.key} is in {info.storage_class}; request its restore "
                    "(GlacierRestoreSensor or `xtrabackup-provider glacier-restore`) and retry when it is readable"
                )


def fetch_chain(
    req: RestoreRequest,
    chain: list[Manifest],
    tool: ToolVersion,
    scratch: Path,
    report: RestoreReport,
    targets: Targets,
) -> list[Path]:
    """Download, verify, decrypt, decompress and extract every backup of the chain, in parallel,
    each from the first target that holds it intact (the chain's own target first)."""
    dirs = [scratch / m.backup_id for m in chain]
    for d in dirs:
        d.mkdir()
    with GpgHome() as gpg:
        if any(m.backup_object.encryption == "gpg" for m in chain):
            if not req.private_key:
                raise RestoreError(
                    f"backup {chain[-1].backup_id} is GPG-encrypted for {', '.join(chain[-1].backup_object.recipients)}; "
                    "supply the private key (gpg connection or --private-key-file)"
                )
            _import_private(gpg, req, chain)
        workers = max(1, min(req.parallel_downloads or default_parallel_downloads(), len(chain)))
        origin = targets.first
        failed = threading.Event()  # a backup that failed on every target stops the others

        def fetch(m: Manifest, d: Path) -> tuple[int, int]:
            def one(source: Source, here: Manifest) -> tuple[int, int]:
                return fetch_one(source.catalog, here, tool, d, gpg, req.progress_seconds, cancel=failed)

            try:
                locate = backup_on(origin, m)
                return fetch_with_fallback(targets, f"backup {m.backup_id}", locate, one, clear_dir(d))
            except BaseException:
                failed.set()
                raise

        with ThreadPoolExecutor(workers, thread_name_prefix="fetch") as pool:
            futures = [pool.submit(fetch, m, d) for m, d in zip(chain, dirs, strict=True)]
        for m, (stored, raw) in zip(chain, first_failure(futures), strict=True):
            report.stored_bytes += stored
            report.raw_bytes += max(raw, 0)  # -1: zstd did not report the size
            log.info("fetched %s: %d stored bytes, %d extracted", m.backup_id, stored, raw)
    return dirs


def first_failure(futures: list[Future[T]]) -> list[T]:
    """The results of `futures` (all done), or the first failure that is not a stream cancelled
    because of it."""
    errors = [e for f in futures if (e := f.exception()) is not None]
    if errors:
        raise next((e for e in errors if not isinstance(e, Cancelled)), errors[0])
    return [f.result() for f in futures]


def _import_private(gpg: GpgHome, req: RestoreRequest, chain: list[Manifest]) -> None:
    assert req.private_key is not None
    import_private_for(gpg, req.private_key, req.passphrase, chain)


def import_private_for(gpg: GpgHome, private_key: str, passphrase: str | None, chain: list[Manifest]) -> None:
    """Import the private key and check it can decrypt every encrypted backup of the chain."""
    gpg.import_private_key(private_key, passphrase)
    have = set(gpg.fingerprints(secret=True))
    for m in chain:
        obj = m.backup_object
        # Recipients are primary-key fingerprints; a match on any of them can decrypt.
        if obj.encryption == "gpg" and obj.recipients and not have & set(obj.recipients):
            raise GpgError(
                f"backup {m.backup_id} is encrypted for {', '.join(obj.recipients)}, but the private key given "
                f"is {', '.join(sorted(have)) or 'none'}; supply the matching private key"
            )


def fetch_one(
    catalog: Catalog,
    m: Manifest,
    tool: ToolVersion,
    dest: Path,
    gpg: GpgHome,
    progress_seconds: float = 10.0,
    cancel: threading.Event | None = None,
) -> tuple[int, int]:
    """Stream one backup into `dest` (sha256 check, gpg, zstd, the extractor): its one object, or
    its K data parts at once (one per core) and then its tail. Returns (stored, raw) bytes.
    A part that fails stops the other parts; `cancel` (set by the caller) stops them all."""
    streams = m.streams
    if len(streams) == 1:
        stored, raw = _fetch_stream(catalog, m, streams[0], tool, dest, gpg, progress_seconds, (cancel,))
    else:
        data, tail = streams[:-1], streams[-1]
        workers = min(len(data), default_parallel_downloads())
        failed = threading.Event()

        def part(obj: StoredObject) -> tuple[int, int]:
            try:
                return _fetch_stream(catalog, m, obj, tool, dest, gpg, progress_seconds, (cancel, failed))
            except BaseException:
                failed.set()
                raise

        with ThreadPoolExecutor(workers, thread_name_prefix=f"fetch-{m.backup_id}") as pool:
            futures = [pool.submit(part, obj) for obj in data]
        done = first_failure(futures)  # once every part has stopped
        # The tail renames and removes what the parts extracted: only after all of them.
        done.append(_fetch_stream(catalog, m, tail, tool, dest, gpg, progress_seconds, (cancel,)))
        stored = sum(s for s, _ in done)
        raw = -1 if any(r < 0 for _, r in done) else sum(r for _, r in done)
        try:
            _require_checkpoints(tool, dest)  # part 0 holds the tool's metadata files
        except PipelineError as exc:
            raise stream_failure(f"backup {m.backup_id}", exc, catalog.store, data[0]) from exc
    return stored, raw


def _require_checkpoints(tool: ToolVersion, dest: Path) -> None:
    if find_metadata(dest, CHECKPOINT_FILES) is None:
        raise PipelineError(
            f"{tool.stream_tool()} -x extracted no {' or '.join(CHECKPOINT_FILES)} into {dest}: "
            "the stream is not a whole backup"
        )


def _fetch_stream(
    catalog: Catalog,
    m: Manifest,
    obj: StoredObject,
    tool: ToolVersion,
    dest: Path,
    gpg: GpgHome,
    progress_seconds: float,
    cancel: tuple[threading.Event | None, ...] = (),
) -> tuple[int, int]:
    what = m.backup_id if obj.role is None else f"{m.backup_id} ({obj.key.rsplit('/', 1)[-1]})"
    progress = ProgressLogger(log, f"fetch of {what}", obj.size, progress_seconds, "the manifest's size")
    fd = passphrase_pipe(gpg.passphrase) if obj.encryption == "gpg" and gpg.passphrase is not None else None
    try:
        result = stream_from_store(
            cancellable(read_stored(catalog.store, obj), *cancel),
            extract_argv(tool, str(dest)),
            decrypt_argv=gpg.decrypt_argv(fd) if obj.encryption == "gpg" else None,
            pass_fds=(fd,) if fd is not None else (),
            expected_sha256=obj.sha256,
            object_name=f"{catalog.store.location}/{obj.key}",
            consumer_name=f"{tool.stream_tool()} -x into {dest}",
            progress=progress,
            quiet_consumer=True,
        )
        if obj.role is None:
            _require_checkpoints(tool, dest)
    except (ChecksumMismatch, StorageError) as exc:  # the object is named: a backup has several
        exc.object_key = obj.key
        raise
    except Cancelled:
        raise
    except PipelineError as exc:
        if any(e is not None and e.is_set() for e in cancel):  # a sibling's failure stopped this one
            raise Cancelled(f"backup {m.backup_id}: {obj.key}: stopped, another stream failed") from exc
        # Whichever stage noticed first, say which object and whether it is what the backup stored
        # (a StoredObjectDamaged when it is not: core/restore/sources.py then tries another target).
        raise stream_failure(f"backup {m.backup_id}", exc, catalog.store, obj) from exc
    finally:
        if fd is not None:
            os.close(fd)
    return result.stored_bytes, result.raw_bytes


def copy_back(tool: ToolVersion, prepared: Path, target: Path, *, move: bool) -> None:
    """Copy (move) `prepared` into the empty `target`, holding the target (already held by a chain
    or point-in-time restore; a restore from the standby takes it here) and checking again that it
    is empty: what is in it after a failure was written by this copy, and only that is removed."""
    with target_lock(target, "restore"):
        check_target(target)
        _copy_back(tool, prepared, target, move=move)


def _copy_back(tool: ToolVersion, prepared: Path, target: Path, *, move: bool) -> None:
    created = not target.exists()
    target.mkdir(parents=True, exist_ok=True)
    argv = copy_back_argv(tool, str(prepared), str(target), move=move)
    proc = children.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        empty_dir(target, remove=created)
        raise RestoreError(
            f"{'move' if move else 'copy'}-back into {target} failed ({children.how_ended(proc.returncode)}); "
            "the target was "
            f"emptied again: {children.summarize_stderr(proc.stderr)}"
        )


def empty_dir(path: Path, *, remove: bool, keep: Collection[Path] = ()) -> None:
    """Remove what `path` holds (and `path` itself with `remove`), except its entries in `keep`
    (what was there before this run wrote: then `path` stays)."""
    if remove and not keep:
        shutil.rmtree(path, ignore_errors=True)
        return
    for child in path.iterdir():
        if child in keep:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
