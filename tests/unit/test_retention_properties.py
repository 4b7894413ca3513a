"""Property tests of the retention planner and its apply step over random catalogs.

Each example builds a host's catalog in memory: up to hundreds of chains at random spacing,
some damaged (a manifest missing or unreadable, an LSN gap, another server), random storage
classes and Object Lock dates, restore reports, debris, hourly-ish binlogs, a random policy
and a random clock. The invariants are checked against independent oracles (per-backup
`resolve_chain`, plain period arithmetic), not against the planner's own helpers.
"""

from __future__ import annotations

import json
import os
import random
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from manifest_factory import CLUSTER, HOST, PREFIX, UUID, make_manifest
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.chain import resolve_chain
from xtrabackup_provider.core.catalog.manifest import CatalogError, Manifest
from xtrabackup_provider.core.retention.apply import apply_plan, plan_host
from xtrabackup_provider.core.retention.model import MIN_STORAGE, BinlogItem, Plan, RetentionPolicy
from xtrabackup_provider.core.retention.plan import plan_retention
from xtrabackup_provider.core.storage.base import GiB, ObjectInfo, StorageError
from xtrabackup_provider.core.storage.local import LocalStore

T0 = datetime(2024, 1, 1, tzinfo=UTC)
FMT = "%Y%m%dT%H%M%SZ"
BACKUPS = f"{PREFIX}/{CLUSTER}/{HOST}/backups/"
OTHER_UUID = "8c1c2f3e-2d1a-11ef-a3b1-0242ac120002"
DAY = timedelta(days=1)
SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]

# -- random catalogs ---------------------------------------------------------------------------

chain_specs = st.fixed_dictionaries(
    {
        "gap_h": st.one_of(st.integers(1, 48), st.integers(1, 24 * 40)),
        "incs": st.integers(0, 6),
        "step_h": st.integers(1, 48),
        "damage": st.sampled_from(["ok"] * 8 + ["dropped", "unreadable", "lsn_gap", "other_server"]),
        "damage_at": st.integers(0, 6),
        "klass": st.sampled_from(
            ["STANDARD", "STANDARD", "STANDARD_IA", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE"]
        ),
        "lock_days": st.one_of(st.none(), st.none(), st.none(), st.integers(-30, 400)),
        "lock_by_head": st.booleans(),
        "verified_at": st.one_of(st.none(), st.none(), st.integers(0, 6)),
        "debris_h": st.one_of(st.none(), st.none(), st.integers(0, 24 * 30)),
        "binlog_info": st.booleans(),  # False: the manifests record no binlog position
    }
)
policies = st.builds(
    RetentionPolicy,
    keep_last_chains=st.one_of(st.none(), st.integers(1, 3), st.integers(1, 3), st.integers(1, 8)),
    daily=st.one_of(st.just(0), st.integers(0, 14)),
    weekly=st.one_of(st.just(0), st.integers(0, 8)),
    monthly=st.one_of(st.just(0), st.integers(0, 12)),
    yearly=st.one_of(st.just(0), st.integers(0, 3)),
    min_age_days=st.floats(0, 10),
    pitr_days=st.one_of(st.just(0.0), st.floats(0, 30)),
    debris_grace_days=st.floats(1 / 24, 14),
)


@dataclass
class World:
    manifests: list[Manifest]
    listing: list[ObjectInfo]
    binlogs: list[BinlogItem]
    verified: set[str]
    locks: dict[str, datetime]
    policy: RetentionPolicy
    now: datetime
    reports: list[str] = field(default_factory=list)  # backup ids with a restore-report.json that passes

    def plan(self, **over) -> Plan:
        args = (
            dict(verified=self.verified, listing=self.listing, backups_prefix=BACKUPS, locks=self.locks)
            | over
        )
        return plan_retention(self.manifests, self.binlogs, self.policy, self.now, **args)


def _info(key: str, size: int, klass: str, when: datetime) -> ObjectInfo:
    return ObjectInfo(key, size, klass, when)


def _binlog_name(when: datetime, period: timedelta) -> str:
    return f"mysql-bin.{1 + int((when - T0) / period):06d}"


def build_world(
    specs: list[dict], policy: RetentionPolicy, now_h: int, loose: bool, skew_h: int = 0
) -> World:
    """`now_h`: the clock, in hours after the newest backup (negative: a clock behind the catalog).
    `skew_h`: how far the database's clock (binlog event times) is off the workers' (backup times)."""
    period = max(
        timedelta(hours=6), sum((timedelta(hours=s["gap_h"] + 6 * 48) for s in specs), timedelta()) / 150
    )
    w = World([], [], [], set(), {}, policy, T0)
    start = T0
    for n, spec in enumerate(specs):
        start += timedelta(hours=spec["gap_h"])
        start = _add_chain(w, spec, start, period, n) + timedelta(hours=1)
    end = start + timedelta(days=2)
    for i in range(int((end - T0) / period) + 1):
        first = T0 + i * period + timedelta(hours=skew_h)
        key = f"{PREFIX}/{CLUSTER}/{HOST}/binlogs/{UUID}/mysql-bin.{i + 1:06d}.zst"
        w.binlogs.append(
            BinlogItem(UUID, f"mysql-bin.{i + 1:06d}", first, first + period - timedelta(seconds=1), 10**7,
                       "STANDARD", key, (key + ".json",))
        )  # fmt: skip
    if loose:
        w.listing.append(_info(BACKUPS + "README.txt", 10, "STANDARD", T0))
    w.now = start + timedelta(hours=now_h)
    w.verified.add("29991231T000000Z-full")  # a report for a backup that is gone changes nothing
    return w


def _add_chain(w: World, spec: dict, start: datetime, period: timedelta, n: int) -> datetime:
    members: list[Manifest] = []
    lock = start + timedelta(days=spec["lock_days"]) if spec["lock_days"] is not None else None
    for k in range(spec["incs"] + 1):
        when = start + timedelta(hours=k * spec["step_h"])
        over: dict = {"binlog_file": _binlog_name(when, period), "binlog_position": 4}
        if not spec["binlog_info"]:
            over = {}
        if k and k == spec["damage_at"] and spec["damage"] == "lsn_gap":
            over["from_lsn"] = members[-1].to_lsn + 1
        if k and k == spec["damage_at"] and spec["damage"] == "other_server":
            over["server_uuid"] = OTHER_UUID
        size = 2 * GiB if k == 0 else GiB // 4
        m = make_manifest(
            when.strftime(FMT) + ("-inc" if k else "-full"),
            parent=members[-1] if k else None,
            size=size,
            storage_class=spec["klass"],
            object_lock_until=lock if lock and k == 0 and not spec["lock_by_head"] else None,
            **over,
        )
        members.append(m)
        _list_backup(w, m, spec, k, lock)
    if spec["debris_h"] is not None:
        when = start + timedelta(hours=spec["debris_h"])
        w.listing.append(
            _info(f"{BACKUPS}{when.strftime(FMT)}-full-d{n}/backup.xbstream.zst", 99, "STANDARD", when)
        )
    return members[-1].finished_at


def _list_backup(w: World, m: Manifest, spec: dict, k: int, lock: datetime | None) -> None:
    damaged = k == spec["damage_at"] and spec["damage"] in ("dropped", "unreadable")
    obj = m.backup_object
    w.listing.append(_info(obj.key, obj.size, obj.storage_class, m.finished_at))
    directory = obj.key.rsplit("/", 1)[0]
    if not damaged or spec["damage"] == "unreadable":
        w.listing.append(_info(f"{directory}/manifest.json", 2000, "STANDARD", m.finished_at))
    if not damaged:
        w.manifests.append(m)
    if lock and k == 0 and spec["lock_by_head"]:
        w.locks[obj.key] = lock
    if spec["verified_at"] == k:
        w.verified.add(m.backup_id)
        w.reports.append(m.backup_id)
        w.listing.append(_info(f"{directory}/restore-report.json", 300, "STANDARD", m.finished_at + DAY))


def world_strategy(chains: tuple[int, int], clock_days: int, loose: bool = True) -> st.SearchStrategy[World]:
    """Catalogs of `chains` (min, max) chains; the clock near the newest backup half the time,
    else up to `clock_days` after it; a database clock up to 12 h off the workers'."""
    return st.builds(
        build_world,
        st.lists(chain_specs, min_size=chains[0], max_size=chains[1]),
        policies,
        st.one_of(st.integers(-24 * 5, 24 * 20), st.integers(-24 * 30, 24 * clock_days)),
        st.booleans() if loose else st.just(False),
        st.integers(-12, 12),
    )


worlds = world_strategy((3, 40), 400)
big_worlds = world_strategy((100, 300), 800)
small_worlds = world_strategy((1, 8), 100, loose=False)

# -- oracles -----------------------------------------------------------------------------------


def restorable_ids(manifests: list[Manifest]) -> set[str]:
    by_id = {m.backup_id: m for m in manifests}
    ok = set()
    for bid in by_id:
        try:
            resolve_chain(by_id, bid)
        except CatalogError:
            continue
        ok.add(bid)
    return ok


def orphans(by_id: dict[str, Manifest]) -> set[str]:
    """Backups with an ancestor that has no manifest."""
    out = set()
    for bid, m in by_id.items():
        while m.parent_id and m.parent_id in by_id:
            m = by_id[m.parent_id]
        if m.parent_id:
            out.add(bid)
    return out


def outcome(plan: Plan) -> dict[tuple[str, str], str]:
    return {(i.kind, i.name): i.action for i in plan.items}


def kept_backups(plan: Plan) -> set[str]:
    return {i.name for i in plan.items if i.kind == "backup" and i.action == "keep"}


def lock_dates(w: World) -> dict[str, datetime]:
    dates = dict(w.locks)
    for m in w.manifests:
        for o in m.objects:
            if o.object_lock_until:
                dates[o.key] = o.object_lock_until
    return dates


def check_invariants(w: World, plan: Plan) -> None:
    by_id = {m.backup_id: m for m in w.manifests}
    items = {(i.kind, i.name): i for i in plan.items}
    assert len(items) == len(plan.items), "an item appears twice"
    assert all(i.reason and i.action in ("keep", "delete") for i in plan.items)
    _check_coverage(w, plan, by_id)
    kept = kept_backups(plan)
    if not w.policy.configured:
        assert not plan.deletes, "the default policy must keep everything"
        return
    _check_backups(w, kept, by_id)
    _check_binlogs(w, plan, kept, by_id)
    _check_debris_and_locks(w, plan)


def _check_coverage(w: World, plan: Plan, by_id: dict[str, Manifest]) -> None:
    owner: dict[str, str] = {}
    for item in plan.items:
        for key in item.keys:
            assert key not in owner, f"{key} belongs to {owner[key]} and {item.name}"
            owner[key] = item.name
    assert {i.key for i in w.listing} <= set(owner), "a listed object is in no item"
    assert {i.name for i in plan.items if i.kind == "backup"} >= set(by_id)
    assert {i.name for i in plan.items if i.kind == "binlog"} == {
        f"{b.server_uuid}/{b.name}" for b in w.binlogs
    }
    for item in plan.items:
        if item.kind == "backup" and item.name in by_id:
            assert item.keys[0].endswith(f"{item.name}/manifest.json"), "the manifest must be deleted first"


def _check_backups(w: World, kept: set[str], by_id: dict[str, Manifest]) -> None:
    policy, now = w.policy, w.now
    for bid in kept & set(by_id):
        parent = by_id[bid].parent_id
        assert parent not in by_id or parent in kept, f"kept {bid} lost its parent {parent}"
    restorable = restorable_ids(w.manifests)
    kept_by_id = {b: by_id[b] for b in kept & set(by_id)}
    for bid in restorable & kept:
        resolve_chain(kept_by_id, bid)  # every kept chain still validates after the deletions
    assert orphans(by_id) <= kept, "a backup whose ancestor has no manifest was deleted"
    newest_ok = max((by_id[b] for b in restorable), key=lambda m: (m.started_at, m.backup_id), default=None)
    for m in w.manifests:
        if newest_ok is None or (m.started_at, m.backup_id) > (newest_ok.started_at, newest_ok.backup_id):
            assert m.backup_id in kept, f"{m.backup_id} is newer than the newest backup that restores"
    verified = [by_id[b] for b in w.verified if b in by_id]
    if verified:
        assert max(verified, key=lambda m: (m.started_at, m.backup_id)).backup_id in kept
    newest = sorted((by_id[b] for b in restorable), key=lambda m: (m.started_at, m.backup_id), reverse=True)
    _check_newest_chains(newest, kept, policy.keep_last_chains or 0)
    for count, period in (
        (policy.daily, lambda d: d.date()),
        (policy.weekly, lambda d: d.isocalendar()[:2]),
        (policy.monthly, lambda d: (d.year, d.month)),
        (policy.yearly, lambda d: d.year),
    ):
        firsts: dict = {}
        for m in newest:
            firsts.setdefault(period(m.started_at), m.backup_id)
        assert set(list(firsts.values())[:count]) <= kept, "a GFS slot's backup was deleted"
    for m in w.manifests:
        if m.finished_at > now - policy.min_age_days * DAY:
            assert m.backup_id in kept, f"{m.backup_id} is younger than min_age_days and was deleted"
        if policy.pitr_days and m.finished_at >= now - policy.pitr_days * DAY:
            assert m.backup_id in kept, f"{m.backup_id} is inside the PITR window and was deleted"
    if policy.pitr_days:
        base = next((m for m in newest if m.finished_at < now - policy.pitr_days * DAY), None)
        assert base is None or base.backup_id in kept, "the PITR window's base was deleted"


def _check_newest_chains(newest: list[Manifest], kept: set[str], count: int) -> None:
    roots: list[str] = []
    for m in newest:
        if m.chain_root not in roots:
            roots.append(m.chain_root)
    for m in newest:
        if m.chain_root in roots[:count]:
            assert m.backup_id in kept, (
                f"{m.backup_id} is in one of the newest {count} chains and was deleted"
            )


def _check_binlogs(w: World, plan: Plan, kept: set[str], by_id: dict[str, Manifest]) -> None:
    status = {i.name: i.action for i in plan.items if i.kind == "binlog"}
    unreadable = {i.name for i in plan.items if i.kind == "backup" and i.name not in by_id}
    assert unreadable <= kept, "a directory whose manifest cannot be read was deleted"
    # When was each kept backup taken? For an unreadable manifest: its directory's oldest object.
    starts = [by_id[b].started_at for b in kept if b in by_id]
    starts += [i.last_modified for i in w.listing if i.key[len(BACKUPS) :].split("/")[0] in unreadable]
    if not starts:
        assert all(a == "keep" for a in status.values()), "binlogs deleted while no backup is kept"
        return
    oldest = min(starts)
    first_file: dict[str, int] = {}  # server -> the file holding its oldest kept backup's position
    for bid in kept & set(by_id):
        m = by_id[bid]
        if m.binlog_file:
            seq = int(m.binlog_file.rsplit(".", 1)[1])
            first_file[m.server_uuid] = min(seq, first_file.get(m.server_uuid, seq))
    for b in w.binlogs:
        name = f"{b.server_uuid}/{b.name}"
        if b.last_event_time >= oldest:
            assert status[name] == "keep", f"binlog {name} is needed from the oldest kept backup on"
        if b.last_event_time > w.now - w.policy.min_age_days * DAY:
            assert status[name] == "keep", f"binlog {name} is younger than min_age_days"
        if int(b.name.rsplit(".", 1)[1]) >= first_file.get(b.server_uuid, 10**9):
            assert status[name] == "keep", f"binlog {name} holds or follows a kept backup's position"


def _check_debris_and_locks(w: World, plan: Plan) -> None:
    locks = lock_dates(w)
    for item in plan.deletes:
        retained = [k for k in item.keys if k in locks and locks[k] > w.now]
        assert not retained, f"{item.name} is deleted although Object Lock retains {retained}"
        if item.kind == "debris":
            assert item.created and item.created <= w.now - w.policy.debris_grace_days * DAY
        assert item.kind in ("backup", "binlog", "debris")
    for item in plan.items:
        if item.kind == "debris" and item.action == "keep" and "Object Lock" not in item.reason:
            assert item.created is None or item.created > w.now - w.policy.debris_grace_days * DAY
        if item.kind == "other":
            assert item.action == "keep"


# -- the planner -------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=SLOW)
@given(big_worlds)
def test_hundreds_of_chains_keep_every_invariant(w: World):
    plan = w.plan()
    assert len({m.chain_root for m in w.manifests}) >= 50
    check_invariants(w, plan)


@settings(max_examples=150, deadline=None, suppress_health_check=SLOW)
@given(worlds)
def test_small_catalogs_keep_every_invariant(w: World):
    check_invariants(w, w.plan())


@settings(max_examples=80, deadline=None, suppress_health_check=SLOW)
@given(worlds)
def test_planning_again_after_the_deletions_deletes_nothing_more(w: World):
    plan = w.plan()
    gone = {k for item in plan.deletes for k in item.keys}
    deleted = {i.name for i in plan.deletes}
    after = replace(
        w,
        manifests=[m for m in w.manifests if m.backup_id not in deleted],
        listing=[i for i in w.listing if i.key not in gone],
        binlogs=[b for b in w.binlogs if f"{b.server_uuid}/{b.name}" not in deleted],
    )
    again = after.plan()
    assert not again.deletes, [(i.name, i.reason) for i in again.deletes[:5]]
    assert kept_backups(again) == kept_backups(plan)


@settings(max_examples=60, deadline=None, suppress_health_check=SLOW)
@given(worlds, st.randoms(use_true_random=False))
def test_the_plan_does_not_depend_on_input_order(w: World, rnd: random.Random):
    shuffled = replace(
        w,
        manifests=rnd.sample(w.manifests, len(w.manifests)),
        listing=rnd.sample(w.listing, len(w.listing)),
        binlogs=rnd.sample(w.binlogs, len(w.binlogs)),
    )
    assert outcome(shuffled.plan()) == outcome(w.plan())


@settings(max_examples=60, deadline=None, suppress_health_check=SLOW)
@given(worlds)
def test_early_deletion_charges_only_young_objects_of_minimum_duration_classes(w: World):
    plan = w.plan()
    listed = {i.key: i for i in w.listing}
    for item in plan.items:
        if item.action == "keep" or item.kind != "backup":
            assert item.early_delete_usd == 0 or item.action == "delete"
            continue
        young = [
            listed[k]
            for k in item.keys
            if k in listed
            and listed[k].storage_class in MIN_STORAGE
            and (w.now - listed[k].last_modified) / DAY < MIN_STORAGE[listed[k].storage_class][0]
        ]
        ceiling = sum(
            i.size / GiB * MIN_STORAGE[i.storage_class][1] * MIN_STORAGE[i.storage_class][0] / 30
            for i in young
        )
        assert (item.early_delete_usd > 0) == bool(young), item
        assert item.early_delete_usd <= ceiling + 1e-9
        if item.early_delete_usd >= 0.005:
            assert "early deletion charge about $" in item.reason


# -- applying a plan to a real directory store ------------------------------------------------------


class FailingStore(LocalStore):
    """A LocalStore whose delete() raises after `allowed` calls (an interrupted run)."""

    def __init__(self, root: Path, allowed: int) -> None:
        super().__init__(root)
        self.allowed = allowed

    def delete(self, keys):
        if self.allowed <= 0:
            raise StorageError(f"{self.location}: connection reset")
        self.allowed -= 1
        return super().delete(keys)


def materialize(w: World, root: Path) -> None:
    """Write the world's listing to a directory: manifests as JSON, reports, everything else as bytes."""
    manifests = {f"{m.backup_object.key.rsplit('/', 1)[0]}/manifest.json": m for m in w.manifests}
    for info in w.listing:
        path = root / info.key
        path.parent.mkdir(parents=True, exist_ok=True)
        if info.key in manifests:
            path.write_bytes(manifests[info.key].to_json())
        elif info.key.endswith("/manifest.json"):
            path.write_bytes(b"{not json")  # the unreadable ones
        elif info.key.endswith("/restore-report.json"):
            path.write_text(json.dumps({"verdict": "pass"}))
        else:
            path.write_bytes(b"x" * 64)
        stamp = info.last_modified.timestamp()  # the store reports file times as LastModified
        os.utime(path, (stamp, stamp))


def store_state(catalog: Catalog) -> tuple[set[str], dict[str, Manifest]]:
    keys = {i.key for i in catalog.store.list(f"{catalog.host_prefix}/backups/")}
    return keys, {m.backup_id: m for m in catalog.manifests([])}


@settings(max_examples=25, deadline=None, suppress_health_check=[*SLOW, HealthCheck.function_scoped_fixture])
@given(w=small_worlds, allowed=st.integers(0, 8))
def test_an_interrupted_apply_never_leaves_a_manifest_naming_deleted_data(
    w: World, allowed: int, tmp_path_factory
):
    root = tmp_path_factory.mktemp("ret")
    materialize(w, root)
    policy = w.policy if w.policy.configured else w.policy.model_copy(update={"keep_last_chains": 1})
    catalog = Catalog(FailingStore(root, allowed), PREFIX, CLUSTER, HOST)
    readable = {m.backup_id for m in catalog.manifests([])}
    before = restorable_ids(catalog.manifests([]))
    plan = plan_host(catalog, policy, w.now)
    try:
        apply_plan(catalog, plan, confirm=True)
    except StorageError:
        pass
    keys, manifests = store_state(catalog)
    for m in manifests.values():  # whatever was cut short, a manifest's objects are all there
        missing = [o.key for o in m.objects if o.key not in keys]
        assert not missing, f"manifest of {m.backup_id} names deleted {missing}"
    assert before & set(manifests) <= restorable_ids(list(manifests.values())), (
        "an interruption broke a chain"
    )
    # The next run finishes the job: the same backups survive as if nothing had been interrupted.
    catalog.store.allowed = 10**6
    apply_plan(catalog, plan_host(catalog, policy, w.now), confirm=True)
    assert set(store_state(catalog)[1]) == kept_backups(plan) & readable


@settings(max_examples=20, deadline=None, suppress_health_check=[*SLOW, HealthCheck.function_scoped_fixture])
@given(w=small_worlds)
def test_apply_deletes_exactly_what_the_plan_deletes_and_dry_run_nothing(w: World, tmp_path_factory):
    root = tmp_path_factory.mktemp("ret")
    materialize(w, root)
    catalog = Catalog(LocalStore(root), PREFIX, CLUSTER, HOST)
    plan = plan_host(catalog, w.policy, w.now)
    listed = {i.key for i in w.listing}
    report = apply_plan(catalog, plan, confirm=False)
    assert report.dry_run and store_state(catalog)[0] == listed
    report = apply_plan(catalog, plan, confirm=True)
    doomed = {k for item in plan.deletes for k in item.keys}
    assert store_state(catalog)[0] == listed - doomed
    assert report.deleted_keys == len(doomed)
    assert sorted(report.deleted) == sorted(i.name for i in plan.deletes)
    # the restore reports found in the store protect the newest passing backup, as in memory
    newest = max((b for b in w.reports if b in {m.backup_id for m in w.manifests}), default=None)
    if newest and w.policy.configured:
        assert newest in kept_backups(plan)


def test_world_builder_makes_the_damage_it_claims():
    """The generator itself: damaged chains really fail validation, others really validate."""
    spec = {
        "gap_h": 1, "incs": 3, "step_h": 2, "damage": "lsn_gap", "damage_at": 2, "klass": "STANDARD",
        "lock_days": None, "lock_by_head": False, "verified_at": None, "debris_h": None, "binlog_info": True,
    }  # fmt: skip
    w = build_world(
        [spec, spec | {"damage": "ok"}, spec | {"damage": "dropped"}], RetentionPolicy(), 0, False
    )
    ok = restorable_ids(w.manifests)
    ids = [m.backup_id for m in w.manifests]
    assert len(ids) == 4 + 4 + 3
    assert ok == set(ids[:2]) | set(ids[4:8]) | set(ids[8:10])
    per_dir = defaultdict(list)
    for info in w.listing:
        per_dir[info.key[len(BACKUPS) :].split("/")[0]].append(info.key)
    assert sum(1 for keys in per_dir.values() if not any(k.endswith("manifest.json") for k in keys)) == 1
