"""Integrity of stored backups without restoring them: one report per backup.

quick: the manifest parses, its chain resolves, and every object exists with the manifest's
       size, a known storage class and the SSE / Object Lock the manifest records.
deep:  quick, then every object is streamed through the restore path (sha256 of the stored
       bytes, gpg, zstd) into an xbstream framing check instead of an extractor, so nothing
       is written to disk. Archived objects must be restored first (glacier-restore).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..catalog.backups import Catalog
from ..catalog.chain import resolve_chain
from ..catalog.manifest import CatalogError, Manifest, StoredObject, read_stored
from ..common.tempdirs import private_dir
from ..engine.tools import stream_flavour
from ..engine.xbstream import StreamFlavour, StreamRole, XbstreamError, checker_args, merge_parts
from ..engine.xbtree import Tree
from ..pipeline.from_store import stream_from_store
from ..pipeline.gpg import GpgError, GpgHome, passphrase_pipe
from ..pipeline.process import ChecksumMismatch, PipelineError
from ..storage.base import STORAGE_CLASSES, ObjectInfo, ObjectStore, StorageError, WrittenSegment
from ..storage.glacier import object_state

log = logging.getLogger(__name__)

Mode = Literal["quick", "deep"]
CHECKER_ARGV = [sys.executable, "-m", "xtrabackup_provider.core.engine.xbstream"]


@dataclass
class VerifyReport:
    cluster: str
    host: str
    backup_id: str
    mode: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # fine, but worth knowing (e.g. archived objects)
    objects: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "host": self.host,
            "backup_id": self.backup_id,
            "mode": self.mode,
            "ok": self.ok,
            "problems": self.problems,
            "notes": self.notes,
            "objects": self.objects,
            "seconds": round(self.seconds, 3),
        }


@dataclass
class VerifyRequest:
    catalog: Catalog
    backup_ids: list[str] | None = None  # None: every backup with a manifest
    mode: Mode = "quick"
    private_key: str | None = None  # deep mode, encrypted backups
    passphrase: str | None = None


def selected_ids(catalog: Catalog, which: str) -> list[str] | None:
    """The backups `which` names: "all" (None: every backup), "latest", or one backup id."""
    if which == "all":
        return None
    return catalog.backup_ids()[-1:] if which == "latest" else [which]


def verify(req: VerifyRequest) -> list[VerifyReport]:
    """A report per backup; a manifest that cannot be read is a report with that problem."""
    unreadable: list[str] = []
    by_id = {m.backup_id: m for m in req.catalog.manifests(unreadable)}
    ids = req.backup_ids if req.backup_ids is not None else req.catalog.backup_ids()
    if req.mode != "deep":
        return [_verify_one(req.catalog, backup_id, by_id, unreadable, None, None) for backup_id in ids]
    with GpgHome() as gpg:  # deep mode decrypts: a private keyring for this run only
        key_problem = _import_key(gpg, req)
        return [_verify_one(req.catalog, backup_id, by_id, unreadable, gpg, key_problem) for backup_id in ids]


def _verify_one(
    catalog: Catalog,
    backup_id: str,
    by_id: dict[str, Manifest],
    unreadable: list[str],
    gpg: GpgHome | None,
    key_problem: str | None,
) -> VerifyReport:
    t0 = time.monotonic()
    report = VerifyReport(catalog.cluster, catalog.host, backup_id, "deep" if gpg else "quick")
    manifest = by_id.get(backup_id)
    if manifest is None:
        report.problems.append(_unreadable(catalog, backup_id, unreadable))
    else:
        _check_backup(catalog, manifest, by_id, report, gpg, key_problem)
    report.seconds = time.monotonic() - t0
    _log(report)
    return report


def _import_key(gpg: GpgHome, req: VerifyRequest) -> str | None:
    if not req.private_key:
        return None
    try:
        gpg.import_private_key(req.private_key, req.passphrase)
    except GpgError as exc:
        return str(exc)
    return None


def _unreadable(catalog: Catalog, backup_id: str, unreadable: list[str]) -> str:
    for problem in unreadable:
        if backup_id in problem:
            return problem
    return f"backup {backup_id} has no manifest in {catalog.describe()}"


def _check_backup(
    catalog: Catalog,
    manifest: Manifest,
    by_id: dict[str, Manifest],
    report: VerifyReport,
    gpg: GpgHome | None,
    key_problem: str | None,
) -> None:
    try:
        resolve_chain(by_id, manifest.backup_id, catalog.describe())
    except CatalogError as exc:
        report.problems.append(f"chain: {exc}")
    with _PartTrees(manifest) as trees:
        for obj in manifest.objects:
            _check_object(catalog, manifest, obj, report, gpg, key_problem, trees)
    if manifest.option_files:  # the side object: present at its size (it is a tar, not a stream)
        side = manifest.option_files.object
        report.problems += quick_problems(side, catalog.store.head(side.key))


def _check_object(
    catalog: Catalog,
    manifest: Manifest,
    obj: StoredObject,
    report: VerifyReport,
    gpg: GpgHome | None,
    key_problem: str | None,
    trees: _PartTrees,
) -> None:
    row: dict[str, Any] = {"key": obj.key, "size": obj.size, "storage_class": obj.storage_class}
    report.objects.append(row)
    problems, states = [], []
    for piece in obj.pieces():  # each segment of a stream stored as several objects
        info = catalog.store.head(piece.key)
        problems += quick_problems(obj, info, piece)
        states.append(object_state(piece.key, info))
        if states[-1].state == "archived" or states[-1].state == "restoring":
            report.notes.append(f"{piece.key} is in {states[-1].storage_class} ({states[-1].state})")
    if obj.segments:
        row["segments"] = len(obj.segments)
    state = next((s for s in states if s.state != "readable"), states[0])
    row["state"] = state.state
    if not problems and gpg is not None:
        base, tree_out, problem = trees.for_object(obj)
        problems = [problem] if problem else []
        problems += deep_problems(
            catalog,
            obj,
            state.state,
            gpg,
            key_problem,
            row,
            stream_flavour(manifest.engine_flavour),
            _role(obj),
            base,
            tree_out,
        )
    report.problems += problems


def _role(obj: StoredObject) -> StreamRole:
    return "whole" if obj.role is None else obj.role


class _PartTrees:
    """A K-part backup is checked as a restore extracts it: each data part's check writes the tree
    it makes, and the tail is checked onto their merge (which must have no path in two parts)."""

    def __init__(self, manifest: Manifest) -> None:
        self.parts = sum(obj.role == "part" for obj in manifest.objects)
        self.dir: Path | None = None

    def __enter__(self) -> _PartTrees:
        if self.parts:
            self.dir = private_dir("verify")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

    def for_object(self, obj: StoredObject) -> tuple[str | None, str | None, str | None]:
        """(--base, --tree-out, a problem) for the check of `obj`."""
        if self.dir is None or obj.role is None:
            return None, None, None
        if obj.role == "part":
            return None, str(self.dir / f"part{obj.part}.json"), None
        files = [self.dir / f"part{n}.json" for n in range(self.parts)]
        if not all(f.exists() for f in files):  # a part failed its check: the tail is checked alone
            return None, None, None
        try:
            merged = merge_parts({f"part {n}": Tree.load(f.read_text()) for n, f in enumerate(files)})
        except XbstreamError as exc:
            return None, None, f"{obj.key}: the data parts cannot be extracted at once: {exc}"
        base = self.dir / "parts.json"
        base.write_text(merged.dump())
        return str(base), None, None


def quick_problems(
    obj: StoredObject, info: ObjectInfo | None, piece: WrittenSegment | None = None
) -> list[str]:
    """What HEAD shows is wrong with an object (or with `piece`, one of its segments), compared with
    its manifest entry."""
    key, size = (piece.key, piece.size) if piece else (obj.key, obj.size)
    if info is None:
        return [
            f"{key}: missing"
            + (f" (segment of a {len(obj.segments)}-segment stream)" if obj.segments else "")
        ]
    problems = []
    if info.size != size:
        problems.append(f"{key}: {info.size} bytes stored, the manifest says {size}")
    if info.storage_class not in STORAGE_CLASSES:
        problems.append(f"{key}: unknown storage class {info.storage_class!r}")
    if obj.sse and info.sse != obj.sse:
        problems.append(f"{key}: server-side encryption is {info.sse or 'off'}, the manifest says {obj.sse}")
    if obj.kms_key_id and info.kms_key_id and obj.kms_key_id not in info.kms_key_id:
        problems.append(
            f"{key}: encrypted with KMS key {info.kms_key_id}, the manifest says {obj.kms_key_id}"
        )
    if obj.object_lock_until:
        until = obj.object_lock_until.replace(microsecond=0)
        if info.lock_mode != obj.object_lock_mode or info.lock_until is None or info.lock_until < until:
            problems.append(
                f"{key}: Object Lock is {info.lock_mode or 'off'} until {info.lock_until or '-'}, the manifest "
                f"says {obj.object_lock_mode} until {obj.object_lock_until.isoformat()}"
            )
    return problems


def deep_problems(
    catalog: Catalog,
    obj: StoredObject,
    state: str,
    gpg: GpgHome,
    key_problem: str | None,
    row: dict[str, Any],
    flavour: StreamFlavour = "mariabackup",
    role: StreamRole = "whole",
    base: str | None = None,
    tree_out: str | None = None,
) -> list[str]:
    """Stream the object through sha256, gpg, zstd and the xbstream framing check (of `flavour`'s
    chunk grammar: the tools differ); `base` and `tree_out` as for `_PartTrees`."""
    if state in ("archived", "restoring"):
        return [f"{obj.key}: archived and not restored; run glacier-restore before a deep verify"]
    if obj.encryption == "gpg":
        if key_problem:
            return [f"{obj.key}: cannot decrypt: {key_problem}"]
        have = set(gpg.fingerprints(secret=True))
        if not have:
            return [
                f"{obj.key}: encrypted for {', '.join(obj.recipients)}; a deep verify needs the private key"
            ]
        if obj.recipients and not have & set(obj.recipients):
            return [
                f"{obj.key}: encrypted for {', '.join(obj.recipients)}, the key given is {', '.join(sorted(have))}"
            ]
    fd = passphrase_pipe(gpg.passphrase) if obj.encryption == "gpg" and gpg.passphrase is not None else None
    try:
        result = stream_from_store(
            read_stored(catalog.store, obj),
            [*CHECKER_ARGV, *checker_args(flavour, role, base, tree_out)],
            decrypt_argv=gpg.decrypt_argv(fd) if obj.encryption == "gpg" else None,
            pass_fds=(fd,) if fd is not None else (),
            expected_sha256=obj.sha256,
            object_name=f"{catalog.store.location}/{obj.key}",
            consumer_name="xbstream framing check",
        )
    except ChecksumMismatch as exc:
        return [f"{obj.key}: {exc}"]
    except (PipelineError, StorageError) as exc:
        verdict = sha256_verdict(catalog.store, obj)
        # The check writes nothing: when the object is as stored, the bytes themselves are bad.
        bad = ", so the data was already bad when the backup stored it" if verdict.intact else ""
        return [f"{obj.key}: {exc}; {verdict}{bad}"]
    finally:
        if fd is not None:
            os.close(fd)
    row["raw_bytes"] = result.raw_bytes
    if obj.raw_size and result.raw_bytes != obj.raw_size:
        return [f"{obj.key}: {result.raw_bytes} bytes after decompression, the manifest says {obj.raw_size}"]
    return []


SHA256_MATCHES = "its sha256 matches the manifest's: the object is as the backup stored it"


@dataclass(frozen=True)
class Sha256Verdict:
    """Whether a stored object is what the backup stored, said in words (`str()`)."""

    text: str
    intact: bool

    def __str__(self) -> str:
        return self.text


class StoredObjectDamaged(PipelineError):
    """A stream failed, and re-reading the stored object showed it is not what the backup stored
    (altered, truncated, or unreadable): another target's copy can stand in, whichever stage
    (gpg, zstd, the extractor) noticed first."""


def stream_failure(what: str, exc: BaseException, store: ObjectStore, obj: StoredObject) -> PipelineError:
    """The error of a failed stream of `obj`, named and with the sha256 verdict: a
    StoredObjectDamaged when the stored bytes are not the backup's (a local failure otherwise)."""
    verdict = sha256_verdict(store, obj)
    kind = PipelineError if verdict.intact else StoredObjectDamaged
    error = kind(f"{what}: {obj.key}: {exc}; {verdict}")
    error.object_key = obj.key
    return error


def sha256_verdict(store: ObjectStore, obj: StoredObject) -> Sha256Verdict:
    """A failed stream stops early, before the sha256 is known; hash the whole object to say whether
    it changed after the backup stored it (restore, PITR and verify --deep name it so)."""
    digest = hashlib.sha256()
    altered = []
    try:
        for piece in obj.pieces():  # the one object, or each segment (named when it differs)
            own = hashlib.sha256()
            for chunk in store.read_chunks(piece.key):
                digest.update(chunk)
                own.update(chunk)
            if obj.segments and own.hexdigest() != piece.sha256:
                altered.append(piece.key)
    except StorageError as exc:
        return Sha256Verdict(f"could not re-read it to check its sha256: {exc}", intact=False)
    if altered:
        return Sha256Verdict(
            f"the sha256 of segment {', '.join(altered)} differs from the manifest's: it was altered after "
            "the backup stored it",
            intact=False,
        )
    if digest.hexdigest() != obj.sha256:
        return Sha256Verdict(
            f"its sha256 {digest.hexdigest()} differs from the manifest's: the stored object was altered "
            "after the backup stored it",
            intact=False,
        )
    return Sha256Verdict(SHA256_MATCHES, intact=True)


def _log(report: VerifyReport) -> None:
    if report.ok:
        log.info("verify %s %s/%s: OK (%.1fs)", report.mode, report.host, report.backup_id, report.seconds)
    else:
        log.error(
            "verify %s %s/%s: %s", report.mode, report.host, report.backup_id, "; ".join(report.problems)
        )
