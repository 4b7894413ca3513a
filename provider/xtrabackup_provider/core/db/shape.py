"""A server's tables as information_schema reports them, and its GTID position: what a backup
records about its source (catalog/shape.py) and what a restore test reads back from the
restored copy. Only information_schema and server variables: no COUNT(*), no table scan, so it
is safe on a production source (InnoDB answers from its statistics; innodb_stats_on_metadata,
off by default, would make it recompute them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..catalog.shape import MAX_SHAPE_TABLES, SourceShape, TableShape
from .server import MySQLTarget, connection

if TYPE_CHECKING:
    from .session import Session

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")

_TABLES_SQL = (
    "SELECT table_schema, table_name, COALESCE(engine, ''), COALESCE(table_rows, 0),"
    " COALESCE(data_length, 0), COALESCE(index_length, 0) FROM information_schema.tables"
    " WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ({})"
    " ORDER BY table_schema, table_name LIMIT {}"
)


def tables_sql() -> str:
    return _TABLES_SQL.format(", ".join(f"'{s}'" for s in SYSTEM_SCHEMAS), MAX_SHAPE_TABLES + 1)


def table_shapes(rows: Iterable[tuple[Any, ...]]) -> list[TableShape]:
    return [
        TableShape(
            schema_name=str(schema),
            table=str(table),
            engine=str(engine),
            rows=max(int(nrows), 0),
            data_bytes=max(int(data), 0),
            index_bytes=max(int(index), 0),
        )
        for schema, table, engine, nrows, data, index in rows
    ]


def read_tables(cursor: Any) -> list[TableShape]:
    """Every base table outside the system schemas (at most MAX_SHAPE_TABLES + 1), by name."""
    cursor.execute(tables_sql())
    return table_shapes(cursor.fetchall())


def read_gtid(cursor: Any) -> str:
    """The GTID position the server reports: MariaDB @@gtid_current_pos (what mariabackup records),
    MySQL @@gtid_executed."""
    cursor.execute("SELECT @@version")
    if "mariadb" in str(cursor.fetchone()[0]).lower():
        cursor.execute("SELECT @@gtid_current_pos")
    else:
        cursor.execute("SELECT @@global.gtid_executed")
    return "".join(str(cursor.fetchone()[0] or "").split())


def server_gtid(target: MySQLTarget | Session) -> str:
    with connection(target) as conn:
        return read_gtid(conn.cursor())


def capture_shape(
    target: MySQLTarget | Session, gtid_before: str, names_before: set[str] | None
) -> SourceShape:
    """The source right after its backup. `names_before` (the tables right before it started):
    a table in only one of the two lists was created or dropped during the backup."""
    with connection(target) as conn:
        cur = conn.cursor()
        gtid_after = read_gtid(cur)
        tables = read_tables(cur)
        stale = stale_statistics(cur, tables[:MAX_SHAPE_TABLES])
    truncated = len(tables) > MAX_SHAPE_TABLES
    tables = tables[:MAX_SHAPE_TABLES]
    changed: list[str] = []
    if names_before is not None and not truncated:
        after = {t.name for t in tables}
        changed = sorted(after ^ names_before)[:MAX_SHAPE_TABLES]
    return SourceShape(
        captured_at=datetime.now(UTC),
        gtid_before=gtid_before,
        gtid_after=gtid_after,
        tables=tables,
        changed_during_backup=changed,
        truncated=truncated,
        stale_statistics=stale,
    )


def stale_statistics(cursor: Any, tables: list[TableShape]) -> list[str] | None:
    """The InnoDB tables whose persistent statistics were computed before the server last started
    (mysql.innodb_table_stats.last_update): since a recalculation, InnoDB moves its row estimate
    with every insert and delete, but a restart reloads the persisted one, which may be from before
    a bulk load or a mass DELETE that the server never recounted. None when mysql.* is not readable."""
    try:
        cursor.execute(
            "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME'"
        )
        uptime = int(cursor.fetchone()[0])
        # Whole seconds on both sides: a recount in the second the server started counts as older
        # (its comparison is skipped), one from the second before it is never taken for newer.
        cursor.execute(
            "SELECT database_name, table_name FROM mysql.innodb_table_stats"
            " WHERE last_update <= NOW() - INTERVAL %s SECOND",
            (uptime - 1,),
        )
        rows = cursor.fetchall()
    except Exception:  # noqa: BLE001 - unknown: the restore test then compares no InnoDB estimate
        return None
    names = {t.name for t in tables if t.engine.lower() == "innodb"}
    # A partition's statistics are under `<table>#P#<partition>`.
    stale = {f"{db}.{_PARTITION.split(str(table))[0]}" for db, table in rows}
    return sorted(stale & names)


_PARTITION = re.compile(r"#[Pp]#")


def table_names(target: MySQLTarget | Session) -> tuple[str, set[str]]:
    """(GTID position, names of the tables) right before a backup starts."""
    with connection(target) as conn:
        cur = conn.cursor()
        return read_gtid(cur), {t.name for t in read_tables(cur)}
