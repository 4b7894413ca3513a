"""Writes a host's catalog into a store as the product writes it: backup objects at their sizes,
manifests last, a restore report, shipped binlog manifests and a gap record. For the Backups
view's tests and bench/ui_view.py (500 hosts): no database needed, the catalog is what they read.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from manifest_factory import UUID, make_manifest
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog, BinlogGap, BinlogManifest
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.catalog.origin import ORIGIN_KEY
from xtrabackup_provider.core.catalog.reports import REPORT_NAME

SIZE = 64
BINLOG_SHA = "cd" * 32


def _bid(when: datetime, kind: str) -> str:
    return f"{when:%Y%m%dT%H%M%SZ}-{'full' if kind == 'full' else 'inc'}"


def write_host(
    catalog: Catalog,
    now: datetime,
    *,
    chains: int = 2,
    incrementals: int = 3,
    every: timedelta = timedelta(hours=6),
    binlogs: int = 4,
    gap_at: int | None = None,
    tested: bool = True,
    origin: dict[str, object] | None = None,
) -> list[Manifest]:
    """`chains` chains of a full and `incrementals` incrementals, one backup every `every`, the
    newest `every` before `now`; binlog i covers backup i's time on (the newest ones up to `now`);
    binlog number `gap_at` purged before shipping (a gap record); the newest backup restore-tested."""
    count = chains * (incrementals + 1)
    start = now - every * count
    made: list[Manifest] = []
    for i in range(count):
        when = start + every * i
        parent = None if i % (incrementals + 1) == 0 else made[-1]
        bid = _bid(when, "inc" if parent else "full")
        binlog = f"mysql-bin.{i + 1:06d}"
        extra = {ORIGIN_KEY: dict(origin, map_index=0)} if origin else {}
        m = make_manifest(
            bid,
            parent=parent,
            size=SIZE,
            cluster=catalog.cluster,
            host=catalog.host,
            binlog_file=binlog,
            binlog_position=4,
            extra=extra,
            storage_class="STANDARD" if parent else "STANDARD_IA",
        )
        m = m.model_copy(
            update={
                "objects": [
                    o.model_copy(update={"key": catalog.object_key(bid, o.key.rsplit("/", 1)[1])})
                    for o in m.objects
                ]
            }
        )
        for obj in m.objects:
            catalog.store.put_bytes(obj.key, b"x" * obj.size)
        catalog.write(m)
        made.append(m)
    _binlogs(catalog, made, now, binlogs, gap_at)
    if tested:
        newest = made[-1]
        chain = [m.backup_id for m in made if m.chain_root == newest.chain_root]
        report = {
            "cluster": catalog.cluster,
            "host": catalog.host,
            "backup_id": newest.backup_id,
            "chain": chain,
            "verdict": "pass",
            "level": "full",
            "started_at": (newest.finished_at + timedelta(minutes=10)).isoformat(),
            "finished_at": (newest.finished_at + timedelta(minutes=20)).isoformat(),
            "timings": {"fetch_extract": 30.0, "prepare": 20.0, "copy_back": 10.0},
            "results": [
                {"name": n, "status": "pass", "reasons": [], "note": ""}
                for n in ("innochecksum", "check_table", "roll_forward")
            ],
        }
        catalog.store.put_bytes(
            catalog.object_key(newest.backup_id, REPORT_NAME), json.dumps(report).encode()
        )
    return made


def _binlogs(catalog: Catalog, made: list[Manifest], now: datetime, count: int, gap_at: int | None) -> None:
    """Binlogs numbered like the backups' binlog files: the last `count` of them, the newest
    covering up to `now`."""
    binlog = BinlogCatalog(catalog, UUID)
    first = max(len(made) - count, 0)
    for i in range(first, len(made)):
        number = i + 1
        name = f"mysql-bin.{number:06d}"
        if number == gap_at:
            gap = BinlogGap(server_uuid=UUID, first_missing=name, last_missing=name,
                            last_shipped=f"mysql-bin.{number - 1:06d}", server_oldest=f"mysql-bin.{number + 1:06d}",
                            detected_at=now)  # fmt: skip
            catalog.store.put_bytes(binlog.gap_key(gap), gap.model_dump_json().encode())
            continue
        begin = made[i].started_at
        until = made[i + 1].started_at if i + 1 < len(made) else now
        key = binlog.object_key(name, encrypted=False)
        catalog.store.put_bytes(key, b"b" * SIZE)
        m = BinlogManifest.model_validate(
            {
                "name": name, "cluster": catalog.cluster, "host": catalog.host, "server_uuid": UUID,
                "server_id": 7, "complete": True, "size": SIZE, "sha256": BINLOG_SHA, "events": 10,
                "first_event_time": begin, "last_event_time": until, "covers_until": until,
                "segments": [{"offset": 0, "raw_size": SIZE, "raw_sha256": BINLOG_SHA,
                              "object": {"key": key, "size": SIZE, "sha256": BINLOG_SHA, "raw_size": SIZE,
                                         "compression": "zstd", "encryption": "none"}}],
                "shipped_at": until,
            }
        )  # fmt: skip
        catalog.store.put_bytes(binlog.manifest_key(name), m.to_json())
