"""Backup manifests: versioned JSON, the commit marker of a backup.

Layout: <prefix>/<cluster>/<host>/backups/<backup_id>/{backup.xbstream.zst.gpg, manifest.json}.
A K-part backup (format_version 2) stores backup.p<i>of<K>.xbstream.zst.gpg for each data part and
backup.tail.xbstream.zst.gpg instead (core/pipeline/split.py); a one-stream backup is version 1,
which older workers read, and a worker that only knows version 1 refuses version 2 by name instead
of restoring part 0 alone. A backup exists only when its manifest exists. Manifests hold no secrets, so listing, chain
validation and retention never need keys.
"""

from __future__ import annotations

__all__ = ["Manifest", "StoredObject", "read_stored"]

import json
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from ..common.values import BINLOG_NAME, check_mysql_gtid_set, parse_gtid_pos
from ..storage.base import ObjectStore, ObjectWriter, StorageError, WrittenSegment, check_key, segment_key
from ..storage.segments import read_segments
from .records import BackupImpact, CopyOrigin
from .shape import SourceShape

FORMAT_VERSION = 1
PARTS_FORMAT_VERSION = 2  # a K-part backup: objects are its data parts in order, then its tail
MAX_PARTS = 64
MANIFEST_NAME = "manifest.json"
BACKUP_OBJECT_NAME = "backup.xbstream"
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
BACKUP_ID_RE = re.compile(r"^[0-9]{8}T[0-9]{6}Z-(full|inc)(-[0-9a-z]{1,12})?$")
NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
# MySQL's server_uuid, or the one core.db.server derives for MariaDB (mariadb-<host>-<port>-<id>):
# it names a directory of the binlog catalog.
SERVER_UUID_RE = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,254}$"
FINGERPRINT_RE = r"^[0-9A-Fa-f]{16,64}$"
MAX_SERVER_ID = 2**32 - 1


class CatalogError(RuntimeError):
    """A manifest is missing, unreadable or inconsistent; the message names the key or link."""


class Segment(BaseModel):
    """One of the consecutive objects `KEY`, `KEY.s001`, ... that hold a stream too long for one
    object (core/storage/segments.py); its key follows from its place."""

    model_config = ConfigDict(extra="forbid")

    size: int = Field(ge=0, le=2**63)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class StoredObject(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str
    size: int = Field(ge=0, le=2**63)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    raw_size: int = Field(ge=0, le=2**63)
    compression: Literal["zstd", "none"]
    encryption: Literal["gpg", "none"]
    recipients: list[str] = Field(default_factory=list, max_length=64)  # primary-key fingerprints
    storage_class: str = "STANDARD"
    sse: str | None = None
    kms_key_id: str | None = None  # with sse aws:kms: the key that encrypts the object at rest
    object_lock_mode: Literal["GOVERNANCE", "COMPLIANCE"] | None = None
    object_lock_until: AwareDatetime | None = None
    # K-part backups only (format_version 2): a data part (`part` 0..K-1) or the tail.
    role: Literal["part", "tail"] | None = None
    part: int | None = Field(None, ge=0, lt=MAX_PARTS)
    # A stream stored as several objects (segment 0 is `key`): None when `key` holds it all.
    # Workers from before segments forbid this field, so they refuse such a manifest by name
    # instead of reading segment 0 alone.
    segments: list[Segment] | None = Field(None, min_length=2, max_length=100_000)

    @model_serializer(mode="wrap")
    def _without_unset_parts(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A one-stream object is written without role, part and segments: workers from before K
        parts forbid unknown fields, so a format 1 manifest stays byte for byte what they read."""
        data: dict[str, Any] = handler(self)
        for name in ("role", "part", "segments"):
            if data.get(name) is None:
                data.pop(name, None)
        return data

    @model_validator(mode="after")
    def _segments_add_up(self) -> StoredObject:
        if self.segments and sum(s.size for s in self.segments) != self.size:
            raise ValueError(
                f"the segments of {self.key} hold {sum(s.size for s in self.segments)} bytes, the object {self.size}"
            )
        return self

    def pieces(self) -> list[WrittenSegment]:
        """The objects that hold this stream, in order: its segments, or the one object at `key`."""
        if not self.segments:
            return [WrittenSegment(self.key, self.size, self.sha256)]
        return [
            WrittenSegment(segment_key(self.key, i), s.size, s.sha256) for i, s in enumerate(self.segments)
        ]

    @property
    def keys(self) -> list[str]:
        """Every key this stream is stored under (what retention deletes, copies copy, locks hold)."""
        return [p.key for p in self.pieces()]

    @field_validator("recipients")
    @classmethod
    def _fingerprints(cls, recipients: list[str]) -> list[str]:
        if bad := [r for r in recipients if not re.fullmatch(FINGERPRINT_RE, r)]:
            raise ValueError(f"{bad[0][:80]!r} is not a key fingerprint (16 to 64 hex digits)")
        return recipients

    @field_validator("key")
    @classmethod
    def _safe_key(cls, key: str) -> str:
        try:
            return check_key(key)
        except StorageError as exc:
            raise ValueError(str(exc)) from exc


class OptionFiles(BaseModel):
    """The server's option files, saved as one encrypted side object (a tar: core/backup/option_files.py)."""

    model_config = ConfigDict(extra="forbid")

    object: StoredObject
    files: list[str] = Field(default_factory=list, max_length=1000)  # paths on the host, read order
    skipped: list[str] = Field(default_factory=list, max_length=1000)  # "path: why it was not saved"


class GateResult(BaseModel):
    name: str
    status: Literal["pass", "fail", "marked", "skipped"]
    detail: dict[str, Any] = Field(default_factory=dict)


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format_version: Literal[1, 2] = 1
    backup_id: str = Field(pattern=BACKUP_ID_RE.pattern)
    cluster: str = Field(pattern=NAME_RE)
    host: str = Field(pattern=NAME_RE)
    kind: Literal["full", "incremental"]
    parent_id: str | None = None
    chain_root: str
    decision_reason: str = ""
    engine_flavour: Literal["mariabackup", "xtrabackup", "clone"]
    engine_version: str
    engine_major: str
    server_version: str = ""
    server_uuid: str = Field(pattern=SERVER_UUID_RE)
    server_id: int = Field(ge=0, le=MAX_SERVER_ID)
    from_lsn: int = Field(ge=0, le=2**64)
    to_lsn: int = Field(ge=0, le=2**64)
    last_lsn: int = Field(ge=0, le=2**64)
    binlog_file: str | None = Field(None, pattern=BINLOG_NAME)
    binlog_position: int | None = Field(None, ge=0, le=2**63)
    gtid: str | None = Field(None, max_length=65536)  # MariaDB GTIDs or a MySQL GTID set, per flavour
    started_at: AwareDatetime
    finished_at: AwareDatetime
    objects: list[StoredObject] = Field(min_length=1, max_length=1000)
    raw_bytes: int = Field(ge=0, le=2**63)
    stored_bytes: int = Field(ge=0, le=2**63)
    gates: list[GateResult] = Field(default_factory=list)
    estimate_memory: bool = False
    prepare_memory_estimate: int | None = Field(None, ge=0, le=2**63)
    # Exact COUNT(*) of the smallest InnoDB tables at the backup's own point (core/db/rowcounts.py;
    # how they were taken, or why none were: extra["row_counts"]). Restore tests compare them exactly.
    table_rows: dict[str, int] = Field(default_factory=dict, max_length=20_000)
    source_shape: SourceShape | None = (
        None  # the source at backup time (catalog/shape.py); older manifests: None
    )
    extra: dict[str, Any] = Field(default_factory=dict)
    impact: BackupImpact | None = None  # the bounds it ran under, the locks it held
    option_files: OptionFiles | None = None
    copy_of: CopyOrigin | None = None  # set on a further storage target's copy

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        if self.kind == "full" and (
            self.parent_id or self.from_lsn != 0 or self.chain_root != self.backup_id
        ):
            raise ValueError("a full backup has no parent, from_lsn 0, and is its own chain root")
        if self.kind == "incremental" and not self.parent_id:
            raise ValueError("an incremental backup needs parent_id")
        if self.gtid:
            _check_gtid(self.gtid, self.engine_flavour)
        for obj in self.stored_objects:
            if not obj.key.split("/")[-2:-1] == [self.backup_id]:
                raise ValueError(
                    f"object key {obj.key!r} is outside this backup's directory {self.backup_id}/"
                )
        self._check_parts()
        self._check_keys()
        return self

    def _check_keys(self) -> None:
        """Every stored byte has one key: a restore would read one object as two (a segment of one
        stream stored where another object is listed)."""
        seen: dict[str, str] = {}
        for obj in self.stored_objects:
            for key in obj.keys:
                if key in seen:
                    raise ValueError(f"objects {seen[key]!r} and {obj.key!r} are both stored at key {key!r}")
                seen[key] = obj.key

    def _check_parts(self) -> None:
        roles = [(o.role, o.part) for o in self.objects]
        if self.format_version == FORMAT_VERSION:
            if any(r != (None, None) for r in roles):
                raise ValueError("objects of a format_version 1 manifest have no role or part")
            return
        k = len(self.objects) - 1
        if k < 2 or roles != [*(("part", i) for i in range(k)), ("tail", None)]:
            raise ValueError(
                f"a format_version {PARTS_FORMAT_VERSION} manifest lists its data parts 0..K-1 (K >= 2) "
                f"in order, then its tail; it lists {roles}"
            )
        first = self.objects[0]
        for obj in self.objects[1:]:  # a restore decodes every part as part 0 says
            for name in ("compression", "encryption", "recipients"):
                if sorted_if_list(getattr(obj, name)) != sorted_if_list(getattr(first, name)):
                    raise ValueError(
                        f"{obj.role} {obj.key!r} has {name} {getattr(obj, name)!r}, part 0 "
                        f"{getattr(first, name)!r}: the parts of a backup are written alike"
                    )

    @property
    def backup_object(self) -> StoredObject:
        """The one stream (version 1), or part 0 (version 2; its encryption is every part's)."""
        return self.objects[0]

    @property
    def stored_objects(self) -> list[StoredObject]:
        """Every object the manifest names: the data objects, then the side objects."""
        return [*self.objects, *([self.option_files.object] if self.option_files else [])]

    @property
    def streams(self) -> list[StoredObject]:
        """What a restore extracts: the one stream, or the data parts (at once) then the tail."""
        return list(self.objects) if self.format_version == PARTS_FORMAT_VERSION else [self.objects[0]]

    def to_json(self) -> bytes:
        return self.model_dump_json(indent=2).encode()


def sorted_if_list(value: Any) -> Any:
    return sorted(value) if isinstance(value, list) else value


def _check_gtid(gtid: str, flavour: str) -> None:
    """MariaDB GTIDs from mariabackup (PITR parses them); from xtrabackup a MySQL GTID set, or
    MariaDB GTIDs when it backed up an old MariaDB."""
    try:
        parse_gtid_pos(gtid, "gtid")
    except ValueError:
        if flavour == "mariabackup":
            raise
        check_mysql_gtid_set(gtid, "gtid")


def new_backup_id(kind: str, now: datetime | None = None) -> str:
    now = (now or datetime.now(UTC)).astimezone(UTC)
    return now.strftime("%Y%m%dT%H%M%SZ") + ("-full" if kind == "full" else "-inc")


def parse_manifest(data: bytes, source: str) -> Manifest:
    if len(data) > MAX_MANIFEST_BYTES:
        raise CatalogError(
            f"{source}: manifest is {len(data)} bytes, over the {MAX_MANIFEST_BYTES} limit; refusing it"
        )
    try:
        return Manifest.model_validate_json(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in exc.errors()[:5]
        )
        raise CatalogError(f"{source}: invalid manifest: {problems}") from exc


def manifest_summary(manifests: Iterable[Manifest]) -> list[dict[str, Any]]:
    """Small JSON-able rows for `list --json`, XCom and reports."""
    return [
        {
            "backup_id": m.backup_id,
            "kind": m.kind,
            "parent_id": m.parent_id,
            "chain_root": m.chain_root,
            "from_lsn": m.from_lsn,
            "to_lsn": m.to_lsn,
            "raw_bytes": m.raw_bytes,
            "stored_bytes": m.stored_bytes,
            "started_at": m.started_at.isoformat(),
            "finished_at": m.finished_at.isoformat(),
            "gtid": m.gtid,
            "storage_class": m.backup_object.storage_class,
        }
        for m in manifests
    ]


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=str)


def read_stored(store: ObjectStore, obj: StoredObject) -> Iterator[bytes]:
    """The stored stream's bytes: the one object as it always was, or each segment in order, every
    segment checked present first and each one's sha256 as it ends (refused by its key)."""
    return read_segments(store, obj.pieces()) if obj.segments else store.read_chunks(obj.key)


def stored_segments(writer: ObjectWriter) -> list[Segment] | None:
    """What a committed writer stored, for StoredObject.segments (None: one object)."""
    return [Segment(size=s.size, sha256=s.sha256) for s in writer.segments] or None
