"""Deep verify checks a K-part backup as a restore extracts it (its data parts at once, then the
tail): parts that are each well-formed but hold the same file, or a tail that removes the
checkpoints, do not verify; a backup whose parts verify restores the tree the check names."""

from __future__ import annotations

import hashlib
from pathlib import Path

import zstandard

from manifest_factory import make_manifest
from xbstream_build import CHECKPOINTS, checkpoints, mbstream_x, remove, whole_file
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.restore.verify import VerifyRequest, verify
from xtrabackup_provider.core.storage.local import LocalStore

BID = "20261101T103000Z-full"


def _store_parts(tmp_path: Path, streams: list[bytes]) -> Catalog:
    """A K-part backup (format 2) of `streams` (the data parts, then the tail), zstd-compressed."""
    catalog = Catalog(LocalStore(tmp_path / "bucket"), "backups-prod", "c1", "db1")
    k = len(streams) - 1
    objects = []
    for n, raw in enumerate(streams):
        name = "backup.tail.xbstream.zst" if n == k else f"backup.p{n}of{k}.xbstream.zst"
        key = f"backups-prod/c1/db1/backups/{BID}/{name}"
        stored = zstandard.ZstdCompressor().compress(raw)
        catalog.store.put_bytes(key, stored)
        objects.append(
            {
                "key": key,
                "size": len(stored),
                "sha256": hashlib.sha256(stored).hexdigest(),
                "raw_size": len(raw),
                "compression": "zstd",
                "encryption": "none",
                "role": "tail" if n == k else "part",
                "part": None if n == k else n,
            }
        )
    manifest = make_manifest(
        BID,
        format_version=2,
        engine_flavour="mariabackup",
        engine_version="10.11.19",
        engine_major="10.11",
        objects=objects,
        raw_bytes=sum(len(s) for s in streams),
        stored_bytes=sum(o["size"] for o in objects),
    )
    catalog.store.put_bytes(catalog.manifest_key(BID), manifest.to_json())
    return catalog


def _deep(catalog: Catalog) -> list[str]:
    (report,) = verify(VerifyRequest(catalog, [BID], mode="deep"))
    return report.problems


def test_parts_that_verify_restore_what_the_check_says(tmp_path):
    parts = [checkpoints() + whole_file("db/a.ibd", b"a" * 100), whole_file("db/b.ibd", b"b" * 50)]
    tail = remove("db/a.ibd")
    assert _deep(_store_parts(tmp_path, [*parts, tail])) == []
    restored = mbstream_x(parts, then=tail)
    assert restored.ok and set(restored.files) == {CHECKPOINTS, "db/b.ibd"}


def test_parts_that_hold_the_same_file_do_not_verify(tmp_path):
    """Each part alone is fine; extracted at once, the second to create db/a.ibd fails ("File exists")
    or loses the race. Verify passed this backup."""
    parts = [checkpoints() + whole_file("db/a.ibd", b"a" * 100), whole_file("db/a.ibd", b"z" * 100)]
    problems = _deep(_store_parts(tmp_path, [*parts, b""]))
    assert len(problems) == 1 and "backup.tail.xbstream.zst" in problems[0], problems
    assert "'db/a.ibd' is a file in part 1 and a file in part 0" in problems[0]
    assert not mbstream_x(parts).ok


def test_a_tail_that_removes_the_checkpoints_does_not_verify(tmp_path):
    """Part 0 alone holds xtrabackup_checkpoints; after the tail, the restore has none. Verify passed
    this backup."""
    parts = [checkpoints() + whole_file("db/a.ibd", b"a" * 100), whole_file("db/b.ibd", b"b" * 50)]
    problems = _deep(_store_parts(tmp_path, [*parts, remove(CHECKPOINTS)]))
    assert len(problems) == 1 and "backup.tail.xbstream.zst" in problems[0], problems
    assert "no xtrabackup_checkpoints" in problems[0]
