"""XtraBackupHook: a `mysql` connection -> the core's MySQLTarget, plus the tool flavour/binary."""

from __future__ import annotations

__all__ = ["XtraBackupHook"]

from typing import Any

from airflow.providers.mysql.hooks.mysql import MySqlHook

from ..core.binlog.replication import ReplicationSource
from ..core.db.server import MySQLTarget, ServerError, check_charset, client_tls
from ..core.engine.tools import Flavour, ToolVersion, detect_tool


class XtraBackupHook(MySqlHook):
    """Credentials for the backup tools come from a `mysql` connection, read the way the mysql
    provider's MySqlHook reads it (it is one: `get_records`, `run`, `get_conn` work as there).

    Connection fields: host/port (or extra `unix_socket`), login, password. Extras: `ssl` (an
    object with `ca`, `cert`, `key`, `capath`, `cipher`: paths on the worker; or its JSON text),
    `ssl_mode` (DISABLED, PREFERRED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY) and `charset`, which
    core/db/server.py turns into MySQLdb arguments and the 0600 defaults file the tools read (the
    only way the password reaches them). An unknown `ssl` key or mode is refused by name, and so
    is `iam`: the backup tools cannot fetch an AWS token.
    """

    conn_name_attr = "mysql_conn_id"
    default_conn_name = "mysql_default"
    conn_type = "mysql"
    hook_name = "XtraBackup (MySQL connection)"

    def __init__(
        self,
        mysql_conn_id: str = default_conn_name,
        flavour: Flavour = "mariabackup",
        binary: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(mysql_conn_id=mysql_conn_id, **kwargs)
        self.mysql_conn_id = mysql_conn_id
        self.flavour = flavour
        self.binary = binary

    def get_target(self) -> MySQLTarget:
        conn = self.get_connection(self.mysql_conn_id)
        source = f"connection {self.mysql_conn_id!r}"
        extra = conn.extra_dejson
        if extra.get("iam"):
            raise ServerError(
                f"{source}: extra iam (an AWS token as the password) is not supported: the backup tools "
                "read a password from their defaults file; give the connection a password"
            )
        try:
            # MySqlHook's own reading of the extras: ssl (a JSON string from a URI is parsed),
            # ssl_mode, charset, unix_socket.
            config = self._get_conn_config_mysql_client(conn)
        except ValueError as exc:
            raise ServerError(f"{source}: extra ssl is not a JSON object: {exc}") from None
        ssl, ssl_mode = client_tls(config.get("ssl"), config.get("ssl_mode"), source)
        return MySQLTarget(
            host=conn.host or "127.0.0.1",
            port=int(config["port"]),
            socket=config.get("unix_socket") or extra.get("socket"),
            user=conn.login or "root",
            password=conn.password,
            ssl=ssl,
            ssl_mode=ssl_mode,
            charset=check_charset(config.get("charset"), source),
        )

    def get_replication_source(
        self, host: str | None = None, port: int | None = None, ssl: bool = False, label: str = ""
    ) -> ReplicationSource:
        """The connection as a replication account: its login and password, and its host/port as the
        address replicas reach the source at (`host`/`port` given here override them)."""
        conn = self.get_connection(self.mysql_conn_id)
        address = host or conn.host
        if not address:
            raise ValueError(
                f"connection {self.mysql_conn_id!r} has no host: give the address replicas reach the source at"
            )
        return ReplicationSource(
            address, int(port or conn.port or 3306), conn.login or "repl", conn.password, ssl, label=label
        )

    def get_tool(self) -> ToolVersion:
        return detect_tool(self.flavour, self.binary)
