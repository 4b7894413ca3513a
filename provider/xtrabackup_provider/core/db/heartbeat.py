"""What a backup writes into the server it backs up: one row per backup, never in the binlog.

The row (`xtrabackup_provider_local.heartbeat`: backup id, a random lineage token, the time) is
written right before the backup starts, so it is in the backup's data. It serves twice:
  - the restore test's canary: the restored copy must hold the row of its backup;
  - the lineage of the data: the next incremental is taken only if the server still holds its
    parent's row with the parent's token (core/backup/lineage.py). A datadir replaced by another
    server's data, or restored from an older backup, does not have it.

The session turns binary logging off (`SET SESSION sql_log_bin=0`) and checks that it is off
before the first write, so the row creates no transaction in the binlog: on a GTID replica a row
of its own (with its own server_id) is an errant transaction that stops replication under
gtid_strict_mode at the source's next write and breaks failover. The schema is host-local (the
source has its own, with other rows), so pt-table-checksum always ignores it
(core/db/checksum.py). An account that may not turn the binlog off (it needs BINLOG ADMIN or
SUPER) or may not write under read_only (READ_ONLY ADMIN) gets no row: the backup goes on without
a canary and says so; nothing is ever retried with logging on.

`heartbeat_target` (the source's connection, when a replica is backed up) writes the canary on the
source instead, with logging on so that it replicates (the source's own GTID), and waits until the
replica applied it: proof that the replica was current when its backup started.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .dialect import dialect_of
from .server import MySQLTarget, ServerError, connect, connection, dialect_on, query

if TYPE_CHECKING:
    from .session import Session

log = logging.getLogger(__name__)

LOCAL_SCHEMA = "xtrabackup_provider_local"
HEARTBEAT_TABLE = (LOCAL_SCHEMA, "heartbeat")  # host-local, unlogged: the default canary
SOURCE_HEARTBEAT_TABLE = ("xtrabackup_provider", "heartbeat")  # written on a source, replicated

# Errors that mean "this account may not write unlogged here": no canary, never a logged retry.
_CANNOT_WRITE_UNLOGGED = {
    1044: "the account has no privileges on the schema",
    1142: "the account may not create or write the table",
    1227: "the account may not turn the binlog off (grant BINLOG ADMIN, or SUPER)",
    1290: "the server runs with read_only and the account may not write there (grant READ_ONLY ADMIN)",
    1836: "the server runs with read_only and the account may not write there (grant READ_ONLY ADMIN)",
}


class ErrantWriteError(ServerError):
    """A write meant to stay out of the binlog reached it: the message says what to check."""


@dataclass(frozen=True)
class Planted:
    table: str | None  # "schema.table" holding the row, None when nothing could be written
    token: str | None  # the lineage token in the row
    skipped: str = ""  # why there is no row


def plant(target: MySQLTarget | Session, backup_id: str) -> Planted:
    """Write this backup's row without logging it; Planted(None, ...) if the account may not.
    A session keeps sql_log_bin off afterwards: the verb's later statements only read."""
    schema, table = HEARTBEAT_TABLE
    token = secrets.token_hex(16)
    with connection(target) as conn:
        cur = conn.cursor()
        mariadb = dialect_on(target, conn).is_mariadb
        last_gtid = (
            "SELECT @@session.sql_log_bin, @@last_gtid" if mariadb else "SELECT @@session.sql_log_bin, ''"
        )
        try:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(last_gtid)
            logged, before = cur.fetchone()
            if int(logged) != 0:
                return Planted(None, None, "the session could not turn the binlog off (sql_log_bin stays 1)")
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{schema}`")
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS `{schema}`.`{table}` (backup_id VARCHAR(64) PRIMARY KEY,"
                " lineage_token CHAR(32) NULL, created_at DATETIME(6) NOT NULL) ENGINE=InnoDB"
            )
            cur.execute(
                f"REPLACE INTO `{schema}`.`{table}` (backup_id, lineage_token, created_at)"
                " VALUES (%s, %s, UTC_TIMESTAMP(6))",
                (backup_id, token),
            )
        except Exception as exc:
            code = _error_code(exc)
            if code in _CANNOT_WRITE_UNLOGGED:
                return Planted(None, None, f"{_CANNOT_WRITE_UNLOGGED[code]}: {exc}")
            raise
        cur.execute(last_gtid)
        _check_unlogged(before or "", cur.fetchone()[1] or "", target)
        return Planted(f"{schema}.{table}", token)


def _check_unlogged(before: str, after: str, target: MySQLTarget | Session) -> None:
    """MariaDB's @@last_gtid is the GTID of the last transaction this session binlogged (MySQL has
    none: '' both times). The global positions move with every replicated transaction, so this
    session's own is what tells whether the row reached the binlog."""
    if after != before:
        raise ErrantWriteError(
            f"the heartbeat row written on {target.address} with sql_log_bin=0 reached the binlog as GTID "
            f"{after}: on a replica this is an errant transaction. Check for a proxy or plugin that resets "
            "session variables, and repair the replica's GTID position before its source writes again"
        )


def _error_code(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def lineage_token(target: MySQLTarget | Session, backup_id: str) -> str | None:
    """The token of `backup_id`'s row, or None when the server has no such row (or no table)."""
    schema, table = HEARTBEAT_TABLE
    try:
        rows = query(
            target, f"SELECT lineage_token FROM `{schema}`.`{table}` WHERE backup_id = %s", (backup_id,)
        )
    except ServerError:
        raise
    except Exception as exc:  # noqa: BLE001 - no table (1146) or no schema (1049): no row
        if _error_code(exc) in (1146, 1049, 1054):
            return None
        raise ServerError(f"cannot read the lineage row of {backup_id} on {target.address}: {exc}") from exc
    return str(rows[0][0]) if rows and rows[0][0] else None


def write_source_heartbeat(source: MySQLTarget, backup_id: str) -> None:
    """The canary on a replica's *source*, logged so that it replicates. Refused (ServerError) when
    that server is itself a replica or read_only: a logged write there would be errant."""
    schema, table = SOURCE_HEARTBEAT_TABLE
    conn = connect(source)
    try:
        cur = conn.cursor()
        cur.execute("SELECT @@read_only")
        read_only = int(cur.fetchone()[0])
        try:
            cur.execute(dialect_of(conn).all_replicas_status)
            replicating = bool(cur.fetchall())
        except Exception:  # noqa: BLE001 - no privilege to tell: treat as "could be a replica"
            replicating = True
        if read_only or replicating:
            raise ServerError(
                f"heartbeat_conn_id names {source.address}, which is "
                f"{'read_only' if read_only else 'a replica (or its role cannot be read)'}: a logged "
                "canary there would be an errant transaction; point it at the source"
            )
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{schema}`")
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS `{schema}`.`{table}` (backup_id VARCHAR(64) PRIMARY KEY,"
            " created_at DATETIME(6) NOT NULL) ENGINE=InnoDB"
        )
        cur.execute(f"REPLACE INTO `{schema}`.`{table}` VALUES (%s, UTC_TIMESTAMP(6))", (backup_id,))
    finally:
        conn.close()


def wait_for_heartbeat(target: MySQLTarget | Session, backup_id: str, timeout: float) -> bool:
    """Wait until a replica has applied the heartbeat row written on its source."""
    schema, table = SOURCE_HEARTBEAT_TABLE
    deadline = time.monotonic() + timeout
    while True:
        try:
            if query(target, f"SELECT 1 FROM `{schema}`.`{table}` WHERE backup_id = %s", (backup_id,)):
                return True
        except ServerError:
            raise
        except Exception:  # noqa: BLE001 - the table itself may not have replicated yet
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
