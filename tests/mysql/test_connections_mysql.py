"""A clone backup of a real MySQL 9.7 talks to it through one session (core/db/session.py): the
clone plugin's checks, the heartbeat, CLONE LOCAL and the identity and shape reads around it.
Counted by the server (tests/connection_count.py); the settling server runs on the copy, not here."""

from __future__ import annotations

import secrets

import pytest

from connection_count import connections
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.storage.local import LocalStore

pytestmark = pytest.mark.mysql


def test_a_clone_backup_talks_to_the_server_through_one_session(mysql_factory, tmp_path):
    server = mysql_factory("conn-clone", root_password=secrets.token_urlsafe(16))
    try:
        server.execute_script(
            "INSTALL PLUGIN clone SONAME 'mysql_clone.so'; CREATE DATABASE shop;"
            " CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(20)); INSERT INTO shop.t VALUES (1, 'a'), (2, 'b');"
        )
        catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
        request = BackupRequest(
            catalog,
            MySQLTarget(socket=str(server.socket), user="root", password=server.root_password),
            flavour="clone",
            staging_dir=str(tmp_path),
            allow_unencrypted=True,
            heartbeat=True,
        )
        with connections(server) as opened:
            manifest = run_backup(request)
        assert manifest.engine_flavour == "clone" and manifest.extra["heartbeat"]
        assert opened.ours <= 1, f"a clone backup opened {opened}"
    finally:
        mysql_factory.discard(server)
