"""Catalog: the backups of one host in an object store (list, read, validate, register)."""

from __future__ import annotations

__all__ = ["Catalog"]

from concurrent.futures import ThreadPoolExecutor

from ..storage.base import ObjectStore, StorageError
from .chain import first_missing_link, resolve_chain
from .manifest import MANIFEST_NAME, CatalogError, Manifest, parse_manifest


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
        for obj in manifest.stored_objects:
            if not obj.key.startswith(own):
                raise CatalogError(
                    f"{self.store.location}/{self.manifest_key(manifest.backup_id)}: the manifest names object "
                    f"{obj.key!r} outside {own}; refusing it"
                )

    def manifests(self, problems: list[str] | None = None, ids: list[str] | None = None) -> list[Manifest]:
        """Every readable manifest (or those of `ids`), oldest first. Unreadable ones go to
        `problems` (or raise)."""
        ids = self.backup_ids() if ids is None else sorted(ids)
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
        for piece in (p for obj in manifest.stored_objects for p in obj.pieces()):
            info = self.store.head(piece.key)
            if info is None or info.size != piece.size:
                found = "missing" if info is None else f"{info.size} bytes"
                raise CatalogError(
                    f"refusing to register {manifest.backup_id}: {piece.key} is {found}, expected {piece.size}"
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
            missing = first_missing_link(by_id, backup_id)
            bad = [p for p in problems if missing and f"/{missing}/{MANIFEST_NAME}" in p]
            if bad:
                raise CatalogError(f"{exc}. Its manifest is unusable: {bad[0]}") from exc
            raise

    def latest_chain(self) -> list[Manifest]:
        ids = self.backup_ids()
        if not ids:
            raise CatalogError(f"no backups at {self.describe()}")
        return self.chain(ids[-1])
