"""DDL while mariabackup streams: the stream then carries MariaDB's rename ('R'), remove ('D') and
rewrite (flag 0x02) chunks. A deep verify must accept such a backup, and a restore of it must give
what `mbstream -x` of the whole stream gives.

The backup's progress callback runs in the thread that moves the stored bytes: while it runs the
DDL, nothing reads mariabackup's stdout, so mariabackup blocks in the middle of its copy and the
DDL lands during the backup, as on a busy server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import restore_with, root_target, unique_name
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.restore.verify import VerifyRequest, verify
from xtrabackup_provider.core.storage.local import LocalStore

TABLES = [
    ("inno_ren", "InnoDB"),
    ("inno_drop", "InnoDB"),
    ("inno_alter", "InnoDB"),
    ("aria_drop", "Aria"),
    ("aria_keep", "Aria"),
    ("my_ren", "MyISAM"),
    ("my_drop", "MyISAM"),
    ("my_alter", "MyISAM"),
]

DDL = """
RENAME TABLE inno_ren TO inno_ren2;
DROP TABLE inno_drop;
ALTER TABLE inno_alter FORCE;
DROP TABLE aria_drop;
RENAME TABLE my_ren TO my_ren2;
DROP TABLE my_drop;
ALTER TABLE my_alter FORCE;
CREATE TABLE aria_new (id INT PRIMARY KEY, v VARCHAR(40)) ENGINE=Aria;
INSERT INTO aria_new SELECT seq, MD5(seq) FROM seq_1_to_100;
"""


def _seed(server: SandboxServer, db: str) -> None:
    script = f"CREATE DATABASE `{db}`; USE `{db}`;\n"
    for name, engine in TABLES:
        script += (
            f"CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(100)) ENGINE={engine};\n"
            f"INSERT INTO {name} SELECT seq, MD5(seq) FROM seq_1_to_20000;\n"
        )
    # Enough InnoDB data that the stream is still being copied when the DDL runs.
    script += (
        "CREATE TABLE bulk (id INT PRIMARY KEY, body LONGBLOB) ENGINE=InnoDB;\n"
        "INSERT INTO bulk SELECT seq, RANDOM_BYTES(1024) FROM seq_1_to_40000;\n"
    )
    server.execute_script(script)


class DdlOnce:
    """A progress callback that runs the DDL the first time the stream has moved `after` bytes."""

    def __init__(self, server: SandboxServer, db: str, after: int = 1 << 20) -> None:
        self.server, self.db, self.after, self.done = server, db, after, False

    def __call__(self, raw_bytes: int) -> None:
        if not self.done and raw_bytes >= self.after:
            self.done = True
            self.server.execute_script(DDL, database=self.db)


def _backup(server: SandboxServer, catalog: Catalog, keys, db: str, **request) -> Manifest:
    ddl = DdlOnce(server, db)
    manifest = run_backup(
        BackupRequest(
            catalog=catalog,
            target=root_target(server),
            public_keys=[keys.public_key],
            progress=ddl,
            **request,
        )
    )
    assert ddl.done, "the DDL never ran during the backup"
    return manifest


@pytest.fixture
def ddl_server(mariadb: SandboxServer) -> tuple[SandboxServer, str]:
    db = unique_name("ddl")
    _seed(mariadb, db)
    return mariadb, db


@pytest.mark.parametrize("parts", [1, 2], ids=["one-stream", "two-parts"])
def test_a_backup_with_ddl_during_it_passes_deep_verify_and_restores(
    ddl_server, gpg_keys, tmp_path: Path, parts: int
):
    """With K parts the renames and removes go to the tail, extracted after the parts."""
    server, db = ddl_server
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    manifest = _backup(server, catalog, gpg_keys, db, max_parts=parts, part_min_bytes=0)
    assert len(manifest.objects) == (1 if parts == 1 else parts + 1)
    expected = table_checksums(server, [db])

    [report] = verify(
        VerifyRequest(
            catalog,
            [manifest.backup_id],
            mode="deep",
            private_key=gpg_keys.private_key,
            passphrase=gpg_keys.passphrase,
        )
    )
    assert report.ok, report.problems

    target = tmp_path / "restored" / "data"
    restore_with(catalog, gpg_keys, target)
    with SandboxServer.on_datadir(target, tmp_path / "restored", server_id=901) as restored:
        restored.start()
        got = table_checksums(restored, [db])
    assert {t for t in got} == {t for t in expected}, (sorted(got), sorted(expected))
    assert got == expected
