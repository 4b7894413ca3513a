"""catalog.py: manifests, chain resolution/validation, and the per-host Catalog on a LocalStore."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from manifest_factory import CLUSTER, HOST, PREFIX, SHA, make_manifest  # shared with the retention tests
from xtrabackup_provider.core.backup.abandoned import remove_abandoned
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.chain import resolve_chain, validate_chain
from xtrabackup_provider.core.catalog.lock import Holder, this_process
from xtrabackup_provider.core.catalog.manifest import (
    MAX_MANIFEST_BYTES,
    CatalogError,
    Manifest,
    parse_manifest,
)
from xtrabackup_provider.core.restore.archived import chain_keys
from xtrabackup_provider.core.storage.local import LocalStore

T0 = datetime(2026, 11, 1, 10, 30, tzinfo=UTC)


def backup_id(day: int, kind: str) -> str:
    return f"202611{day:02d}T103000Z-{'full' if kind == 'full' else 'inc'}"


def make_chain(incrementals: int, **inc_over) -> list[Manifest]:
    chain = [make_manifest(backup_id(1, "full"))]
    for day in range(2, 2 + incrementals):
        chain.append(make_manifest(backup_id(day, "inc"), parent=chain[-1], **inc_over))
    return chain


def by_id(manifests: list[Manifest]) -> dict[str, Manifest]:
    return {m.backup_id: m for m in manifests}


# ---------------------------------------------------------------------------------------------
# chains


def test_resolve_valid_full_plus_five_incrementals():
    chain = make_chain(5)
    resolved = resolve_chain(by_id(chain), chain[-1].backup_id)
    assert [m.backup_id for m in resolved] == [m.backup_id for m in chain]
    assert resolved[0].kind == "full"
    assert all(m.kind == "incremental" for m in resolved[1:])


def test_resolve_a_middle_backup_gives_its_prefix_of_the_chain():
    chain = make_chain(5)
    resolved = resolve_chain(by_id(chain), chain[2].backup_id)
    assert [m.backup_id for m in resolved] == [m.backup_id for m in chain[:3]]


def test_resolve_unknown_backup_names_it():
    with pytest.raises(CatalogError, match="20261231T000000Z-inc has no manifest in s3://b/c1/db1"):
        resolve_chain(by_id(make_chain(1)), "20261231T000000Z-inc", "s3://b/c1/db1")


def test_missing_middle_manifest_names_both_sides_of_the_link():
    chain = make_chain(5)
    missing, orphan = chain[3], chain[4]
    del_map = by_id(chain)
    del del_map[missing.backup_id]
    with pytest.raises(CatalogError) as exc:
        resolve_chain(del_map, chain[-1].backup_id, "file:///b/c1/db1")
    msg = str(exc.value)
    assert f"missing link {missing.backup_id} -> {orphan.backup_id}" in msg
    assert "file:///b/c1/db1" in msg


def test_lsn_gap_names_the_link_and_both_lsns():
    chain = make_chain(2)
    bad = make_manifest(backup_id(4, "inc"), parent=chain[-1], from_lsn=chain[-1].to_lsn + 1)
    with pytest.raises(CatalogError) as exc:
        resolve_chain(by_id([*chain, bad]), bad.backup_id)
    msg = str(exc.value)
    assert f"LSN gap in link {chain[-1].backup_id} -> {bad.backup_id}" in msg
    assert str(chain[-1].to_lsn) in msg and str(chain[-1].to_lsn + 1) in msg


def test_different_server_uuid_is_refused():
    chain = make_chain(1)
    other = "8c1c2f3e-2d1a-11ef-a3b1-0242ac120002"
    bad = make_manifest(backup_id(3, "inc"), parent=chain[-1], server_uuid=other)
    with pytest.raises(CatalogError) as exc:
        validate_chain([*chain, bad])
    assert f"link {chain[-1].backup_id} -> {bad.backup_id}" in str(exc.value)
    assert "different servers" in str(exc.value) and other in str(exc.value)


def test_engine_major_change_is_refused():
    chain = make_chain(1)
    bad = make_manifest(backup_id(3, "inc"), parent=chain[-1], engine_version="8.4.0-1", engine_major="8.4")
    with pytest.raises(
        CatalogError, match=r"engine changed from xtrabackup 8\.0 to xtrabackup 8\.4; take a new full"
    ):
        validate_chain([*chain, bad])


def test_engine_minor_upgrade_within_a_major_is_accepted():
    chain = make_chain(1)
    ok = make_manifest(backup_id(3, "inc"), parent=chain[-1], engine_version="8.0.36-28")
    validate_chain([*chain, ok])


def test_engine_flavour_change_is_refused():
    chain = make_chain(1)
    bad = make_manifest(backup_id(3, "inc"), parent=chain[-1], engine_flavour="mariabackup")
    with pytest.raises(CatalogError, match="engine changed from xtrabackup 8.0 to mariabackup 8.0"):
        validate_chain([*chain, bad])


def test_root_not_full_is_refused():
    chain = make_chain(3)
    with pytest.raises(CatalogError, match=f"chain root {chain[1].backup_id} is not a full backup"):
        validate_chain(chain[1:])


def test_child_naming_another_parent_is_refused():
    chain = make_chain(2)
    with pytest.raises(CatalogError, match=f"child names parent {chain[1].backup_id}"):
        validate_chain([chain[0], chain[2]])


def test_wrong_chain_root_is_refused():
    chain = make_chain(1)
    bad = make_manifest(backup_id(3, "inc"), parent=chain[-1], chain_root="20261001T000000Z-full")
    with pytest.raises(CatalogError, match="records chain root 20261001T000000Z-full"):
        validate_chain([*chain, bad])


def test_parent_loop_is_detected():
    full = make_manifest(backup_id(1, "full"))
    a = make_manifest(backup_id(2, "inc"), parent=full, parent_id=backup_id(3, "inc"))
    b = make_manifest(backup_id(3, "inc"), parent=full, parent_id=backup_id(2, "inc"))
    with pytest.raises(CatalogError, match="loops"):
        resolve_chain(by_id([full, a, b]), b.backup_id)


# ---------------------------------------------------------------------------------------------
# parse_manifest


def manifest_dict(**over) -> dict:
    data = json.loads(make_manifest(backup_id(1, "full")).to_json())
    data.update(over)
    return data


def parse(data: dict) -> Manifest:
    return parse_manifest(json.dumps(data).encode(), "s3://b/c1/db1/backups/x/manifest.json")


def test_parse_manifest_round_trips():
    m = make_chain(1)[-1]
    assert parse_manifest(m.to_json(), "here") == m


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"to_lsn": "lots"}, "to_lsn"),
        ({"server_id": -1}, "server_id"),
        ({"objects": "x"}, "objects"),
        ({"kind": "differential"}, "kind"),
        ({"started_at": "yesterday"}, "started_at"),
        ({"objects": []}, "objects"),
    ],
)
def test_parse_manifest_wrong_types_name_the_field_and_source(over, field):
    with pytest.raises(CatalogError) as exc:
        parse(manifest_dict(**over))
    msg = str(exc.value)
    assert msg.startswith("s3://b/c1/db1/backups/x/manifest.json: invalid manifest")
    assert field in msg


def test_parse_manifest_refuses_non_json():
    with pytest.raises(CatalogError, match="here: invalid manifest"):
        parse_manifest(b"{not json", "here")


@pytest.mark.parametrize(
    "key",
    [
        "../x",
        "a//b",
        "/backups-prod/c1/db1/backups/20261101T103000Z-full/backup",
        "c1/db1/backups/20261101T103000Z-full/../../../etc/passwd",
        "c1/./20261101T103000Z-full/x",
    ],
)
def test_parse_manifest_refuses_unsafe_object_keys(key):
    data = manifest_dict()
    data["objects"][0]["key"] = key
    with pytest.raises(CatalogError) as exc:
        parse(data)
    assert "objects.0.key" in str(exc.value)
    assert "unsafe object key" in str(exc.value)


def test_parse_manifest_refuses_object_outside_its_backup_directory():
    data = manifest_dict()
    data["objects"][0]["key"] = f"{PREFIX}/{CLUSTER}/{HOST}/backups/20261001T103000Z-full/backup.xbstream.zst"
    with pytest.raises(CatalogError, match="outside this backup's directory 20261101T103000Z-full/"):
        parse(data)


def test_parse_manifest_refuses_oversized_input_before_parsing():
    data = b" " * (MAX_MANIFEST_BYTES + 1)
    with pytest.raises(CatalogError, match=f"over the {MAX_MANIFEST_BYTES} limit"):
        parse_manifest(data, "big.json")


def test_parse_manifest_refuses_unknown_fields():
    with pytest.raises(CatalogError, match="password: Extra inputs are not permitted"):
        parse(manifest_dict(password="hunter2"))
    data = manifest_dict()
    data["objects"][0]["url"] = "http://elsewhere"
    with pytest.raises(CatalogError, match="objects.0.url"):
        parse(data)


def test_parse_manifest_refuses_full_with_parent():
    with pytest.raises(CatalogError, match="a full backup has no parent"):
        parse(manifest_dict(parent_id="20261001T103000Z-full"))


def test_parse_manifest_refuses_incremental_without_parent():
    data = json.loads(make_chain(1)[-1].to_json())
    data["parent_id"] = None
    with pytest.raises(CatalogError, match="an incremental backup needs parent_id"):
        parse(data)


def test_parse_manifest_refuses_bad_backup_id_and_names():
    with pytest.raises(CatalogError, match="backup_id"):
        parse(manifest_dict(backup_id="../../etc"))
    with pytest.raises(CatalogError, match="host"):
        parse(manifest_dict(host="db1/../db2"))


# ---------------------------------------------------------------------------------------------
# Catalog on a LocalStore


@pytest.fixture
def store(tmp_path) -> LocalStore:
    return LocalStore(tmp_path / "bucket")


@pytest.fixture
def catalog(store) -> Catalog:
    return Catalog(store, PREFIX, CLUSTER, HOST)


def store_objects(store: LocalStore, m: Manifest) -> None:
    for obj in m.objects:
        store.put_bytes(obj.key, b"x" * obj.size)


def register(store: LocalStore, catalog: Catalog, manifests: list[Manifest]) -> None:
    for m in manifests:
        store_objects(store, m)
        catalog.write(m)


def test_catalog_write_then_read_chain(store, catalog):
    chain = make_chain(5)
    register(store, catalog, chain)
    assert catalog.backup_ids() == [m.backup_id for m in chain]
    assert catalog.get(chain[2].backup_id) == chain[2]
    assert catalog.latest() == chain[-1]
    assert [m.backup_id for m in catalog.latest_chain()] == [m.backup_id for m in chain]
    assert catalog.exists(chain[0].backup_id)


def test_catalog_write_refuses_missing_object(store, catalog):
    m = make_manifest(backup_id(1, "full"))
    with pytest.raises(
        CatalogError, match=f"refusing to register {m.backup_id}: .*backup.xbstream.zst is missing"
    ):
        catalog.write(m)
    assert catalog.backup_ids() == []
    assert not catalog.exists(m.backup_id)


def test_catalog_write_refuses_object_of_wrong_size(store, catalog):
    m = make_manifest(backup_id(1, "full"), size=1000)
    store.put_bytes(m.objects[0].key, b"x" * 999)
    with pytest.raises(CatalogError, match="is 999 bytes, expected 1000"):
        catalog.write(m)
    assert catalog.backup_ids() == []


def test_backup_ids_ignore_debris_without_manifest(store, catalog):
    chain = make_chain(1)
    register(store, catalog, chain)
    debris = make_manifest(backup_id(5, "inc"), parent=chain[-1])
    store_objects(store, debris)  # a failed run: object uploaded, manifest never written
    store.put_bytes(f"{catalog.backup_dir('20261106T103000Z-full')}/nested/manifest.json", b"{}")
    (store.root / catalog.backup_dir("20261107T103000Z-full")).mkdir(parents=True)
    (store.root / catalog.backup_dir("20261107T103000Z-full") / "manifest.json.partial-1234abcd").write_text(
        "{"
    )
    assert catalog.backup_ids() == [m.backup_id for m in chain]
    assert catalog.latest() == chain[-1]


def test_catalog_of_another_host_is_not_mixed_in(store, catalog):
    register(store, catalog, make_chain(1))
    other = Catalog(store, PREFIX, CLUSTER, "db10")
    assert other.backup_ids() == []
    with pytest.raises(CatalogError, match="no backups at"):
        other.latest_chain()


@pytest.mark.parametrize(
    ("field", "value"), [("cluster", "c2"), ("host", "db2"), ("backup_id", "20261101T103001Z-full")]
)
def test_get_refuses_manifest_that_does_not_match_its_location(store, catalog, field, value):
    bid = backup_id(1, "full")
    over = {field: value}
    if field == "backup_id":
        over["chain_root"] = value
        over["objects"] = [
            {
                "key": f"{PREFIX}/{CLUSTER}/{HOST}/backups/{value}/backup.xbstream.zst",
                "size": 1,
                "sha256": SHA,
                "raw_size": 1,
                "compression": "zstd",
                "encryption": "none",
            }
        ]
    forged = make_manifest(bid, **over)
    store.put_bytes(catalog.manifest_key(bid), forged.to_json())
    with pytest.raises(CatalogError) as exc:
        catalog.get(bid)
    assert "copied or tampered with" in str(exc.value)
    assert catalog.manifest_key(bid) in str(exc.value)


def test_get_missing_manifest_names_the_key(catalog):
    with pytest.raises(CatalogError, match="backup 20261101T103000Z-full has no manifest at file://"):
        catalog.get(backup_id(1, "full"))


def test_manifests_collects_unreadable_ones_as_problems(store, catalog):
    chain = make_chain(1)
    register(store, catalog, chain)
    store.put_bytes(catalog.manifest_key(backup_id(9, "inc")), b"{broken")
    problems: list[str] = []
    assert catalog.manifests(problems) == chain
    assert len(problems) == 1 and backup_id(9, "inc") in problems[0]
    with pytest.raises(CatalogError, match="invalid manifest"):
        catalog.manifests()


def test_catalog_chain_with_missing_manifest_names_the_link(store, catalog):
    chain = make_chain(3)
    register(store, catalog, chain)
    store.delete([catalog.manifest_key(chain[1].backup_id)])
    with pytest.raises(CatalogError, match=f"missing link {chain[1].backup_id} -> {chain[2].backup_id}"):
        catalog.chain(chain[-1].backup_id)


def test_get_refuses_manifest_naming_another_hosts_object(store, catalog):
    bid = backup_id(1, "full")
    foreign = f"{PREFIX}/{CLUSTER}/db2/backups/{bid}/backup.xbstream.zst"
    m = make_manifest(
        bid,
        objects=[
            {
                "key": foreign,
                "size": 1,
                "sha256": SHA,
                "raw_size": 1,
                "compression": "zstd",
                "encryption": "none",
            }
        ],
    )
    store.put_bytes(foreign, b"x")
    store.put_bytes(catalog.manifest_key(bid), m.to_json())
    with pytest.raises(CatalogError):
        catalog.get(bid)


# -- K-part manifests (format_version 2) ----------------------------------------------------------------


def _parts_manifest(roles: list[tuple[str | None, int | None]], version: int = 2) -> dict:
    m = json.loads(make_manifest("20261101T103000Z-full").to_json())
    obj = m["objects"][0]
    names = {("tail", None): "backup.tail.xbstream.zst"}
    m["format_version"] = version
    m["objects"] = [
        {
            **obj,
            "key": obj["key"].replace(
                "backup.xbstream.zst", names.get((r, p), f"backup.p{p}of2.xbstream.zst")
            ),
            "role": r,
            "part": p,
        }
        for r, p in roles
    ]
    return m


def test_a_k_part_manifest_lists_its_parts_in_order_then_its_tail():
    good = parse_manifest(
        json.dumps(_parts_manifest([("part", 0), ("part", 1), ("tail", None)])).encode(), "m"
    )
    assert [o.key.rsplit("/", 1)[-1] for o in good.streams] == [
        "backup.p0of2.xbstream.zst",
        "backup.p1of2.xbstream.zst",
        "backup.tail.xbstream.zst",
    ]
    assert json.loads(good.to_json())["objects"][2]["role"] == "tail"
    for bad in (
        [("part", 0), ("tail", None)],  # one part is a format 1 backup
        [("part", 1), ("part", 0), ("tail", None)],  # out of order
        [("part", 0), ("part", 1)],  # no tail
        [("part", 0), ("part", 2), ("tail", None)],  # a part missing from the numbering
    ):
        with pytest.raises(CatalogError, match="lists its data parts 0..K-1"):
            parse_manifest(json.dumps(_parts_manifest(bad)).encode(), "m.json")
    with pytest.raises(CatalogError, match="format_version 1 manifest have no role or part"):
        parse_manifest(
            json.dumps(_parts_manifest([("part", 0), ("part", 1), ("tail", None)], 1)).encode(), "m"
        )


def _good_parts() -> dict:
    return _parts_manifest([("part", 0), ("part", 1), ("tail", None)])


def _encrypted(obj: dict, recipients: list[str]) -> dict:
    return {**obj, "encryption": "gpg", "recipients": recipients, "key": obj["key"] + ".gpg"}


# Manifests a restore cannot follow as written (issue 33 item 3): each was accepted.
UNRESTORABLE = {
    # a restore decompresses every part as part 0 says
    "parts that disagree on compression": lambda m: m["objects"][1].update(compression="none"),
    # a restore decrypts with the key part 0 names
    "parts that disagree on encryption": lambda m: m["objects"].__setitem__(
        1, _encrypted(m["objects"][1], ["AB" * 20])
    ),
    "parts encrypted for different keys": lambda m: m.update(
        objects=[_encrypted(o, ["AB" * 20 if n else "CD" * 20]) for n, o in enumerate(m["objects"])]
    ),
    # both would be fetched from one object
    "two parts sharing one key": lambda m: m["objects"][1].update(key=m["objects"][0]["key"]),
}


@pytest.mark.parametrize("change", UNRESTORABLE.values(), ids=UNRESTORABLE.keys())
def test_a_manifest_a_restore_cannot_follow_is_refused_by_name(change):
    parse_manifest(json.dumps(_good_parts()).encode(), "m.json")
    bad = _good_parts()
    change(bad)
    with pytest.raises(CatalogError, match="m.json: .*(part|key)"):
        parse_manifest(json.dumps(bad).encode(), "m.json")


def test_an_object_at_a_segment_key_of_a_segmented_object_is_refused():
    """Object 0's second segment is <key>.s001: another object stored there would be read as it."""
    data = manifest_dict()
    obj = data["objects"][0]
    half = obj["size"] // 2
    obj["segments"] = [{"size": half, "sha256": "cd" * 32}, {"size": obj["size"] - half, "sha256": "ef" * 32}]
    parse_manifest(json.dumps(data).encode(), "m.json")
    data["objects"].append({**obj, "segments": None, "key": obj["key"] + ".s001"})
    with pytest.raises(CatalogError, match=r"m.json: .*\.s001"):
        parse_manifest(json.dumps(data).encode(), "m.json")


KEY_NAMES = ["backup.p0of3.xbstream.zst", "backup.p1of3.xbstream.zst", "backup.tail.xbstream.zst"]


@st.composite
def _k_part_objects(draw) -> list[dict]:
    """K data parts and a tail, each written alike or not, stored at keys that may collide (with
    each other or with another object's segments)."""
    base = _good_parts()["objects"][0]
    directory = base["key"].rsplit("/", 1)[0]
    k = draw(st.integers(2, 3))
    roles = [("part", i) for i in range(k)] + [("tail", None)]
    pool = KEY_NAMES + [name + ".s001" for name in KEY_NAMES]
    objects = []
    for n, (role, part) in enumerate(roles):
        obj = {**base, "role": role, "part": part, "key": f"{directory}/{KEY_NAMES[min(n, 2)]}_{n}"}
        if draw(st.integers(0, 3)) == 0:
            obj["key"] = f"{directory}/{draw(st.sampled_from(pool))}"
        obj["compression"] = draw(st.sampled_from(["zstd", "zstd", "none"]))
        obj["encryption"] = draw(st.sampled_from(["none", "none", "gpg"]))
        obj["recipients"] = draw(
            st.sampled_from([[], ["AB" * 20], ["CD" * 20, "AB" * 20], ["AB" * 20, "CD" * 20]])
        )
        if draw(st.booleans()):
            half = obj["size"] // 2
            obj["segments"] = [
                {"size": half, "sha256": "cd" * 32},
                {"size": obj["size"] - half, "sha256": "ef" * 32},
            ]
        objects.append(obj)
    return objects


def _restorable(objects: list[dict]) -> bool:
    """What a restore needs to follow a K-part manifest: one way to decode every part, and one object
    behind every key it reads (a segmented object is also at <key>.s001)."""
    alike = {(o["compression"], o["encryption"], tuple(sorted(o["recipients"]))) for o in objects}
    keys = [
        o["key"] + suffix for o in objects for suffix in ([""] + ([".s001"] if o.get("segments") else []))
    ]
    return len(alike) == 1 and len(keys) == len(set(keys))


@settings(derandomize=True, max_examples=200, deadline=None)
@given(_k_part_objects())
def test_a_k_part_manifest_is_read_exactly_when_a_restore_can_follow_it(objects):
    data = {**_good_parts(), "objects": objects}
    try:
        m = parse_manifest(json.dumps(data).encode(), "m.json")
    except CatalogError as exc:
        assert not _restorable(objects), exc
        assert str(exc).startswith("m.json: ") and "\n" not in str(exc).strip()
        return
    assert _restorable(objects)
    assert len({key for obj in m.stored_objects for key in obj.keys}) == sum(
        len(o.keys) for o in m.stored_objects
    )


def test_a_one_stream_manifest_is_written_as_before_k_parts():
    """Workers from before K parts forbid unknown fields: a format 1 manifest must not grow any."""
    m = make_manifest("20261101T103000Z-full")
    on_disk = json.loads(m.to_json())
    assert on_disk["format_version"] == 1 and not {"role", "part"} & set(on_disk["objects"][0])
    assert m.streams == m.objects


def test_a_segmented_object_names_every_segment_and_its_sizes_must_add_up():
    data = manifest_dict()
    obj = data["objects"][0]
    first = obj["size"] // 2
    obj["segments"] = [{"size": first, "sha256": SHA}, {"size": obj["size"] - first, "sha256": SHA}]
    m = parse(data)
    assert m.objects[0].keys == [obj["key"], obj["key"] + ".s001"]
    assert [p.size for p in m.objects[0].pieces()] == [first, obj["size"] - first]
    assert json.loads(m.to_json())["objects"][0]["segments"] == obj["segments"]
    assert "segments" not in json.loads(make_manifest(backup_id(1, "full")).to_json())["objects"][0]

    assert chain_keys([m]) == m.objects[0].keys  # what a Glacier restore request asks for

    obj["segments"][1]["size"] += 1
    with pytest.raises(CatalogError, match=r"the segments of .*backup.* hold \d+ bytes, the object \d+"):
        parse(data)
    obj["segments"] = obj["segments"][:1]
    with pytest.raises(CatalogError, match="segments"):
        parse(data)


# ---------------------------------------------------------------------------------------------
# a killed run's attempt, removed by the run that took its lock


def _holder(**over: object) -> Holder:
    fields: dict[str, object] = {"token": "t", "owner": "o", "hostname": "h", "pid": 1, "acquired_at": T0.isoformat(),
                                 "expires_at": T0.isoformat(), **this_process()}  # fmt: skip
    return Holder(**{**fields, **over})  # type: ignore[arg-type]


def test_a_holder_is_proven_dead_only_by_its_own_machine_s_process_table():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    started = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    alive = _holder(pid=child.pid, pid_start=int(started))
    assert not alive.gone()
    child.kill()
    child.wait()
    assert alive.gone()
    assert not _holder(pid=child.pid, pid_start=int(started), machine="another-host/boot/pid:[1]").gone()
    assert not _holder(pid=child.pid, pid_start=None).gone()  # a lock of an older release proves nothing
    assert not _holder().gone()  # this process


def test_the_dead_holder_s_attempt_is_removed_and_nothing_else(tmp_path):
    catalog = Catalog(LocalStore(tmp_path), PREFIX, CLUSTER, HOST)
    older = "20261101T102959Z-full"  # before the holder took the lock: not proven to be its attempt
    registered = "20261101T103000Z-full"
    attempt = "20261101T103005Z-inc"
    for bid, names in ((older, ["backup.xbstream.zst.gpg"]), (registered, ["backup.xbstream.zst.gpg", "manifest.json"]),
                       (attempt, ["part-0.xbstream.zst.gpg", "option-files.tar.zst.gpg"])):  # fmt: skip
        for name in names:
            catalog.store.put_bytes(catalog.object_key(bid, name), b"x")
    dead = _holder(pid_start=None)
    assert remove_abandoned(catalog, None) == []
    assert remove_abandoned(catalog, _holder(purpose="retention")) == []
    assert remove_abandoned(catalog, dead) == [attempt]
    left = sorted(i.key.split("/")[-2] for i in catalog.store.list(catalog.host_prefix + "/backups/"))
    assert left == [older, registered, registered]
