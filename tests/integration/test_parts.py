"""K-part backups end to end (core/pipeline/split.py, to_parts.py; restore/chain.py fetch_one):
real MariaDB, mariabackup, mbstream, gpg, and S3 through moto's HTTP server.

A K-part backup restores row for row, a damaged or missing part is refused by name, and a chain
that mixes one-stream (format 1) and K-part (format 2) backups restores.
"""

from __future__ import annotations

import json

import pytest

from helpers import (
    add_orders,
    deep_verify,
    restore_with,
    restored_checksums,
    seed_database,
    take_backup,
    unique_name,
)
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.pipeline.process import PipelineError
from xtrabackup_provider.core.restore.chain import RestoreError
from xtrabackup_provider.core.restore.verify import VerifyRequest, verify
from xtrabackup_provider.core.storage.local import LocalStore
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client


@pytest.fixture
def seeded(mariadb: SandboxServer) -> tuple[SandboxServer, str]:
    db = unique_name("parts")
    seed_database(mariadb, db, rows=20_000)
    return mariadb, db


def test_a_two_part_chain_on_s3_verifies_and_restores_row_for_row(
    seeded, gpg_keys, s3_server, bucket, tmp_path
):
    server, db = seeded
    catalog = Catalog(
        S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket), "backups", "c1", "db1"
    )
    full = take_backup(server, catalog, gpg_keys, "full", 2)
    add_orders(server, db, 5_000)
    inc = take_backup(server, catalog, gpg_keys, "incremental", 2)
    expected = table_checksums(server, [db])

    for m in (full, inc):
        assert m.format_version == 2
        names = [o.key.rsplit("/", 1)[-1] for o in m.objects]
        assert names == [
            "backup.p0of2.xbstream.zst.gpg",
            "backup.p1of2.xbstream.zst.gpg",
            "backup.tail.xbstream.zst.gpg",
        ]
        assert all(o.size > 0 for o in m.objects[:2]) and m.stored_bytes == sum(o.size for o in m.objects)
        report = deep_verify(catalog, gpg_keys, m.backup_id)
        assert report.ok, report.problems
        assert [row["key"] for row in report.objects] == [o.key for o in m.objects]

    target = tmp_path / "restored" / "data"
    restore_with(catalog, gpg_keys, target)
    assert restored_checksums(target, tmp_path / "restored", [db]) == expected


def test_one_stream_and_k_part_backups_mix_in_a_chain_and_a_bad_part_is_refused_by_name(
    seeded, gpg_keys, tmp_path
):
    server, db = seeded
    store = LocalStore(tmp_path / "store")
    catalog = Catalog(store, "backups", "c1", "db1")
    full = take_backup(server, catalog, gpg_keys, "full", 1)  # today's format: what older workers read
    add_orders(server, db, 3_000)
    inc = take_backup(server, catalog, gpg_keys, "incremental", 2)
    expected = table_checksums(server, [db])

    on_disk = json.loads(store.get_bytes(catalog.manifest_key(full.backup_id)))
    assert on_disk["format_version"] == 1 and len(on_disk["objects"]) == 1
    assert not {"role", "part"} & set(on_disk["objects"][0]), (
        "a one-stream manifest is the format older workers read"
    )
    assert inc.format_version == 2 and len(inc.objects) == 3

    target = tmp_path / "r1" / "data"
    restore_with(catalog, gpg_keys, target)
    assert restored_checksums(target, tmp_path / "r1", [db]) == expected

    part1 = inc.objects[1]
    path = tmp_path / "store" / part1.key
    original = path.read_bytes()
    damaged = bytearray(original)
    damaged[len(damaged) // 2] ^= 0x01
    path.write_bytes(bytes(damaged))
    with pytest.raises(
        PipelineError, match=rf"backup {inc.backup_id}: {part1.key}: .*sha256 [0-9a-f]+ differs"
    ):
        restore_with(catalog, gpg_keys, tmp_path / "r2" / "data")
    assert not (tmp_path / "r2" / "data").exists() or not any((tmp_path / "r2" / "data").iterdir())
    report = deep_verify(catalog, gpg_keys, inc.backup_id)
    assert not report.ok and all(part1.key in p for p in report.problems), report.problems

    path.unlink()
    with pytest.raises(RestoreError, match=rf"backup {inc.backup_id}: object {part1.key} is missing"):
        restore_with(catalog, gpg_keys, tmp_path / "r3" / "data")
    [quick] = verify(VerifyRequest(catalog, [inc.backup_id]))
    assert quick.problems == [f"{part1.key}: missing"]


def test_a_k_part_chain_damaged_on_the_first_target_restore_tests_from_its_copy(seeded, gpg_keys, tmp_path):
    """A part of a K-part incremental altered on the first target: the restore test fetches that
    backup from the copy (one note naming the part), passes, and reports on the target it read."""
    from xtrabackup_provider.core.backup.copies import CopyTarget, copy_host
    from xtrabackup_provider.core.catalog.reports import read_report
    from xtrabackup_provider.core.catalog.targets import Source
    from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test

    server, db = seeded
    first = Catalog(LocalStore(tmp_path / "first"), "backups", "c1", "db1")
    take_backup(server, first, gpg_keys, "full", 2)
    add_orders(server, db, 5_000)
    # Fresh statistics: the source's shape at backup time must not be the stale 2-page estimate of
    # a table just loaded (the restore test's source_shape check compares sizes with it).
    server.query(f"ANALYZE TABLE `{db}`.orders")
    inc = take_backup(server, first, gpg_keys, "incremental", 2)
    copy = Catalog(LocalStore(tmp_path / "copy"), "far", "c1", "db1")
    copied = copy_host(first, CopyTarget(name="offsite", store=copy.store, prefix="far"), what="backups")
    assert copied.copied == first.backup_ids(), copied
    part = inc.objects[1]  # backup.p1of2...: its last byte is inside gpg's modification detection code
    data = bytearray(first.store.get_bytes(part.key))
    data[-1] ^= 0x01
    first.store.put_bytes(part.key, bytes(data))

    report = run_restore_test(
        RestoreTestRequest(
            catalog=first,
            workdir=tmp_path / "rt",
            private_key=gpg_keys.private_key,
            passphrase=gpg_keys.passphrase,
            fallbacks=[Source("offsite", copy)],
        )
    )
    assert report.passed, report.reasons
    [note] = report.fallbacks
    assert note.startswith(f"backup {inc.backup_id}: fetched from target offsite because primary: "), note
    assert "p1of2" in note, note
    assert read_report(first, inc.backup_id)["verdict"] == "pass"  # the chain was read from the first
