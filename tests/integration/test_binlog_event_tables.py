"""`binlogs events --table` finds a statement by every table it names, on binlogs a real server
wrote: multi-table DROP and RENAME, TRUNCATE without TABLE, multi-table DELETE / UPDATE, ALTER ...
RENAME, CREATE ... LIKE / SELECT, names qualified by the session's current database; a statement
whose tables cannot be told (a SELECT calling a function that writes) is listed whatever the
filter says, marked. The statements and their databases as read here are those `mariadb-binlog`
prints for the same files."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import root_target
from xtrabackup_provider.cli import main as cli_main
from xtrabackup_provider.core.binlog.listing import Transaction, transactions
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.storage.local import LocalStore

# (name, session database, binlog format, statement, tables it must be found by)
STATEMENTS = [
    ("drop", None, "ROW", "DROP TABLE shop.a, shop.b", ["shop.a", "shop.b"]),
    ("truncate", "other", "ROW", "TRUNCATE shop.c", ["shop.c"]),
    (
        "rename",
        None,
        "ROW",
        "RENAME TABLE shop.d TO shop.d2, shop.e TO shop.e2",
        ["shop.d", "shop.e2", "shop.e"],
    ),
    (
        "delete",
        "shop",
        "STATEMENT",
        "DELETE m1, m2 FROM m1 JOIN m2 ON m1.id = m2.id WHERE m1.id < 3",
        ["shop.m1", "shop.m2"],
    ),
    (
        "delete_using",
        "shop",
        "STATEMENT",
        "DELETE FROM m3 USING m3 JOIN other.keep k ON m3.id = k.id",
        ["shop.m3", "other.keep"],
    ),
    (
        "update",
        "shop",
        "STATEMENT",
        "UPDATE u1 JOIN u2 ON u1.id = u2.id SET u1.v = u2.v + 1",
        ["shop.u1", "shop.u2"],
    ),
    (
        "update_rows",
        "shop",
        "ROW",
        "UPDATE u1, u2 SET u1.v = u1.v + 1, u2.v = u2.v + 1",
        ["shop.u1", "shop.u2"],
    ),
    (
        "alter_rename",
        "shop",
        "ROW",
        "ALTER TABLE orig ADD COLUMN n INT, RENAME TO renamed",
        ["shop.orig", "shop.renamed"],
    ),
    ("create_like", "shop", "ROW", "CREATE TABLE liked LIKE src", ["shop.liked", "shop.src"]),
    (
        "create_select",
        "shop",
        "STATEMENT",
        "CREATE TABLE selected SELECT * FROM src",
        ["shop.selected", "shop.src"],
    ),
    ("session_db", "other", "ROW", "DROP TABLE gone", ["other.gone"]),
]
SETUP = """
CREATE DATABASE shop; CREATE DATABASE other;
USE shop;
CREATE TABLE a (id INT PRIMARY KEY); CREATE TABLE b (id INT PRIMARY KEY); CREATE TABLE c (id INT PRIMARY KEY);
CREATE TABLE d (id INT PRIMARY KEY); CREATE TABLE e (id INT PRIMARY KEY);
CREATE TABLE m1 (id INT PRIMARY KEY); CREATE TABLE m2 (id INT PRIMARY KEY); CREATE TABLE m3 (id INT PRIMARY KEY);
CREATE TABLE u1 (id INT PRIMARY KEY, v INT); CREATE TABLE u2 (id INT PRIMARY KEY, v INT);
CREATE TABLE orig (id INT PRIMARY KEY); CREATE TABLE src (id INT PRIMARY KEY, v INT);
CREATE TABLE hidden (id INT);
INSERT INTO c VALUES (1), (2); INSERT INTO m1 VALUES (1), (2), (5); INSERT INTO m2 VALUES (1), (2), (6);
INSERT INTO m3 VALUES (1), (2); INSERT INTO u1 VALUES (1, 1), (2, 2); INSERT INTO u2 VALUES (1, 10), (2, 20);
INSERT INTO src VALUES (1, 1), (2, 2);
CREATE TABLE other.keep (id INT PRIMARY KEY); INSERT INTO other.keep VALUES (1);
CREATE TABLE other.gone (id INT PRIMARY KEY);
"""


@dataclass
class Written:
    server: SandboxServer
    store: Path
    gtids: dict[str, str]  # statement name -> its GTID


@pytest.fixture(scope="module")
def written(mariadb_factory, tmp_path_factory) -> Written:
    server = mariadb_factory("evtables", root_password=secrets.token_urlsafe(12))
    server.query("SET GLOBAL log_bin_trust_function_creators = 1")
    server.execute_script(SETUP)
    server.query(
        "CREATE FUNCTION shop.f() RETURNS INT MODIFIES SQL DATA BEGIN INSERT INTO shop.hidden VALUES (1); RETURN 1; END"
    )
    gtids = {}
    for name, database, fmt, sql, _ in STATEMENTS:
        gtids[name] = _run(server, database, fmt, sql)
    # A SELECT of a function that writes: logged as the SELECT in statement format.
    gtids["function"] = _run(server, "shop", "STATEMENT", "SELECT f()")
    store = tmp_path_factory.mktemp("evtables")
    catalog = Catalog(LocalStore(store), "backups", "c1", "db1")
    ship_binlogs(ShipRequest(catalog=catalog, target=root_target(server), allow_unencrypted=True, flush=True))
    return Written(server, store, gtids)


def _run(server: SandboxServer, database: str | None, fmt: str, sql: str) -> str:
    conn = server.connect(database)
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION binlog_format = %s", (fmt,))
        cur.execute(sql)
        cur.fetchall()
        cur.execute("SELECT @@last_gtid")
        return str(cur.fetchone()[0])
    finally:
        conn.close()


def _events(written: Written, monkeypatch, capsys, *args: str) -> list[dict]:
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    rc = cli_main(
        [
            *("binlogs", "events", "--cluster", "c1", "--host", "db1", "--local-path", str(written.store)),
            "--json",
            *args,
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return [json.loads(line) for line in captured.out.splitlines()]


@pytest.mark.parametrize("name, table", [(n, t) for n, _, _, _, tables in STATEMENTS for t in tables])
def test_a_statement_is_found_by_every_table_it_names(written, monkeypatch, capsys, name, table):
    found = _events(written, monkeypatch, capsys, "--table", table)
    assert written.gtids[name] in [row["gtid"] for row in found], (
        f"{table} does not find the {name} statement"
    )


def test_a_statement_whose_tables_are_unknown_is_listed_whatever_the_filter_says(
    written, monkeypatch, capsys
):
    found = _events(written, monkeypatch, capsys, "--table", "shop.hidden")
    rows = {row["gtid"]: row for row in found}
    assert written.gtids["function"] in rows, "SELECT f() writes shop.hidden through the function"
    row = rows[written.gtids["function"]]
    assert row["tables_parsed"] is False and row["unparsed"][0].startswith("SELECT"), row
    assert written.gtids["drop"] not in rows, "a statement whose tables are known is still filtered"
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    cli_main(
        [
            *("binlogs", "events", "--cluster", "c1", "--host", "db1", "--local-path", str(written.store)),
            *("--schema", "nowhere"),
        ]
    )
    out = capsys.readouterr().out
    assert written.gtids["function"] in out and "TABLES NOT PARSED" in out


_NOT_STATEMENTS = ("BEGIN", "COMMIT", "START TRANSACTION", "DELIMITER")
_TOOL_LINES = ("DELIMITER", "ROLLBACK /* added by mysqlbinlog */", "/*!")  # the tool's own, between files


def _mariadb_binlog_statements(files: list[Path]) -> dict[str, list[tuple[str, str]]]:
    """GTID -> [(database, statement)] as `mariadb-binlog` prints the files: `use` lines set the
    database (printed only when it changes), a statement ends with `/*!*/;`."""
    text = subprocess.run(
        ["mariadb-binlog", "--no-defaults", "--base64-output=decode-rows", *map(str, files)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    out: dict[str, list[tuple[str, str]]] = {}
    database, gtid, lines = "", "", []
    for line in text.splitlines():
        if m := re.match(r"#\d{6} .*\sGTID (\d+-\d+-\d+)", line):
            gtid, lines = m.group(1), []
        elif line.startswith("#"):
            continue
        elif not line.endswith("/*!*/;"):
            lines = [] if line.startswith(_TOOL_LINES) else [*lines, line]
        else:
            chunk = "\n".join([*lines, line.removesuffix("/*!*/;")]).strip()
            lines = []
            if m := re.fullmatch(r"use `((?:[^`]|``)*)`", chunk):
                database = m.group(1).replace("``", "`")
            elif gtid and chunk and not chunk.startswith(("SET ", "/*")) and chunk not in _NOT_STATEMENTS:
                out.setdefault(gtid, []).append((database, chunk))
    return out


def test_the_statements_and_their_databases_are_those_mariadb_binlog_prints(written):
    datadir = Path(written.server.query("SELECT @@datadir")[0][0])
    # the binlogs, not MariaDB 11.8's mysql-bin.NNNNNN.idx beside them
    files = sorted(p for p in datadir.glob("mysql-bin.*") if re.fullmatch(r"mysql-bin\.\d+", p.name))
    theirs = _mariadb_binlog_statements(files)
    ours = {str(t.gtid): t for t in transactions(files) if isinstance(t, Transaction)}
    for name in [*(s[0] for s in STATEMENTS), "function"]:
        gtid = written.gtids[name]
        txn, printed = ours[gtid], theirs.get(gtid, [])
        assert txn.statements == [statement for _, statement in printed], name
        for default, (database, _) in zip(txn.defaults, printed, strict=True):
            assert not default or default == database, name  # without one, the tool prints no `use`
