"""The heartbeat canary: one row per backup written before it starts, found by restore tests."""

from __future__ import annotations

from .server import MySQLTarget, ServerError, connect, query

HEARTBEAT_TABLE = ("xtrabackup_provider", "heartbeat")


def write_heartbeat(target: MySQLTarget, backup_id: str) -> None:
    """The canary a restore test looks for: one row per backup, written right before it starts."""
    schema, table = HEARTBEAT_TABLE
    conn = connect(target)
    try:
        cur = conn.cursor()
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{schema}`")
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS `{schema}`.`{table}` (backup_id VARCHAR(64) PRIMARY KEY,"
            " created_at DATETIME(6) NOT NULL) ENGINE=InnoDB"
        )
        cur.execute(f"REPLACE INTO `{schema}`.`{table}` VALUES (%s, UTC_TIMESTAMP(6))", (backup_id,))
    finally:
        conn.close()


def wait_for_heartbeat(target: MySQLTarget, backup_id: str, timeout: float) -> bool:
    """Wait until a replica has applied the heartbeat row written on its source."""
    import time

    schema, table = HEARTBEAT_TABLE
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
