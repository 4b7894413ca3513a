"""Reusable test helpers (no fixtures, no Airflow imports): data seeding, known PITR points, waits,
backups, GPG keys, S3 endpoint."""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.sandbox import SandboxServer, free_port, table_checksums
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.pipeline.gpg import GpgHome, generate_key_pair
from xtrabackup_provider.core.restore.chain import RestoreReport, RestoreRequest, restore
from xtrabackup_provider.core.storage.local import LocalStore

# -- waiting ---------------------------------------------------------------------------------------


def wait_for(predicate: Callable[[], Any], timeout: float = 30, interval: float = 0.1, what: str = "") -> Any:
    """Poll ``predicate`` until it returns a truthy value (returned); TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def unique_name(prefix: str = "db") -> str:
    """A short unique identifier usable as a schema or bucket suffix."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


# -- replication -----------------------------------------------------------------------------------


def parse_gtid_pos(pos: str | None) -> dict[int, int]:
    """``"0-101-7,1-101-3"`` -> ``{domain: seq_no}``."""
    result: dict[int, int] = {}
    for part in (pos or "").split(","):
        part = part.strip()
        if part:
            domain, _server, seq = part.split("-")
            result[int(domain)] = int(seq)
    return result


def slave_status(replica: SandboxServer) -> dict[str, Any]:
    """``SHOW SLAVE STATUS`` as a dict (empty when replication is not configured)."""
    conn = replica.connect()
    try:
        cur = conn.cursor()
        cur.execute("SHOW SLAVE STATUS")
        row = cur.fetchone()
        if row is None:
            return {}
        return {col[0]: value for col, value in zip(cur.description, row, strict=True)}
    finally:
        conn.close()


def start_replication(source: SandboxServer, replica: SandboxServer, user: str = "repl") -> None:
    """Create a replication user on ``source`` and make ``replica`` follow it by GTID."""
    password = uuid.uuid4().hex
    conn = source.connect()
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("CREATE USER %s@'127.0.0.1' IDENTIFIED BY %s", (user, password))
        cur.execute("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO %s@'127.0.0.1'", (user,))
    finally:
        conn.close()
    replica.query(
        "CHANGE MASTER TO master_host='127.0.0.1', master_port=%s, master_user=%s, master_password=%s,"
        " master_use_gtid=slave_pos, master_connect_retry=1",
        (source.port, user, password),
    )
    replica.query("START SLAVE")


def deep_pair(factory: Callable[..., SandboxServer], name: str, **compare: Any) -> tuple[Any, Any, Any]:
    """(source, replica, SourceCompare): a source and its caught-up GTID replica (backups are taken of
    the replica), with a replication account and a pt-table-checksum account on the source: what a
    deep restore test of the replica's backups needs. `compare` goes to SourceCompare."""
    import secrets

    from xtrabackup_provider.core.binlog.replication import ReplicationSource
    from xtrabackup_provider.core.restore.replica_compare import SourceCompare

    source = factory(f"{name}-src", root_password=secrets.token_urlsafe(12))
    replica = factory(f"{name}-rep", root_password=secrets.token_urlsafe(12))
    start_replication(source, replica)
    repl, check = uuid.uuid4().hex, uuid.uuid4().hex
    source.execute_script(
        f"CREATE USER xrepl@'127.0.0.1' IDENTIFIED BY '{repl}'; GRANT REPLICATION SLAVE ON *.* TO xrepl@'127.0.0.1';"
        f"CREATE USER xbp_checksum@'127.0.0.1' IDENTIFIED BY '{check}';"
        "GRANT SELECT, PROCESS, SUPER, BINLOG ADMIN, SLAVE MONITOR, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO xbp_checksum@'127.0.0.1';"
        "GRANT ALL ON percona.* TO xbp_checksum@'127.0.0.1';"
    )
    wait_caught_up(source, replica)
    deep = SourceCompare(
        ReplicationSource("127.0.0.1", source.port, "xrepl", repl, connect_retry=1, label=f"{name}/source"),
        MySQLTarget(host="127.0.0.1", port=source.port, user="xbp_checksum", password=check),
        **compare,
    )
    return source, replica, deep


def checksum_pair(
    factory: Callable[..., SandboxServer], name: str
) -> tuple[SandboxServer, SandboxServer, str]:
    """A private source + GTID replica (from ``mariadb_factory``), caught up, and the password of
    ``xbp_checksum``@127.0.0.1: a pt-table-checksum account created on the source with binary
    logging, so the replica has it too (pt reaches replicas with the source's credentials)."""
    source = factory(f"{name}-source", root_password=uuid.uuid4().hex)
    replica = factory(f"{name}-replica", root_password=uuid.uuid4().hex)
    start_replication(source, replica)
    password = uuid.uuid4().hex
    source.query("CREATE USER 'xbp_checksum'@'127.0.0.1' IDENTIFIED BY %s", (password,))
    source.query(
        "GRANT SELECT, PROCESS, SUPER, BINLOG ADMIN, SLAVE MONITOR, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'xbp_checksum'@'127.0.0.1'"
    )
    source.query("GRANT ALL ON percona.* TO 'xbp_checksum'@'127.0.0.1'")
    wait_caught_up(source, replica)
    return source, replica, password


def execute_unlogged(server: SandboxServer, sql: str) -> None:
    """Run ``sql`` with binary logging off: on a replica, a change its source never sees (drift)."""
    conn = server.connect()
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(sql)
    finally:
        conn.close()


def wait_caught_up(source: SandboxServer, replica: SandboxServer, timeout: float = 60) -> str:
    """Wait until the replica has applied everything in the source binlog; returns that GTID position.

    Compares ``@@gtid_binlog_pos`` of the source with ``@@gtid_slave_pos`` of the replica and fails fast
    when the replica's SQL thread stopped with an error.
    """
    deadline = time.monotonic() + timeout
    while True:
        target = source.query("SELECT @@gtid_binlog_pos")[0][0]
        applied = parse_gtid_pos(replica.query("SELECT @@gtid_slave_pos")[0][0])
        if all(applied.get(domain, 0) >= seq for domain, seq in parse_gtid_pos(target).items()):
            return str(target)
        status = slave_status(replica)
        if status.get("Last_SQL_Errno"):
            raise AssertionError(f"replica SQL thread failed: {status.get('Last_SQL_Error')}")
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"replica not caught up after {timeout}s: source {target!r}, replica {applied!r},"
                f" IO={status.get('Slave_IO_Running')} {status.get('Last_IO_Error')!r},"
                f" SQL={status.get('Slave_SQL_Running')}"
            )
        time.sleep(0.05)


def sysbench_argv(
    server: SandboxServer, password: str, db: str, tables: int, command: str, *extra: str
) -> list[str]:
    """sysbench oltp_write_only on `db` as the user `sb` (a throwaway user of the test server:
    sysbench only takes its password on the command line)."""
    return [
        "sysbench",
        "oltp_write_only",
        "--db-driver=mysql",
        f"--mysql-socket={server.socket}",
        "--mysql-user=sb",
        f"--mysql-password={password}",
        f"--mysql-db={db}",
        f"--tables={tables}",
        "--table-size=5000",
        *extra,
        command,
    ]


def replay_until(replica: SandboxServer, gtid: str, timeout: float = 120) -> None:
    """Let the stopped replica apply exactly up to `gtid`, then stop again."""
    replica.query("START SLAVE UNTIL master_gtid_pos = %s", (gtid,))
    wanted = parse_gtid_pos(gtid)
    deadline = time.monotonic() + timeout
    while True:
        status = slave_status(replica)
        if status.get("Last_SQL_Errno"):
            raise AssertionError(f"replica failed: {status.get('Last_SQL_Error')}")
        applied = parse_gtid_pos(replica.query("SELECT @@gtid_slave_pos")[0][0])
        if status.get("Slave_SQL_Running") == "No" and all(applied.get(d, 0) >= s for d, s in wanted.items()):
            assert applied == wanted, f"the replica went past {gtid}: {applied}"
            replica.query("STOP SLAVE")
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"replica did not reach {gtid}: {applied}")
        time.sleep(0.05)


# -- data ------------------------------------------------------------------------------------------


def seed_database(server: SandboxServer, database: str, rows: int = 1000) -> None:
    """Create ``database`` with deterministic data: InnoDB ``customers`` and ``orders``, Aria ``audit``.

    The same arguments give the same CHECKSUM TABLE values on any server.
    """
    server.execute_script(
        f"""
        CREATE DATABASE `{database}`;
        USE `{database}`;
        CREATE TABLE customers (
            id INT PRIMARY KEY, name VARCHAR(64) NOT NULL, email VARCHAR(128), created DATETIME NOT NULL
        ) ENGINE=InnoDB;
        CREATE TABLE orders (
            id BIGINT PRIMARY KEY, customer_id INT NOT NULL, amount DECIMAL(12,2) NOT NULL,
            note TEXT, KEY (customer_id)
        ) ENGINE=InnoDB;
        CREATE TABLE audit (id INT PRIMARY KEY, msg VARCHAR(200)) ENGINE=Aria;
        INSERT INTO customers SELECT seq, CONCAT('customer ', seq), CONCAT('c', seq, '@example.com'),
            '2026-01-01 00:00:00' + INTERVAL seq MINUTE FROM seq_1_to_{max(1, rows // 10)};
        INSERT INTO audit SELECT seq, CONCAT('event ', seq) FROM seq_1_to_{max(1, rows // 100)};
        """
    )
    add_orders(server, database, rows)


def add_orders(server: SandboxServer, database: str, rows: int) -> None:
    """Append ``rows`` deterministic rows to ``orders`` (e.g. between a full and an incremental)."""
    if rows <= 0:
        return
    start = int(server.query(f"SELECT COALESCE(MAX(id), 0) FROM `{database}`.orders")[0][0])
    customers = int(server.query(f"SELECT COUNT(*) FROM `{database}`.customers")[0][0]) or 1
    server.query(
        f"INSERT INTO orders SELECT seq, 1 + seq % {customers}, (seq % 1000) + 0.99,"
        f" REPEAT(CHAR(97 + seq % 26 USING ascii), 1 + seq % 200) FROM seq_{start + 1}_to_{start + rows}",
        database=database,
    )


@dataclass(frozen=True)
class KnownPoint:
    """The source right after one known transaction: a point-in-time restore target to check against."""

    rows: frozenset[int]  # the ids in `<db>`.t
    time: int  # epoch seconds after the transaction's event and before the next write (real clock)
    gtid: str
    position: str  # <binlog file>:<position> just past it


def commit_known(server: SandboxServer, db: str, value: str, conn: Any = None) -> KnownPoint:
    """Insert one row into `<db>`.t (``id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR``) in its own
    transaction (on ``conn`` if given, e.g. a session with its own ``SET TIMESTAMP``), remember the
    state after it, and wait until the clock passes the second after its event, so the next write
    is stamped later (binlog events have one-second resolution). A session whose clock is set back
    stamps every event with that time: target its GTID or position, not its time."""
    own = conn is None
    conn = server.connect() if own else conn
    try:
        cur = conn.cursor()
        cur.execute(f"INSERT INTO `{db}`.t (v) VALUES (%s)", (value,))
        cur.execute("SELECT @@last_gtid, UNIX_TIMESTAMP()")
        gtid, stamped = cur.fetchone()
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    finally:
        if own:
            conn.close()
    rows = frozenset(r[0] for r in server.query(f"SELECT id FROM `{db}`.t"))
    after = math.floor(stamped) + 1
    while time.time() < after + 0.05:
        time.sleep(0.05)
    return KnownPoint(rows, after, str(gtid), f"{file}:{pos}")


def iso_utc(epoch: int) -> str:
    """Epoch seconds as a PITR target time (``2026-01-01T10:00:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


# -- backups ---------------------------------------------------------------------------------------


def root_target(server: SandboxServer) -> MySQLTarget:
    """The server's root account over its socket, as core calls take a database."""
    return MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)


def take_backup(
    server: SandboxServer, catalog: Catalog, keys: GpgKeys, kind: str, parts: int = 1
) -> Manifest:
    """run_backup of ``kind`` encrypted to ``keys`` (a run in the same second as the last one
    waits for the next: backup ids have one-second resolution), in up to ``parts`` parts (the
    test datadir is small: part_min_bytes=0 lets it be split; the default wants 8 GiB a part)."""
    request = BackupRequest(
        catalog=catalog,
        target=root_target(server),
        kind=kind,
        public_keys=[keys.public_key],
        max_parts=parts,
        part_min_bytes=0,
    )
    return run_backup(request)


def clone_backup(server: SandboxServer, catalog: Catalog, staging: Path) -> Manifest:
    """An unencrypted `flavour: clone` backup of a MySQL server (clone plugin installed), staged
    in `staging` (made here)."""
    staging.mkdir(parents=True, exist_ok=True)
    request = BackupRequest(
        catalog=catalog,
        target=root_target(server),
        flavour="clone",
        staging_dir=str(staging),
        allow_unencrypted=True,
        accept_new_server=True,
    )
    return run_backup(request)


def ship_mysql_binlogs(catalog: Catalog, server: SandboxServer) -> Any:
    """A batch `binlogs ship` of a MySQL server's closed binlogs, unencrypted, by MySQL's own
    mysqlbinlog (first on PATH); its ShipReport."""
    import shutil

    from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs

    request = ShipRequest(
        catalog=catalog,
        target=root_target(server),
        allow_unencrypted=True,
        binary=shutil.which("mysqlbinlog"),
    )
    return ship_binlogs(request)


def cli_capture(capsys: Any, *argv: str) -> tuple[int, str, str]:
    """The CLI run in this process: (exit code, stdout, stderr) of these arguments alone."""
    from xtrabackup_provider.cli import main as cli_main

    capsys.readouterr()
    rc = cli_main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def deep_verify(catalog: Catalog, keys: GpgKeys, backup_id: str) -> Any:
    """The VerifyReport of `verify --deep` of one backup, decrypting with `keys`."""
    from xtrabackup_provider.core.restore.verify import VerifyRequest, verify

    [report] = verify(
        VerifyRequest(
            catalog, [backup_id], mode="deep", private_key=keys.private_key, passphrase=keys.passphrase
        )
    )
    return report


def stored_backup(
    catalog: Catalog, bid: str, parent: Manifest | None = None, size: int = 3000, **over: Any
) -> Manifest:
    """A registered backup (manifest_factory's) whose object really is stored: random bytes with
    the size and sha256 its manifest names (no server needed)."""
    import hashlib
    import os

    from manifest_factory import make_manifest

    data = os.urandom(size)
    key = catalog.object_key(bid, "backup.xbstream.zst")
    catalog.store.put_bytes(key, data)
    m = make_manifest(bid, parent=parent, size=len(data), cluster=catalog.cluster, host=catalog.host, **over)
    obj = m.backup_object.model_copy(update={"sha256": hashlib.sha256(data).hexdigest(), "key": key})
    m = Manifest.model_validate(m.model_dump() | {"objects": [obj]})
    catalog.write(m)
    return m


def restore_with(catalog: Catalog, keys: GpgKeys, target: Path, **request: Any) -> RestoreReport:
    """core restore() of the catalog's newest chain (or `backup_id=`) into `target`, decrypting
    with `keys`; other RestoreRequest fields as keywords."""
    return restore(
        RestoreRequest(
            catalog=catalog,
            target_datadir=target,
            private_key=keys.private_key,
            passphrase=keys.passphrase,
            **request,
        )
    )


def restored_checksums(datadir: Path, basedir: Path, dbs: list[str], server_id: int = 900) -> dict[str, int]:
    """Start a sandbox on a restored datadir; return its per-table checksums of `dbs`."""
    with SandboxServer.on_datadir(datadir, basedir, server_id=server_id) as restored:
        restored.start()
        return table_checksums(restored, dbs)


# -- GPG -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpgKeys:
    public_key: str  # ASCII-armored
    private_key: str  # ASCII-armored, protected by the passphrase
    passphrase: str
    fingerprint: str  # primary key fingerprint (usable as a recipient)

    def __repr__(self) -> str:  # keep the secret parts out of test reports
        return f"GpgKeys(fingerprint={self.fingerprint!r})"


def run_gpg(
    home: Path, *args: str, passphrase: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    """Run ``gpg --homedir home --batch``; a passphrase goes on stdin (fd 0), never argv."""
    argv = ["gpg", "--homedir", str(home), "--batch", "--no-tty"]
    if passphrase is not None:
        argv += ["--pinentry-mode", "loopback", "--passphrase-fd", "0"]
    proc = subprocess.run(
        argv + list(args),
        input=passphrase.encode() if passphrase is not None else None,
        stdin=None if passphrase is not None else subprocess.DEVNULL,
        capture_output=True,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"gpg {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode()}")
    return proc


@contextlib.contextmanager
def gpg_home() -> Iterator[Path]:
    """A temporary GNUPGHOME (short path); its gpg-agent is killed and the directory removed after."""
    home = GpgHome()
    try:
        yield home.path
    finally:
        home.close()


def generate_gpg_keys(uid: str, passphrase: str) -> GpgKeys:
    """An ed25519 (sign) + cv25519 (encrypt) key pair protected by ``passphrase``."""
    pair = generate_key_pair(uid, passphrase)
    return GpgKeys(pair.public_key, pair.private_key, passphrase, pair.fingerprint)


# -- S3 --------------------------------------------------------------------------------------------

S3_REGION = "us-east-1"
S3_ACCESS_KEY = "testing"
S3_SECRET_KEY = "testing"


class S3Server:
    """A moto S3 endpoint over real HTTP on 127.0.0.1; ``stop()``/``start()`` for fault tests
    (bucket contents survive a restart: they live in this process)."""

    def __init__(self, port: int | None = None):
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self._server: Any = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        if self._server is None:
            server = ThreadedMotoServer(ip_address=self.host, port=self.port, verbose=False)
            server.start()
            self._server = server

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    def client(self, **kw: Any) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=S3_REGION,
            aws_access_key_id=S3_ACCESS_KEY,
            aws_secret_access_key=S3_SECRET_KEY,
            **kw,
        )

    def make_bucket(self, name: str, object_lock: bool = False, versioning: bool = False) -> str:
        client = self.client()
        if object_lock:
            client.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
        else:
            client.create_bucket(Bucket=name)
        if versioning and not object_lock:  # Object Lock turns versioning on by itself
            client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        return name

    def airflow_connection_json(self) -> str:
        return json.dumps(
            {
                "conn_type": "aws",
                "login": S3_ACCESS_KEY,
                "password": S3_SECRET_KEY,
                "extra": {"endpoint_url": self.endpoint_url, "region_name": S3_REGION},
            }
        )

    def env(self) -> dict[str, str]:
        """Environment for boto3 and Airflow (``aws_test`` connection) to use this endpoint."""
        return {
            "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY,
            "AWS_DEFAULT_REGION": S3_REGION,
            "AIRFLOW_CONN_AWS_TEST": self.airflow_connection_json(),
        }


def process_argv(pid: int) -> list[str]:
    """The argv of a running process (Linux), to check that no secret is visible in it."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")


# -- the CLI, as a DBA runs it -----------------------------------------------------------------------

# Importing the CLI must not import Airflow: it has to work on a host where Airflow is broken.
RUN = (
    "import sys, runpy; sys.argv = ['xtrabackup-provider'] + sys.argv[1:]; "
    "from xtrabackup_provider import cli; rc = cli.main(sys.argv[1:]); "
    "assert 'airflow' not in sys.modules, 'the CLI imported airflow'; sys.exit(rc)"
)


def cli(*args: str, env: dict[str, str] | None = None, **kw: Any) -> subprocess.CompletedProcess[str]:
    """`xtrabackup-provider ARGS` in a new process, with this environment minus Airflow's plus `env`
    (`kw` goes to subprocess.run, e.g. a preexec_fn setting a limit)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    return subprocess.run(
        [sys.executable, "-c", RUN, *args],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        timeout=600,
        **kw,
    )


def is_cli(argv: list[str]) -> bool:
    """Is this the argv of a process that cli() started?"""
    return RUN in argv


# -- hand-made xbstreams ---------------------------------------------------------------------------------


def xbstream(files: list[tuple[str, bytes]]) -> bytes:
    """An xbstream as `mbstream -c` writes it: per file a payload chunk and an end-of-file chunk,
    for any path (a hostile producer's too)."""
    import struct
    import zlib

    out = bytearray()
    for path, data in files:
        name = path.encode()
        head = b"XBSTCK01" + bytes([0])
        out += head + b"P" + struct.pack("<I", len(name)) + name
        out += struct.pack("<QQI", len(data), 0, zlib.crc32(data)) + data
        out += head + b"E" + struct.pack("<I", len(name)) + name
    return bytes(out)


S3_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def retention_apply_keep_last_chain(
    tmp_path: Path, endpoint_url: str, bucket: str
) -> subprocess.CompletedProcess[str]:
    """`retention apply --confirm` as a DBA runs it, for host c1/db1 under prefix backups, keeping
    the last chain (no minimum age)."""
    import yaml

    config = tmp_path / "fleet.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"bucket": bucket, "endpoint_url": endpoint_url, "prefix": "backups"},
                "encryption": {"enabled": False},
                "retention": {"keep_last_chains": 1, "min_age_days": 0},
                "clusters": [{"name": "c1", "hosts": [{"name": "db1"}]}],
            }
        )
    )
    argv = ["retention", "apply", "--config", str(config), "--cluster", "c1", "--host", "db1", "--confirm"]
    return cli(*argv, env=S3_TEST_ENV)


def purge_binlogs_to(server: Any, name: str, timeout: float = 120.0) -> list[str]:
    """PURGE BINARY LOGS TO `name`, again until every older binlog is gone: MariaDB keeps one that
    crash recovery may still need until its binlog checkpoint moves on, late on a loaded machine
    (a purge that removed nothing made a test prove nothing). The names purged, oldest first."""
    older = [str(r[0]) for r in server.query("SHOW BINARY LOGS") if str(r[0]) < name]
    deadline = time.monotonic() + timeout
    while True:
        server.query(f"PURGE BINARY LOGS TO '{name}'")
        left = {str(r[0]) for r in server.query("SHOW BINARY LOGS")}
        if not left.intersection(older) or time.monotonic() > deadline:
            return [n for n in older if n not in left]
        time.sleep(0.5)


class RetentionOnBinlogRead(LocalStore):
    """A directory store that runs `retention apply` of host c1/db1 once (keep the last chain, or
    `policy`) as the first binlog's bytes are read: retention running on another worker while a
    reader (a restore, restore-table, a roll-forward) reads. `ran`: (its plan, what it applied)."""

    def __init__(self, root: Path, policy: Any = None) -> None:
        from xtrabackup_provider.core.retention.model import RetentionPolicy

        super().__init__(root)
        self.policy = policy or RetentionPolicy(keep_last_chains=1, min_age_days=0)
        self.ran: tuple[Any, Any] | None = None

    def read_chunks(self, key: str, chunk_size: int = 4 * 2**20) -> Iterator[bytes]:
        from xtrabackup_provider.core.retention.apply import apply_plan, plan_host

        if self.ran is None and "/binlogs/" in key:
            catalog = Catalog(LocalStore(self.root), "backups", "c1", "db1")
            plan = plan_host(catalog, self.policy)
            self.ran = (plan, apply_plan(catalog, plan, confirm=True))
        return super().read_chunks(key, chunk_size)


def mysql_caught_up(source: Any, replica: Any, timeout: float = 60) -> None:
    """Wait until a MySQL `replica` has executed every GTID its `source` has."""
    from xtrabackup_provider.core.common.values import GtidSet

    def executed(server: Any) -> GtidSet:
        return GtidSet.parse("".join(str(server.query("SELECT @@global.gtid_executed")[0][0]).split()))

    deadline = time.monotonic() + timeout
    while not executed(source) <= executed(replica):
        assert time.monotonic() < deadline, "the replica did not catch up"
        time.sleep(0.2)


def replicate_mysql(source: Any, replica: Any, user: str) -> None:
    """A MySQL `replica` replicates from `source` (auto-positioned, as `user`), with the clone plugin
    for its backups; returns once it has caught up."""
    import secrets

    from xtrabackup_provider.core.db.dialect import dialect_for

    dialect = dialect_for(source.query("SELECT @@version")[0][0])
    password = secrets.token_urlsafe(12)
    source.execute_script(
        f"CREATE USER {user}@'127.0.0.1' IDENTIFIED BY '{password}';"
        f"GRANT REPLICATION SLAVE ON *.* TO {user}@'127.0.0.1';"
    )
    replica.query("INSTALL PLUGIN clone SONAME 'mysql_clone.so'")
    conn = replica.connect()
    try:
        cur = conn.cursor()
        cur.execute("RESET BINARY LOGS AND GTIDS")  # a replica holds no transaction of its own
        for sql, args in dialect.change_source(
            host="127.0.0.1", port=source.port, user=user, password=password, connect_retry=1
        ):
            cur.execute(sql, args)
        cur.execute(dialect.start_replica)
    finally:
        conn.close()
    mysql_caught_up(source, replica)
