"""core/catalog/targets.py and core/restore/sources.py on directories: which target a read uses,
when a fetch falls back to the next target and when it must not (the real streams, endpoints and
damage are in tests/integration/test_targets.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import stored_backup
from manifest_factory import CLUSTER, HOST, PREFIX
from xtrabackup_provider.core.backup.copies import CopyTarget, copy_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import CatalogError, Manifest
from xtrabackup_provider.core.catalog.targets import Source, Targets, list_backups
from xtrabackup_provider.core.pipeline.process import PipelineError
from xtrabackup_provider.core.restore.sources import NoIntactSource, backup_on, fetch_with_fallback
from xtrabackup_provider.core.restore.verify import StoredObjectDamaged
from xtrabackup_provider.core.storage.local import LocalStore

FULL = "20261101T103000Z-full"


@pytest.fixture
def targets(tmp_path: Path) -> Targets:
    """`primary` and `offsite`, both holding the same full backup."""
    primary = Catalog(LocalStore(tmp_path / "primary"), PREFIX, CLUSTER, HOST)
    offsite = Catalog(LocalStore(tmp_path / "offsite"), "far", CLUSTER, HOST)
    m = stored_backup(primary, FULL)
    copy_backup(primary, offsite, m, CopyTarget("offsite", offsite.store, "far"), "primary")
    return Targets([Source("primary", primary), Source("offsite", offsite)])


def _fetch(targets: Targets, fail: dict[str, Exception]) -> tuple[str, list[str]]:
    """Fetch the full through fetch_with_fallback; `fail`: target name -> what its fetch raises.
    Returns the target it came from and the targets whose partial writes were cleared."""
    m = targets.first.catalog.get(FULL)
    cleared: list[str] = []
    tried: list[str] = []

    def fetch(source: Source, here: Manifest) -> str:
        tried.append(source.name)
        assert here.backup_object.key.startswith(source.catalog.backup_dir(FULL))  # its own keys
        if source.name in fail:
            raise fail[source.name]
        return source.name

    got = fetch_with_fallback(
        targets, f"backup {FULL}", backup_on(targets.first, m), fetch, lambda: cleared.append(tried[-1])
    )
    return got, cleared


def test_a_stored_object_that_is_damaged_comes_from_the_next_target_with_one_note(targets):
    key = targets.first.catalog.get(FULL).backup_object.key
    said = "mbstream -x failed: invalid checksum; its sha256 ... differs from the manifest's"
    got, cleared = _fetch(targets, {"primary": StoredObjectDamaged(f"backup {FULL}: {key}: {said}")})
    assert (got, cleared) == ("offsite", ["primary"])
    assert targets.notes == [f"backup {FULL}: fetched from target offsite because primary: {said}"]


def test_a_failure_with_the_object_intact_is_raised_and_no_other_target_is_tried(targets):
    local = PipelineError("mbstream -x failed: No space left on device; its sha256 matches the manifest's")
    with pytest.raises(PipelineError, match="No space left"):
        _fetch(targets, {"primary": local})
    assert targets.notes == []


def test_an_object_missing_on_the_first_target_is_fetched_from_the_next(targets):
    primary = targets.first.catalog
    primary.store.delete([primary.get(FULL).backup_object.key])
    got, cleared = _fetch(targets, {})
    assert (got, cleared) == ("offsite", [])
    assert "because primary: file://" in targets.notes[0] and "is missing" in targets.notes[0]


def test_a_copy_of_another_object_never_stands_in(targets):
    offsite = targets.sources[1].catalog
    other = stored_backup(offsite, FULL.replace("1030", "1031"))  # another backup's bytes ...
    m = offsite.get(FULL)
    m = Manifest.model_validate(
        m.model_dump() | {"objects": [other.backup_object.model_copy(update={"key": m.backup_object.key})]}
    )
    offsite.store.put_bytes(offsite.manifest_key(FULL), m.to_json())  # ... under this backup's id
    with pytest.raises(NoIntactSource) as err:
        _fetch(targets, {"primary": StoredObjectDamaged("gpg: encrypted message has been manipulated")})
    assert f"offsite: its {FULL} is another object (sha256 differs)" in str(err.value)


def test_with_one_target_the_fetch_error_is_raised_as_it_is(targets):
    alone = Targets([targets.first])
    with pytest.raises(StoredObjectDamaged, match="manipulated"):
        _fetch(alone, {"primary": StoredObjectDamaged("gpg: encrypted message has been manipulated")})


def test_read_uses_the_first_target_that_answers_and_puts_it_first(targets):
    empty = Catalog(LocalStore(targets.first.catalog.store.root.parent / "empty"), PREFIX, CLUSTER, HOST)
    both = Targets([Source("primary", empty), targets.sources[1]])
    chain = both.read("the chain of the newest backup", lambda c: c.latest_chain())
    assert [m.backup_id for m in chain] == [FULL] and both.first.name == "offsite"
    assert both.notes == [
        f"the chain of the newest backup: read from target offsite because primary: no backups at {empty.describe()}"
    ]
    nothing = Targets([Source("primary", empty), Source("vault", empty)])
    with pytest.raises(CatalogError, match="no backups at"):
        nothing.read("the chain", lambda c: c.latest_chain())


def test_list_backups_lists_what_only_a_copy_holds_and_where_each_is(targets, tmp_path):
    primary = targets.first.catalog
    newer = stored_backup(primary, "20261102T103000Z-full")
    primary.store.delete([primary.manifest_key(FULL)])  # the older one is on offsite only now
    problems: list[str] = []
    rows, found = list_backups(targets, problems)
    assert [(r["backup_id"], r["targets"]) for r in rows] == [
        (FULL, ["offsite"]),
        (newer.backup_id, ["primary"]),
    ]
    assert found == {
        "primary": {"location": primary.describe(), "backups": 1},
        "offsite": {"location": targets.sources[1].catalog.describe(), "backups": 1},
    }
    assert problems == []
