"""The point-in-time restore test (core/pitr/pitr_test.py: what the restore-test DAG's
`restore_to_time` task runs) of a MySQL host, on a real MySQL 9.7 with MySQL's own mysqlbinlog: a
clone backup, binlogs shipped after it, a time between two writes. The test passes and the restored
server's gtid_executed is the source's at that time (what was written before it, nothing after); its
report is stored beside the backup; a time before the first backup fails naming why. On main it failed on every MySQL host (the MariaDB replay path
and a mariadbd sandbox)."""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime

import pytest

from helpers import clone_backup, ship_mysql_binlogs, unique_name
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.pitr.pitr_test import run_pitr_test
from xtrabackup_provider.core.pitr.plan import PitrTarget
from xtrabackup_provider.core.storage.local import LocalStore

pytestmark = pytest.mark.mysql


@pytest.fixture
def source(mysql_factory):
    server = mysql_factory("pitrtest-my", root_password=secrets.token_urlsafe(16))
    server.query("INSTALL PLUGIN clone SONAME 'mysql_clone.so'")
    yield server
    mysql_factory.discard(server)


def test_a_point_in_time_restore_test_of_a_mysql_host_passes_at_the_time_asked(source, tmp_path):
    db = unique_name("pt")
    source.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY); INSERT INTO {db}.t VALUES (1);"
    )
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "my1")
    before_backup = datetime.now(UTC).replace(microsecond=0)
    time.sleep(1.1)
    clone_backup(source, catalog, tmp_path / "staging")
    source.execute_script(f"INSERT INTO {db}.t VALUES (2); INSERT INTO {db}.t VALUES (3);")
    at_stop = source.query("SELECT @@global.gtid_executed")[0][0].replace("\n", "")
    time.sleep(1.1)  # binlog times are whole seconds: the next write is stamped after the stop time
    stop = datetime.now(UTC).replace(microsecond=0)
    time.sleep(1.1)
    source.execute_script(f"INSERT INTO {db}.t VALUES (4); FLUSH BINARY LOGS;")
    ship_mysql_binlogs(catalog, source)

    report = run_pitr_test(catalog, tmp_path / "work", PitrTarget.at_time(stop.isoformat()))
    assert report.passed, report.reasons
    assert report.reached["gtid"] == at_stop  # 2 and 3 replayed on the backup's 1; not 4
    stored = catalog.store.get_bytes(catalog.object_key(report.backup_id, "pitr-report.json"))
    assert b'"verdict": "pass"' in stored

    early = run_pitr_test(catalog, tmp_path / "early", PitrTarget.at_time(before_backup.isoformat()))
    assert not early.passed and "no MySQL backup" in " ".join(early.reasons), early.reasons
