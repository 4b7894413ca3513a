"""`restore --to-time` on MySQL 9.7 over the binlogs of a replica that was killed (SIGKILL) and
restarted: the MySQL side of the MariaDB finding (tests/integration/test_pitr_replica_restart_time.py,
the chaos run's seed 390202).

Transactions the source committed just before T reach the replica only after its restart. They sit
in the replica's next binlog, stamped with the source's (earlier) time, behind that file's own
events (Format_description, Previous_gtids), stamped at the restart, after T. What a DBA means by
--to-time on a replica's binlogs: every transaction the source committed before T is in, none
after, by either replay method.
"""

from __future__ import annotations

import math
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import clone_backup, iso_utc, mysql_caught_up, replicate_mysql, ship_mysql_binlogs, unique_name
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.common.values import GtidSet
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.pitr.mysql_pipe import mysql_point_in_time_restore
from xtrabackup_provider.core.pitr.plan import PitrTarget
from xtrabackup_provider.core.pitr.recover import PitrRequest
from xtrabackup_provider.core.storage.local import LocalStore

pytestmark = pytest.mark.mysql


@dataclass(frozen=True)
class Point:
    rows: frozenset[int]  # the ids committed so far
    time: int  # a second after the last commit's: a --to-time target just past it
    gtids: GtidSet  # the source's gtid_executed then


@dataclass
class KilledReplica:
    catalog: Catalog
    db: str
    crashed: Point  # A: the last transaction in the binlog the crash cut, before B
    before: Point  # B: committed on the source while the replica was dead, before T
    after: Point  # C: committed after T


def _executed(server: SandboxServer) -> GtidSet:
    return GtidSet.parse("".join(str(server.query("SELECT @@global.gtid_executed")[0][0]).split()))


def _commit(source: SandboxServer, db: str, value: str) -> Point:
    """One row in its own transaction; returns once the clock is past its second (binlog times
    are whole seconds), so the next write is stamped later."""
    source.query(f"INSERT INTO `{db}`.t (v) VALUES (%s)", (value,))
    stamped = float(source.query("SELECT UNIX_TIMESTAMP()")[0][0])
    rows = frozenset(r[0] for r in source.query(f"SELECT id FROM `{db}`.t"))
    after = math.floor(stamped) + 1
    while time.time() < after + 0.05:
        time.sleep(0.05)
    return Point(rows, after, _executed(source))


@pytest.fixture(scope="module")
def killed_replica(mysql_factory, tmp_path_factory) -> KilledReplica:
    base = tmp_path_factory.mktemp("trt")
    source = mysql_factory("trt-src", root_password=secrets.token_urlsafe(12))
    replica = mysql_factory("trt-rep", root_password=secrets.token_urlsafe(12))
    try:
        replicate_mysql(source, replica, "trt_repl")
        catalog = Catalog(LocalStore(base / "store"), "backups", "c1", "rep1")
        db = unique_name("trt")
        source.execute_script(
            f"CREATE DATABASE `{db}`; CREATE TABLE `{db}`.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64));"
        )
        mysql_caught_up(source, replica)
        clone_backup(replica, catalog, base / "staging")
        for n in range(19):  # some transactions in the replica's binlog before the crash
            source.query(f"INSERT INTO `{db}`.t (v) VALUES ('a{n}')")
        crashed = _commit(source, db, "A")
        mysql_caught_up(source, replica)
        replica.kill()  # a crash: its binlog ends after its last transaction, without a Rotate event
        before = _commit(source, db, "B")
        while time.time() < before.time + 1.2:  # the restart (its new binlog's own events) is stamped after T
            time.sleep(0.05)
        replica.start()  # replicates again (no --skip-replica-start): B arrives, stamped before T
        mysql_caught_up(source, replica)
        after = _commit(source, db, "C")
        for n in range(60):  # the new binlog grows past the crashed one's end (the chaos run's overrun)
            source.query(f"INSERT INTO `{db}`.t (v) VALUES (REPEAT('c{n}', 20))")
        mysql_caught_up(source, replica)
        replica.query("FLUSH BINARY LOGS")  # ship closes binlogs only
        assert ship_mysql_binlogs(catalog, replica).shipped
        yield KilledReplica(catalog, db, crashed, before, after)
    finally:
        mysql_factory.discard(replica)
        mysql_factory.discard(source)


@pytest.mark.parametrize("replay", ["applier", "pipe"])
@pytest.mark.parametrize("upto", ["crashed", "before"])
def test_to_time_on_a_restarted_mysql_replica_restores_what_the_source_committed_before_it(
    killed_replica, tmp_path: Path, replay, upto
):
    """`before`: T after B (in the new binlog behind its own events stamped after T): A and B are
    in. `crashed`: T after A, before B: the replay ends with the binlog the crash cut."""
    k = killed_replica
    point: Point = getattr(k, upto)
    datadir = tmp_path / "r" / "data"
    report = mysql_point_in_time_restore(
        PitrRequest(
            k.catalog,
            datadir,
            PitrTarget.at_time(iso_utc(point.time)),
            binlog_binary=shutil.which("mysqlbinlog") or "mysqlbinlog",
            client_binary="mysql",
            replay=replay,
        )
    )
    assert report.replay.startswith(replay), report.replay
    copy = SandboxServer.on_datadir(
        datadir, tmp_path / "sb", server_id=979, family="mysql", extra_args=["--skip-replica-start"]
    )
    copy.start()
    with copy:
        ids = {r[0] for r in copy.query(f"SELECT id FROM `{k.db}`.t")}
        executed = _executed(copy)
    assert ids == set(point.rows), (
        f"rows committed before T missing: {sorted(set(point.rows) - ids)}; "
        f"after T present: {sorted(ids - set(point.rows))}"
    )
    assert executed == point.gtids, f"reached {executed}, the source had {point.gtids}"
