"""One line for a server error met during a statement (core/db/errors.py): what it shows of the
statement, and what it tells the user to do."""

from __future__ import annotations

import MySQLdb

from xtrabackup_provider.core.db.errors import describe, label, shown


def test_a_literal_password_in_a_statement_is_never_shown():
    text = shown("CHANGE MASTER TO MASTER_USER='repl', MASTER_PASSWORD='s3cr''et'")
    assert "s3cr" not in text and "MASTER_PASSWORD='***'" in text and "MASTER_USER='repl'" in text
    assert "hunter2" not in shown("ALTER USER x IDENTIFIED BY 'hunter2'")
    assert "hunter2" not in shown(b"SET PASSWORD = 'hunter2'")


def test_a_long_statement_is_one_short_line():
    text = shown("SELECT a,\n       b\n  FROM t WHERE " + "x = 1 AND " * 40)
    assert "\n" not in text and len(text) == 120 and text.startswith("SELECT a, b FROM t")


def test_a_missing_privilege_names_the_ones_that_would_do():
    exc = MySQLdb.OperationalError(
        1227,
        "Access denied; you need (at least one of) the SUPER, BINLOG MONITOR privilege(s) for this operation",
    )
    label(exc, "db1:3306", "SHOW BINARY LOGS")
    line = describe(exc)
    assert line.startswith(
        "db1:3306: SHOW BINARY LOGS (reading the server's binlogs) failed: 1227 Access denied"
    )
    assert line.endswith("grant the account one of SUPER, BINLOG MONITOR")


def test_the_innermost_statement_is_the_one_named():
    exc = MySQLdb.OperationalError(2006, "Server has gone away")
    label(exc, "db1:3306", "SELECT 1")
    label(exc, "db1:3306", "a later caller's statement")
    line = describe(exc)
    assert "SELECT 1 failed: 2006 Server has gone away; the server closed the connection" in line


def test_an_unlabelled_error_still_says_what_to_do():
    line = describe(MySQLdb.OperationalError(1815, "Internal error: something"))
    assert line == (
        "a MySQL/MariaDB server: a statement failed: 1815 Internal error: something; "
        "see the server's error log, then run again"
    )
