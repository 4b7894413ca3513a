"""Continuous binlog shipping (core/binlog/follow.py) on a real MySQL 9.7 with mysqlbinlog 9.7:
the follower is given its replication server_id the way MySQL's client takes it, the server's
position comes from SHOW BINARY LOG STATUS (8.4 removed SHOW MASTER STATUS), the open binlog is
stored within seconds with the GTID set it holds so far, and a rotation ships it whole."""

from __future__ import annotations

import shutil
import threading

import pytest

from helpers import unique_name, wait_for
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog
from xtrabackup_provider.core.binlog.follow import ship_continuous
from xtrabackup_provider.core.binlog.ship import ShipRequest, is_shipped, lag_target
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.common.values import GtidSet
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.storage.local import LocalStore

pytestmark = pytest.mark.mysql


def test_the_open_mysql_binlog_is_followed_and_shipped_with_its_gtids(mysql, tmp_path):
    db = unique_name("fl")
    mysql.execute_script(f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY);")
    target = MySQLTarget(socket=str(mysql.socket), user="root", password=mysql.root_password)
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    request = ShipRequest(
        catalog=catalog, target=target, allow_unencrypted=True, binary=shutil.which("mysqlbinlog")
    )
    uuid = mysql.query("SELECT @@server_uuid")[0][0]
    stop = threading.Event()
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["report"] = ship_continuous(request, duration=120, progress_interval=0.5, stop=stop)
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertions below
            result["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    try:
        mysql.execute_script(f"INSERT INTO {db}.t VALUES (1); INSERT INTO {db}.t VALUES (2);")
        executed = mysql.query("SELECT @@global.gtid_executed")[0][0]
        point = lag_target(target)  # SHOW BINARY LOG STATUS: the open binlog and its size
        wait_for(lambda: is_shipped(catalog, point) or "error" in result, 60, 0.2, "progress upload")
        assert "error" not in result, result
        assert is_shipped(catalog, lag_target(target, executed))  # the GTID set, from the open binlog's parts
        open_name = point.file
        partial = BinlogCatalog(catalog, uuid).index().partial[open_name]
        assert GtidSet.parse(partial.gtid_set) == GtidSet.parse(executed)

        mysql.query("FLUSH BINARY LOGS")
        wait_for(
            lambda: open_name in BinlogCatalog(catalog, uuid).index().complete or "error" in result,
            60,
            0.2,
            "rotation",
        )
    finally:
        stop.set()
        worker.join(60)
    assert "error" not in result, result
    index = BinlogCatalog(catalog, uuid).index()
    assert open_name in index.complete and open_name not in index.partial
    assert GtidSet.parse(index.complete[open_name].gtid_set) == GtidSet.parse(executed)
