"""A server error met during a statement, said in one line: the server, the statement, what the
server said, and the privilege or action it needs.

`connect()` (server.py) gives each connection a cursor that labels a MySQLdb error raised by a
statement with the server's address and the statement's text: the template, without the parameter
values (a password is only ever a parameter). The error itself stays what it was (its class and
`args`), so code that handles some errors (a missing table, no privilege to skip the binlog) still
does; `describe` turns what reaches a caller unhandled (the CLI) into its one line.
"""

from __future__ import annotations

import re
from typing import Any

from ..common.children import hide_credentials

SERVER = "xbp_server"  # the attributes the cursor sets on the error
STATEMENT = "xbp_statement"

_NEEDS = re.compile(r"you need \(at least one of\) the (.+?) privilege", re.I)
_CLOSED = (
    "the server closed the connection (it restarted or shut down, the session was killed, or "
    "wait_timeout / max_allowed_packet was exceeded): check that the server runs and its error log, then run again"
)
# What a statement is for, by its words (the first match): said with it when known.
PURPOSES = [
    (r"^FLUSH BINARY LOGS", "closing the open binlog so that it is shipped"),
    (r"^SHOW (BINARY LOGS|MASTER STATUS|BINARY LOG STATUS|BINLOG EVENTS)", "reading the server's binlogs"),
    (r"xtrabackup_provider(_local)?`?\.`?heartbeat", "the backup's heartbeat row"),
    (r"sql_log_bin", "turning the session's binlog off"),
    (
        r"^(CHANGE (MASTER|REPLICATION SOURCE)|(START|STOP|RESET) (SLAVE|REPLICA))|gtid_slave_pos",
        "setting up replication",
    ),
    (r"^SHOW (ALL )?(SLAVES?|REPLICA) STATUS", "reading the replication status"),
    (r"^SHUTDOWN", "stopping the server"),
    (r"^SHOW GRANTS|mysql\.(user|global_priv)", "reading the grant tables"),
    (r"(DISCARD|IMPORT) TABLESPACE|EXCHANGE PARTITION|FOR EXPORT", "moving a table's tablespace"),
]
# What to do, by error code (MariaDB and MySQL); a missing privilege is said from the message.
ACTIONS = {
    1044: "grant the account privileges on that schema",
    1142: "grant the account that privilege on that table",
    1143: "grant the account that privilege on those columns",
    1370: "grant the account EXECUTE on that routine",
    1205: (
        "another session holds a lock the statement waited for longer than innodb_lock_wait_timeout / "
        "lock_wait_timeout: find it (information_schema.INNODB_TRX, SHOW PROCESSLIST), let it end, then run again"
    ),
    1213: "it deadlocked with another session: run again",
    1317: "its session was interrupted (KILL QUERY, or the server is shutting down): run again",
    1969: "it ran longer than max_statement_time allows: raise it for the account, or run when the server is quieter",
    3024: "it ran longer than max_execution_time allows: raise it for the account, or run when the server is quieter",
    1290: "the server runs with read_only (or another option that forbids it): grant READ_ONLY ADMIN, or use the writable server",
    1836: "the server runs with read_only: grant READ_ONLY ADMIN, or use the writable server",
    1049: "that schema does not exist on this server: check the names in the config",
    1146: "that table does not exist on this server: check the names in the config",
    1021: "the server's disk is full: free space there, then run again",
    1114: "a table is full (or the server's disk): free space there, then run again",
    1053: _CLOSED,
    1927: _CLOSED,
    2006: _CLOSED,
    2013: _CLOSED,
    4031: _CLOSED,
}


def label(exc: BaseException, server: str, statement: Any) -> None:
    """Record on `exc` where it happened, unless an inner statement already did."""
    if getattr(exc, STATEMENT, None) is None:
        setattr(exc, SERVER, server)
        setattr(exc, STATEMENT, shown(statement))


def shown(statement: Any) -> str:
    """The statement as a line: whitespace folded, string literals after PASSWORD / IDENTIFIED BY
    hidden, cut at 120 characters."""
    if isinstance(statement, bytes | bytearray):
        statement = bytes(statement).decode("utf-8", "replace")
    text = hide_credentials(" ".join(str(statement).split()))
    return text if len(text) <= 120 else text[:117] + "..."


def cursor_class(server: str) -> type:
    """A MySQLdb cursor class whose statements label their errors with `server`."""
    import MySQLdb.cursors

    class LabelledCursor(MySQLdb.cursors.Cursor):
        def execute(self, query: Any, args: Any = None) -> Any:
            try:
                return super().execute(query, args)
            except MySQLdb.Error as exc:
                label(exc, server, query)
                raise

        def executemany(self, query: Any, args: Any) -> Any:
            try:
                return super().executemany(query, args)
            except MySQLdb.Error as exc:
                label(exc, server, query)
                raise

        def callproc(self, procname: Any, args: Any = ()) -> Any:
            try:
                return super().callproc(procname, args)
            except MySQLdb.Error as exc:
                label(exc, server, f"CALL {procname}")
                raise

    return LabelledCursor


def is_server_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("MySQLdb")


def describe(exc: BaseException) -> str:
    """One line for a MySQLdb error: `<server>: <statement> failed: <code> <message>; <action>`."""
    args: tuple[Any, ...] = getattr(exc, "args", ())
    code = args[0] if args and isinstance(args[0], int) else None
    message = str(args[1]) if len(args) > 1 else str(exc)
    said = f"{code} {message}" if code is not None else message
    server = getattr(exc, SERVER, None) or "a MySQL/MariaDB server"
    statement = getattr(exc, STATEMENT, None)
    if statement:
        purpose = next((p for words, p in PURPOSES if re.search(words, statement, re.I)), None)
        where = f"{server}: {statement}{f' ({purpose})' if purpose else ''} failed"
    else:
        where = f"{server}: a statement failed"
    return f"{where}: {said}; {action(code, message)}"


def action(code: int | None, message: str) -> str:
    if code == 1227 and (needs := _NEEDS.search(message)):
        privileges = [p.strip() for p in needs.group(1).split(",")]
        which = privileges[0] if len(privileges) == 1 else "one of " + ", ".join(privileges)
        return f"grant the account {which}"
    if code is not None and code in ACTIONS:
        return ACTIONS[code]
    return "see the server's error log, then run again"
