"""Binlog history on a real MySQL 9.7 with its own mysqlbinlog 9.7 (issue 36 item 2), the twins of
tests/integration/test_binlog.py's MariaDB cases: a purge before shipping is a recorded gap PITR
will not cross, the binlog a SIGKILLed server was writing ships once it is back, the binlogs an old
server_id wrote are skipped (and stay skipped), and a new binlog history under the old names
(RESET BINARY LOGS AND GTIDS) is refused with the stored one kept. MySQL has no @@last_gtid: a
point is the server's gtid_executed, and a shipped binlog's end is its Previous_gtids plus the
GTIDs it holds."""

from __future__ import annotations

import shutil
import time

import pytest

from helpers import clone_backup, purge_binlogs_to, root_target, unique_name
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog, BinlogError, BinlogGapError, BinlogManifest
from xtrabackup_provider.core.binlog.follow import ship_continuous
from xtrabackup_provider.core.binlog.ship import ShipReport, ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.common.values import GtidSet
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.db.server import server_facts
from xtrabackup_provider.core.pitr.mysql_pipe import binlogs_to, choose_mysql_backup
from xtrabackup_provider.core.pitr.plan import PitrError, PitrTarget
from xtrabackup_provider.core.storage.local import LocalStore

pytestmark = pytest.mark.mysql


@pytest.fixture
def catalog(tmp_path) -> Catalog:
    return Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")


def _request(server: SandboxServer, catalog: Catalog, **kw) -> ShipRequest:
    return ShipRequest(
        catalog=catalog,
        target=root_target(server),
        allow_unencrypted=True,
        binary=shutil.which("mysqlbinlog"),
        **kw,
    )


def _ship(server: SandboxServer, catalog: Catalog, **kw) -> ShipReport:
    return ship_binlogs(_request(server, catalog, **kw))


def _follow(server: SandboxServer, catalog: Catalog, duration: float) -> ShipReport:
    return ship_continuous(_request(server, catalog), duration=duration, progress_interval=0.2)


def _table(server: SandboxServer) -> str:
    db = unique_name("bl")
    server.query(f"CREATE DATABASE `{db}`")
    server.query(f"CREATE TABLE `{db}`.t (id INT AUTO_INCREMENT PRIMARY KEY, v TEXT) ENGINE=InnoDB")
    return db


def _write(server: SandboxServer, db: str, rows: int, flush: bool = False) -> str:
    """Insert `rows` rows in one transaction each; returns the server's gtid_executed after them."""
    conn = server.connect()
    try:
        cur = conn.cursor()
        for _ in range(rows):
            cur.execute(f"INSERT INTO `{db}`.t (v) VALUES (REPEAT('x', 100))")
        cur.execute("SELECT @@global.gtid_executed")
        executed = str(cur.fetchone()[0])
        if flush:
            cur.execute("FLUSH BINARY LOGS")
        return executed
    finally:
        conn.close()


def _ends_at(manifest: BinlogManifest, executed: str) -> bool:
    """The binlog ends where the server's gtid_executed was (MySQL's gtid_last == gtid)."""
    before, held = manifest.gtid_sets()
    return before | held == GtidSet.parse(executed)


def _bcat(server: SandboxServer, catalog: Catalog) -> BinlogCatalog:
    return BinlogCatalog(catalog, server_facts(root_target(server)).server_uuid)


def _clone_backup(server: SandboxServer, catalog: Catalog, tmp_path) -> Manifest:
    server.query("INSTALL PLUGIN clone SONAME 'mysql_clone.so'")
    return clone_backup(server, catalog, tmp_path / "staging")


def _plan(catalog: Catalog, executed: str) -> list[BinlogManifest]:
    """The shipped binlogs MySQL's point-in-time recovery replays to reach `executed`."""
    target = PitrTarget.at_gtid(executed)
    return binlogs_to(catalog, choose_mysql_backup(catalog, target), target)


def test_purged_binlog_is_detected_recorded_and_pitr_refuses_to_cross_it(mysql, catalog, tmp_path):
    """Binlogs purged before they were shipped: the run names them as a recorded gap, the next run
    ships on, and a point-in-time recovery past them is refused instead of restoring short."""
    db = _table(mysql)
    _write(mysql, db, 2, flush=True)
    _ship(mysql, catalog)
    _clone_backup(mysql, catalog, tmp_path)
    lost = [_write(mysql, db, 2, flush=True) for _ in range(2)]
    logs = [r[0] for r in mysql.query("SHOW BINARY LOGS")]
    purged = purge_binlogs_to(mysql, logs[-1])  # nothing after the backup was shipped
    missing = [n for n in logs[1:] if n in purged]
    assert missing, "the purge removed nothing: the test would prove nothing"

    with pytest.raises(BinlogGapError) as info:
        _ship(mysql, catalog)
    message = str(info.value)
    assert f"{missing[0]}..{missing[-1]}" in message and "purged" in message and "full backup" in message
    index = _bcat(mysql, catalog).index()
    assert [(g.first_missing, g.last_missing) for g in index.gaps] == [(missing[0], missing[-1])]

    # The next run knows the gap: it ships what is new and does not fail again.
    _write(mysql, db, 1, flush=True)
    assert _ship(mysql, catalog).shipped == [logs[-1]]

    with pytest.raises(PitrError, match="gap") as pitr:
        _plan(catalog, lost[-1])
    assert missing[0] in str(pitr.value)


def test_the_binlog_a_crashed_server_was_writing_ships_once_it_is_back(mysql, catalog, tmp_path):
    """A SIGKILLed server's binlog has no rotate or stop event; restarted, MySQL lists it closed.
    It ships as it is, with every GTID committed before the kill, and a point-in-time recovery
    reaches through it."""
    db = _table(mysql)
    _clone_backup(mysql, catalog, tmp_path)
    before_crash = _write(mysql, db, 5)
    crashed = str(mysql.query("SHOW BINARY LOG STATUS")[0][0])
    mysql.kill()
    mysql.start()
    after_crash = _write(mysql, db, 3, flush=True)

    report = _ship(mysql, catalog)
    assert crashed in report.shipped
    index = _bcat(mysql, catalog).index()
    assert _ends_at(index.complete[crashed], before_crash), index.complete[crashed]
    assert index.complete[crashed].size == (mysql.datadir / crashed).stat().st_size
    plan = _plan(catalog, after_crash)
    assert crashed in [m.name for m in plan] and _ends_at(plan[-1], after_crash)


def _new_server_id(server: SandboxServer) -> None:
    """The DBA restarts the server under a server_id of its own (its server_uuid stays)."""
    server.stop()
    server.server_id += 1000
    server.start()


def test_after_a_server_id_change_the_binlogs_the_old_id_wrote_are_skipped_and_the_new_ones_shipped(
    mysql, catalog, caplog
):
    """Binlogs the old server_id wrote and nobody shipped are that server's history: skipped with a
    warning naming them, and the server's own binlogs shipped instead of a refusal on every run."""
    db = _table(mysql)
    _write(mysql, db, 5)  # written by the old server_id, never shipped
    old_id = mysql.server_id
    _new_server_id(mysql)
    gtid = _write(mysql, db, 5, flush=True)

    with caplog.at_level("WARNING"):
        report = _ship(mysql, catalog, accept_new_server=True)
    old_logs = [name for name, *_ in mysql.query("SHOW BINARY LOGS")[: len(report.not_ours)]]
    assert report.not_ours and report.not_ours == old_logs, report
    assert report.shipped, "no binlog of the new server was shipped"
    assert any(
        name in r.getMessage() and str(old_id) in r.getMessage() for r in caplog.records for name in old_logs
    )
    index = _bcat(mysql, catalog).index()
    assert set(index.complete) == set(report.shipped) and not set(index.complete) & set(report.not_ours)
    assert any(_ends_at(m, gtid) for m in index.complete.values()), "the new server's writes are not shipped"


def test_the_old_server_ids_binlogs_stay_skipped_once_the_new_server_has_shipped(mysql, catalog):
    """The runs after the first one that shipped the new server_id's binlogs: the old id's files,
    still on the server below them, stay skipped and new writes keep shipping."""
    db = _table(mysql)
    _write(mysql, db, 5)  # written by the old server_id, never shipped
    _new_server_id(mysql)
    _write(mysql, db, 5, flush=True)
    first = _ship(mysql, catalog, accept_new_server=True)
    assert first.not_ours and first.shipped, first

    gtid = _write(mysql, db, 5, flush=True)
    second = _ship(mysql, catalog)
    assert second.not_ours == first.not_ours and second.shipped, second
    index = _bcat(mysql, catalog).index()
    assert any(_ends_at(m, gtid) for m in index.complete.values()), "the new writes are not shipped"
    assert not set(index.complete) & set(first.not_ours)


def _reset_history(server: SandboxServer, db: str) -> None:
    """The server starts a new binlog history under the old names (and, on MySQL, the same GTIDs)."""
    time.sleep(1.1)  # a file created in another second: its format event's time differs
    server.query("RESET BINARY LOGS AND GTIDS")
    for _ in range(3):
        _write(server, db, 40)


def _refused_after_reset(
    server: SandboxServer, catalog: Catalog, mode: str
) -> pytest.ExceptionInfo[BinlogError]:
    """Ship (batch or continuous) after the reset: refused as a reset."""
    if mode == "batch":
        server.query("FLUSH BINARY LOGS")  # the new mysql-bin.000001 is closed: batch ships closed ones
    with pytest.raises(BinlogError, match="reset") as info:
        if mode == "batch":
            _ship(server, catalog)
        else:
            _follow(server, catalog, duration=3)
    return info


@pytest.mark.parametrize("mode", ["continuous", "batch"])
def test_a_new_binlog_history_under_the_old_names_is_refused_and_the_stored_one_kept(mysql, catalog, mode):
    """After RESET BINARY LOGS AND GTIDS the server writes another mysql-bin.000001: shipping it
    would overwrite the stored history that earlier backups' point-in-time recovery reads."""
    db = _table(mysql)
    _write(mysql, db, 5)
    _follow(mysql, catalog, duration=1.5)
    bcat = _bcat(mysql, catalog)
    (name,) = bcat.index().partial
    stored = catalog.store.get_bytes(bcat.manifest_key(name, partial=True))
    _reset_history(mysql, db)
    info = _refused_after_reset(mysql, catalog, mode)
    assert name in str(info.value), info.value
    assert catalog.store.get_bytes(bcat.manifest_key(name, partial=True)) == stored
    assert name not in bcat.index().complete
    for seg in bcat.index().partial[name].segments:
        assert catalog.store.head(seg.object.key) is not None, "a segment of the old history was deleted"


@pytest.mark.parametrize(
    ("mode", "backup_at"),
    [("continuous", "a later binlog"), ("batch", "further into mysql-bin.000001")],
)
def test_a_reset_before_anything_was_shipped_is_refused_against_the_servers_backup(
    mysql, catalog, tmp_path, mode, backup_at
):
    """The server's clone backup names a binlog position, none of its binlogs is shipped yet, then
    its binlogs restart at .000001: stored under the server's name, the new files would be read by
    a point-in-time recovery from that backup. Refused, naming the backup, and nothing stored."""
    db = _table(mysql)
    if backup_at == "a later binlog":
        _write(mysql, db, 5, flush=True)
        _write(mysql, db, 5, flush=True)
    else:  # the backup far into .000001, past where the new .000001 ends
        mysql.query("RESET BINARY LOGS AND GTIDS")
        _write(mysql, db, 600)
    backup = _clone_backup(mysql, catalog, tmp_path)
    assert backup.binlog_file, backup  # the clone backup records its binlog position
    _write(mysql, db, 5)  # never shipped
    _reset_history(mysql, db)
    info = _refused_after_reset(mysql, catalog, mode)
    assert backup.backup_id in str(info.value) and backup.binlog_file in str(info.value), info.value
    index = _bcat(mysql, catalog).index()
    assert not index.complete and not index.partial, "the new history was stored under the server's name"


def test_a_reset_below_the_binlog_shipped_in_part_is_refused(mysql, catalog):
    """Continuous shipping stored the open mysql-bin.000002 in part (.000001 was purged); then the
    binlogs restart at .000001. Shipping the new .000001 beside the old .000002 would let a
    point-in-time recovery run from one history into the other."""
    db = _table(mysql)
    _write(mysql, db, 5, flush=True)
    (first, *_rest, last) = [r[0] for r in mysql.query("SHOW BINARY LOGS")]
    purge_binlogs_to(mysql, last)
    assert [r[0] for r in mysql.query("SHOW BINARY LOGS")] == [last], "the purge removed nothing"
    _write(mysql, db, 5)
    _follow(mysql, catalog, duration=1.5)
    bcat = _bcat(mysql, catalog)
    assert list(bcat.index().partial) == [last] and list(bcat.index().complete) == []
    _reset_history(mysql, db)

    with pytest.raises(BinlogError, match="reset") as info:
        _follow(mysql, catalog, duration=3)
    assert last in str(info.value) and first in str(info.value), info.value
    assert list(bcat.index().partial) == [last], "the new history was stored beside the old one"
