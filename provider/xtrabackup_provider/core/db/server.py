"""Server connection details (TLS included), the private 0600 defaults file the tools read, and
server facts."""

from __future__ import annotations

__all__ = ["MySQLTarget"]

import json
import os
import re
import shutil
import socket as socketlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..common.tempdirs import private_dir
from .dialect import Dialect, dialect_for, dialect_of
from .errors import cursor_class

if TYPE_CHECKING:
    from .session import Session


class ServerError(RuntimeError):
    """The database server could not be reached or queried; the message names it."""


# The `ssl` keys of a mysql connection (apache-airflow-providers-mysql passes them to MySQLdb as
# `ssl=`) and the client option each becomes in the defaults file; both client families read these.
SSL_OPTIONS = {
    "ca": "ssl-ca",
    "cert": "ssl-cert",
    "key": "ssl-key",
    "capath": "ssl-capath",
    "cipher": "ssl-cipher",
}
SSL_MODES = ("DISABLED", "PREFERRED", "REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY")
ClientFamily = Literal["mariadb", "mysql"]  # MariaDB's client library, or MySQL 8's (Percona XtraBackup)


def client_tls(ssl: Any, ssl_mode: Any, source: str) -> tuple[dict[str, str], str | None]:
    """A mysql connection's `ssl` (an object, or its JSON text as a URI gives it) and `ssl_mode`,
    checked: unknown keys and modes are refused by name (`source` says where they came from)."""
    if isinstance(ssl, str):
        try:
            ssl = json.loads(ssl) if ssl.strip() else {}
        except ValueError:
            raise ServerError(
                f'{source}: extra ssl is not JSON; give an object like {{"ca": "/etc/mysql/ca.pem"}}'
            ) from None
    ssl = ssl or {}
    if not isinstance(ssl, Mapping):
        raise ServerError(
            f'{source}: extra ssl must be an object like {{"ca": "/etc/mysql/ca.pem"}}, not {ssl!r}'
        )
    unknown = sorted(set(ssl) - set(SSL_OPTIONS))
    if unknown:
        raise ServerError(
            f"{source}: extra ssl has unknown key(s) {', '.join(unknown)}; the known ones are "
            f"{', '.join(sorted(SSL_OPTIONS))}"
        )
    options = {str(k): str(v) for k, v in ssl.items() if v not in (None, "")}
    for key, value in options.items():
        if any(c in value for c in "\n\r"):
            raise ServerError(f"{source}: extra ssl.{key} cannot contain a newline")
    mode = str(ssl_mode).strip().upper() if ssl_mode not in (None, "") else None
    if mode is not None and mode not in SSL_MODES:
        raise ServerError(f"{source}: extra ssl_mode must be one of {', '.join(SSL_MODES)}, not {ssl_mode!r}")
    if mode in ("VERIFY_CA", "VERIFY_IDENTITY") and not ({"ca", "capath"} & set(options)):
        raise ServerError(
            f"{source}: ssl_mode {mode} needs the CA to verify against: extra ssl.ca (or ssl.capath)"
        )
    if mode == "DISABLED" and options:
        raise ServerError(
            f"{source}: ssl_mode DISABLED with ssl options {', '.join(sorted(options))}: drop one"
        )
    return options, mode


def check_charset(charset: Any, source: str) -> str | None:
    if charset in (None, ""):
        return None
    if not re.fullmatch(r"[A-Za-z0-9_]+", str(charset)):
        raise ServerError(f"{source}: extra charset {charset!r} is not a character set name (like utf8mb4)")
    return str(charset)


@dataclass(frozen=True)
class MySQLTarget:
    host: str | None = "127.0.0.1"
    port: int = 3306
    socket: str | None = None
    user: str = "root"
    password: str | None = field(default=None, repr=False)
    defaults_file: str | None = None  # an existing client option file holding the credentials
    # TLS, as a mysql connection's extras give it (client_tls): paths on this worker, no key material.
    ssl: Mapping[str, str] = field(default_factory=dict)
    ssl_mode: str | None = None
    charset: str | None = None  # for the client sessions (MySQLdb, pt-table-checksum); not the physical copy

    @property
    def address(self) -> str:
        if self.socket or self.host:
            return self.socket or f"{self.host}:{self.port}"
        return f"the server named in {self.defaults_file}"

    def connect_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"user": self.user, "connect_timeout": 10, "autocommit": True}
        if self.defaults_file:
            kw.update(read_default_file=self.defaults_file, read_default_group="client")
            kw.pop("user")
        if self.password is not None:
            kw["passwd"] = self.password
        elif not self.defaults_file:
            kw["passwd"] = ""  # an account without one: never the worker's $MYSQL_PWD
        if self.socket:
            kw["unix_socket"] = self.socket
        elif self.host or not self.defaults_file:
            kw.update(host=self.host or "127.0.0.1", port=self.port)
        if self.ssl:
            kw["ssl"] = dict(self.ssl)
        # VERIFY_CA is the CA given in `ssl` alone: both client libraries then verify the chain, and
        # MariaDB's maps the mode itself to a host name check too (VERIFY_IDENTITY).
        if self.ssl_mode and self.ssl_mode != "VERIFY_CA":
            kw["ssl_mode"] = self.ssl_mode
        if self.charset:
            kw["charset"] = self.charset
        return kw

    def tls_lines(self, client: ClientFamily = "mariadb") -> list[str]:
        """The TLS options of a [client] option file, in the spelling of the tool's client library.

        MariaDB's has no ssl-mode: `ssl` asks for TLS, `skip-ssl` refuses it, a CA makes it verify
        the chain, and `ssl-verify-server-cert` adds the host name check (VERIFY_IDENTITY). MySQL
        8's (Percona XtraBackup, mysqlbinlog) takes `ssl-mode` as it is.
        """
        lines = [f"{SSL_OPTIONS[key]}={_ini_value(value)}" for key, value in sorted(self.ssl.items())]
        mode = self.ssl_mode
        if client == "mysql":
            return lines + ([f"ssl-mode={mode}"] if mode else [])
        if mode == "DISABLED":
            return ["skip-ssl"]
        if mode in ("REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY") or (self.ssl and mode is None):
            lines.append("ssl")
        if mode == "VERIFY_IDENTITY":
            lines.append("ssl-verify-server-cert")
        return lines


def _ini_value(value: str, field: str = "ssl option") -> str:
    """`value` quoted for a [client] option file; a line break (which would start options of its
    own) is refused naming the connection's `field`, never showing the value (a password)."""
    if any(c in value for c in "\n\r\0"):
        raise ServerError(
            f"the connection's {field} contains a line break (or NUL), which would add options to the "
            "tools' option file; fix the connection"
        )
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@contextmanager
def defaults_file(target: MySQLTarget, client: ClientFamily = "mariadb") -> Iterator[str]:
    """Yield the path of a 0600 [client] option file for the tools; removed on exit.

    The file lives in a fresh 0700 directory so no other user can even see its name. It holds
    the credentials, the address and the TLS options (`client`: the tool's client library), and
    never a character set: mariadb-binlog refuses `default-character-set` in [client]. A target
    with a defaults file of its own (the CLI's) and no password is given that file as it is.
    """
    if target.defaults_file and target.password is None:
        yield target.defaults_file
        return
    # Named after this process, so the next run removes it if this one is killed before `finally`.
    private = str(private_dir("cred"))
    try:
        path = os.path.join(private, "client.cnf")
        lines = ["[client]", f"user={_ini_value(target.user, 'user')}"]
        if target.password is not None:
            lines.append(f"password={_ini_value(target.password, 'password')}")
        if target.socket:
            lines.append(f"socket={_ini_value(target.socket, 'socket')}")
        else:
            lines += [f"host={_ini_value(target.host or '127.0.0.1', 'host')}", f"port={int(target.port)}"]
        lines += target.tls_lines(client)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        yield path
    finally:
        shutil.rmtree(private, ignore_errors=True)


def connect(target: MySQLTarget) -> Any:
    import MySQLdb

    try:
        # Its statements' errors name this server and the statement (errors.py: one line in the CLI).
        return MySQLdb.connect(**target.connect_kwargs(), cursorclass=cursor_class(target.address))
    except MySQLdb.Error as exc:
        raise ServerError(
            f"cannot connect to MySQL/MariaDB at {target.address} as {target.user}: {exc}"
        ) from exc


@contextmanager
def connection(server: MySQLTarget | Session) -> Iterator[Any]:
    """A connection to `server`: a verb's session's own (session.py), left open, or a new one for
    a MySQLTarget, closed afterwards."""
    if not isinstance(server, MySQLTarget):
        with server.use() as conn:
            yield conn
        return
    conn = connect(server)
    try:
        yield conn
    finally:
        conn.close()


def dialect_on(server: MySQLTarget | Session, conn: Any) -> Dialect:
    """The server's dialect: a session knows it, a bare connection asks (dialect_of)."""
    return dialect_of(conn) if isinstance(server, MySQLTarget) else server.dialect


# Client errors that mean nothing listens at the address: a missing socket, a refused or unroutable
# port, an unknown host. Any other error came from something that answered.
NOTHING_THERE = (2002, 2003, 2005)


def answered(exc: ServerError) -> bool:
    """Whether a failed connect reached a server (an access denied, a dropped handshake)."""
    cause = exc.__cause__
    code = cause.args[0] if cause is not None and cause.args else None
    return code not in NOTHING_THERE


def binlog_status(target: MySQLTarget | Session) -> list[tuple[Any, ...]]:
    """The binlog being written, (File, Position, ...), in the server's own words (SHOW BINARY LOG
    STATUS on MySQL 8.2+, SHOW MASTER STATUS before and on MariaDB); [] with binary logging off."""
    with connection(target) as conn:
        cur = conn.cursor()
        cur.execute(dialect_on(target, conn).binlog_status)
        return list(cur.fetchall())


def query(
    target: MySQLTarget | Session, sql: str, args: tuple[Any, ...] | None = None
) -> list[tuple[Any, ...]]:
    with connection(target) as conn:
        cur = conn.cursor()
        cur.execute(sql, args)
        return list(cur.fetchall())


@dataclass(frozen=True)
class ServerFacts:
    version: str
    server_id: int
    server_uuid: str
    datadir: str
    gtid_binlog_pos: str
    is_mariadb: bool
    port: int = 0
    socket: str = ""
    # MariaDB: @@gtid_current_pos (what mariabackup records as the backup's GTID); MySQL: gtid_executed
    gtid_current: str = ""

    @property
    def dialect(self) -> Dialect:
        """How to speak to this server (core/db/dialect.py)."""
        return dialect_for(self.version)


def tablespace_count(target: MySQLTarget | Session) -> int | None:
    """InnoDB tablespaces of the server (a backup tool keeps each one open); None if it cannot tell."""
    import MySQLdb

    queries = (
        # MariaDB: the data dictionary. INNODB_SYS_TABLESPACES lists only the tablespaces loaded since
        # the server started (252 of 304 after a restart), not all of them.
        "SELECT COUNT(DISTINCT SPACE) FROM information_schema.INNODB_SYS_TABLES WHERE SPACE <> 0",
        "SELECT COUNT(*) FROM information_schema.INNODB_TABLESPACES",  # MySQL 8: its data dictionary
    )
    with connection(target) as conn:
        cur = conn.cursor()
        for sql in queries:
            try:
                cur.execute(sql)
            except MySQLdb.Error:
                continue
            return int(cur.fetchone()[0])
        return None


def server_facts(target: MySQLTarget | Session) -> ServerFacts:
    """The server's facts read now (a session's first ones: Session.facts)."""
    with connection(target) as conn:
        return read_facts(conn.cursor())


def read_facts(cur: Any) -> ServerFacts:
    """The facts through an open connection's cursor."""
    cur.execute("SELECT @@version, @@server_id, @@datadir, @@hostname, @@port, @@socket")
    version, server_id, datadir, hostname, port, socket = cur.fetchone()
    is_mariadb = dialect_for(str(version)).is_mariadb
    if is_mariadb:
        cur.execute("SELECT @@gtid_binlog_pos, @@gtid_current_pos")
        gtid, current = cur.fetchone()
        # MariaDB has no server_uuid: identify the server by where it runs and its id.
        uuid = f"mariadb-{hostname or socketlib.gethostname()}-{port}-{server_id}"
    else:
        cur.execute("SELECT @@server_uuid, @@global.gtid_executed")
        uuid, gtid = cur.fetchone()
        current = gtid
    return ServerFacts(
        str(version),
        int(server_id),
        str(uuid),
        str(datadir),
        str(gtid or ""),
        is_mariadb,
        int(port or 0),
        str(socket or ""),
        str(current or ""),
    )


@dataclass(frozen=True)
class DataPosition:
    """Where the server's data history stands now: what an incremental's parent must be behind."""

    lsn: int | None  # the InnoDB LSN now (None: this account cannot read it)
    gtid: str  # MariaDB: @@gtid_binlog_state (every domain-server_id's last GTID); MySQL: gtid_executed
    gtid_current: str = ""  # MariaDB: @@gtid_current_pos (a replica without a binlog of its own)
    contains: bool | None = None  # MySQL: GTID_SUBSET(<given set>, gtid_executed), computed by the server


def data_position(target: MySQLTarget | Session, gtid_set: str | None = None) -> DataPosition:
    """The server's LSN and GTID history; on MySQL also whether `gtid_set` is contained in it."""
    with connection(target) as conn:
        cur = conn.cursor()
        if dialect_on(target, conn).is_mariadb:
            cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_lsn_current'")
            row = cur.fetchone()
            cur.execute("SELECT @@gtid_binlog_state, @@gtid_current_pos")
            state, current = cur.fetchone()
            return DataPosition(int(row[1]) if row else None, str(state or ""), str(current or ""))
        cur.execute("SELECT @@global.gtid_executed")
        executed = str(cur.fetchone()[0] or "")
        contains = None
        if gtid_set:
            cur.execute("SELECT GTID_SUBSET(%s, @@global.gtid_executed)", (gtid_set,))
            contains = bool(cur.fetchone()[0])
        lsn = None
        try:  # needs BACKUP_ADMIN
            cur.execute("SELECT LOCAL->>'$.innodb.LSN' FROM performance_schema.log_status")
            row = cur.fetchone()
            lsn = int(row[0]) if row and row[0] is not None else None
        except Exception:  # noqa: BLE001 - without the privilege the LSN check is skipped
            lsn = None
        return DataPosition(lsn, executed, contains=contains)
