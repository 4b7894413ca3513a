"""Files made outside the streaming path (a user's own tooling, binlogs): encrypt a file with
GPG, and upload a file or a directory to the object store with a sha256 manifest written last.

Layout: <dest_prefix>/<relative path> for every file, then <dest_prefix>/manifest.json.
As with backups, the manifest is the commit marker: an upload without one is debris.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..catalog.manifest import MANIFEST_NAME, StoredObject
from ..common import children
from ..pipeline.gpg import GpgError, GpgHome
from ..storage.base import ObjectStore, PutOptions, check_key
from ..storage.segments import one_object

log = logging.getLogger(__name__)

CHUNK = 4 * 1024 * 1024


class UploadError(RuntimeError):
    """The upload cannot be done; nothing was registered. The message names the file or key."""


class UploadManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format_version: Literal[1] = 1
    kind: Literal["upload"] = "upload"
    source: str  # the file or directory name on the uploading host
    started_at: datetime
    finished_at: datetime
    objects: list[StoredObject] = Field(min_length=1, max_length=100_000)
    stored_bytes: int = Field(ge=0)

    def to_json(self) -> bytes:
        return self.model_dump_json(indent=2).encode()


@dataclass(frozen=True)
class EncryptResult:
    path: str
    size: int
    sha256: str
    recipients: list[str]


def encrypt_file(source: Path, output: Path, public_keys: list[str]) -> EncryptResult:
    """gpg --encrypt `source` for every key into `output`; written to a temp name, renamed at the end."""
    if not source.is_file():
        raise UploadError(f"{source} is not a regular file")
    if output.exists():
        raise UploadError(f"{output} already exists; refusing to overwrite it")
    if not public_keys:
        raise GpgError("no recipient public key given")
    partial = output.with_name(output.name + ".partial")
    with GpgHome() as gpg:
        recipients = [
            fpr for n, key in enumerate(public_keys) for fpr in gpg.import_keys(key, f"public key #{n + 1}")
        ]
        gpg.check_recipients_usable(recipients)
        try:
            with source.open("rb") as src, partial.open("wb") as dst:
                proc = children.run(
                    gpg.encrypt_argv(recipients), stdin=src, stdout=dst, stderr=subprocess.PIPE
                )
            if proc.returncode != 0:
                raise GpgError(
                    f"gpg could not encrypt {source}: {children.summarize_stderr(proc.stderr, 600)}"
                )
            size, sha = _digest(partial)
            os.replace(partial, output)
        finally:
            partial.unlink(missing_ok=True)
    log.info("encrypted %s -> %s (%d bytes) for %s", source, output, size, ", ".join(recipients))
    return EncryptResult(str(output), size, sha, recipients)


def _digest(path: Path) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


@dataclass
class UploadRequest:
    store: ObjectStore
    source: Path  # a file, or a directory uploaded with its relative layout
    dest_prefix: str
    options: PutOptions = field(default_factory=PutOptions)
    lock_days: int | None = None  # Object Lock retention (options.lock_mode) from now
    # The destination prefix is this upload's own: an open upload under it is an earlier attempt's.
    stale_uploads_after: timedelta = timedelta(0)
    progress: Callable[[int], None] | None = None  # bytes read so far


def files_of(source: Path) -> list[tuple[Path, str]]:
    """(path, relative name) of every regular file; symlinks and special files are refused."""
    if source.is_symlink() or not source.exists():
        raise UploadError(f"{source} does not exist or is a symlink")
    if source.is_file():
        return [(source, source.name)]
    out = []
    for dirpath, dirnames, names in os.walk(source):
        dirnames.sort()
        for name in sorted(names):
            path = Path(dirpath, name)
            if path.is_symlink() or not path.is_file():
                raise UploadError(f"{path} is a symlink or not a regular file; refusing to upload it")
            out.append((path, path.relative_to(source).as_posix()))
    if not out:
        raise UploadError(f"{source} holds no files")
    return out


def upload(req: UploadRequest) -> UploadManifest:
    """Upload every file (multipart, storage class, SSE, lock), then write the manifest."""
    prefix = check_key(req.dest_prefix.strip("/"))
    manifest_key = f"{prefix}/{MANIFEST_NAME}"
    if req.store.head(manifest_key) is not None:
        raise UploadError(f"{req.store.location}/{manifest_key} exists: {prefix} was already uploaded")
    files = files_of(req.source)
    req.store.abort_stale_uploads(prefix + "/", req.stale_uploads_after)
    options = _with_lock(req)
    started, done, sent = datetime.now(UTC), [], [0]
    try:
        for path, name in files:
            done.append(_upload_file(req, path, f"{prefix}/{name}", options, sent))
        manifest = UploadManifest(
            source=req.source.name,
            started_at=started,
            finished_at=datetime.now(UTC),
            objects=done,
            stored_bytes=sum(o.size for o in done),
        )
        req.store.put_bytes(manifest_key, manifest.to_json())
    except BaseException:
        _remove_quietly(req.store, [o.key for o in done])
        raise
    log.info(
        "uploaded %d file(s), %d bytes, to %s/%s",
        len(done),
        manifest.stored_bytes,
        req.store.location,
        prefix,
    )
    return manifest


def _with_lock(req: UploadRequest) -> PutOptions:
    if not (req.options.lock_mode and req.lock_days):
        return req.options
    if not req.store.supports_object_lock:
        raise UploadError(f"Object Lock is configured but {req.store.location} is not S3")
    until = datetime.now(UTC) + timedelta(days=req.lock_days)
    return replace(req.options, lock_until=until)


def _upload_file(
    req: UploadRequest, path: Path, key: str, options: PutOptions, sent: list[int]
) -> StoredObject:
    size = path.stat().st_size
    writer = req.store.open_writer(key, replace(options, expected_size=size))
    digest, count = hashlib.sha256(), 0
    try:
        with path.open("rb") as fh:
            while block := fh.read(CHUNK):
                digest.update(block)
                writer.write(block)
                count += len(block)
                sent[0] += len(block)
                if req.progress:
                    req.progress(sent[0])
        if count != size:
            raise UploadError(f"{path} changed size while it was read ({size} -> {count} bytes)")
        writer.commit()
        one_object(req.store, writer, key)
    except BaseException:
        writer.abort()
        raise
    return StoredObject(
        key=key,
        size=count,
        sha256=digest.hexdigest(),
        raw_size=count,
        compression="none",
        encryption="gpg" if path.suffix == ".gpg" else "none",
        storage_class=options.storage_class,
        sse=options.sse,
        kms_key_id=options.kms_key_id if options.sse == "aws:kms" else None,
        object_lock_mode=options.lock_mode if options.lock_until else None,
        object_lock_until=options.lock_until,
    )


def _remove_quietly(store: ObjectStore, keys: list[str]) -> None:
    """A failed upload registers nothing; its finished objects are debris, removed when possible."""
    try:
        store.delete(keys)
    except Exception as exc:  # noqa: BLE001 - the upload's own error is what the caller must see
        log.warning("could not remove %d object(s) of a failed upload: %s", len(keys), exc)
