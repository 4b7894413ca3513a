"""The clone engine on a real MySQL 9.7: CLONE LOCAL into a private staging directory, streamed
-> zstd -> GPG -> LocalStore / S3, restored by fetch + extract (no prepare) into an empty datadir
that a MySQL server starts on with the source's data at the backup's GTID set. Servers it cannot
copy are refused in one line before anything is stored, and the staging directory is gone after a
success, a failure and a kill (the next run removes what a killed one left)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from helpers import restore_with, unique_name
from xtrabackup_provider.core.backup.run import BackupError, BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.engine.tools import EngineError
from xtrabackup_provider.core.restore.chain import RestoreRequest, restore
from xtrabackup_provider.core.restore.verify import VerifyRequest, verify
from xtrabackup_provider.core.storage.local import LocalStore
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client

pytestmark = pytest.mark.mysql

PLUGIN = "INSTALL PLUGIN clone SONAME 'mysql_clone.so'"


@pytest.fixture(scope="module")
def source(mysql_factory):
    """A MySQL server with the clone plugin installed the way a user does it, holding data."""
    server = mysql_factory("clone-src", root_password=secrets.token_urlsafe(16))
    server.query(PLUGIN)
    db = unique_name("shop")
    server.execute_script(
        f"SET SESSION cte_max_recursion_depth = 10000; CREATE DATABASE {db}; USE {db};"
        " CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(40), email VARCHAR(80));"
        " CREATE TABLE orders (id INT AUTO_INCREMENT PRIMARY KEY, customer INT, total DECIMAL(10,2),"
        "   note TEXT, KEY (customer));"
        " CREATE TABLE w (id INT AUTO_INCREMENT PRIMARY KEY, at TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6));"
        f" CREATE DATABASE {db}_empty;"
        " INSERT INTO customers WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 500)"
        "   SELECT n, CONCAT('customer ', n), CONCAT('c', n, '@example.com') FROM s;"
        " INSERT INTO orders (customer, total, note) WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL"
        "   SELECT n + 1 FROM s WHERE n < 5000) SELECT n % 500 + 1, n * 1.25, REPEAT('x', n % 300) FROM s;"
    )
    server.db = db
    yield server
    mysql_factory.discard(server)


def _target(server: SandboxServer, user: str = "root", password: str | None = None) -> MySQLTarget:
    return MySQLTarget(socket=str(server.socket), user=user, password=password or server.root_password)


def _request(catalog: Catalog, server: SandboxServer, staging: Path, **kw) -> BackupRequest:
    kw.setdefault("accept_new_server", True)
    return BackupRequest(
        catalog=catalog, target=_target(server), flavour="clone", staging_dir=str(staging), **kw
    )


def _staged(staging: Path) -> list[Path]:
    return sorted(staging.glob("xbp-clone-*"))


def _nothing_stored(catalog: Catalog) -> bool:
    return catalog.backup_ids() == [] and not [
        o for o in catalog.store.list(catalog.host_prefix + "/backups/") if not o.key.endswith("/lock")
    ]


@pytest.fixture(params=["local", "s3"])
def catalog(request, tmp_path) -> Catalog:
    host = f"db{secrets.token_hex(3)}"
    if request.param == "local":
        return Catalog(LocalStore(tmp_path / "store"), "backups", "c1", host)
    s3_server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("bucket")
    return Catalog(
        S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket), "backups", "c1", host
    )


def _writer(server: SandboxServer, db: str, stop: threading.Event) -> threading.Thread:
    """Commits one row at a time until stopped: the clone copies a server that is being written."""

    def run() -> None:
        conn = server.connect()
        cur = conn.cursor()
        while not stop.is_set():
            cur.execute(f"INSERT INTO `{db}`.w () VALUES ()")
            conn.commit()
        conn.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_clone_backup_restores_the_data_at_its_gtid_set(source, catalog, gpg_keys, tmp_path):
    db = source.db
    staging = tmp_path / "staging"
    staging.mkdir()
    seq_before = _last_seq(source.query("SELECT @@gtid_executed")[0][0])
    rows_before = source.query(f"SELECT COUNT(*) FROM `{db}`.w")[0][0]
    stop = threading.Event()
    writer = _writer(source, db, stop)
    try:
        manifest = run_backup(_request(catalog, source, staging, public_keys=[gpg_keys.public_key]))
    finally:
        stop.set()
        writer.join()
    static = table_checksums(source, [db])
    static.pop(f"{db}.w")
    after = source.query("SELECT @@gtid_executed")[0][0]
    source.query(f"INSERT INTO `{db}`.orders (customer, total, note) VALUES (1, 1, 'after the backup')")

    assert _staged(staging) == [], "the clone's staging directory is left behind"
    assert manifest.engine_flavour == "clone" and manifest.kind == "full" and manifest.from_lsn == 0
    assert manifest.backup_object.recipients == [gpg_keys.fingerprint]
    assert manifest.gtid and manifest.gtid != after, (
        "the GTID set is the server's after the copy, not the copy's"
    )
    assert manifest.binlog_file and manifest.binlog_file.startswith("mysql-bin.") and manifest.binlog_position
    stored = catalog.store.get_bytes(manifest.backup_object.key)
    assert b"XBSTCK01" not in stored and b"example.com" not in stored, "the object is not encrypted"

    [deep] = verify(
        VerifyRequest(catalog, mode="deep", private_key=gpg_keys.private_key, passphrase=gpg_keys.passphrase)
    )
    assert deep.ok, deep.problems

    target = tmp_path / "restored" / "data"
    report = restore_with(catalog, gpg_keys, target)
    assert report.chain == [manifest.backup_id] and report.prepare_argv == []
    restored = SandboxServer.on_datadir(target, tmp_path / "sb", server_id=950, family="mysql")
    restored.start()
    with restored:
        assert restored.query("SELECT @@gtid_executed")[0][0].replace("\n", "") == manifest.gtid
        got = table_checksums(restored, [db])
        rows_w = restored.query(f"SELECT COUNT(*) FROM `{db}`.w")[0][0]
        assert restored.query(f"SHOW DATABASES LIKE '{db}_empty'") == [(f"{db}_empty",)]
    got.pop(f"{db}.w")
    assert got == static, "CHECKSUM TABLE differs from the source's at the backup's GTID set"
    # Each row the writer added is one transaction: the copy holds as many as its GTID set says.
    assert rows_w - rows_before == _last_seq(manifest.gtid) - seq_before > 0


def _last_seq(gtid_set: str) -> int:
    """The last transaction number of a one-server GTID set (uuid:1-N)."""
    return int(gtid_set.replace("\n", "").rsplit("-", 1)[-1])


def test_the_policy_never_plans_an_incremental_and_one_asked_for_is_refused(source, tmp_path):
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    staging = tmp_path / "staging"
    staging.mkdir()
    first = run_backup(_request(catalog, source, staging, allow_unencrypted=True))
    second = run_backup(_request(catalog, source, staging, allow_unencrypted=True))
    assert (first.kind, second.kind) == ("full", "full")
    assert "full backups only" in second.decision_reason
    with pytest.raises(BackupError, match="full backups only"):
        run_backup(_request(catalog, source, staging, allow_unencrypted=True, kind="incremental"))
    assert len(catalog.backup_ids()) == 2 and _staged(staging) == []


def test_clone_without_the_plugin_is_refused_naming_install_plugin(source, tmp_path):
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    source.query("UNINSTALL PLUGIN clone")
    try:
        with pytest.raises(EngineError, match=r"INSTALL PLUGIN clone SONAME 'mysql_clone.so'") as err:
            run_backup(_request(catalog, source, tmp_path, allow_unencrypted=True))
    finally:
        source.query(PLUGIN)
    assert "\n" not in str(err.value)
    assert _nothing_stored(catalog) and _staged(tmp_path) == []


def test_an_account_without_backup_admin_is_refused(source, tmp_path):
    user, password = f"nobak{secrets.token_hex(3)}", secrets.token_urlsafe(16)
    source.query(f"CREATE USER '{user}'@'localhost' IDENTIFIED BY %s", (password,))
    source.query(f"GRANT SELECT, RELOAD, PROCESS, REPLICATION CLIENT ON *.* TO '{user}'@'localhost'")
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    req = _request(catalog, source, tmp_path, allow_unencrypted=True)
    req.target = _target(source, user, password)
    with pytest.raises(EngineError, match="lacks BACKUP_ADMIN") as err:
        run_backup(req)
    assert "\n" not in str(err.value)
    assert _nothing_stored(catalog) and _staged(tmp_path) == []


def test_clone_against_mariadb_and_mariabackup_against_mysql_are_refused(source, mariadb_factory, tmp_path):
    maria = mariadb_factory("clone-maria", root_password=secrets.token_urlsafe(16))
    try:
        catalog = Catalog(LocalStore(tmp_path / "m"), "backups", "c1", "db1")
        with pytest.raises(EngineError, match="MariaDB: use flavour mariabackup") as err:
            run_backup(_request(catalog, maria, tmp_path, allow_unencrypted=True))
        assert "\n" not in str(err.value) and _nothing_stored(catalog)
    finally:
        mariadb_factory.discard(maria)
    catalog = Catalog(LocalStore(tmp_path / "s"), "backups", "c1", "db1")
    req = _request(catalog, source, tmp_path, allow_unencrypted=True)
    req.flavour = "mariabackup"
    with pytest.raises(EngineError, match=r"cannot back up MySQL 9\.7") as err:
        run_backup(req)
    assert "\n" not in str(err.value) and _nothing_stored(catalog) and _staged(tmp_path) == []


def test_the_staging_directory_is_removed_after_a_failure(source, tmp_path):
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    staging = tmp_path / "staging"
    staging.mkdir()
    seen: list[Path] = []

    def fail(raw_bytes: int) -> None:
        seen.extend(_staged(staging))
        raise RuntimeError("the upload failed halfway")

    with pytest.raises(RuntimeError, match="halfway"):
        run_backup(_request(catalog, source, staging, allow_unencrypted=True, progress=fail))
    assert seen, "the failure came after the clone was staged"
    assert _staged(staging) == [] and catalog.backup_ids() == []


_KILLED_RUN = """
import json, os, signal, sys
from pathlib import Path
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.storage.local import LocalStore
a = json.loads(sys.stdin.read())
def die(raw_bytes):
    print("staged", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
run_backup(BackupRequest(
    catalog=Catalog(LocalStore(a["store"]), "backups", "c1", "db1"),
    target=MySQLTarget(socket=a["socket"], user="root", password=a["password"]),
    flavour="clone", staging_dir=a["staging"], allow_unencrypted=True, accept_new_server=True, progress=die,
))
"""


def test_a_killed_run_leaves_its_staged_copy_only_until_the_next_run(source, tmp_path):
    staging = tmp_path / "staging"
    staging.mkdir()
    args = {
        "store": str(tmp_path / "store"),
        "socket": str(source.socket),
        "password": source.root_password,
        "staging": str(staging),
    }
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_RUN],
        input=json.dumps(args),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -9 and "staged" in proc.stdout, proc.stderr[-2000:]
    left = _staged(staging)
    assert len(left) == 1 and (left[0] / "data" / "ibdata1").exists(), "the killed run staged no copy"
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    manifest = run_backup(_request(catalog, source, staging, allow_unencrypted=True))
    assert manifest.kind == "full"
    assert _staged(staging) == [], "the killed run's staged copy is still there after the next run"


def test_restore_of_a_clone_needs_no_backup_tool(source, tmp_path, monkeypatch):
    """Fetch + extract with the product's own extractor: no xbstream, mbstream or mysqld is run."""
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    staging = tmp_path / "staging"
    staging.mkdir()
    run_backup(_request(catalog, source, staging, allow_unencrypted=True))
    # Each backup tool on PATH fails if run: the restore must not need any of them.
    broken = tmp_path / "bin"
    broken.mkdir()
    for tool in ("xbstream", "mbstream", "xtrabackup", "mariabackup", "mariadb-backup", "mysqld"):
        (broken / tool).write_text("#!/bin/sh\necho not installed >&2\nexit 127\n")
        (broken / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{broken}:{os.environ['PATH']}")
    target = tmp_path / "data"
    restore(RestoreRequest(catalog=catalog, target_datadir=target))
    assert (target / "ibdata1").is_file() and (target / "mysql.ibd").is_file()
    assert (target / source.db / "orders.ibd").is_file()


@pytest.fixture
def small_filesystem(tmp_path):
    """An 8 MiB tmpfs: a staging place too small for any server's data."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {proc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_too_little_space_for_the_copy_is_refused_before_the_clone(source, small_filesystem, tmp_path):
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    with pytest.raises(
        EngineError, match=r"the clone needs about \d+ MiB in .*which has [0-8] MiB free"
    ) as err:
        run_backup(_request(catalog, source, small_filesystem, allow_unencrypted=True))
    assert "\n" not in str(err.value)
    assert _nothing_stored(catalog) and list(small_filesystem.iterdir()) == []


def test_a_worker_without_mysqld_is_refused_and_its_staged_copy_removed(source, tmp_path):
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    staging = tmp_path / "staging"
    staging.mkdir()
    req = _request(catalog, source, staging, allow_unencrypted=True)
    req.binary = str(tmp_path / "no-such-mysqld")
    with pytest.raises(EngineError, match="no-such-mysqld' not found on this worker") as err:
        run_backup(req)
    assert "\n" not in str(err.value)
    assert _staged(staging) == [] and _nothing_stored(catalog)


_KILLED_MID_CLONE = """
import json, os, signal, sys, threading, time
from pathlib import Path
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.storage.local import LocalStore
a = json.loads(sys.stdin.read())
req = BackupRequest(
    catalog=Catalog(LocalStore(a["store"]), "backups", "c1", "db1"),
    target=MySQLTarget(socket=a["socket"], user="root", password=a["password"]),
    flavour="clone", staging_dir=a["staging"], allow_unencrypted=True, accept_new_server=True,
)
threading.Thread(target=run_backup, args=(req,), daemon=True).start()
deadline = time.monotonic() + 120
while not list(Path(a["staging"]).glob("xbp-clone-*/data")) and time.monotonic() < deadline:
    time.sleep(0.02)
print("cloning", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _clone_state(server: SandboxServer) -> str:
    rows = server.query("SELECT STATE FROM performance_schema.clone_status")
    return rows[-1][0] if rows else ""


def test_a_run_killed_during_the_clone_has_its_clone_stopped_and_removed_by_the_next(source, tmp_path):
    staging = tmp_path / "staging"
    staging.mkdir()
    args = {
        "store": str(tmp_path / "store"),
        "socket": str(source.socket),
        "password": source.root_password,
        "staging": str(staging),
    }
    source.query("SET GLOBAL clone_max_data_bandwidth = 1")  # MiB/s: the clone takes a minute or more
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _KILLED_MID_CLONE],
            input=json.dumps(args),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == -9 and "cloning" in proc.stdout, proc.stderr[-2000:]
        assert _clone_state(source) == "In Progress", "the server did not go on cloning for the dead run"
    finally:
        source.query("SET GLOBAL clone_max_data_bandwidth = 0")
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    manifest = run_backup(_request(catalog, source, staging, allow_unencrypted=True))
    assert manifest.kind == "full" and _clone_state(source) == "Completed"
    assert _staged(staging) == [], "the killed run's clone directory is still there after the next run"


def test_backup_admin_given_by_a_default_role_is_enough(source, tmp_path):
    user, password, role = (
        f"viarole{secrets.token_hex(3)}",
        secrets.token_urlsafe(16),
        f"r{secrets.token_hex(3)}",
    )
    source.execute_script(
        f"CREATE ROLE '{role}'; GRANT BACKUP_ADMIN ON *.* TO '{role}';"
        f"CREATE USER '{user}'@'localhost' IDENTIFIED BY '{password}';"
        f"GRANT SELECT, RELOAD, PROCESS, REPLICATION CLIENT ON *.* TO '{user}'@'localhost';"
        f"GRANT '{role}' TO '{user}'@'localhost'; SET DEFAULT ROLE '{role}' TO '{user}'@'localhost';"
    )
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    req = _request(catalog, source, tmp_path, allow_unencrypted=True)
    req.target = _target(source, user, password)
    manifest = run_backup(req)
    assert manifest.engine_flavour == "clone" and manifest.gtid
