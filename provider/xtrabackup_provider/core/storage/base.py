"""The object store protocol, what it stores and the errors it raises.

Every store (storage.local, storage.s3, or your own) implements ObjectStore, so the pipeline,
catalog, restore and retention never care which one they talk to. Writers stage data invisibly
(an open multipart upload, or a `.partial` file) until `commit()`; `abort()` leaves nothing
behind. Features only some stores have (Object Lock, archive tiers, open uploads to clean up)
are protocol members that the others answer with "not supported", so callers never `isinstance`.
"""

from __future__ import annotations

__all__ = ["ObjectStore", "ObjectWriter"]

import builtins
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

MiB = 1024 * 1024
GiB = 1024 * MiB
MAX_PARTS = 10_000
MIN_PART_SIZE = 8 * MiB
MAX_PART_SIZE = 5 * GiB
# What `upload_memory_mib` (config, the aws connection's extra) may be: buffers per upload stream.
DEFAULT_MEMORY_MIB = 512
MEMORY_MIB_RANGE = (32, 65536)
# An upload cap (MiB/s) is at least 1 KiB/s (below, the bytes-per-second cap rounds to 0: none)
UPLOAD_CAP_MIB_RANGE = (1 / 1024, 1024 * 1024)
ARCHIVE_CLASSES = frozenset({"GLACIER", "DEEP_ARCHIVE"})
# Backup data objects carry this tag; lifecycle rules transition only tagged objects, so
# manifests (which listing and chain validation read) never end up in Glacier.
ARCHIVE_TAG = ("xbp-archive", "true")
ARCHIVE_TAGGING = "=".join(ARCHIVE_TAG)
STORAGE_CLASSES = frozenset(
    {
        "STANDARD",
        "STANDARD_IA",
        "ONEZONE_IA",
        "INTELLIGENT_TIERING",
        "GLACIER_IR",
        "GLACIER",
        "DEEP_ARCHIVE",
        "REDUCED_REDUNDANCY",
    }
)


class StorageError(RuntimeError):
    """An object store operation failed; the message names the bucket/directory and key."""

    object_key = ""  # the backup's object it failed on, when a reader of several sets it


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    storage_class: str = "STANDARD"
    last_modified: datetime | None = None
    restore: str | None = None  # S3 x-amz-restore header of an archived object
    sse: str | None = None
    kms_key_id: str | None = None
    lock_mode: str | None = None  # Object Lock: GOVERNANCE or COMPLIANCE
    lock_until: datetime | None = None


@dataclass(frozen=True)
class PutOptions:
    storage_class: str = "STANDARD"
    sse: str | None = None  # "AES256" or "aws:kms"
    kms_key_id: str | None = None
    expected_size: int | None = None  # sizes the multipart parts
    lock_mode: str | None = None  # Object Lock retention: "GOVERNANCE" or "COMPLIANCE"
    lock_until: datetime | None = None
    tagging: str | None = None  # URL-encoded tags ("k=v&k2=v2"), what lifecycle rules filter on

    def s3_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {"StorageClass": self.storage_class}
        if self.sse:
            args["ServerSideEncryption"] = self.sse
            if self.kms_key_id:
                args["SSEKMSKeyId"] = self.kms_key_id
        if self.lock_mode and self.lock_until:
            args["ObjectLockMode"] = self.lock_mode
            args["ObjectLockRetainUntilDate"] = self.lock_until
        if self.tagging:
            args["Tagging"] = self.tagging
        return args


@dataclass
class Deleted:
    """What a delete did. On a versioned bucket every version of each key is deleted (a delete
    without a VersionId only hides the object behind a delete marker and frees nothing)."""

    keys: int = 0  # keys that are gone
    freed_bytes: int | None = 0  # bytes no longer stored (None: the store cannot tell)
    retained: list[str] = field(default_factory=list)  # versions Object Lock still keeps, named

    def add(self, other: Deleted | None) -> None:
        """Sum up another call's result (None: a store of an older protocol that returns nothing)."""
        if other is None:
            self.freed_bytes = None
            return
        self.keys += other.keys
        self.freed_bytes = (
            None
            if self.freed_bytes is None or other.freed_bytes is None
            else self.freed_bytes + other.freed_bytes
        )
        self.retained += other.retained


@dataclass(frozen=True)
class Versioned:
    """An object read with its ETag, and its age by the store's own clock (the response's Date
    less the object's LastModified), so that no two workers' clocks need to agree."""

    data: bytes
    etag: str
    age: timedelta | None  # None: the store did not say
    store_now: datetime | None = None  # the store's clock when it answered (None: it did not say)


def segment_key(key: str, index: int) -> str:
    """The key of segment `index` of a stream stored at `key` (segment 0 is `key` itself;
    core/storage/segments.py)."""
    return key if index == 0 else f"{key}.s{index:03d}"


@dataclass(frozen=True)
class WrittenSegment:
    key: str
    size: int
    sha256: str


class ObjectWriter(Protocol):
    def write(self, data: bytes) -> None: ...
    def commit(self) -> int: ...
    def abort(self) -> None: ...

    # After commit: the objects that hold the stream when it needed more than one (segments, in
    # order; the first is the writer's key); empty when the one object at the key holds it all.
    @property
    def segments(self) -> list[WrittenSegment]: ...


LEGAL_HOLD = datetime.max.replace(tzinfo=UTC)  # an Object Lock legal hold: retained until released
# keys -> the Object Lock retain-until of those that have one (LEGAL_HOLD for a legal hold)
LockReader = Callable[[list[str]], dict[str, datetime]]


class ObjectStore(Protocol):
    location: str

    def open_writer(self, key: str, options: PutOptions | None = None) -> ObjectWriter: ...
    def put_bytes(self, key: str, data: bytes, options: PutOptions | None = None) -> None: ...
    def get_bytes(self, key: str) -> bytes: ...
    def read_chunks(self, key: str) -> Iterator[bytes]: ...
    def head(self, key: str) -> ObjectInfo | None: ...
    def list(self, prefix: str) -> Iterator[ObjectInfo]: ...
    def delete(self, keys: Iterable[str]) -> Deleted: ...
    def put_new(self, key: str, data: bytes, if_match: str | None = None) -> str | None: ...
    def get_versioned(self, key: str) -> Versioned | None: ...
    @property
    def endpoint_url(self) -> str | None: ...  # where the store is reached (named in errors)

    # What only some stores have: the others say "not here", so callers never ask isinstance.
    @property
    def supports_object_lock(self) -> bool: ...  # objects can carry Object Lock retention
    @property
    def supports_archive(self) -> bool: ...  # objects can sit in GLACIER / DEEP_ARCHIVE
    def abort_stale_uploads(self, prefix: str, older_than: timedelta) -> builtins.list[str]: ...
    def lock_reader(self) -> LockReader | None: ...  # None: nothing here can be under Object Lock
    def restore_object(self, key: str, days: int, tier: str) -> bool: ...  # supports_archive only


def check_key(key: str) -> str:
    """Refuse keys that could escape a prefix or a LocalStore root."""
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\x00" in key:
        raise StorageError(f"unsafe object key {key!r}: keys are relative paths without '.', '..' or '//'")
    return key
