"""Manifests (versioned JSON, the commit marker of a backup) and the per-host catalog.

Layout: <prefix>/<cluster>/<host>/backups/<backup_id>/{backup.xbstream.zst.gpg, manifest.json}.
A backup exists only when its manifest exists. Manifests hold no secrets, so listing, chain
validation and retention never need keys.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .storage import ObjectStore, StorageError, check_key

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
BACKUP_OBJECT_NAME = "backup.xbstream"
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
BACKUP_ID_RE = re.compile(r"^\d{8}T\d{6}Z-(full|inc)(-[0-9a-z]{1,12})?$")
NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class CatalogError(RuntimeError):
    """A manifest is missing, unreadable or inconsistent; the message names the key or link."""


class StoredObject(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str
    size: int = Field(ge=0, le=2**63)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    raw_size: int = Field(ge=0, le=2**63)
    compression: Literal["zstd", "none"]
    encryption: Literal["gpg", "none"]
    recipients: list[str] = Field(default_factory=list, max_length=64)
    storage_class: str = "STANDARD"
    sse: str | None = None
    kms_key_id: str | None = None  # with sse aws:kms: the key that encrypts the object at rest
    object_lock_mode: Literal["GOVERNANCE", "COMPLIANCE"] | None = None
    object_lock_until: datetime | None = None

    @field_validator("key")
    @classmethod
    def _safe_key(cls, key: str) -> str:
        try:
            return check_key(key)
        except StorageError as exc:
            raise ValueError(str(exc)) from exc


class GateResult(BaseModel):
    name: str
    status: Literal["pass", "fail", "marked", "skipped"]
    detail: dict[str, Any] = Field(default_factory=dict)


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format_version: Literal[1] = 1
    backup_id: str = Field(pattern=BACKUP_ID_RE.pattern)
    cluster: str = Field(pattern=NAME_RE)
    host: str = Field(pattern=NAME_RE)
    kind: Literal["full", "incremental"]
    parent_id: str | None = None
    chain_root: str
    decision_reason: str = ""
    engine_flavour: Literal["mariabackup", "xtrabackup"]
    engine_version: str
    engine_major: str
    server_version: str = ""
    server_uuid: str
    server_id: int = Field(ge=0, le=2**32)
    from_lsn: int = Field(ge=0, le=2**64)
    to_lsn: int = Field(ge=0, le=2**64)
    last_lsn: int = Field(ge=0, le=2**64)
    binlog_file: str | None = None
    binlog_position: int | None = None
    gtid: str | None = None
    started_at: datetime
    finished_at: datetime
    objects: list[StoredObject] = Field(min_length=1, max_length=1000)
    raw_bytes: int = Field(ge=0)
    stored_bytes: int = Field(ge=0)
    gates: list[GateResult] = Field(default_factory=list)
    estimate_memory: bool = False
    prepare_memory_estimate: int | None = None
    table_rows: dict[str, int] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        if self.kind == "full" and (
            self.parent_id or self.from_lsn != 0 or self.chain_root != self.backup_id
        ):
            raise ValueError("a full backup has no parent, from_lsn 0, and is its own chain root")
        if self.kind == "incremental" and not self.parent_id:
            raise ValueError("an incremental backup needs parent_id")
        for obj in self.objects:
            if not obj.key.split("/")[-2:-1] == [self.backup_id]:
                raise ValueError(
                    f"object key {obj.key!r} is outside this backup's directory {self.backup_id}/"
                )
        return self

    @property
    def backup_object(self) -> StoredObject:
        return self.objects[0]

    def to_json(self) -> bytes:
        return self.model_dump_json(indent=2).encode()


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


class Catalog:
    """The backups of one host, read from and written to an object store."""

    def __init__(self, store: ObjectStore, prefix: str, cluster: str, host: str) -> None:
        self.store = store
        self.prefix = prefix.strip("/")
        self.cluster = cluster
        self.host = host

    @property
    def host_prefix(self) -> str:
        parts = [p for p in (self.prefix, self.cluster, self.host) if p]
        return "/".join(parts)

    def backup_dir(self, backup_id: str) -> str:
        return f"{self.host_prefix}/backups/{backup_id}"

    def object_key(self, backup_id: str, name: str) -> str:
        return f"{self.backup_dir(backup_id)}/{name}"

    def manifest_key(self, backup_id: str) -> str:
        return self.object_key(backup_id, MANIFEST_NAME)

    def describe(self, backup_id: str | None = None) -> str:
        where = f"{self.store.location}/{self.host_prefix}"
        return f"{where}/backups/{backup_id}" if backup_id else where

    def exists(self, backup_id: str) -> bool:
        return self.store.head(self.manifest_key(backup_id)) is not None

    def backup_ids(self) -> list[str]:
        """Ids that have a manifest, oldest first."""
        base = f"{self.host_prefix}/backups/"
        ids = []
        for info in self.store.list(base):
            rest = info.key[len(base) :]
            if rest.count("/") == 1 and rest.endswith("/" + MANIFEST_NAME):
                ids.append(rest.split("/")[0])
        return sorted(ids)

    def get(self, backup_id: str) -> Manifest:
        key = self.manifest_key(backup_id)
        try:
            data = self.store.get_bytes(key)
        except StorageError as exc:
            raise CatalogError(f"backup {backup_id} has no manifest at {self.store.location}/{key}") from exc
        manifest = parse_manifest(data, f"{self.store.location}/{key}")
        if (manifest.backup_id, manifest.cluster, manifest.host) != (backup_id, self.cluster, self.host):
            raise CatalogError(
                f"{self.store.location}/{key}: manifest says {manifest.cluster}/{manifest.host}/{manifest.backup_id}; "
                "it was copied or tampered with"
            )
        self._check_object_keys(manifest)
        return manifest

    def _check_object_keys(self, manifest: Manifest) -> None:
        """Every object must live in this backup's own directory, never another host's."""
        own = self.backup_dir(manifest.backup_id) + "/"
        for obj in manifest.objects:
            if not obj.key.startswith(own):
                raise CatalogError(
                    f"{self.store.location}/{self.manifest_key(manifest.backup_id)}: the manifest names object "
                    f"{obj.key!r} outside {own}; refusing it"
                )

    def manifests(self, problems: list[str] | None = None) -> list[Manifest]:
        """Every readable manifest, oldest first. Unreadable ones go to `problems` (or raise)."""
        ids = self.backup_ids()
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(self._try_get, ids))
        out = []
        for result in results:
            if isinstance(result, Manifest):
                out.append(result)
            elif problems is not None:
                problems.append(result)
            else:
                raise CatalogError(result)
        return out

    def _try_get(self, backup_id: str) -> Manifest | str:
        try:
            return self.get(backup_id)
        except CatalogError as exc:
            return str(exc)

    def write(self, manifest: Manifest) -> None:
        """Write the manifest last, after checking every object it names is stored at its size."""
        self._check_object_keys(manifest)
        for obj in manifest.objects:
            info = self.store.head(obj.key)
            if info is None or info.size != obj.size:
                found = "missing" if info is None else f"{info.size} bytes"
                raise CatalogError(
                    f"refusing to register {manifest.backup_id}: {obj.key} is {found}, expected {obj.size}"
                )
        self.store.put_bytes(self.manifest_key(manifest.backup_id), manifest.to_json())

    def latest(self) -> Manifest | None:
        ids = self.backup_ids()
        return self.get(ids[-1]) if ids else None

    def chain(self, backup_id: str) -> list[Manifest]:
        """Root full .. backup_id, validated from manifests alone (nothing is downloaded).

        A bad manifest of another chain must not block this restore; one on this chain is named.
        """
        problems: list[str] = []
        by_id = {m.backup_id: m for m in self.manifests(problems)}
        try:
            return resolve_chain(by_id, backup_id, self.describe())
        except CatalogError as exc:
            missing = _first_missing_link(by_id, backup_id)
            bad = [p for p in problems if missing and f"/{missing}/{MANIFEST_NAME}" in p]
            if bad:
                raise CatalogError(f"{exc}. Its manifest is unusable: {bad[0]}") from exc
            raise

    def latest_chain(self) -> list[Manifest]:
        ids = self.backup_ids()
        if not ids:
            raise CatalogError(f"no backups at {self.describe()}")
        return self.chain(ids[-1])


def _first_missing_link(by_id: dict[str, Manifest], backup_id: str) -> str | None:
    """The first id on the way from backup_id to its root that has no readable manifest."""
    current: str | None = backup_id
    for _ in range(len(by_id) + 1):
        if current is None or current not in by_id:
            return current
        current = by_id[current].parent_id
    return None


def resolve_chain(by_id: dict[str, Manifest], backup_id: str, where: str = "") -> list[Manifest]:
    if backup_id not in by_id:
        raise CatalogError(f"backup {backup_id} has no manifest in {where or 'the catalog'}")
    chain = [by_id[backup_id]]
    while chain[-1].parent_id:
        child = chain[-1]
        parent = by_id.get(child.parent_id or "")
        if parent is None:
            raise CatalogError(
                f"broken chain in {where or 'the catalog'}: {child.backup_id} needs its parent {child.parent_id}, "
                f"which has no manifest (missing link {child.parent_id} -> {child.backup_id}); "
                "restore an older backup or take a new full"
            )
        if len(chain) > 10_000:
            raise CatalogError(f"chain of {backup_id} loops or exceeds 10,000 links")
        chain.append(parent)
    chain.reverse()
    validate_chain(chain)
    return chain


def validate_chain(chain: list[Manifest]) -> None:
    """Root is a full with from_lsn 0; each link continues its parent's LSN on the same server/engine."""
    root = chain[0]
    if root.kind != "full" or root.from_lsn != 0:
        raise CatalogError(f"chain root {root.backup_id} is not a full backup with from_lsn 0")
    for parent, child in zip(chain, chain[1:], strict=False):
        link = f"{parent.backup_id} -> {child.backup_id}"
        if child.parent_id != parent.backup_id:
            raise CatalogError(f"link {link}: child names parent {child.parent_id}")
        if child.from_lsn != parent.to_lsn:
            raise CatalogError(
                f"LSN gap in link {link}: child starts at from_lsn {child.from_lsn}, parent ends at to_lsn {parent.to_lsn}"
            )
        if child.server_uuid != parent.server_uuid:
            raise CatalogError(
                f"link {link}: backups of different servers ({parent.server_uuid} vs {child.server_uuid})"
            )
        if (child.engine_flavour, child.engine_major) != (parent.engine_flavour, parent.engine_major):
            raise CatalogError(
                f"link {link}: engine changed from {parent.engine_flavour} {parent.engine_major} "
                f"to {child.engine_flavour} {child.engine_major}; take a new full"
            )
        if child.chain_root != root.backup_id:
            raise CatalogError(
                f"link {link}: child records chain root {child.chain_root}, expected {root.backup_id}"
            )


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
