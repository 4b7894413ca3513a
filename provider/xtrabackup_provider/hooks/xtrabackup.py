"""XtraBackupHook: a `mysql` connection -> the core's MySQLTarget, plus the tool flavour/binary."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from ..core.binlog.replication import ReplicationSource
from ..core.db.server import MySQLTarget
from ..core.engine.tools import Flavour, ToolVersion, detect_tool


class XtraBackupHook(BaseHook):
    """Credentials for the backup tools come from a `mysql` connection.

    Connection fields: host/port (or extra `unix_socket`), login, password. The password only
    ever reaches the tools through a 0600 defaults file written by the core.
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
        super().__init__(**kwargs)
        self.mysql_conn_id = mysql_conn_id
        self.flavour = flavour
        self.binary = binary

    def get_target(self) -> MySQLTarget:
        conn = self.get_connection(self.mysql_conn_id)
        extra = conn.extra_dejson
        return MySQLTarget(
            host=conn.host or "127.0.0.1",
            port=int(conn.port or 3306),
            socket=extra.get("unix_socket") or extra.get("socket"),
            user=conn.login or "root",
            password=conn.password,
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
