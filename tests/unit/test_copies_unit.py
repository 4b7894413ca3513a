"""core/backup/copies.py on directories (LocalStore): what is copied, what is not copied again,
a damaged source object, an unreachable target; the copy targets in the fleet config; and that
manifests written before the new records still read."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from helpers import stored_backup as stored
from manifest_factory import CLUSTER, HOST, PREFIX, make_manifest
from xtrabackup_provider.core.backup.copies import CopyTarget, copy_host, pending_backups, pending_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import parse_manifest
from xtrabackup_provider.core.catalog.reports import REPORT_NAME
from xtrabackup_provider.core.config.load import parse_config
from xtrabackup_provider.core.config.schema import ConfigError
from xtrabackup_provider.core.storage.local import LocalStore


@pytest.fixture
def source(tmp_path: Path) -> Catalog:
    return Catalog(LocalStore(tmp_path / "first"), PREFIX, CLUSTER, HOST)


def target(path: Path, **kw) -> CopyTarget:
    return CopyTarget("vault", LocalStore(path), prefix="copies", **kw)


def test_every_backup_is_copied_with_its_own_manifest_and_checked_sha256(source, tmp_path):
    full = stored(source, "20261101T103000Z-full")
    stored(source, "20261102T103000Z-inc", parent=full)
    source.store.put_bytes(source.object_key(full.backup_id, REPORT_NAME), b'{"verdict": "pass"}')
    report = copy_host(source, target(tmp_path / "vault"))
    assert report.ok and report.copied == ["20261101T103000Z-full", "20261102T103000Z-inc"]
    assert report.reports == 1
    dest = Catalog(LocalStore(tmp_path / "vault"), "copies", CLUSTER, HOST)
    copy = dest.get("20261102T103000Z-inc")  # reads and validates like any manifest
    assert copy.backup_object.key.startswith("copies/")
    assert copy.copy_of is not None and copy.copy_of.target == "primary"
    assert dest.chain(copy.backup_id)[0].backup_id == full.backup_id
    data = dest.store.get_bytes(copy.backup_object.key)
    assert hashlib.sha256(data).hexdigest() == copy.backup_object.sha256
    # A second run copies nothing.
    assert copy_host(source, target(tmp_path / "vault")).copied == []


def test_what_the_targets_own_retention_deleted_is_not_copied_again():
    assert pending_backups(["a1", "a2", "a3", "a4"], []) == ["a1", "a2", "a3", "a4"]
    assert pending_backups(["a1", "a2", "a3", "a4"], ["a3"]) == ["a4"]
    assert pending_binlogs(["b.000001", "b.000002", "b.000010"], ["b.000002"]) == ["b.000010"]


def test_a_damaged_object_on_the_source_is_named_and_not_copied(source, tmp_path):
    full = stored(source, "20261101T103000Z-full")
    stored(source, "20261102T103000Z-inc", parent=full)
    path = source.store.root / full.backup_object.key
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF
    path.write_bytes(bytes(data))
    report = copy_host(source, target(tmp_path / "vault"))
    assert report.copied == []
    assert any(full.backup_object.key in p and "damaged on the source" in p for p in report.problems)
    # Its incremental cannot be restored there without it, so it waits too (named).
    assert any("its parent 20261101T103000Z-full is not on vault" in p for p in report.problems)
    assert report.behind == ["20261101T103000Z-full", "20261102T103000Z-inc"]
    assert not (tmp_path / "vault" / full.backup_object.key.replace(PREFIX, "copies", 1)).exists()


def test_an_unreachable_target_is_retried_then_left_behind_with_one_line(source, tmp_path):
    stored(source, "20261101T103000Z-full")
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")  # every write under it fails
    waits: list[float] = []
    report = copy_host(source, target(blocked, attempts=3, retry_seconds=7), sleep=waits.append)
    assert waits == [7, 7] and report.attempts == 3
    assert report.error and report.behind == ["20261101T103000Z-full"]
    line = report.line()
    assert (
        "\n" not in line
        and "copy target vault" in line
        and "1 backup(s)" in line
        and "next run retries" in line
    )


def test_copy_targets_in_the_fleet_config():
    base = {"storage": {"bucket": "b"}, "clusters": [{"name": "c", "hosts": [{"name": "h"}]}]}
    config = parse_config(
        base
        | {
            "copies": [
                {"name": "offsite", "bucket": "b2", "retention": {"keep_last_chains": 1}, "pool": "copies"}
            ]
        }
    )
    assert [t.name for t in config.targets()] == ["primary", "offsite"]
    assert config.target("offsite").retention.keep_last_chains == 1  # type: ignore[attr-defined]
    assert [p.name for p in config.pools()] == ["copies"]
    with pytest.raises(ConfigError, match="no storage target 'nope'; targets are \\['primary', 'offsite'\\]"):
        config.target("nope")
    with pytest.raises(ConfigError, match="same place as storage"):
        parse_config(base | {"copies": [{"name": "again", "bucket": "b"}]})
    with pytest.raises(ConfigError, match="target name 'primary' is also used by storage"):
        parse_config(base | {"copies": [{"name": "primary", "bucket": "b3"}]})
    with pytest.raises(ConfigError, match="copies.0.name"):
        parse_config(base | {"copies": [{"bucket": "b3"}]})


def test_a_manifest_written_before_the_new_records_still_reads():
    old = json.loads(make_manifest("20261101T103000Z-full").to_json())
    for key in ("impact", "option_files", "copy_of"):
        old.pop(key)
    m = parse_manifest(json.dumps(old).encode(), "old.json")
    assert (m.impact, m.option_files, m.copy_of) == (None, None, None)
    assert m.stored_objects == m.objects


def test_a_side_object_outside_the_backups_directory_is_refused():
    m = json.loads(make_manifest("20261101T103000Z-full").to_json())
    side = dict(
        m["objects"][0],
        key=f"{PREFIX}/{CLUSTER}/other/backups/20261101T103000Z-full/option-files.tar.zst.gpg",
    )
    side["key"] = side["key"].replace("/20261101T103000Z-full/", "/20261102T103000Z-full/")
    m["option_files"] = {"object": side, "files": ["/etc/mysql/my.cnf"]}
    with pytest.raises(Exception, match="outside this backup's directory"):
        parse_manifest(json.dumps(m).encode(), "hostile.json")


def test_timeline_records_are_copied_with_the_binlogs(source, tmp_path):
    from manifest_factory import make_timeline
    from xtrabackup_provider.core.binlog.timeline import timelines, write_timeline

    write_timeline(source, make_timeline())
    assert copy_host(source, target(tmp_path / "vault")).ok
    dest = Catalog(LocalStore(tmp_path / "vault"), "copies", CLUSTER, HOST)
    assert timelines(dest) == [make_timeline()]
