"""Fixtures of the unit tests."""

from __future__ import annotations

import pytest

from manifest_factory import make_manifest


@pytest.fixture(scope="module")
def catalog_dir(tmp_path_factory) -> str:
    """A directory store holding manifests (and no objects: nothing can be fetched)."""
    from xtrabackup_provider.core.catalog.backups import Catalog
    from xtrabackup_provider.core.storage.local import LocalStore

    root = tmp_path_factory.mktemp("store")
    catalog = Catalog(LocalStore(str(root)), "backups-prod", "c1", "db1")
    full = make_manifest("20261101T000000Z-full")
    catalog.store.put_bytes(catalog.manifest_key(full.backup_id), full.to_json())
    inc = make_manifest("20261102T000000Z-inc", parent=full)
    catalog.store.put_bytes(catalog.manifest_key(inc.backup_id), inc.to_json())
    return str(root)
