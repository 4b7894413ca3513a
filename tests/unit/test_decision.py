"""decision.py: full or incremental, from the catalog, the policy and the clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from xtrabackup_provider.core.backup.decide import ChainPolicy, decide
from xtrabackup_provider.core.catalog.manifest import Manifest

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
FULL_AT = datetime(2026, 11, 1, 10, 30, tzinfo=UTC)
POLICY = ChainPolicy(full_every=timedelta(days=7), max_chain_length=6, max_incremental_ratio=0.5)


def manifest(day: float, parent: Manifest | None = None, stored: int = 100, **over) -> Manifest:
    """Taken `day` days after FULL_AT; a full unless `parent` is given."""
    started = FULL_AT + timedelta(days=day)
    bid = started.strftime("%Y%m%dT%H%M%SZ") + ("-inc" if parent else "-full")
    from_lsn = parent.to_lsn if parent else 0
    fields = {
        "backup_id": bid,
        "cluster": "c1",
        "host": "db1",
        "kind": "incremental" if parent else "full",
        "parent_id": parent.backup_id if parent else None,
        "chain_root": parent.chain_root if parent else bid,
        "engine_flavour": "xtrabackup",
        "engine_version": "8.0.35-33",
        "engine_major": "8.0",
        "server_uuid": UUID,
        "server_id": 1,
        "from_lsn": from_lsn,
        "to_lsn": from_lsn + 10,
        "last_lsn": from_lsn + 10,
        "started_at": started,
        "finished_at": started + timedelta(minutes=1),
        "objects": [
            {
                "key": f"c1/db1/backups/{bid}/backup.xbstream.zst",
                "size": stored,
                "sha256": "0" * 64,
                "raw_size": stored,
                "compression": "zstd",
                "encryption": "none",
            }
        ],
        "raw_bytes": stored,
        "stored_bytes": stored,
    }
    fields.update(over)
    return Manifest.model_validate(fields)


def chain(incrementals: int, inc_size: int = 10) -> list[Manifest]:
    out = [manifest(0, stored=1000)]
    for i in range(1, incrementals + 1):
        out.append(manifest(i / 4, parent=out[-1], stored=inc_size))
    return out


def at(days: float) -> datetime:
    return FULL_AT + timedelta(days=days)


def test_no_backups_means_full():
    d = decide([], POLICY, at(0))
    assert (d.kind, d.parent, d.parent_id) == ("full", None, None)
    assert "no backup" in d.reason


def test_chain_within_policy_continues_from_the_last_incremental():
    manifests = chain(3)
    d = decide(list(reversed(manifests)), POLICY, at(3), server_uuid=UUID, engine=("xtrabackup", "8.0"))
    assert d.kind == "incremental"
    assert d.parent == manifests[-1]
    assert d.parent_id == manifests[-1].backup_id
    assert manifests[0].backup_id in d.reason


def test_lone_full_gets_an_incremental_on_it():
    full = manifest(0)
    d = decide([full], POLICY, at(1))
    assert (d.kind, d.parent_id) == ("incremental", full.backup_id)


def test_full_too_old_means_full_and_names_full_every():
    manifests = chain(1)
    assert decide(manifests, POLICY, at(6.9)).kind == "incremental"
    d = decide(manifests, POLICY, at(7))
    assert d.kind == "full" and d.parent is None
    assert "full_every" in d.reason and "7.0d" in d.reason
    assert manifests[0].backup_id in d.reason


def test_chain_at_max_chain_length_means_full():
    assert decide(chain(5), POLICY, at(3)).kind == "incremental"
    d = decide(chain(6), POLICY, at(3))
    assert d.kind == "full"
    assert "max_chain_length 6" in d.reason and "6 incrementals" in d.reason


def test_last_incremental_over_ratio_means_full():
    manifests = chain(1, inc_size=500)  # exactly 50% of the full: still fine
    assert decide(manifests, POLICY, at(1)).kind == "incremental"
    manifests = chain(2, inc_size=501)
    d = decide(manifests, POLICY, at(1))
    assert d.kind == "full"
    assert "max_incremental_ratio" in d.reason and "50%" in d.reason


def test_broken_newest_chain_means_full_with_the_missing_link():
    manifests = chain(3)
    del manifests[1]
    d = decide(manifests, POLICY, at(2))
    assert d.kind == "full" and d.parent is None
    assert "not valid" in d.reason
    assert chain(3)[1].backup_id in d.reason


def test_lsn_gap_in_newest_chain_means_full():
    full = manifest(0)
    bad = manifest(1, parent=full, from_lsn=full.to_lsn + 7)
    d = decide([full, bad], POLICY, at(2))
    assert d.kind == "full"
    assert "LSN gap" in d.reason


def test_server_uuid_change_means_full():
    d = decide(chain(2), POLICY, at(2), server_uuid="8c1c2f3e-2d1a-11ef-a3b1-0242ac120002")
    assert d.kind == "full"
    assert "server changed" in d.reason and UUID in d.reason


def test_backup_tool_major_change_means_full():
    d = decide(chain(2), POLICY, at(2), engine=("xtrabackup", "8.4"))
    assert d.kind == "full"
    assert "xtrabackup 8.4" in d.reason


def test_newest_chain_decides_even_if_an_older_one_is_broken():
    old_full = manifest(0)
    old_inc = manifest(1, parent=old_full, from_lsn=999)  # broken, but superseded
    new_full = manifest(2, to_lsn=5000, last_lsn=5000)
    d = decide([old_inc, new_full, old_full], POLICY, at(3))
    assert (d.kind, d.parent_id) == ("incremental", new_full.backup_id)
