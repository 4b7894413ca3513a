"""A point-in-time restore whose target is where the backup already is (nothing to replay) leaves
`gtid_slave_pos` at the GTID reached, as one that replays does, and promote works from it; a
`--to-gtid` equal to the backup's own GTID needs no shipped binlog at all."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from helpers import root_target, seed_database, unique_name
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.sandbox import SandboxServer, free_port
from xtrabackup_provider.core.pitr.plan import PitrTarget
from xtrabackup_provider.core.pitr.promote import PromoteRequest, promote
from xtrabackup_provider.core.pitr.recover import PitrRequest, point_in_time_restore
from xtrabackup_provider.core.storage.local import LocalStore


@dataclass
class Source:
    server: SandboxServer
    shipped: Catalog  # the backup and the binlogs written after it
    unshipped: Catalog  # the same backup, no binlog shipped
    backup: Manifest


@pytest.fixture(scope="module")
def source(mariadb_factory, tmp_path_factory) -> Source:
    server = mariadb_factory("nothing", root_password=secrets.token_urlsafe(12))
    seed_database(server, unique_name("nothing"), rows=300)
    root = tmp_path_factory.mktemp("nothing")
    shipped = Catalog(LocalStore(root / "shipped"), "backups", "c1", "db1")
    unshipped = Catalog(LocalStore(root / "unshipped"), "backups", "c1", "db1")
    backup = run_backup(BackupRequest(catalog=shipped, target=root_target(server), allow_unencrypted=True))
    for obj in backup.objects:
        unshipped.store.put_bytes(obj.key, shipped.store.get_bytes(obj.key))
    unshipped.write(backup)
    time.sleep(1.1)  # the writes below are stamped after the second the backup finished in
    server.execute_script("CREATE DATABASE after_backup; CREATE TABLE after_backup.t (id INT PRIMARY KEY);")
    ship_binlogs(ShipRequest(catalog=shipped, target=root_target(server), allow_unencrypted=True, flush=True))
    return Source(server, shipped, unshipped, backup)


def _restore(catalog: Catalog, target: PitrTarget, datadir: Path):
    return point_in_time_restore(PitrRequest(catalog=catalog, target_datadir=datadir, target=target))


def _start(source: Source, datadir: Path, basedir: Path, server_id: int) -> SandboxServer:
    """The restored datadir as a server that could go in service: binlog on, a server_id and a
    port of its own, the source's accounts."""
    server = SandboxServer.on_datadir(
        datadir,
        basedir,
        server_id=server_id,
        port=free_port(),
        skip_grant_tables=False,
        root_password=source.server.root_password,
    )
    server.start()
    return server


@pytest.mark.parametrize("target", ["gtid", "time"])
def test_nothing_to_replay_leaves_gtid_slave_pos_at_the_backup_and_promote_forks_there(
    source, tmp_path, target
):
    """On main, gtid_slave_pos stayed empty: promote refused (`has no gtid_slave_pos`)."""
    if target == "gtid":
        pitr = PitrTarget.at_gtid(source.backup.gtid or "")
    else:
        # The second after the one the backup finished in: before the writes (made 1.1 s later).
        pitr = PitrTarget.at_time(f"{source.backup.finished_at + timedelta(seconds=1):%Y-%m-%dT%H:%M:%S}")
    report = _restore(source.shipped, pitr, tmp_path / "data")
    assert report.reached_gtid == source.backup.gtid and report.transactions == 0
    server = _start(source, tmp_path / "data", tmp_path / "sb", 801 if target == "gtid" else 802)
    try:
        assert server.query("SELECT @@gtid_slave_pos")[0][0] == source.backup.gtid
        promoted = promote(PromoteRequest(catalog=source.shipped, target=root_target(server)))
        assert promoted.timeline.fork_gtid == source.backup.gtid
        assert promoted.timeline.parent_server_uuid == source.backup.server_uuid
    finally:
        server.stop()


def test_a_gtid_target_equal_to_the_backup_needs_no_shipped_binlog(source, tmp_path):
    """On main: refused, `backup ... starts at mysql-bin.000001:..., but ... ship binlogs`."""
    report = _restore(source.unshipped, PitrTarget.at_gtid(source.backup.gtid or ""), tmp_path / "data")
    assert report.binlogs == [] and report.reached_gtid == source.backup.gtid
    server = _start(source, tmp_path / "data", tmp_path / "sb", 803)
    try:
        assert server.query("SELECT @@gtid_slave_pos")[0][0] == source.backup.gtid
        assert server.query("SHOW DATABASES LIKE 'after_backup'") == [], "the backup's data, nothing after it"
    finally:
        server.stop()
