"""Binlog shipping and the binlog readers on a real MySQL 9.7 with its own mysqlbinlog 9.7 (issue 36
item 2): the dialect's binlog status and client, the GTID sets each shipped binlog holds (checked
against the server's own SHOW BINLOG EVENTS and gtid_executed), `binlogs events` over MySQL's GTID
events, and a binlog client of the wrong family refused by name before anything is shipped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from helpers import cli_capture, unique_name

pytestmark = pytest.mark.mysql

MARIADB_BINLOG = "/usr/bin/mariadb-binlog"  # the host's MariaDB 10.11 client (tests/integration uses it)


def _config(tmp_path: Path, server, **host: object) -> Path:
    defaults = server.write_client_defaults(tmp_path / "client.cnf")
    config = {
        "storage": {"local_path": str(tmp_path / "store")},
        "encryption": {"enabled": False},
        "clusters": [
            {
                "name": "c1",
                "hosts": [{"name": "db1", "flavour": "xtrabackup", "defaults_file": str(defaults), **host}],
            }
        ],
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _history(server) -> str:
    """A CREATE, four INSERTs and a DROP TABLE, in two binlogs; returns the schema."""
    db = unique_name("my")
    server.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v TEXT);"
        f"INSERT INTO {db}.t VALUES (1, 'a'); INSERT INTO {db}.t VALUES (2, 'b'); FLUSH BINARY LOGS;"
        f"INSERT INTO {db}.t VALUES (3, 'c'); INSERT INTO {db}.t VALUES (4, 'd'); DROP TABLE {db}.t;"
        "FLUSH BINARY LOGS;"
    )
    return db


def _server_gtids(server, binlog: str) -> list[str]:
    """The GTIDs of `binlog` as the server itself lists them (SHOW BINLOG EVENTS)."""
    rows = server.query(f"SHOW BINLOG EVENTS IN '{binlog}'")
    return [str(r[5]).split("'")[1] for r in rows if r[2] == "Gtid"]


def test_mysql_binlogs_ship_with_the_mysql_client_and_a_mariadb_client_is_refused_first(
    mysql, tmp_path, capsys
):
    _history(mysql)
    closed = [r[0] for r in mysql.query("SHOW BINARY LOGS")][:-1]
    common = ["--cluster", "c1", "--host", "db1"]

    # MariaDB's client, configured for the host: refused in one line before anything is copied.
    wrong = _config(tmp_path, mysql, binlog_binary=MARIADB_BINLOG)
    rc, out, err = cli_capture(capsys, "binlogs", "ship", "--config", str(wrong), *common)
    assert rc != 0
    line = err.strip()
    assert "\n" not in line, err
    assert f"the binlog client {MARIADB_BINLOG} is MariaDB's" in line and "MySQL 9.7.4" in line, line
    assert "install MySQL's own client (mysqlbinlog 9.7 or newer)" in line and "binlog_binary" in line, line
    store = tmp_path / "store"
    assert not store.exists() or not [p for p in store.rglob("*") if p.is_file()], "something was stored"

    # The family's own client (MySQL's mysqlbinlog first on PATH): both closed binlogs shipped.
    right = _config(tmp_path, mysql, binlog_binary=shutil.which("mysqlbinlog"))
    rc, out, err = cli_capture(capsys, "binlogs", "ship", "--config", str(right), *common)
    assert rc == 0, err
    assert f"shipped {len(closed)} binlog(s) {' '.join(closed)}" in out
    rc, out, err = cli_capture(capsys, "binlogs", "list", "--config", str(right), *common, "--json")
    assert rc == 0, err
    (server,) = json.loads(out)["servers"]
    assert server["server_uuid"] == mysql.query("SELECT @@server_uuid")[0][0]
    assert [b["name"] for b in server["binlogs"]] == closed
    assert all(b["complete"] for b in server["binlogs"])


def _target(server):
    from xtrabackup_provider.core.db.server import MySQLTarget

    return MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)


def test_each_shipped_mysql_binlog_records_the_gtid_set_it_holds(mysql, tmp_path, capsys):
    from xtrabackup_provider.core.binlog.catalog import BinlogError
    from xtrabackup_provider.core.binlog.ship import is_shipped, lag_target
    from xtrabackup_provider.core.catalog.backups import Catalog
    from xtrabackup_provider.core.common.values import GtidSet
    from xtrabackup_provider.core.storage.local import LocalStore

    _history(mysql)
    uuid = mysql.query("SELECT @@server_uuid")[0][0]
    executed = mysql.query("SELECT @@global.gtid_executed")[0][0]
    closed = [r[0] for r in mysql.query("SHOW BINARY LOGS")][:-1]
    config = _config(tmp_path, mysql, binlog_binary=shutil.which("mysqlbinlog"))
    common = ["--config", str(config), "--cluster", "c1", "--host", "db1"]
    rc, _out, err = cli_capture(capsys, "binlogs", "ship", *common)
    assert rc == 0, err

    rc, out, err = cli_capture(capsys, "binlogs", "list", *common, "--json")
    assert rc == 0, err
    rows = {b["name"]: b for b in json.loads(out)["servers"][0]["binlogs"]}
    logged = GtidSet()
    for name in closed:
        # the GTIDs the server lists for the binlog, as one set
        expected = GtidSet.parse(",".join(_server_gtids(mysql, name)))
        assert GtidSet.parse(rows[name]["gtid_set"]) == expected, name
        logged = logged | expected
    assert str(logged) == executed == f"{uuid}:1-7"  # CREATE DATABASE, CREATE, 4 INSERTs, DROP
    rc, out, err = cli_capture(capsys, "binlogs", "list", *common)
    assert rc == 0, err
    assert f"{uuid}:1-4" in out and f"{uuid}:5-7" in out, out  # the table shows each binlog's set

    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    from xtrabackup_provider.core.binlog.catalog import BinlogCatalog

    second = BinlogCatalog(catalog, uuid).read(closed[1])
    assert second.gtid_set_before == f"{uuid}:1-4"  # its Previous_gtids: what the first binlog ended at
    assert is_shipped(catalog, lag_target(_target(mysql), executed))
    mysql.query("CREATE DATABASE IF NOT EXISTS later")
    now = mysql.query("SELECT @@global.gtid_executed")[0][0]
    assert not is_shipped(catalog, lag_target(_target(mysql), now)), "the open binlog's GTID is not shipped"
    with pytest.raises(
        BinlogError, match=r"gtid '0-1-5' is a MariaDB GTID .* is MySQL: give a MySQL GTID set"
    ):
        lag_target(_target(mysql), "0-1-5")


def _events(capsys, common: list[str], *more: str) -> list[dict]:
    rc, out, err = cli_capture(capsys, "binlogs", "events", *common, "--json", *more)
    assert rc == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_binlogs_events_lists_mysql_transactions_with_their_gtids_and_finds_the_drop(mysql, tmp_path, capsys):
    db = _history(mysql)
    uuid = mysql.query("SELECT @@server_uuid")[0][0]
    closed = [r[0] for r in mysql.query("SHOW BINARY LOGS")][:-1]
    config = _config(tmp_path, mysql, binlog_binary=shutil.which("mysqlbinlog"))
    common = ["--config", str(config), "--cluster", "c1", "--host", "db1"]
    assert cli_capture(capsys, "binlogs", "ship", *common)[0] == 0

    listed = _events(capsys, common)
    assert [m["gtid"] for m in listed] == _server_gtids(mysql, closed[0]) + _server_gtids(mysql, closed[1])
    assert [m["kinds"] for m in listed] == [["CREATE"], ["CREATE"], *[["INSERT"]] * 4, ["DROP"]]
    assert all(m["complete"] for m in listed)

    (drop,) = _events(capsys, common, "--kind", "DROP")
    gtid_rows = [r for r in mysql.query(f"SHOW BINLOG EVENTS IN '{closed[1]}'") if r[2] == "Gtid"]
    assert drop["gtid"] == str(gtid_rows[-1][5]).split("'")[1] == f"{uuid}:7"
    assert drop["to_position"] == f"{closed[1]}:{gtid_rows[-1][1]}"  # its GTID event: replay stops before it
    assert drop["to_gtid"] == f"{uuid}:1-6"  # every transaction before it, as a MySQL GTID set
    assert f"DROP TABLE `{db}`.`t`" in drop["summary"]
    inserts = _events(capsys, common, "--table", f"{db}.t", "--kind", "INSERT")
    assert [m["gtid"] for m in inserts] == [f"{uuid}:{n}" for n in range(3, 7)]
    window = _events(capsys, common, "--gtid-from", f"{uuid}:4", "--gtid-to", f"{uuid.upper()}:5")
    assert [m["gtid"] for m in window] == [f"{uuid}:4", f"{uuid}:5"]
    rc, _out, err = cli_capture(capsys, "binlogs", "events", *common, "--gtid-from", f"{uuid}:2-4")
    assert rc == 2 and "--gtid-from" in err and "one GTID per source" in err, err
    rc, out, err = cli_capture(capsys, "binlogs", "events", *common, "--gtid-from", "0-1-5")
    assert rc != 0 and not out and "name MariaDB GTIDs, but the binlogs read are MySQL's" in err, err

    rc, out, err = cli_capture(capsys, "binlogs", "events", *common, "--kind", "DROP")
    assert rc == 0 and f"{uuid}:7" in out and "DROP" in out and "no transaction matches" not in err


def test_a_mysql_binlog_with_transactions_without_gtids_is_an_error_naming_it(mysql, tmp_path, capsys):
    """Transactions written while gtid_mode was not ON carry no GTID (Anonymous_gtid events):
    `binlogs events` names the binlog instead of saying "no transaction matches"."""
    db = unique_name("an")
    mysql.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY);"
        "SET GLOBAL gtid_mode = ON_PERMISSIVE; SET GLOBAL gtid_mode = OFF_PERMISSIVE;"
        f"INSERT INTO {db}.t VALUES (1); DROP TABLE {db}.t;"
    )
    anonymous = mysql.query("SHOW BINARY LOG STATUS")[0][0]
    # (with gtid_mode ON again, the server refuses to send anonymous transactions to mysqlbinlog)
    mysql.execute_script("SET GLOBAL gtid_mode = ON_PERMISSIVE; FLUSH BINARY LOGS;")
    config = _config(tmp_path, mysql, binlog_binary=shutil.which("mysqlbinlog"))
    common = ["--config", str(config), "--cluster", "c1", "--host", "db1"]
    rc, _out, err = cli_capture(capsys, "binlogs", "ship", *common)
    assert rc == 0, err
    rc, out, err = cli_capture(capsys, "binlogs", "events", *common, "--kind", "DROP")
    assert rc != 0
    assert anonymous in err and "without a GTID" in err and "no transaction matches" not in err, err
