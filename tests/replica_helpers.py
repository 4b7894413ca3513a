"""Helpers for tests of replicas built from backups (no fixtures, no Airflow imports): a "new host"
whose server is started the way an init system would (a start command that returns while the
server keeps running), backups whose bytes are altered on purpose, and write load."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.sandbox import SandboxServer, free_port
from xtrabackup_provider.core.db.server import MySQLTarget


@dataclass
class NewHost:
    """A host with an empty datadir and a my.cnf: `start_command` starts mariadbd (family "mysql":
    mysqld) on it in the background (like `systemctl start mariadb`); `stop()` stops that server by
    its pid file."""

    basedir: Path
    server_id: int
    port: int = field(default_factory=free_port)
    family: str = "mariadb"

    def __post_init__(self) -> None:
        self.basedir.mkdir(parents=True, exist_ok=True)
        self.datadir.mkdir(exist_ok=True)
        (self.basedir / "tmp").mkdir(exist_ok=True)
        if self.family == "mysql":
            self.cnf.write_text("\n".join(self._mysql_cnf()))
            return
        lines = [
            "[mysqld]",
            f"datadir={self.datadir}",
            f"socket={self.socket}",
            f"port={self.port}",
            "bind-address=127.0.0.1",
            f"server-id={self.server_id}",
            f"pid-file={self.pid_file}",
            f"log-error={self.basedir / 'error.log'}",
            f"tmpdir={self.basedir / 'tmp'}",
            "user=root",
            "skip-name-resolve",
            "log-bin=mysql-bin",
            "log-slave-updates",
            "binlog-format=ROW",
            "gtid-strict-mode=1",
            "relay-log=relay-bin",
            "read-only=1",
            "innodb-buffer-pool-size=64M",
            "innodb-log-file-size=48M",
            "",
        ]
        self.cnf.write_text("\n".join(lines))

    def _mysql_cnf(self) -> list[str]:
        """MySQL 8.4+ / 9.x: GTIDs on (auto-position), the replica words, no X plugin listener."""
        return [
            "[mysqld]",
            f"datadir={self.datadir}",
            f"socket={self.socket}",
            f"port={self.port}",
            "bind-address=127.0.0.1",
            f"server-id={self.server_id}",
            f"pid-file={self.pid_file}",
            f"log-error={self.basedir / 'error.log'}",
            f"tmpdir={self.basedir / 'tmp'}",
            f"secure-file-priv={self.basedir / 'tmp'}",
            "user=root",
            "skip-name-resolve",
            "mysqlx=OFF",
            "log-bin=mysql-bin",
            "log-replica-updates",
            "gtid-mode=ON",
            "enforce-gtid-consistency=ON",
            "relay-log=relay-bin",
            "read-only=1",
            "innodb-buffer-pool-size=64M",
            "innodb-redo-log-capacity=100M",
            "",
        ]

    @property
    def datadir(self) -> Path:
        return self.basedir / "data"

    @property
    def socket(self) -> Path:
        return self.basedir / "mysqld.sock"

    @property
    def pid_file(self) -> Path:
        return self.basedir / "mysqld.pid"

    @property
    def cnf(self) -> Path:
        return self.basedir / "my.cnf"

    @property
    def start_command(self) -> list[str]:
        program = "mysqld" if self.family == "mysql" else "mariadbd"
        return ["sh", "-c", f"setsid {program} --defaults-file={self.cnf} </dev/null >/dev/null 2>&1 &"]

    def target(self, password: str | None) -> MySQLTarget:
        """root over the socket: the restored data holds the source's root account."""
        return MySQLTarget(socket=str(self.socket), user="root", password=password)

    def server(self, password: str | None) -> SandboxServer:
        """A SandboxServer handle for queries (it does not own the process)."""
        return SandboxServer(
            self.basedir, self.datadir, self.port, self.server_id, root_password=password, family=self.family
        )

    def stop(self, timeout: float = 60) -> None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.basedir, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie until its parent (init) reaps it: gone for our purpose
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return False
    return True


def new_host_dir() -> Path:
    """A short directory (unix socket paths are limited to 107 bytes)."""
    return Path(tempfile.mkdtemp(prefix="xbp-nh-", dir="/tmp"))


class WriteLoad(threading.Thread):
    """INSERTs, UPDATEs and DELETEs on `<db>`.writes until stopped: a source that keeps writing."""

    def __init__(self, server: SandboxServer, db: str, pause: float = 0.002) -> None:
        super().__init__(daemon=True)
        self.server, self.db, self.pause = server, db, pause
        self.stop_event = threading.Event()
        self.count = 0
        self.error: BaseException | None = None
        server.query(
            f"CREATE TABLE IF NOT EXISTS `{db}`.writes (id INT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL,"
            " pad VARCHAR(200) NOT NULL) ENGINE=InnoDB"
        )

    def run(self) -> None:
        try:
            conn = self.server.connect(self.db)
            try:
                cur = conn.cursor()
                while not self.stop_event.is_set():
                    _write(cur, self.count)
                    self.count += 1
                    time.sleep(self.pause)
            finally:
                conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def burst(self, transactions: int) -> None:
        """`transactions` writes right now, each its own transaction (and GTID)."""
        conn = self.server.connect(self.db)
        try:
            cur = conn.cursor()
            for _ in range(transactions):
                _write(cur, self.count)
                self.count += 1
        finally:
            conn.close()

    def __enter__(self) -> WriteLoad:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.join(30)


def _write(cur: Any, n: int) -> None:
    cur.execute("INSERT INTO writes (v, pad) VALUES (%s, REPEAT('x', 1 + %s %% 200))", (n, n))
    if n % 5 == 0:
        cur.execute("UPDATE writes SET v = v + 1 WHERE id = %s", (n // 3 + 1,))
    if n % 11 == 0:
        cur.execute("DELETE FROM writes WHERE id = %s", (n // 2,))


def rewrite_backup(catalog: Catalog, manifest: Manifest, workdir: Path, change: Any) -> Manifest:
    """Re-pack an unencrypted backup with `change(extracted_dir)` applied, and register it under its
    manifest with the new size and sha256: bytes that were bad before they were stored (a bad disk or
    memory on the backup host), so every stored-object check passes and only the data is wrong."""
    obj = manifest.backup_object
    work = workdir / "rewrite"
    extracted = extract_backup(catalog, manifest, work / "x")
    packed = work / "backup.xbstream.zst"
    change(extracted)
    files = sorted(str(p.relative_to(extracted)) for p in extracted.rglob("*") if p.is_file())
    subprocess.run(
        f"cd {extracted} && mbstream -c {' '.join(files)} | zstd -q -c > {packed}",
        shell=True,
        check=True,
        capture_output=True,
    )
    data = packed.read_bytes()
    catalog.store.put_bytes(obj.key, data)
    new_obj = obj.model_copy(update={"size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    rewritten = manifest.model_copy(update={"objects": [new_obj], "stored_bytes": len(data)})
    catalog.write(rewritten)
    shutil.rmtree(work, ignore_errors=True)
    return rewritten


def extract_backup(catalog: Catalog, manifest: Manifest, dest: Path) -> Path:
    """The files of an unencrypted one-stream backup as stored (not prepared), extracted into `dest`."""
    obj = manifest.backup_object
    assert obj.encryption == "none", "only unencrypted backups are extracted here"
    dest.mkdir(parents=True)
    packed = dest.parent / f"{dest.name}.zst"
    packed.write_bytes(catalog.store.get_bytes(obj.key))
    subprocess.run(f"zstd -dc {packed} | mbstream -x -C {dest}", shell=True, check=True, capture_output=True)
    packed.unlink()
    return dest


def backup_tablespace(extracted: Path, db: str, table: str) -> Path:
    """A table's tablespace in an extracted backup: `<t>.ibd`, or `<t>.new` for a table created shortly
    before the backup (mariabackup's marker for DDL it saw, renamed at prepare)."""
    for suffix in (".ibd", ".new"):
        if (path := extracted / db / f"{table}{suffix}").is_file():
            return path
    raise FileNotFoundError(f"no tablespace of {db}.{table} in {extracted}")


def flip_page(path: Path, page: int, offset: int = 3000, page_size: int = 16384) -> None:
    """XOR one byte of one page of an InnoDB file."""
    data = bytearray(path.read_bytes())
    data[page * page_size + offset] ^= 0x5A
    path.write_bytes(bytes(data))


def transplant(source: Catalog, backup_id: str, dest: Catalog) -> Manifest:
    """Copy a backup of one host into another host's catalog under a manifest edited to pass as that
    host's own (host name and object keys rewritten): what a mix-up of hosts or a hand-made copy leaves."""
    manifest = source.get(backup_id)
    objects = []
    for obj in manifest.objects:
        key = dest.object_key(backup_id, obj.key.rsplit("/", 1)[-1])
        dest.store.put_bytes(key, source.store.get_bytes(obj.key))
        objects.append(obj.model_copy(update={"key": key}))
    moved = manifest.model_copy(update={"cluster": dest.cluster, "host": dest.host, "objects": objects})
    dest.write(moved)
    return moved
