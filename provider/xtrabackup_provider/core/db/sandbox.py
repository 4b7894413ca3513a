"""Throwaway MariaDB and MySQL servers on a private directory (restore tests, the demo and the test
suite).

Airflow-free. A :class:`SandboxServer` owns one ``mariadbd`` (``family="mysql"``: ``mysqld``) child
process started on a datadir;
everything else it creates (socket, pid file, error log, client option files) lives in ``basedir``.
Secrets never appear in any argv: passwords go over the connection or into 0600 option files.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import shutil
import signal
import socket as _socket
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import MySQLdb

from ..common import children
from .server import MySQLTarget

# sun_path is 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107
_ERROR_LOG_TAIL_LINES = 40
# Errors that mean "the server answered": it is up even if these credentials are not accepted.
_ER_ACCESS_DENIED = (1044, 1045, 1698)
_ROOT_HOSTS = ("localhost", "127.0.0.1", "::1")
_running: set[SandboxServer] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, below the kernel's ephemeral range: a
    port the kernel hands out (bind to 0) is also what it gives the next outgoing connection, so on
    a busy host it can be taken before the server binds it (CI saw "Address already in use")."""
    low = _ephemeral_low()
    for _ in range(64):
        port = random.randrange(max(low - 12_000, 1024), low)
        with _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM) as s:  # all taken: the kernel's pick
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default: 32768)."""
    try:
        return max(int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]), 2048)
    except (OSError, ValueError, IndexError):
        return 32768


SANDBOX_REDO_BYTES = 48 * 1024 * 1024  # every sandbox's redo log (a restored datadir gets one of this size)


class SandboxError(RuntimeError):
    """A sandbox server failed; the message names the datadir and ends with the error log tail."""

    def __init__(self, message: str, datadir: Path, error_log: Path | None = None):
        self.datadir = datadir
        text = f"{message} (datadir {datadir})"
        if error_log is not None:
            text += f"\n--- tail of {error_log} ---\n{_tail(error_log)}"
        super().__init__(text)


def _tail(path: Path, lines: int = _ERROR_LOG_TAIL_LINES) -> str:
    try:
        data = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"<cannot read error log: {exc}>"
    return "\n".join(data[-lines:]) or "<empty>"


def _quote_option_value(value: str) -> str:
    """Quote a value for a MySQL/MariaDB option file (``#`` and spaces stay literal)."""
    if "\n" in value or "\r" in value:
        raise ValueError("option file values cannot contain newlines")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _write_private(path: Path, text: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(text)
    return path


def quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass(eq=False)
class SandboxServer:
    """One throwaway ``mariadbd`` on ``datadir``, with socket, pid file and error log in ``basedir``."""

    basedir: Path
    datadir: Path
    port: int
    server_id: int
    root_password: str | None = field(default=None, repr=False)
    # Restore sandboxes: no authentication, and therefore no networking (socket only).
    skip_grant_tables: bool = False
    log_bin: bool = True
    extra_args: list[str] = field(default_factory=list)
    mariadbd: str = "mariadbd"  # the server program (mysqld for family "mysql")
    family: str = "mariadb"  # "mariadb" or "mysql": the server's options and its client program
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.family not in ("mariadb", "mysql"):
            raise ValueError(f"family must be mariadb or mysql, not {self.family!r}")
        if self.family == "mysql" and self.mariadbd == "mariadbd":
            self.mariadbd = "mysqld"
        self.basedir = Path(self.basedir).absolute()
        self.datadir = Path(self.datadir).absolute()
        if len(os.fsencode(self.socket)) >= MAX_SOCKET_PATH:
            raise SandboxError(
                f"unix socket path {self.socket} is too long (max {MAX_SOCKET_PATH - 1} bytes);"
                " use a shorter basedir",
                self.datadir,
            )

    # -- paths ---------------------------------------------------------------------------------
    @property
    def socket(self) -> Path:
        return self.basedir / "mysqld.sock"

    @property
    def tmpdir(self) -> Path:
        return self.basedir / "tmp"

    @property
    def error_log(self) -> Path:
        return self.basedir / "error.log"

    @property
    def pid_file(self) -> Path:
        return self.basedir / "mysqld.pid"

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        basedir: Path,
        *,
        server_id: int,
        port: int | None = None,
        root_password: str | None = None,
        install_db: str | None = None,
        **kw: Any,
    ) -> SandboxServer:
        """Initialize a new datadir (``basedir/data`` unless ``datadir=`` is given), start the server
        and set the root password if one is given. Returns the running server."""
        basedir = Path(basedir).absolute()
        datadir = Path(kw.pop("datadir", basedir / "data")).absolute()
        server = cls(basedir, datadir, port or free_port(), server_id, **kw)
        basedir.mkdir(parents=True, exist_ok=True)
        server.tmpdir.mkdir(exist_ok=True)
        argv = server.install_args(install_db)
        proc = children.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SandboxError(
                f"{argv[0]} exited {proc.returncode}: {children.summarize_stderr(proc.stderr or proc.stdout)}",
                datadir,
                server.error_log if server.family == "mysql" else None,
            )
        server.start()
        if root_password:
            try:
                server.set_root_password(root_password)
            except BaseException:
                server.stop()
                raise
        return server

    @classmethod
    def on_datadir(
        cls,
        datadir: Path,
        basedir: Path,
        *,
        server_id: int,
        port: int | None = None,
        skip_grant_tables: bool = True,
        **kw: Any,
    ) -> SandboxServer:
        """A server for an existing (e.g. restored) datadir. Does not initialize and does not start."""
        Path(basedir).mkdir(parents=True, exist_ok=True)
        return cls(
            Path(basedir),
            Path(datadir),
            port or free_port(),
            server_id,
            skip_grant_tables=skip_grant_tables,
            **kw,
        )

    def install_args(self, install_db: str | None = None) -> list[str]:
        """The argv that initializes an empty datadir: mariadb-install-db, or mysqld --initialize."""
        if self.family == "mysql":
            return [
                install_db or self.mariadbd,
                "--no-defaults",
                "--initialize-insecure",  # root@localhost without a password: set_root_password follows
                f"--datadir={self.datadir}",
                f"--tmpdir={self.tmpdir}",
                f"--log-error={self.error_log}",
                "--user=root",
                f"--innodb-redo-log-capacity={2 * SANDBOX_REDO_BYTES}",
            ]
        return [
            install_db or "mariadb-install-db",
            "--no-defaults",
            f"--datadir={self.datadir}",
            # A private tmpdir: many servers sharing /tmp collided on temporary table names.
            f"--tmpdir={self.tmpdir}",
            "--user=root",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            # Same redo size as start() so the first start does not resize the log.
            f"--innodb-log-file-size={SANDBOX_REDO_BYTES}",
        ]

    # -- process control -----------------------------------------------------------------------
    def server_args(self) -> list[str]:
        """The full ``mariadbd`` / ``mysqld`` argv (never holds a secret)."""
        args = [
            self.mariadbd,
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--socket={self.socket}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            "--user=root",
            f"--server-id={self.server_id}",
            f"--pid-file={self.pid_file}",
            f"--log-error={self.error_log}",
            "--skip-name-resolve",
            # Host-independent relay log names so a copied datadir still finds them.
            "--relay-log=relay-bin",
            "--innodb-buffer-pool-size=64M",
            f"--tmpdir={self.tmpdir}",
        ]
        args += self._mysqld_args() if self.family == "mysql" else self._mariadbd_args()
        return args + list(self.extra_args)

    def _mariadbd_args(self) -> list[str]:
        args = [f"--innodb-log-file-size={SANDBOX_REDO_BYTES}"]
        if self.log_bin:
            args += [
                "--log-bin=mysql-bin",
                "--log-slave-updates",
                "--binlog-format=ROW",
                "--gtid-strict-mode=1",
            ]
        if self.skip_grant_tables:
            # Restored data is untrusted: no auth means no TCP, and file import/export is
            # confined to a private directory (no INTO OUTFILE into the host's filesystem).
            args += ["--skip-grant-tables", "--skip-networking", f"--secure-file-priv={self.tmpdir}"]
        return args

    def _mysqld_args(self) -> list[str]:
        args = [
            f"--innodb-redo-log-capacity={2 * SANDBOX_REDO_BYTES}",
            "--mysqlx=OFF",  # no second listener on a fixed port
            f"--secure-file-priv={self.tmpdir}",
            "--gtid-mode=ON",
            "--enforce-gtid-consistency=ON",
        ]
        # MySQL logs binlogs by default: off unless asked for.
        args += ["--log-bin=mysql-bin", "--log-replica-updates"] if self.log_bin else ["--skip-log-bin"]
        if self.skip_grant_tables:
            args.append("--skip-grant-tables")  # MySQL 8+ then listens on the socket only
        return args

    def start(self, timeout: float = 90) -> None:
        """Start the server and wait until it accepts a connection."""
        if self.running:
            return
        self.basedir.mkdir(parents=True, exist_ok=True)
        self.tmpdir.mkdir(exist_ok=True)
        if not self.datadir.is_dir():
            raise SandboxError("datadir does not exist", self.datadir)
        with open(self.error_log, "ab") as log:
            # stdout/stderr go to the error log too: early failures are written before --log-error opens.
            self._proc = children.popen(
                self.server_args(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        _running.add(self)
        deadline = time.monotonic() + timeout
        while True:
            rc = self._proc.poll()
            if rc is not None:
                self._proc = None
                _running.discard(self)
                raise SandboxError(
                    f"mariadbd exited with code {rc} during startup", self.datadir, self.error_log
                )
            if self.socket.exists() and self._ready():
                return
            if time.monotonic() > deadline:
                self.stop(timeout=10)
                raise SandboxError(f"mariadbd not ready after {timeout:.0f}s", self.datadir, self.error_log)
            time.sleep(0.05)

    def _ready(self) -> bool:
        try:
            self.connect().close()
        except MySQLdb.OperationalError as exc:
            return bool(exc.args) and exc.args[0] in _ER_ACCESS_DENIED
        return True

    def stop(self, timeout: float = 60) -> None:
        """Clean shutdown (SIGTERM), SIGKILL after ``timeout``. Idempotent."""
        proc, self._proc = self._proc, None
        _running.discard(self)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        """SIGKILL the server (crash simulation). Idempotent."""
        proc, self._proc = self._proc, None
        _running.discard(self)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def destroy(self) -> None:
        """Stop the server and remove ``basedir`` (a datadir outside basedir is left alone)."""
        self.stop()
        shutil.rmtree(self.basedir, ignore_errors=True)

    def __enter__(self) -> SandboxServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- clients -------------------------------------------------------------------------------
    def connect(self, database: str | None = None) -> Any:
        """A MySQLdb connection over the unix socket as root, autocommit on."""
        kwargs: dict[str, Any] = {
            "unix_socket": str(self.socket),
            "user": "root",
            "charset": "utf8mb4",
            "autocommit": True,
            "connect_timeout": 5,
        }
        if self.root_password:
            kwargs["passwd"] = self.root_password
        if database:
            kwargs["db"] = database
        return MySQLdb.connect(**kwargs)

    def query(self, sql: str, args: Any = None, database: str | None = None) -> list[tuple[Any, ...]]:
        conn = self.connect(database)
        try:
            cur = conn.cursor()
            cur.execute(sql, args)
            return list(cur.fetchall() or ())
        finally:
            conn.close()

    def execute_script(self, sql: str, database: str | None = None) -> None:
        """Run many statements through the ``mariadb`` client (stdin); raise with its stderr on failure."""
        defaults = self.write_client_defaults(self.basedir / "client.cnf")
        argv = ["mysql" if self.family == "mysql" else "mariadb", f"--defaults-file={defaults}", "--batch"]
        if database:
            argv.append(f"--database={database}")
        proc = children.run(argv, input=sql, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SandboxError(
                f"{argv[0]} client exited {proc.returncode}: {children.summarize_stderr(proc.stderr)}",
                self.datadir,
            )

    def write_client_defaults(self, path: Path) -> Path:
        """A 0600 ``[client]`` option file (user, password, socket, port) for mariadb/mariabackup."""
        lines = ["[client]", "user=root"]
        if self.root_password:
            lines.append(f"password={_quote_option_value(self.root_password)}")
        lines += [f"socket={_quote_option_value(str(self.socket))}", f"port={self.port}", ""]
        return _write_private(Path(path), "\n".join(lines))

    def set_root_password(self, password: str) -> None:
        """Set the password of root@localhost/127.0.0.1/::1, without writing it to the binlog."""
        conn = self.connect()
        try:
            cur = conn.cursor()
            cur.execute("SET SESSION sql_log_bin = 0")
            if self.family == "mysql":  # --initialize-insecure made root@localhost alone
                cur.execute("ALTER USER 'root'@'localhost' IDENTIFIED BY %s", (password,))
                cur.execute("CREATE USER 'root'@'127.0.0.1' IDENTIFIED BY %s", (password,))
                cur.execute("GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")
                self.root_password = password
                return
            # mariadb-install-db also creates root@<hostname>, which --skip-name-resolve ignores:
            # drop it rather than leave a passwordless root behind.
            cur.execute(
                "DELETE FROM mysql.global_priv WHERE user = 'root' AND host NOT IN %s", (_ROOT_HOSTS,)
            )
            cur.execute("FLUSH PRIVILEGES")
            cur.execute("SELECT host FROM mysql.global_priv WHERE user = 'root'")
            for (host,) in cur.fetchall():
                cur.execute("ALTER USER 'root'@%s IDENTIFIED BY %s", (host, password))
        finally:
            conn.close()
        self.root_password = password


def privileged_account(server: SandboxServer, prefix: str = "xbp") -> MySQLTarget:
    """On a --skip-grant-tables sandbox: turn the grant tables on (FLUSH PRIVILEGES from the one
    session it allows, so replayed or replicated GRANT / CREATE USER statements work) and create
    a throwaway all-privileges account with a random password, reachable on the socket only."""
    conn = server.connect()  # --skip-grant-tables: this session has every privilege
    try:
        return grant_tables_on(conn.cursor().execute, server, prefix)
    finally:
        conn.close()


def grant_tables_on(execute: Callable[..., Any], server: SandboxServer, prefix: str) -> MySQLTarget:
    """privileged_account's statements, run by `execute` on the connection the server let in
    without an account (it keeps every privilege after FLUSH PRIVILEGES); the new account."""
    import secrets

    user, password = f"{prefix}_{secrets.token_hex(4)}", secrets.token_urlsafe(24)
    execute("FLUSH PRIVILEGES")  # grants are checked from now on; this session keeps its own
    execute("CREATE USER %s@'localhost' IDENTIFIED BY %s", (user, password))
    execute("GRANT ALL PRIVILEGES ON *.* TO %s@'localhost' WITH GRANT OPTION", (user,))
    return MySQLTarget(host=None, socket=str(server.socket), user=user, password=password)


def table_checksums(server: SandboxServer, databases: Iterable[str]) -> dict[str, int]:
    """``CHECKSUM TABLE`` of every base table in ``databases`` -> ``{"db.table": checksum}``."""
    databases = list(databases)
    if not databases:
        return {}
    placeholders = ", ".join(["%s"] * len(databases))
    tables = server.query(
        "SELECT table_schema, table_name FROM information_schema.tables"
        f" WHERE table_type = 'BASE TABLE' AND table_schema IN ({placeholders})"
        " ORDER BY table_schema, table_name",
        databases,
    )
    result: dict[str, int] = {}
    for schema, table in tables:
        rows = server.query(f"CHECKSUM TABLE {quote_ident(schema)}.{quote_ident(table)}")
        name, checksum = rows[0]
        if checksum is None:
            raise SandboxError(f"CHECKSUM TABLE {name} returned NULL", server.datadir, server.error_log)
        result[f"{schema}.{table}"] = int(checksum)
    return result


def stop_orphans(directory: Path) -> list[int]:
    """SIGKILL the sandbox servers a dead run left running in `directory` (a swept temp dir): they
    run in their own session, so its death does not stop them. A process counts only if its argv
    names the pid file it wrote there. Returns their pids."""
    killed = []
    for pid_file in Path(directory).glob("**/mysqld.pid"):
        try:
            pid = int(pid_file.read_text().split()[0])
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if f"--pid-file={pid_file}".encode() not in argv:
            continue  # not that server any more: the pid was reused
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in killed) and time.monotonic() < deadline:
        time.sleep(0.05)  # its files are removed next
    return killed


@atexit.register
def _stop_all() -> None:
    """Servers run in their own session, so stop any still running when the interpreter exits."""
    for server in list(_running):
        with contextlib.suppress(Exception):
            server.stop(timeout=20)
