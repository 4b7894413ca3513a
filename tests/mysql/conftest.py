"""Fixtures of the MySQL suites (make test-mysql)."""

from __future__ import annotations

import pytest

from helpers import clone_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.storage.local import LocalStore


@pytest.fixture
def backup(source, tmp_path) -> tuple[Catalog, Manifest]:
    """A clone backup of the test module's own `source` fixture (a MySQL server with the clone
    plugin), into a local store."""
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "my1")
    manifest = clone_backup(source, catalog, tmp_path / "staging")
    return catalog, manifest
