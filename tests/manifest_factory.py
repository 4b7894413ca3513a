"""A factory for valid `core.catalog.manifest.Manifest` objects, shared by unit tests and benchmarks.

No I/O and no fixtures: it builds manifests in memory. Object keys follow the catalog layout
`<PREFIX>/<CLUSTER>/<HOST>/backups/<backup_id>/backup.xbstream.zst`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from xtrabackup_provider.core.binlog.timeline import Timeline
from xtrabackup_provider.core.catalog.manifest import Manifest

PREFIX = "backups-prod"
CLUSTER = "c1"
HOST = "db1"
UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
SHA = "ab" * 32


def make_manifest(
    bid: str,
    *,
    parent: Manifest | None = None,
    size: int = 1000,
    storage_class: str = "STANDARD",
    object_lock_until: datetime | None = None,
    **over: Any,
) -> Manifest:
    """A valid manifest; an incremental continues `parent` (LSNs, chain root) unless overridden.

    Its start time is the one encoded in `bid` (e.g. 20261101T103000Z-full).
    """
    kind = "incremental" if parent else "full"
    from_lsn = parent.to_lsn if parent else 0
    started = datetime.strptime(bid[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    fields = {
        "backup_id": bid,
        "cluster": CLUSTER,
        "host": HOST,
        "kind": kind,
        "parent_id": parent.backup_id if parent else None,
        "chain_root": parent.chain_root if parent else bid,
        "engine_flavour": "xtrabackup",
        "engine_version": "8.0.35-33",
        "engine_major": "8.0",
        "server_uuid": UUID,
        "server_id": 7,
        "from_lsn": from_lsn,
        "to_lsn": from_lsn + 5000,
        "last_lsn": from_lsn + 5009,
        "started_at": started,
        "finished_at": started + timedelta(minutes=5),
        "objects": [
            {
                "key": f"{PREFIX}/{CLUSTER}/{HOST}/backups/{bid}/backup.xbstream.zst",
                "size": size,
                "sha256": SHA,
                "raw_size": size * 3,
                "compression": "zstd",
                "encryption": "none",
                "storage_class": storage_class,
                "object_lock_until": object_lock_until,
            }
        ],
        "raw_bytes": size * 3,
        "stored_bytes": size,
    }
    fields.update(over)
    return Manifest.model_validate(fields)


def make_timeline(**over: Any) -> Timeline:
    """A valid timeline record: mariadb-h-3306-2 promoted from mariadb-h-3306-1 at 0-1-14."""
    fields: dict[str, Any] = {
        "cluster": CLUSTER,
        "host": HOST,
        "server_uuid": "mariadb-h-3306-2",
        "server_id": 2,
        "parent_server_uuid": "mariadb-h-3306-1",
        "fork_gtid": "0-1-14",
        "binlog_state": "0-1-14,0-2-1000000",
        "start_gtid": "0-2-1000000",
        "promoted_at": datetime(2026, 12, 1, tzinfo=UTC),
    }
    return Timeline(**(fields | over))
