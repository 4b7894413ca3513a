"""Point-in-time recovery on MySQL by the applier (core/pitr/mysql_applier.py), on a real MySQL 9.7:
the shipped binlogs become the relay logs of a sandbox on the restored clone backup and its SQL
thread (parallel workers) applies them, stopped by `START REPLICA SQL_THREAD UNTIL ...`.

One source: a clone backup, then untagged and tagged transactions over three binlogs (a big
transaction among them, so the workers have something to do), a stop point, the accident (a DROP
under a tagged GTID) and what followed it. Restored with `replay="applier"` to the "stop before" GTID
set (`binlogs events` prints it; it holds tagged GTIDs), to a time between the stop and the
accident, and to the accident's binlog position: each time every table's CHECKSUM TABLE is the
source's at the stop and gtid_executed is the source's then, the same as the pipe gives (the pipe
is run to the same GTID set and compared). A GTID set that leaves out a transaction before its
end is replayed by the pipe (the applier applies in order), to the same result the pipe alone gives.

Before the applier, `replay="applier"` on MySQL was ignored: the pipe replayed (the report said
"pipe: mysqlbinlog | mysql")."""

from __future__ import annotations

import secrets
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from helpers import clone_backup, mysql_caught_up, replicate_mysql, ship_mysql_binlogs, unique_name
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.common.values import GtidSet
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.pitr.mysql_pipe import mysql_point_in_time_restore
from xtrabackup_provider.core.pitr.plan import PitrTarget
from xtrabackup_provider.core.pitr.recover import PitrRequest
from xtrabackup_provider.core.storage.local import LocalStore

pytestmark = pytest.mark.mysql


def _executed(server) -> str:
    return "".join(str(server.query("SELECT @@global.gtid_executed")[0][0]).split())


def _tagged(tag: str, sql: str) -> str:
    return f"SET gtid_next = 'AUTOMATIC:{tag}'; {sql}; SET gtid_next = 'AUTOMATIC';"


@dataclass
class History:
    db: str
    uuid: str
    checksums: dict[str, int]  # every table at the stop
    at_stop: str  # gtid_executed at the stop
    stop_time: datetime  # after the stop, before the accident
    drop_at: str  # FILE:POS of the accident's GTID event
    drop_gtid: str
    after: str  # gtid_executed at the end


@pytest.fixture
def source(mysql_factory):
    server = mysql_factory("applsrc", root_password=secrets.token_urlsafe(12))
    server.query("INSTALL PLUGIN clone SONAME 'mysql_clone.so'")
    try:
        yield server
    finally:
        mysql_factory.discard(server)


def _history(source, db: str) -> History:
    uuid = str(source.query("SELECT @@server_uuid")[0][0])
    rows = "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 3000)"
    source.execute_script(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v TEXT);"
        f"CREATE TABLE {db}.u (id INT); CREATE TABLE {db}.big (id INT PRIMARY KEY, v VARCHAR(64));"
        f"INSERT INTO {db}.t VALUES (1, 'a'), (2, 'b');"
        + _tagged("audit", f"INSERT INTO {db}.t VALUES (3, 'c')")
        + "FLUSH BINARY LOGS; SET SESSION cte_max_recursion_depth = 5000;"
        + f"INSERT INTO {db}.big {rows} SELECT n, SHA2(n, 256) FROM s;"
        + f"INSERT INTO {db}.t VALUES (4, 'd');"
        + f"SET gtid_next = '{uuid}:fix:7'; UPDATE {db}.t SET v = 'z' WHERE id = 1; SET gtid_next = 'AUTOMATIC';"
        + "FLUSH BINARY LOGS;"
        + _tagged("audit", f"DELETE FROM {db}.t WHERE id = 2")
        + f"UPDATE {db}.big SET v = 'x' WHERE id % 7 = 0;"
    )
    checksums, at_stop = table_checksums(source, [db]), _executed(source)
    time.sleep(1.1)  # binlog times are whole seconds: the accident is stamped after the stop time
    stop_time = datetime.now(UTC).replace(microsecond=0)
    time.sleep(1.1)
    source.execute_script(
        _tagged("audit", f"DROP TABLE {db}.t") + f"INSERT INTO {db}.u VALUES (1); FLUSH BINARY LOGS;"
    )
    last = [r[0] for r in source.query("SHOW BINARY LOGS")][-2]
    drop_at = drop_gtid = ""
    for row in source.query(f"SHOW BINLOG EVENTS IN '{last}'"):
        if str(row[2]).startswith("Gtid"):
            at, gtid = row[1], str(row[5]).split("'")[1]
        elif row[2] == "Query" and "DROP TABLE" in str(row[5]):
            drop_at, drop_gtid = f"{last}:{at}", gtid
    assert drop_gtid.endswith(":audit:3"), drop_gtid
    return History(db, uuid, checksums, at_stop, stop_time, drop_at, drop_gtid, _executed(source))


def _restore(
    catalog: Catalog, db: str, target: PitrTarget, datadir: Path, replay: str = "applier"
) -> tuple[str, dict[str, int], str, int]:
    """Restore to `target` by `replay`; (the report's replay, every table's CHECKSUM TABLE, the
    copy's gtid_executed, rows of u) read from a server started on the copy afterwards."""
    report = mysql_point_in_time_restore(
        PitrRequest(
            catalog,
            datadir,
            target,
            binlog_binary=shutil.which("mysqlbinlog") or "mysqlbinlog",
            client_binary="mysql",
            replay=replay,
            replay_threads=4,
        )
    )
    sandbox = _copy_server(datadir, datadir.parent / "sb")
    sandbox.start()
    with sandbox:
        u_rows = int(sandbox.query(f"SELECT COUNT(*) FROM {db}.u")[0][0])
        return report.replay, table_checksums(sandbox, [db]), _executed(sandbox), u_rows


def test_the_applier_restores_a_clone_backup_to_a_gtid_set_a_time_and_a_position(source, backup, tmp_path):
    catalog, _ = backup
    history = _prepare(source, catalog)
    assert history.at_stop.endswith(":audit:1-2:fix:7"), history.at_stop
    targets = {
        "gtid": PitrTarget.at_gtid(history.at_stop),
        "time": PitrTarget("time", time=history.stop_time),
        "position": PitrTarget.at_position(history.drop_at),
    }
    for how, target in targets.items():
        replay, checksums, executed, u_rows = _restore(catalog, history.db, target, tmp_path / how / "data")
        assert replay.startswith("applier"), (how, replay)
        assert checksums == history.checksums, how
        assert executed == history.at_stop, how
        assert u_rows == 0, how

    # The pipe to the same set gives the same copy.
    replay, checksums, executed, _ = _restore(
        catalog, history.db, targets["gtid"], tmp_path / "pipe" / "data", "pipe"
    )
    assert replay.startswith("pipe"), replay
    assert (checksums, executed) == (history.checksums, history.at_stop)


def test_a_gtid_set_with_a_hole_is_replayed_by_the_pipe_to_the_same_result(source, backup, tmp_path):
    catalog, _ = backup
    history = _prepare(source, catalog)
    # Everything but the DROP: the transaction after it too (the applier would apply the DROP).
    skip = GtidSet.parse(history.after) - GtidSet.parse(history.drop_gtid)
    wanted = PitrTarget.at_gtid(str(skip))
    by_applier = _restore(catalog, history.db, wanted, tmp_path / "a" / "data")
    by_pipe = _restore(catalog, history.db, wanted, tmp_path / "p" / "data", "pipe")
    assert by_applier[0].startswith("pipe"), by_applier[0]
    assert by_applier[1:] == by_pipe[1:]
    assert by_applier[2] == str(skip) and by_applier[3] == 1
    t = f"{history.db}.t"
    assert by_applier[1][t] == history.checksums[t]  # t as at the stop: the DROP was left out


def _prepare(source, catalog: Catalog) -> History:
    history = _history(source, unique_name("ap"))
    assert ship_mysql_binlogs(catalog, source).shipped
    return history


@pytest.mark.parametrize("replay", ["applier", "pipe"])
def test_a_clone_of_a_replica_is_taken_to_a_gtid_set_by_either_method(mysql_factory, tmp_path, replay):
    """Backups are mostly of replicas: the copy keeps the replica's channel (auto-positioned), which
    refused the applier's relay log coordinates (error 1776); the applier uses a channel of its own
    and the copy's channel is as the backup had it afterwards, by either method. A replayed CREATE
    USER is applied by both (the pipe's client failed on it with error 1290: the sandbox skipped
    the grant tables), and the pipe's throwaway account is gone afterwards."""
    primary = mysql_factory("applpri", root_password=secrets.token_urlsafe(12))
    replica = mysql_factory("applrep", root_password=secrets.token_urlsafe(12))
    try:
        replicate_mysql(primary, replica, "appl_repl")
        catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "rep1")
        clone_backup(replica, catalog, tmp_path / "staging")
        user = unique_name("bob")
        primary.execute_script(f"CREATE USER {user}@localhost IDENTIFIED BY '{secrets.token_urlsafe(9)}';")
        history = _history(primary, unique_name("ar"))
        mysql_caught_up(primary, replica)
        replica.query("FLUSH BINARY LOGS")  # the primary's FLUSH is not replicated
        assert ship_mysql_binlogs(catalog, replica).shipped
        datadir = tmp_path / "r" / "data"
        how, checksums, executed, u_rows = _restore(
            catalog, history.db, PitrTarget.at_gtid(history.at_stop), datadir, replay
        )
        assert how.startswith(replay), how
        assert (checksums, executed, u_rows) == (history.checksums, history.at_stop, 0)
        sandbox = _copy_server(datadir, tmp_path / "sb")
        sandbox.start()
        with sandbox:
            users = {r[0] for r in sandbox.query("SELECT user FROM mysql.user")}
            assert user in users and not [u for u in users if u.startswith("xbp")], users
            channels = sandbox.query(
                "SELECT channel_name, host, port, auto_position FROM performance_schema.replication_connection_configuration"
            )
            assert [tuple(r) for r in channels] == [("", "127.0.0.1", primary.port, "1")], channels
    finally:
        mysql_factory.discard(replica)
        mysql_factory.discard(primary)


def _copy_server(datadir: Path, basedir: Path) -> SandboxServer:
    """A server on a restored copy; a copy of a replica does not start replicating."""
    return SandboxServer.on_datadir(
        datadir, basedir, server_id=995, family="mysql", extra_args=["--skip-replica-start"]
    )


def test_a_point_in_time_restore_that_fails_after_the_restore_leaves_the_target_as_it_was(
    source, backup, tmp_path
):
    """A shipped binlog damaged in the store fails the run after the backup was restored into the
    target: the half-made copy (the backup without the binlogs) is removed again, as MariaDB's
    PITR does; an empty directory the target already was stays (a mount point, say)."""
    catalog, _ = backup
    history = _prepare(source, catalog)
    objects = sorted(p for p in (tmp_path / "store").rglob("*") if p.is_file() and "/binlogs/" in str(p))
    damaged = next(p for p in objects if not p.name.endswith(".json"))
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))

    for existed in (False, True):
        target = tmp_path / f"t-{existed}" / "data"
        if existed:
            target.mkdir(parents=True)
        with pytest.raises(Exception) as err:
            _restore(catalog, history.db, PitrTarget.at_gtid(history.at_stop), target)
        assert damaged.name in str(err.value) or "sha256" in str(err.value), err.value
        if existed:
            assert target.is_dir() and not any(target.iterdir()), list(target.iterdir())
        else:
            assert not target.exists() or not any(target.iterdir()), list(target.iterdir())
