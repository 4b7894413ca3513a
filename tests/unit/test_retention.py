"""Retention by example: the planner's rules and reasons, applying a plan to a directory store,
the CLI, the operator and the DAG branch. The invariants over random catalogs are in
test_retention_properties.py."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from manifest_factory import CLUSTER, HOST, PREFIX, UUID, make_manifest
from xtrabackup_provider.cli import main
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.lock import LOCK_NAME, PROBE_NAME
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.config.load import parse_config
from xtrabackup_provider.core.config.schema import ConfigError
from xtrabackup_provider.core.retention.apply import RetentionError, apply_plan, marker_batches, plan_host
from xtrabackup_provider.core.retention.model import (
    NOT_CONFIGURED,
    BinlogItem,
    Plan,
    RetentionPolicy,
    early_deletion_usd,
    parse_policy,
    plan_table,
)
from xtrabackup_provider.core.retention.plan import plan_retention
from xtrabackup_provider.core.storage.base import GiB, ObjectInfo
from xtrabackup_provider.core.storage.local import LocalStore

NOW = datetime(2026, 6, 15, 12, 0, tzinfo=UTC)
BACKUPS = f"{PREFIX}/{CLUSTER}/{HOST}/backups/"
BINLOGS = f"{PREFIX}/{CLUSTER}/{HOST}/binlogs/{UUID}/"


def bid(when: datetime, kind: str = "full") -> str:
    return when.strftime("%Y%m%dT%H%M%SZ") + ("-full" if kind == "full" else "-inc")


def chain(
    start: datetime, incrementals: int = 0, step: timedelta = timedelta(days=1), **over
) -> list[Manifest]:
    members = [make_manifest(bid(start), **over)]
    for n in range(1, incrementals + 1):
        members.append(make_manifest(bid(start + n * step, "inc"), parent=members[-1], **over))
    return members


def weekly_chains(
    weeks: int, incrementals: int = 6, end: datetime = NOW - timedelta(days=1)
) -> list[Manifest]:
    """A full every Sunday-ish and daily incrementals, the newest chain starting before `end`."""
    out: list[Manifest] = []
    for w in range(weeks, 0, -1):
        out += chain(end - timedelta(days=7 * w - 1), incrementals)
    return out


def actions(plan: Plan, kind: str = "backup") -> dict[str, str]:
    return {i.name: i.action for i in plan.items if i.kind == kind}


def reason(plan: Plan, name: str) -> str:
    return next(i.reason for i in plan.items if i.name == name)


def kept(plan: Plan) -> set[str]:
    return {i.name for i in plan.items if i.kind == "backup" and i.action == "keep"}


def plan(manifests, policy: RetentionPolicy, now: datetime = NOW, binlogs=(), **kw) -> Plan:
    return plan_retention(manifests, list(binlogs), policy, now, backups_prefix=BACKUPS, **kw)


def listed(m: Manifest, when: datetime | None = None, klass: str | None = None) -> list[ObjectInfo]:
    when = when or m.finished_at
    obj = m.backup_object
    directory = obj.key.rsplit("/", 1)[0]
    return [
        ObjectInfo(obj.key, obj.size, klass or obj.storage_class, when),
        ObjectInfo(f"{directory}/manifest.json", 1500, "STANDARD", when),
    ]


# -- the policy ------------------------------------------------------------------------------------


def test_the_default_policy_keeps_everything_and_says_why():
    manifests = weekly_chains(20)
    debris = ObjectInfo(
        f"{BACKUPS}20200101T000000Z-full/backup.xbstream.zst", 5, "STANDARD", NOW - timedelta(days=900)
    )
    binlog = BinlogItem(UUID, "mysql-bin.000001", NOW - timedelta(days=999), NOW - timedelta(days=998), 10,
                        "STANDARD", BINLOGS + "mysql-bin.000001.zst")  # fmt: skip
    p = plan(manifests, RetentionPolicy(), binlogs=[binlog], listing=[debris])
    assert not p.deletes
    assert {i.reason for i in p.items} == {NOT_CONFIGURED}
    assert len(p.items) == len(manifests) + 2


def test_keep_last_chains_keeps_whole_chains_and_deletes_the_rest_manifest_first():
    manifests = weekly_chains(5)
    p = plan(manifests, RetentionPolicy(keep_last_chains=2, min_age_days=0))
    newest_two = {m.backup_id for m in manifests[-14:]}
    assert kept(p) == newest_two
    first = p.deletes[0]
    assert first.keys[0].endswith(f"{first.name}/manifest.json") and first.markers == 1
    assert first.keys[1].endswith(f"{first.name}/backup.xbstream.zst")
    assert f"chain {manifests[0].backup_id} is not among the newest 2" in reason(p, manifests[0].backup_id)
    assert reason(p, manifests[-1].backup_id) == "in the newest 2 chain(s) (#1)"
    assert reason(p, manifests[-8].backup_id) == "in the newest 2 chain(s) (#2)"


def test_a_kept_incremental_keeps_its_ancestors_but_not_its_descendants():
    old = chain(NOW - timedelta(days=60), 5)
    new = chain(NOW - timedelta(days=3), 2)
    verified = old[3].backup_id
    p = plan(old + new, RetentionPolicy(keep_last_chains=1, min_age_days=0), verified={verified})
    assert reason(p, verified) == "newest backup that passed a restore test"
    for m in old[:3]:
        assert reason(p, m.backup_id) == f"needed by kept {verified}"
    assert actions(p)[old[4].backup_id] == actions(p)[old[5].backup_id] == "delete"


def test_only_the_newest_verified_backup_is_protected():
    old, mid, new = (chain(NOW - timedelta(days=d), 1) for d in (90, 60, 3))
    p = plan(
        old + mid + new, RetentionPolicy(keep_last_chains=1), verified={old[1].backup_id, mid[0].backup_id}
    )
    assert kept(p) == {m.backup_id for m in mid[:1] + new}


def test_young_backups_are_kept_whatever_the_rest_of_the_policy_says():
    manifests = weekly_chains(3)  # fulls 21, 14 and 7 days ago, then daily incrementals
    p = plan(manifests, RetentionPolicy(keep_last_chains=1, min_age_days=10))
    middle = manifests[7:14]
    young = [m for m in middle if m.finished_at > NOW - timedelta(days=10)]
    assert young and all(reason(p, m.backup_id) == "younger than min_age_days (10)" for m in young)
    # ... and their ancestors come with them
    assert all(m.backup_id in kept(p) for m in middle[: middle.index(young[0])])
    assert all(m.backup_id not in kept(p) for m in manifests[:7])


def test_pitr_window_keeps_its_base_and_everything_inside_it():
    manifests = weekly_chains(6)
    p = plan(manifests, RetentionPolicy(keep_last_chains=1, min_age_days=0, pitr_days=10))
    start = NOW - timedelta(days=10)
    inside = [m for m in manifests if m.finished_at >= start]
    base = max((m for m in manifests if m.finished_at < start), key=lambda m: m.finished_at)
    assert {m.backup_id for m in inside} | {base.backup_id} <= kept(p)
    assert reason(p, base.backup_id) == "base of the 10-day PITR window"
    assert all(
        m.backup_id not in kept(p) for m in manifests if m.chain_root != base.chain_root and m not in inside
    )


def test_grandfather_father_son_slots():
    # one full a day for two years, no incrementals
    manifests = [make_manifest(bid(NOW - timedelta(days=d, hours=2))) for d in range(730, 0, -1)]
    policy = RetentionPolicy(keep_last_chains=1, daily=7, weekly=4, monthly=6, yearly=3, min_age_days=0)
    p = plan(manifests, policy)
    days = sorted((m.started_at for m in manifests if m.backup_id in kept(p)), reverse=True)
    assert days[:7] == [(NOW - timedelta(days=d, hours=2)) for d in range(1, 8)]
    newest = {d.date() for d in days}
    assert {(NOW - timedelta(days=d, hours=2)).date() for d in range(1, 8)} <= newest
    assert len({d.isocalendar()[:2] for d in days}) >= 4
    assert {(d.year, d.month) for d in days} >= {
        (2026, 6),
        (2026, 5),
        (2026, 4),
        (2026, 3),
        (2026, 2),
        (2026, 1),
    }
    assert {d.year for d in days} == {2026, 2025, 2024}
    # the newest backup of each month is the one kept: for May 2026 that is the 31st
    assert any(d.date() == datetime(2026, 5, 31).date() for d in days)
    assert reason(p, bid(datetime(2025, 12, 31, 10, tzinfo=UTC))) == "yearly slot 2/3"
    assert reason(p, bid(datetime(2024, 12, 31, 10, tzinfo=UTC))) == "yearly slot 3/3"
    assert len(kept(p)) <= 7 + 4 + 6 + 3


def test_gfs_slots_count_periods_that_have_backups_so_a_pause_keeps_them():
    before_pause = [make_manifest(bid(NOW - timedelta(days=400 + d))) for d in range(10, 0, -1)]
    p = plan(before_pause, RetentionPolicy(keep_last_chains=1, daily=5, min_age_days=0))
    assert len(kept(p)) == 5


def test_backups_whose_chain_does_not_validate():
    full, inc1, inc2 = chain(NOW - timedelta(days=90), 2)
    orphan = make_manifest(bid(NOW - timedelta(days=80), "inc"), parent=inc2, parent_id=bid(NOW, "inc"))
    old_gap = make_manifest(bid(NOW - timedelta(days=70), "inc"), parent=inc2, from_lsn=inc2.to_lsn + 7)
    new = chain(NOW - timedelta(days=5), 2)
    new_gap = make_manifest(bid(NOW - timedelta(days=2), "inc"), parent=new[-1], from_lsn=new[-1].to_lsn + 1)
    after_gap = make_manifest(bid(NOW - timedelta(days=1, hours=12), "inc"), parent=new_gap)
    manifests = [full, inc1, inc2, orphan, old_gap, *new, new_gap, after_gap]
    p = plan(manifests, RetentionPolicy(keep_last_chains=1, min_age_days=0))
    # its parent has no manifest (maybe it failed to read): kept, whatever its age
    assert "chain does not validate, kept for a human to check" in reason(p, orphan.backup_id)
    assert "which has no manifest" in reason(p, orphan.backup_id)
    # newer than the newest backup that restores: kept for a human too
    for m in (new_gap, after_gap):
        assert reason(p, m.backup_id).startswith(
            "newer than the newest backup that restores, kept for a human"
        )
        assert f"LSN gap in link {new[-1].backup_id} -> {new_gap.backup_id}" in reason(p, m.backup_id)
    # the newest chain that restores fills the slot; an old broken backup goes with its chain
    assert all(reason(p, m.backup_id) == "in the newest 1 chain(s) (#1)" for m in new)
    assert {actions(p)[m.backup_id] for m in (full, inc1, inc2, old_gap)} == {"delete"}


def test_an_unreadable_manifest_keeps_its_directory_and_every_binlog():
    manifests = chain(NOW - timedelta(days=100)) + chain(NOW - timedelta(days=2))
    ghost = f"{BACKUPS}{bid(NOW - timedelta(days=50))}"
    listing = [o for m in manifests for o in listed(m)] + [
        ObjectInfo(f"{ghost}/manifest.json", 10, "STANDARD", None),
        ObjectInfo(f"{ghost}/backup.xbstream.zst", 10, "STANDARD", None),
    ]
    binlog = BinlogItem(UUID, "mysql-bin.000001", NOW - timedelta(days=200), NOW - timedelta(days=199), 10,
                        "STANDARD", BINLOGS + "mysql-bin.000001.zst")  # fmt: skip
    p = plan(manifests, RetentionPolicy(keep_last_chains=1), listing=listing, binlogs=[binlog])
    ghost_item = next(i for i in p.items if i.name == ghost.rsplit("/", 1)[1])
    assert ghost_item.action == "keep" and "manifest.json cannot be read" in ghost_item.reason
    assert set(ghost_item.keys) == {f"{ghost}/manifest.json", f"{ghost}/backup.xbstream.zst"}
    assert actions(p, "binlog") == {f"{UUID}/mysql-bin.000001": "keep"}
    assert actions(p)[manifests[0].backup_id] == "delete"


# -- binlogs ----------------------------------------------------------------------------------------


def hourly_binlogs(start: datetime, hours: int, skew: timedelta = timedelta()) -> list[BinlogItem]:
    items = []
    for n in range(hours):
        first = start + timedelta(hours=n) + skew
        name = f"mysql-bin.{n + 1:06d}"
        items.append(
            BinlogItem(UUID, name, first, first + timedelta(minutes=59), 1000, "STANDARD",
                       BINLOGS + name + ".zst", (BINLOGS + name + ".json",))
        )  # fmt: skip
    return items


def test_binlogs_are_kept_from_the_oldest_kept_backup_on():
    start = NOW - timedelta(days=10)
    binlogs = hourly_binlogs(start, 240)
    old = make_manifest(bid(start + timedelta(hours=5)), binlog_file="mysql-bin.000006", binlog_position=4)
    new = make_manifest(bid(start + timedelta(hours=100)), binlog_file="mysql-bin.000101", binlog_position=4)
    p = plan([old, new], RetentionPolicy(keep_last_chains=1, min_age_days=0), binlogs=binlogs)
    status = actions(p, "binlog")
    kept_files = sorted(n.rsplit(".", 1)[1] for n, a in status.items() if a == "keep")
    # the newest kept backup started at hour 100; an hour of slack for clock skew keeps hour 99 too
    assert kept_files[0] == "000100"
    assert kept_files == [f"{n:06d}" for n in range(100, 241)], "no hole from the oldest kept backup to now"
    deleted = next(i for i in p.items if i.name == f"{UUID}/mysql-bin.000050")
    assert deleted.action == "delete" and f"before the oldest kept backup {new.backup_id}" in deleted.reason
    assert deleted.keys == (BINLOGS + "mysql-bin.000050.json", BINLOGS + "mysql-bin.000050.zst")
    assert deleted.markers == 1


def test_a_database_clock_behind_the_worker_still_keeps_the_file_holding_the_position():
    start = NOW - timedelta(days=10)
    binlogs = hourly_binlogs(start, 240, skew=timedelta(hours=-6))  # event times 6 h behind
    new = make_manifest(bid(start + timedelta(hours=100, minutes=30)), binlog_file="mysql-bin.000101")
    p = plan([new], RetentionPolicy(keep_last_chains=1, min_age_days=0), binlogs=binlogs)
    assert actions(p, "binlog")[f"{UUID}/mysql-bin.000101"] == "keep"
    assert "its binlog position is in or before this file" in reason(p, f"{UUID}/mysql-bin.000101")
    assert actions(p, "binlog")[f"{UUID}/mysql-bin.000100"] == "delete"


def test_binlogs_stay_while_no_backup_is_kept_and_young_or_locked_ones_stay():
    binlogs = hourly_binlogs(NOW - timedelta(days=3), 72)
    p = plan([], RetentionPolicy(keep_last_chains=1, min_age_days=0), binlogs=binlogs)
    assert set(actions(p, "binlog").values()) == {"keep"}
    new = make_manifest(bid(NOW - timedelta(hours=2)))
    locked = replace(binlogs[0], lock_until=NOW + timedelta(days=1))
    p = plan([new], RetentionPolicy(keep_last_chains=1, min_age_days=1), binlogs=[locked, *binlogs[1:]])
    status = actions(p, "binlog")
    assert status[f"{UUID}/mysql-bin.000001"] == "keep"
    assert "Object Lock retains it until" in reason(p, f"{UUID}/mysql-bin.000001")
    assert all(
        status[f"{UUID}/{b.name}"] == "keep" for b in binlogs if b.last_event_time > NOW - timedelta(days=1)
    )
    assert status[f"{UUID}/mysql-bin.000002"] == "delete"


# -- debris, locks, storage charges --------------------------------------------------------------


def test_debris_goes_after_the_grace_period_and_loose_objects_stay():
    manifests = chain(NOW - timedelta(days=1))
    old = ObjectInfo(
        f"{BACKUPS}{bid(NOW - timedelta(days=9))}/backup.xbstream.zst",
        700,
        "STANDARD",
        NOW - timedelta(days=9),
    )
    fresh = ObjectInfo(
        f"{BACKUPS}{bid(NOW - timedelta(hours=3))}/backup.xbstream.zst",
        700,
        "STANDARD",
        NOW - timedelta(hours=3),
    )
    loose = ObjectInfo(f"{BACKUPS}notes.txt", 3, "STANDARD", NOW - timedelta(days=99))
    listing = [*listed(manifests[0]), old, fresh, loose]
    p = plan(manifests, RetentionPolicy(keep_last_chains=1, debris_grace_days=7), listing=listing)
    by_kind = {(i.kind, i.action): i for i in p.items if i.kind in ("debris", "other")}
    assert by_kind[("debris", "delete")].keys == (old.key,)
    assert (
        "no manifest: left by a failed or interrupted run, last written 9.0 days ago"
        in by_kind[("debris", "delete")].reason
    )
    assert by_kind[("debris", "keep")].keys == (fresh.key,)
    assert "may be uploading" in by_kind[("debris", "keep")].reason
    assert by_kind[("other", "keep")].keys == (loose.key,)


def test_object_lock_keeps_a_backup_and_its_chain_until_retain_until():
    until = NOW + timedelta(days=30)
    locked_chain = chain(NOW - timedelta(days=90), 2)
    locked_chain[2] = make_manifest(
        locked_chain[2].backup_id, parent=locked_chain[1], object_lock_until=until
    )
    by_head = chain(NOW - timedelta(days=60), 1)
    held = chain(NOW - timedelta(days=40))
    expired = chain(NOW - timedelta(days=30), object_lock_until=NOW - timedelta(days=1))
    new = chain(NOW - timedelta(days=2))
    locks = {by_head[1].backup_object.key: until, held[0].backup_object.key: datetime.max.replace(tzinfo=UTC)}
    p = plan(locked_chain + by_head + held + expired + new, RetentionPolicy(keep_last_chains=1), locks=locks)
    assert reason(p, locked_chain[2].backup_id) == f"Object Lock retains it until {until:%Y-%m-%d %H:%M}Z"
    assert reason(p, locked_chain[0].backup_id) == f"needed by kept {locked_chain[2].backup_id}"
    assert reason(p, by_head[1].backup_id).startswith("Object Lock retains it until")
    assert reason(p, held[0].backup_id) == "Object Lock legal hold: kept until the hold is released"
    assert actions(p)[expired[0].backup_id] == "delete"


def test_early_deletion_charge_is_the_rest_of_the_minimum_duration():
    # 1 GiB in GLACIER for 30 of its 90 days: 60 days left at $0.0036 per GB-month
    assert early_deletion_usd("GLACIER", GiB, NOW - timedelta(days=30), NOW) == pytest.approx(0.0072)
    assert early_deletion_usd("DEEP_ARCHIVE", 10 * GiB, NOW, NOW) == pytest.approx(10 * 0.00099 * 6)
    assert early_deletion_usd("DEEP_ARCHIVE", 10 * GiB, NOW - timedelta(days=181), NOW) == 0
    assert early_deletion_usd("STANDARD", 10 * GiB, NOW, NOW) == 0
    assert early_deletion_usd("GLACIER", GiB, NOW + timedelta(days=5), NOW) == pytest.approx(
        0.0108
    )  # never above the minimum
    archived = chain(NOW - timedelta(days=20), size=500 * GiB, storage_class="DEEP_ARCHIVE")
    p = plan(archived + chain(NOW - timedelta(days=1)), RetentionPolicy(keep_last_chains=1), listing=[
        *listed(archived[0]), *listed(chain(NOW - timedelta(days=1))[0])])  # fmt: skip
    item = next(i for i in p.deletes if i.name == archived[0].backup_id)
    expected = 500 * 0.00099 * (180 - 20.0 + 5 / 1440) / 30
    assert item.early_delete_usd == pytest.approx(expected, rel=1e-3)
    assert f"early deletion charge about ${expected:.2f}" in item.reason
    assert item.storage_class == "DEEP_ARCHIVE"
    assert p.summary()["early_delete_usd"] == round(item.early_delete_usd, 2)


def test_the_listing_says_where_an_object_lives_now():
    """A lifecycle rule moved the object to GLACIER after the manifest was written: charge it as GLACIER."""
    archived = chain(NOW - timedelta(days=40), size=GiB)
    p = plan(archived + chain(NOW - timedelta(days=1)), RetentionPolicy(keep_last_chains=1),
             listing=[*listed(archived[0], klass="GLACIER"), *listed(chain(NOW - timedelta(days=1))[0])])  # fmt: skip
    item = p.deletes[0]
    assert item.storage_class == "GLACIER" and item.early_delete_usd > 0


# -- input checks and the table -------------------------------------------------------------------


def test_bad_inputs_are_refused_with_what_to_fix():
    with pytest.raises(ValueError, match="timezone-aware"):
        plan_retention([], [], RetentionPolicy(), datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="not under the backups prefix"):
        plan([], RetentionPolicy(), listing=[ObjectInfo("elsewhere/x", 1)])
    with pytest.raises(ValueError, match="outside backups-prod/c1/db2/backups/"):
        plan_retention(
            chain(NOW), [], RetentionPolicy(), NOW, backups_prefix=f"{PREFIX}/{CLUSTER}/db2/backups/"
        )
    with pytest.raises(
        ValueError,
        match=r"task x: invalid retention policy: keep_last_chains: .*daily: Input should be greater",
    ):
        parse_policy({"keep_last_chains": 0, "daily": -1}, "task x")
    with pytest.raises(ValueError, match="min_age_days"):
        parse_policy({"min_age_days": float("nan")}, "x")
    with pytest.raises(ValueError, match="debris_grace_days"):
        parse_policy({"debris_grace_days": 0}, "x")
    with pytest.raises(ConfigError, match=r"fleet.yaml: invalid fleet config: retention.weekly"):
        parse_config(
            {
                "storage": {"bucket": "b"},
                "retention": {"weekly": "often"},
                "clusters": [{"name": "c", "hosts": [{"name": "h"}]}],
            },
            "fleet.yaml",
        )


def test_plan_table_lists_deletions_first_and_truncates():
    manifests = weekly_chains(3)
    p = plan(manifests, RetentionPolicy(keep_last_chains=1, min_age_days=0))
    table = plan_table(p, limit=10).splitlines()
    assert table[0].split()[:3] == ["ACTION", "KIND", "NAME"]
    assert all(line.startswith("delete backup") for line in table[1:11])
    assert table[11] == f"... {len(manifests) - 10} more row(s) not shown"
    assert "delete_backup': 14" in table[12] and "keep_backup': 7" in table[12]


# -- applying to a directory store ------------------------------------------------------------------


@pytest.fixture
def catalog(tmp_path) -> Catalog:
    return Catalog(LocalStore(tmp_path / "bucket"), PREFIX, CLUSTER, HOST)


def register(catalog: Catalog, manifests: list[Manifest], report: dict[str, str] | None = None) -> None:
    for m in manifests:
        for obj in m.objects:
            catalog.store.put_bytes(obj.key, b"x" * obj.size)
        catalog.write(m)
        for key in [obj.key for obj in m.objects] + [catalog.manifest_key(m.backup_id)]:
            os.utime(catalog.store.root / key, (m.finished_at.timestamp(),) * 2)
        if report and m.backup_id in report:
            key = catalog.object_key(m.backup_id, "restore-report.json")
            catalog.store.put_bytes(key, json.dumps({"verdict": report[m.backup_id]}).encode())


def stored(catalog: Catalog) -> set[str]:
    return {i.key for i in catalog.store.list(PREFIX + "/")}


def test_apply_deletes_manifests_deepest_first_then_data(catalog):
    manifests = weekly_chains(3, incrementals=2)
    register(catalog, manifests)
    calls: list[list[str]] = []
    original = catalog.store.delete
    catalog.store.delete = lambda keys: (calls.append(list(keys)), original(keys))[1]  # type: ignore[method-assign]
    p = plan_host(catalog, RetentionPolicy(keep_last_chains=1, min_age_days=0), NOW)
    report = apply_plan(catalog, p, confirm=True)
    calls = [c for c in calls if not any(PROBE_NAME in k for k in c)]  # the lock's conditional-write probe
    doomed = manifests[:6]
    assert [len(c) for c in calls] == [2, 2, 2, 6, 1]
    assert calls[4] == [f"{catalog.host_prefix}/{LOCK_NAME}"], "the host lock is released after the deletes"
    assert calls[0] == [catalog.manifest_key(m.backup_id) for m in (doomed[2], doomed[5])]
    assert calls[2] == [catalog.manifest_key(m.backup_id) for m in (doomed[0], doomed[3])]
    assert all(k.endswith("backup.xbstream.zst") for k in calls[3])
    assert catalog.backup_ids() == [m.backup_id for m in manifests[6:]]
    assert report.summary()["deleted_items"] == 6
    assert report.deleted_bytes == sum(1000 + len(m.to_json()) for m in doomed)
    assert marker_batches(p.deletes) == calls[:3]


def test_dry_run_deletes_nothing_and_reports_what_would_go(catalog):
    register(catalog, weekly_chains(2))
    before = stored(catalog)
    report = apply_plan(catalog, plan_host(catalog, RetentionPolicy(keep_last_chains=1, min_age_days=0), NOW))
    assert report.dry_run and report.deleted == [] and stored(catalog) == before
    assert report.plan["counts"] == {"delete_backup": 7, "keep_backup": 7}


def test_the_newest_passing_restore_report_protects_its_backup(catalog):
    manifests = weekly_chains(4, incrementals=0)
    register(catalog, manifests, report={manifests[0].backup_id: "pass", manifests[1].backup_id: "pass",
                                         manifests[2].backup_id: "fail"})  # fmt: skip
    p = plan_host(catalog, RetentionPolicy(keep_last_chains=1, min_age_days=0), NOW)
    assert kept(p) == {manifests[1].backup_id, manifests[3].backup_id}
    apply_plan(catalog, p, confirm=True)
    assert stored(catalog) >= {catalog.object_key(manifests[1].backup_id, "restore-report.json")}
    assert not any(manifests[2].backup_id in k for k in stored(catalog)), (
        "a deleted backup leaves its report behind"
    )


def test_a_backup_registered_after_planning_on_a_doomed_parent_stops_the_run(catalog):
    manifests = weekly_chains(2, incrementals=1)
    register(catalog, manifests)
    p = plan_host(catalog, RetentionPolicy(keep_last_chains=1, min_age_days=0), NOW)
    late = make_manifest(bid(NOW - timedelta(hours=1), "inc"), parent=manifests[1])
    register(catalog, [late])
    before = stored(catalog)
    with pytest.raises(
        RetentionError,
        match=f"{late.backup_id} appeared since planning and depends on {manifests[1].backup_id}",
    ):
        apply_plan(catalog, p, confirm=True)
    assert stored(catalog) == before


def test_keys_outside_the_host_are_never_deleted(catalog):
    register(catalog, weekly_chains(2))
    stray = BinlogItem(UUID, "mysql-bin.000001", NOW - timedelta(days=90), NOW - timedelta(days=89), 1,
                       "STANDARD", f"{PREFIX}/{CLUSTER}/db2/binlogs/mysql-bin.000001")  # fmt: skip
    p = plan_host(catalog, RetentionPolicy(keep_last_chains=1, min_age_days=0), NOW, binlogs=[stray])
    before = stored(catalog)
    with pytest.raises(
        RetentionError, match="binlog .*mysql-bin.000001: key 'backups-prod/c1/db2/binlogs/.* is outside"
    ):
        apply_plan(catalog, p, confirm=True)
    assert stored(catalog) == before


# -- CLI, operator, DAG ------------------------------------------------------------------------------


@pytest.fixture
def fleet_file(tmp_path, catalog):
    def write(retention: dict) -> Path:
        path = tmp_path / "fleet.yaml"
        config = {
            "storage": {"local_path": str(catalog.store.root), "prefix": PREFIX},
            "retention": retention,
            "clusters": [{"name": CLUSTER, "hosts": [{"name": HOST}]}],
        }
        path.write_text(yaml.safe_dump(config))
        return path

    return write


def cli(*args: str) -> list[str]:
    return ["retention", *args, "--cluster", CLUSTER, "--host", HOST]


def test_cli_plan_apply_dry_run_then_confirm(catalog, fleet_file, capsys):
    now = datetime.now(UTC).replace(microsecond=0)
    manifests = weekly_chains(3, incrementals=1, end=now - timedelta(days=1))
    register(catalog, manifests)
    config = str(fleet_file({"keep_last_chains": 1, "min_age_days": 0}))
    assert main([*cli("plan"), "--config", config]) == 0
    out = capsys.readouterr().out
    assert out.count("delete backup") == 4 and out.count("keep   backup") == 2
    assert main([*cli("apply"), "--config", config]) == 0
    assert "dry run: 4 item(s) would be deleted; add --confirm to delete them" in capsys.readouterr().out
    assert len(catalog.backup_ids()) == 6
    assert main([*cli("apply"), "--config", config, "--confirm", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["applied"]["deleted_items"] == 4 and not out["applied"]["dry_run"]
    assert sorted(out["applied"]["deleted"]) == [m.backup_id for m in manifests[:4]]
    assert catalog.backup_ids() == [m.backup_id for m in manifests[4:]]


def test_cli_default_config_keeps_everything_and_plan_at_a_future_time(catalog, fleet_file, capsys):
    register(catalog, weekly_chains(3, incrementals=0))
    assert main([*cli("apply"), "--config", str(fleet_file({})), "--confirm"]) == 0
    assert len(catalog.backup_ids()) == 3 and "deleted 0 item(s)" in capsys.readouterr().out
    config = str(fleet_file({"keep_last_chains": 1, "min_age_days": 15}))
    assert main([*cli("plan"), "--config", config, "--at", NOW.isoformat(), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["counts"] == {"delete_backup": 1, "keep_backup": 2}
    assert (
        main([*cli("plan"), "--config", config, "--at", (NOW + timedelta(days=30)).isoformat(), "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["summary"]["counts"] == {"delete_backup": 2, "keep_backup": 1}


def test_cli_warns_and_exits_1_on_an_unreadable_manifest(catalog, fleet_file, capsys):
    register(catalog, weekly_chains(1, incrementals=0))
    catalog.store.put_bytes(catalog.manifest_key(bid(NOW - timedelta(days=30))), b"{oops")
    assert main([*cli("plan"), "--config", str(fleet_file({"keep_last_chains": 1}))]) == 1
    captured = capsys.readouterr()
    assert "WARNING: unreadable manifest (its backup is kept)" in captured.err
    assert "its manifest.json cannot be read" in captured.out


def test_operator_logs_the_plan_and_is_a_dry_run_until_confirmed(catalog):
    from xtrabackup_provider.operators.retention import ApplyRetentionOperator

    now = datetime.now(UTC)
    register(catalog, weekly_chains(2, incrementals=0, end=now - timedelta(days=1)))
    args = dict(cluster=CLUSTER, host=HOST, local_path=str(catalog.store.root), prefix=PREFIX)
    policy = {"keep_last_chains": 1, "min_age_days": 0}
    op = ApplyRetentionOperator(task_id="retention_db1", policy=policy, **args)
    result = _execute(op)
    assert result["dry_run"] and result["plan"]["counts"] == {"delete_backup": 1, "keep_backup": 1}
    assert len(catalog.backup_ids()) == 2
    assert len(json.dumps(result)) < 2000, "XCom stays small"
    result = _execute(ApplyRetentionOperator(task_id="r", policy=policy, confirm=True, **args))
    assert result["deleted_items"] == 1 and len(catalog.backup_ids()) == 1
    with pytest.raises(ValueError, match=r"r2 \(c1/db1\): invalid retention policy: weekly"):
        _execute(ApplyRetentionOperator(task_id="r2", policy={"weekly": -1}, **args))


def test_retention_finding_the_hosts_lock_held_is_skipped_for_the_next_run_not_retried(catalog):
    """A backup started elsewhere (the CLI) holds the host's lock: retention deletes nothing and the
    task is skipped, naming the holder; the next backup run applies it. A retry would hold the backup
    DAG's run (one at a time) and so the host's next backups (chaos seed 120516: a killed standby
    task's 15-minute retry held c1's backups for 20 minutes)."""
    from airflow.providers.common.compat.sdk import AirflowSkipException

    from xtrabackup_provider.core.catalog.lock import HostLock
    from xtrabackup_provider.operators.retention import ApplyRetentionOperator

    register(catalog, weekly_chains(2, incrementals=0, end=datetime.now(UTC) - timedelta(days=1)))
    args = dict(cluster=CLUSTER, host=HOST, local_path=str(catalog.store.root), prefix=PREFIX)
    op = ApplyRetentionOperator(
        task_id="r", policy={"keep_last_chains": 1, "min_age_days": 0}, confirm=True, **args
    )
    lock = HostLock(catalog, purpose="backup")
    lock.acquire()
    try:
        with pytest.raises(AirflowSkipException, match=r"cannot start: another backup of .*next backup run"):
            op.execute({})
    finally:
        lock.release()
    assert len(catalog.backup_ids()) == 2, "nothing is deleted while another run holds the lock"


def _execute(op) -> dict:
    """Run an operator's execute() and return its XCom value; its log must hold the plan table."""
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("xtrabackup_provider.operators.retention")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        result = op.execute({})
    finally:
        logger.removeHandler(handler)
    mode = "deleting" if op.confirm else "DRY RUN (set retention.confirm: true to delete)"
    assert any(mode in r and "ACTION KIND" in r for r in records), records
    return result


def test_backup_dag_ends_with_a_retention_task_per_host(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "dags"))
    from dag_helpers import load_dag_module

    config = {
        "storage": {"bucket": "b"},
        "retention": {"keep_last_chains": 3, "weekly": 4, "confirm": True},
        "clusters": [{"name": "c", "hosts": [{"name": "db1"}, {"name": "db.2"}]}],
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("XTRABACKUP_FLEET_CONFIG", str(path))
    dag = load_dag_module("mysql_backup").mysql_backup_c
    # One retention task in the group mapped over the hosts: each map index waits for its own host.
    task = dag.get_task("backup.retention")
    assert task.get_closest_mapped_task_group()._expand_input.value[1]["host"] == "db.2"
    assert task.upstream_task_ids == {"backup.backup"}
    assert task.trigger_rule == "all_success"
    assert task.confirm is True and task.policy["keep_last_chains"] == 3 and task.policy["weekly"] == 4
    assert "confirm" not in task.policy
    config["retention"] = {}
    path.write_text(yaml.safe_dump(config))
    task = load_dag_module("mysql_backup").mysql_backup_c.get_task("backup.retention")
    assert task.confirm is False and task.policy["keep_last_chains"] is None
