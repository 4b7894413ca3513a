"""`promote` on MySQL (issue 36, item 2), on real MySQL 9.7 servers: the old primary writes, a table
is dropped by mistake, more writes follow, binlogs are shipped. Promoted then:

- a replica of the old primary, once it is detached and has applied all it received: refused while
  it still replicates (it keeps replicating) and while it lags (received transactions not applied),
  then promoted: its replication channel gone, writable, the old primary's rows;
- a copy restored to just before the DROP: refused while it holds a transaction of its own (an
  errant one), promoted once restored again: the rows before the DROP, the victim table back,
  writable, its writes under its own server_uuid (no GTID of the old timeline reused).

MySQL's GTIDs name their server (uuid:N), so a new timeline is a new server_uuid: the old primary
itself (or a copy that kept its auto.cnf) is refused by name. The MariaDB scenarios are
tests/integration/test_promote.py.
"""

from __future__ import annotations

import contextlib
import io
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import MySQLdb
import pytest

from helpers import unique_name
from xtrabackup_provider.cli import main as cli_main
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.binlog.timeline import timelines
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.common.values import GtidSet
from xtrabackup_provider.core.db.dialect import dialect_for
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.pitr.mysql_pipe import replay_mysql
from xtrabackup_provider.core.pitr.plan import PitrTarget
from xtrabackup_provider.core.pitr.recover import PitrRequest, fetch_binlogs
from xtrabackup_provider.core.storage.local import LocalStore

pytestmark = pytest.mark.mysql


@dataclass
class Old:
    """The old primary's history: writes, a DROP TABLE, more writes, all shipped."""

    server: SandboxServer
    catalog: Catalog
    store: Path
    db: str
    uuid: str
    before_drop: GtidSet  # gtid_executed just before the DROP
    rows_before_drop: set[int]


def _target(server: SandboxServer) -> MySQLTarget:
    return MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)


def _executed(server: SandboxServer) -> GtidSet:
    return GtidSet.parse(server.query("SELECT @@global.gtid_executed")[0][0])


def _ids(server: SandboxServer, db: str) -> set[int]:
    return {r[0] for r in server.query(f"SELECT id FROM `{db}`.t")}


def _ship(catalog: Catalog, server: SandboxServer):
    return ship_binlogs(
        ShipRequest(
            catalog=catalog,
            target=_target(server),
            allow_unencrypted=True,
            binary=shutil.which("mysqlbinlog"),
            flush=True,
        )
    )


@pytest.fixture(scope="module")
def old(mysql_factory, tmp_path_factory) -> Old:
    server = mysql_factory("prom-old", root_password=secrets.token_urlsafe(12))
    store = tmp_path_factory.mktemp("prom-store")
    catalog = Catalog(LocalStore(store), "backups", "c1", "my1")
    db = unique_name("prom")
    server.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64));"
        f"CREATE TABLE {db}.victim (id INT PRIMARY KEY);"
        f"INSERT INTO {db}.victim VALUES {', '.join(f'({i})' for i in range(1, 51))};"
        f"INSERT INTO {db}.t (v) VALUES {', '.join(['(' + repr('before') + ')'] * 100)};"
        f"FLUSH BINARY LOGS; INSERT INTO {db}.t (v) VALUES ('A'), ('B');"
    )
    before_drop = _executed(server)
    rows = _ids(server, db)
    server.execute_script(
        f"DROP TABLE {db}.victim; INSERT INTO {db}.t (v) VALUES ('after 1'); INSERT INTO {db}.t (v) VALUES ('after 2');"
    )
    _ship(catalog, server)
    uuid = server.query("SELECT @@server_uuid")[0][0]
    try:
        yield Old(server, catalog, store, db, uuid, before_drop, rows)
    finally:
        mysql_factory.discard(server)


def _promote_cli(
    old: Old, server: SandboxServer, tmp_path: Path, *more: str, user: str = "root"
) -> tuple[int, str, str]:
    creds = server.write_client_defaults(tmp_path / f"client-{secrets.token_hex(3)}.cnf")
    if user != "root":  # `<user>`, password `<user>-pw`
        creds.write_text(f"[client]\nuser={user}\npassword={user}-pw\nsocket={server.socket}\n")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli_main(
            [
                "promote",
                *("--cluster", "c1", "--host", "my1", "--local-path", str(old.store)),
                *("--defaults-file", str(creds)),
                *more,
            ]
        )
    return rc, out.getvalue(), err.getvalue()


def _one_line_error(rc: int, err: str) -> str:
    assert rc == 2, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _replica_status(server: SandboxServer) -> dict:
    dialect = dialect_for(server.query("SELECT @@version")[0][0])
    conn = server.connect()
    try:
        cur = conn.cursor(MySQLdb.cursors.DictCursor)
        cur.execute(dialect.replica_status)
        return dialect.status(cur.fetchone())
    finally:
        conn.close()


def _read_only(server: SandboxServer) -> tuple[int, int]:
    row = server.query("SELECT @@global.read_only, @@global.super_read_only")[0]
    return int(row[0]), int(row[1])


def _wait(what: str, done, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


def _write(server: SandboxServer, db: str, value: str) -> GtidSet:
    """One write; the GTIDs it added."""
    before = _executed(server)
    server.query(f"INSERT INTO `{db}`.t (v) VALUES (%s)", (value,))
    return _executed(server) - before


def _unchanged(server: SandboxServer, before: tuple) -> None:
    assert (_executed(server), _read_only(server)) == before


def test_an_unreachable_server_and_the_old_primary_itself_are_refused(old, tmp_path, monkeypatch):
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    creds = tmp_path / "nobody.cnf"
    creds.write_text(f"[client]\nuser=root\npassword=x\nsocket={tmp_path / 'no-such.sock'}\n")
    creds.chmod(0o600)
    with contextlib.redirect_stderr(io.StringIO()) as err:
        rc = cli_main(
            ["promote", "--cluster", "c1", "--host", "my1", "--local-path", str(old.store)]
            + ["--defaults-file", str(creds)]
        )
    assert "cannot connect" in _one_line_error(rc, err.getvalue())
    # The old primary (or a copy that kept its auto.cnf): its server_uuid is the old timeline's.
    before = (_executed(old.server), _read_only(old.server))
    rc, _, err = _promote_cli(old, old.server, tmp_path)
    line = _one_line_error(rc, err)
    assert f"server_uuid {old.uuid} is" in line and "auto.cnf" in line, line
    _unchanged(old.server, before)
    assert timelines(old.catalog) == []


def test_a_replica_is_refused_while_it_replicates_or_lags_then_promoted(
    old, mysql_factory, tmp_path, monkeypatch
):
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    dialect = dialect_for(old.server.query("SELECT @@version")[0][0])
    password = secrets.token_urlsafe(12)
    old.server.execute_script(
        "SET SESSION sql_log_bin = 0;"
        f"CREATE USER IF NOT EXISTS prom_repl@'127.0.0.1' IDENTIFIED BY '{password}';"
        "GRANT REPLICATION SLAVE ON *.* TO prom_repl@'127.0.0.1';"
    )
    replica = mysql_factory("prom-rep", root_password=secrets.token_urlsafe(12))
    try:
        conn = replica.connect()
        cur = conn.cursor()
        cur.execute("RESET BINARY LOGS AND GTIDS")  # a replica holds no transaction of its own
        for sql, args in dialect.change_source(
            host="127.0.0.1", port=old.server.port, user="prom_repl", password=password, connect_retry=1
        ):
            cur.execute(sql, args)
        cur.execute(dialect.start_replica)
        cur.execute("SET GLOBAL super_read_only = ON")  # as replicas run
        conn.close()
        _wait("caught up", lambda: _executed(old.server) <= _executed(replica))

        # Still replicating: refused, and it keeps replicating.
        before = (_executed(replica), _read_only(replica))
        rc, _, err = _promote_cli(old, replica, tmp_path)
        line = _one_line_error(rc, err)
        assert f"replicates from 127.0.0.1:{old.server.port}" in line and "STOP REPLICA" in line, line
        status = _replica_status(replica)
        assert (status["io_running"], status["sql_running"]) == ("Yes", "Yes"), status
        _unchanged(replica, before)
        assert timelines(old.catalog) == []

        # Detached while lagging: it received transactions it has not applied. Refused, naming them.
        replica.query("STOP REPLICA SQL_THREAD")
        old.server.query(f"INSERT INTO `{old.db}`.t (v) VALUES ('late 1'), ('late 2')")
        old.server.query(f"INSERT INTO `{old.db}`.t (v) VALUES ('late 3')")
        _wait(
            "received",
            lambda: _executed(old.server) <= GtidSet.parse(_replica_status(replica)["retrieved_gtid_set"]),
        )
        replica.query("STOP REPLICA")
        unapplied = _executed(old.server) - _executed(replica)
        assert len(unapplied) == 2
        before = (_executed(replica), _read_only(replica))
        rc, _, err = _promote_cli(old, replica, tmp_path)
        line = _one_line_error(rc, err)
        assert "has received transactions it has not applied" in line and str(unapplied) in line, line
        assert _replica_status(replica)["source_port"] == old.server.port  # the channel is kept
        _unchanged(replica, before)
        assert timelines(old.catalog) == []

        # Applied, stopped: promoted.
        replica.query("START REPLICA SQL_THREAD")
        _wait("applied", lambda: _executed(old.server) <= _executed(replica))
        replica.query("STOP REPLICA")
        rc, out, err = _promote_cli(old, replica, tmp_path)
        assert rc == 0, err
        new_uuid = replica.query("SELECT @@server_uuid")[0][0]
        fork = _executed(replica)
        assert f"promoted: {new_uuid}" in out and f"forked from {old.uuid} at {fork}" in out, out
        assert f"SET GLOBAL gtid_purged='{fork}'" in out and "SOURCE_AUTO_POSITION=1" in out, out
        assert _replica_status(replica) == {}, "RESET REPLICA ALL: no channel left"
        assert _read_only(replica) == (0, 0)
        assert _ids(replica, old.db) == _ids(old.server, old.db)
        [timeline] = timelines(old.catalog)
        assert (timeline.server_uuid, timeline.parent_server_uuid) == (new_uuid, old.uuid)
        assert GtidSet.parse(timeline.fork_gtid) == fork
        rc, again, _ = _promote_cli(old, replica, tmp_path)
        assert rc == 0 and again.startswith("already promoted"), again

        # The new primary writes under its own server_uuid; its binlogs ship as the new timeline's.
        first = _write(replica, old.db, "new 1")
        assert str(first) == f"{new_uuid}:1"
        shipped = _ship(old.catalog, replica)
        assert shipped.server_uuid == new_uuid and shipped.shipped
        held = GtidSet()
        for m in BinlogCatalog(old.catalog, new_uuid).index().shipped():
            held |= m.gtid_sets()[1]
        assert first <= held
        rc, again, _ = _promote_cli(old, replica, tmp_path)
        assert rc == 0 and again.startswith("already promoted"), again  # its own writes since
    finally:
        mysql_factory.discard(replica)


def test_a_copy_restored_to_before_the_drop_is_promoted_unless_it_wrote(
    old, mysql_factory, tmp_path, monkeypatch
):
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    shipped = BinlogCatalog(old.catalog, old.uuid).index().shipped()
    files = fetch_binlogs(
        PitrRequest(old.catalog, tmp_path / "unused", PitrTarget("time")), shipped, tmp_path / "copies"
    )
    copy = mysql_factory("prom-pitr", root_password=secrets.token_urlsafe(12))

    def restore() -> None:
        """The copy restored to just before the DROP, kept read-only until promoted."""
        copy.execute_script(
            f"SET GLOBAL super_read_only = OFF; SET SESSION sql_log_bin = 0; DROP DATABASE IF EXISTS {old.db};"
            "RESET BINARY LOGS AND GTIDS;"
        )
        reached = replay_mysql(
            _target(copy), files, PitrTarget.at_gtid(str(old.before_drop)), binlog_binary="mysqlbinlog"
        )
        assert reached == old.before_drop
        copy.query("SET GLOBAL super_read_only = ON")

    try:
        copy.execute_script(  # an account that may read the state, and no more
            "SET SESSION sql_log_bin = 0; CREATE USER weak@localhost IDENTIFIED BY 'weak-pw';"
            "GRANT REPLICATION CLIENT ON *.* TO weak@localhost;"
        )
        restore()
        # A transaction of its own (an errant one for the old history): refused, naming it.
        copy.query("SET GLOBAL super_read_only = OFF")
        errant = _write(copy, old.db, "too early")
        own = copy.query("SELECT @@server_uuid")[0][0]
        assert str(errant) == f"{own}:1"
        before = (_executed(copy), _read_only(copy))
        rc, _, err = _promote_cli(old, copy, tmp_path)
        line = _one_line_error(rc, err)
        assert f"has transactions of its own ({errant})" in line and "restore again" in line, line
        _unchanged(copy, before)
        assert all(t.server_uuid != own for t in timelines(old.catalog))

        # Given a GTID set it does not hold: refused, naming both.
        restore()
        rc, _, err = _promote_cli(old, copy, tmp_path, "--reached-gtid", f"{old.uuid}:1-3")
        line = _one_line_error(rc, err)
        assert f"{old.uuid}:1-3" in line and str(old.before_drop) in line, line

        # An account that may read the state but not open the server to writes: refused, the server
        # and the catalog as they were (the timeline record written first is taken back).
        before = (_executed(copy), _read_only(copy))
        rc, _, err = _promote_cli(old, copy, tmp_path, user="weak")
        line = _one_line_error(rc, err)
        assert "SET GLOBAL super_read_only = OFF failed" in line and "nothing was changed" in line, line
        _unchanged(copy, before)
        assert all(t.server_uuid != own for t in timelines(old.catalog))

        rc, out, err = _promote_cli(old, copy, tmp_path, "--reached-gtid", str(old.before_drop))
        assert rc == 0, err
        assert f"forked from {old.uuid} at {old.before_drop}" in out, out
        assert _read_only(copy) == (0, 0)
        assert _ids(copy, old.db) == old.rows_before_drop
        assert copy.query(f"SELECT COUNT(*) FROM `{old.db}`.victim")[0][0] == 50
        first = _write(copy, old.db, "new timeline")
        assert str(first) == f"{own}:1" and not first <= _executed(old.server)
        record = [t for t in timelines(old.catalog) if t.server_uuid == own]
        assert [GtidSet.parse(t.fork_gtid) for t in record] == [old.before_drop]
    finally:
        mysql_factory.discard(copy)
