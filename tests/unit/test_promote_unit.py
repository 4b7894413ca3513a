"""Timeline records and the promotion's pure parts (no server): what the catalog keeps and refuses."""

from __future__ import annotations

import pytest

from manifest_factory import make_manifest, make_timeline
from xtrabackup_provider.core.binlog.catalog import BinlogError
from xtrabackup_provider.core.binlog.timeline import read_timeline, timeline_key, timelines, write_timeline
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.pitr.plan import PitrError, PitrTarget, choose_backup
from xtrabackup_provider.core.pitr.promote import _continues, _server_id_of
from xtrabackup_provider.core.storage.local import LocalStore


def test_a_timeline_record_round_trips_and_a_copied_one_is_refused(tmp_path):
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    assert timelines(catalog) == [] and read_timeline(catalog, "mariadb-h-3306-2") is None
    write_timeline(catalog, make_timeline())
    assert timelines(catalog) == [make_timeline()]
    # The record of another host copied into this one's directory.
    other = Catalog(catalog.store, "backups", "c1", "db2")
    catalog.store.put_bytes(
        timeline_key(other, "mariadb-h-3306-2"), make_timeline().model_dump_json().encode()
    )
    with pytest.raises(BinlogError, match="describes c1/db1/mariadb-h-3306-2; it was copied"):
        read_timeline(other, "mariadb-h-3306-2")
    with pytest.raises(ValueError):
        make_timeline(fork_gtid="0-1")


def test_the_promoted_state_is_recognised_with_later_writes_and_nothing_else():
    promoted = "0-1-14,0-2-1000000"
    assert _continues(promoted, promoted)
    assert _continues("0-1-14,0-2-1000007", promoted)  # its own writes since
    assert not _continues("0-2-1000007", promoted)  # the fork is gone: a RESET since
    assert not _continues("0-1-14,0-3-5", promoted)  # another server id wrote
    assert _server_id_of("mariadb-db1.example-3306-42") == 42
    assert _server_id_of("3e11fa47-71ca-11e1-9e33-c80aa9429562") is None


def test_a_binlog_position_of_two_timelines_is_refused_without_a_backup_id():
    old = make_manifest(
        "20261201T100000Z-full",
        server_uuid="mariadb-h-3306-1",
        binlog_file="mysql-bin.000003",
        binlog_position=400,
    )
    new = make_manifest(
        "20261201T120000Z-full",
        server_uuid="mariadb-h-3306-2",
        binlog_file="mysql-bin.000001",
        binlog_position=400,
    )
    target = PitrTarget.at_position("mysql-bin.000005:4")
    with pytest.raises(PitrError, match="more than one server timeline"):
        choose_backup([old, new], target)
    assert choose_backup([old, new], target, old.backup_id) == old
