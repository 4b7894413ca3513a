"""Apply retention to one host: gather the planner's inputs from the store, plan, delete safely.

Deletion order, so that an interrupted run never leaves a manifest naming deleted data:
  1. the manifests of the backups to delete (and binlog markers), one DeleteObjects round per
     chain depth, deepest first: a run stopped between rounds leaves valid chain prefixes, never
     an incremental whose parent manifest is gone;
  2. then every other object of those items (backup objects, restore reports, binlog files,
     debris), in batched DeleteObjects calls.
What step 2 leaves behind when interrupted has no manifest any more: the next run deletes it as
debris once it is older than the grace period (it already is, being old data).

Deleting happens under the host's backup lock (core/catalog/lock.py), so a backup of the host and a
retention apply never interleave: while a backup runs, apply fails with HostLockBusy naming the
holder and deletes nothing; while retention deletes, a backup fails the same way. The lock is
confirmed (fencing) before each round of deletions: a run that lost it stops deleting.

Read leases (core/catalog/lease.py): what a running restore, PITR or standby update reads is
kept and named in the plan; after step 1 the leases are read again, and the data of an item
leased since planning is kept (its manifest is gone, so it becomes debris once the lease ends).
The lease files of readers that are gone (killed without deleting theirs) are removed.

On a versioned bucket every version of a deleted key goes (core/storage/s3.py); `freed_bytes`
is what the store really freed, and versions Object Lock still keeps are named in `retained`.
"""

from __future__ import annotations

__all__ = ["retention_items"]

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..binlog.catalog import BinlogCatalog, server_uuids
from ..catalog.backups import Catalog
from ..catalog.lease import leased_items, remove_dead_leases
from ..catalog.lock import HostLock, HostLockBusy
from ..catalog.manifest import CatalogError, Manifest
from ..catalog.reports import REPORT_NAME, read_report
from ..common.crashpoints import crash_point
from ..storage.base import Deleted, ObjectInfo, StorageError
from .model import BinlogItem, Plan, PlanItem, RetentionPolicy
from .plan import plan_retention


def retention_items(catalog: Catalog) -> list[BinlogItem]:
    """Every shipped binlog of this host, as core.retention.plan's planner takes them (plan_host's
    `binlogs`): the manifest is the marker deleted first, then the objects."""

    items = []
    for uuid in server_uuids(catalog):
        bcat = BinlogCatalog(catalog, uuid)
        for m in bcat.index().shipped():
            keys = [s.object.key for s in m.segments]
            first = m.first_event_time or m.shipped_at
            items.append(
                BinlogItem(
                    server_uuid=uuid,
                    name=m.name,
                    first_event_time=first,
                    last_event_time=m.last_event_time or first,
                    size=m.stored_bytes,
                    storage_class=m.segments[0].object.storage_class,
                    key=keys[0],
                    marker_keys=(bcat.manifest_key(m.name, partial=not m.complete),),
                    segment_keys=tuple(keys[1:]),
                )
            )
    return items


log = logging.getLogger(__name__)


class RetentionError(RuntimeError):
    """Retention refused to delete; the message names the backup or key and what to do."""


@dataclass
class Inventory:
    manifests: list[Manifest]
    listing: list[ObjectInfo]
    verified: set[str]  # the newest backup whose restore test passed (at most one id)
    problems: list[str] = field(default_factory=list)  # unreadable manifests


@dataclass
class ApplyReport:
    dry_run: bool
    deleted: list[str] = field(default_factory=list)  # names of the deleted items
    deleted_keys: int = 0
    deleted_bytes: int = 0  # the planned size of what was deleted
    freed_bytes: int = 0  # what the store freed (every version, on a versioned bucket)
    retained: list[str] = field(default_factory=list)  # versions still under Object Lock, named
    kept_leased: list[str] = field(default_factory=list)  # leased after planning: data kept
    expired_leases: list[str] = field(default_factory=list)  # lease files of gone readers, removed
    plan: dict[str, Any] = field(default_factory=dict)  # Plan.summary()

    def summary(self, max_names: int = 50) -> dict[str, Any]:
        """Small metadata for XCom."""
        return {
            "dry_run": self.dry_run,
            "deleted_items": len(self.deleted),
            "deleted_keys": self.deleted_keys,
            "deleted_bytes": self.deleted_bytes,
            "freed_bytes": self.freed_bytes,
            "retained": self.retained[:max_names],
            "kept_leased": self.kept_leased[:max_names],
            "expired_leases": len(self.expired_leases),
            "deleted": self.deleted[:max_names],
            "plan": self.plan,
        }


def backups_prefix(catalog: Catalog) -> str:
    return f"{catalog.host_prefix}/backups/"


def gather(catalog: Catalog) -> Inventory:
    problems: list[str] = []
    manifests = catalog.manifests(problems)
    listing = list(catalog.store.list(backups_prefix(catalog)))
    return Inventory(manifests, listing, newest_verified(catalog, manifests, listing), problems)


def newest_verified(catalog: Catalog, manifests: list[Manifest], listing: list[ObjectInfo]) -> set[str]:
    """The newest backup whose restore-report.json says "pass" (only the newest one is protected)."""
    ids = {m.backup_id for m in manifests}
    prefix = backups_prefix(catalog)
    reported = {i.key[len(prefix) :].split("/", 1)[0] for i in listing if i.key.endswith("/" + REPORT_NAME)}
    for bid in sorted(reported & ids, reverse=True):  # ids sort by time
        try:
            report = read_report(catalog, bid)
        except (StorageError, ValueError) as exc:
            log.warning("ignoring the unreadable restore report of %s: %s", bid, exc)
            continue
        if report and report.get("verdict") == "pass":
            return {bid}
    return set()


def plan_host(
    catalog: Catalog,
    policy: RetentionPolicy,
    now: datetime | None = None,
    binlogs: Sequence[BinlogItem] | None = None,
) -> Plan:
    """Plan from the store's current state (the host's shipped binlogs included unless given).
    On an S3 bucket with Object Lock, what the plan would delete is checked with head-object
    and re-planned until no deletion is retained."""
    now = now or datetime.now(UTC)
    if binlogs is None:
        binlogs = retention_items(catalog)
    inv = gather(catalog)
    leases = leased_items(catalog)
    reader = catalog.store.lock_reader()
    locks: dict[str, datetime] = {}
    checked: set[str] = set()
    while True:
        plan = plan_retention(
            inv.manifests,
            binlogs,
            policy,
            now,
            verified=inv.verified,
            listing=inv.listing,
            backups_prefix=backups_prefix(catalog),
            locks=locks,
            leases=leases,
        )
        todo = [k for item in plan.deletes for k in item.keys if k not in checked]
        if reader is None or not todo:
            break
        checked.update(todo)
        found = {k: d for k, d in reader(todo).items() if d > now}
        if not found:
            break
        locks.update(found)
    plan.problems = inv.problems
    return plan


def apply_plan(catalog: Catalog, plan: Plan, *, confirm: bool = False) -> ApplyReport:
    """Delete what the plan deletes, manifests first (see the module doc), holding the host's
    backup lock. Without `confirm` nothing is deleted: the report says what would be. HostLockBusy
    (nothing deleted) if a backup or another retention run of the host holds the lock."""
    deletes = plan.deletes
    report = ApplyReport(dry_run=not confirm, plan=plan.summary())
    if not confirm:
        log.info("dry run: %d item(s) would be deleted; nothing was deleted", len(deletes))
        return report
    _check_scope(catalog, deletes)
    report.expired_leases = remove_dead_leases(catalog)
    if not deletes:
        return report
    lock = HostLock(catalog, purpose="retention")
    try:
        lock.acquire()
    except HostLockBusy as exc:
        raise HostLockBusy(f"{exc}. Nothing was deleted; apply retention again once it is over") from exc
    try:
        _delete(catalog, plan, report, lock)
    finally:
        lock.release()
    return report


def _delete(catalog: Catalog, plan: Plan, report: ApplyReport, lock: HostLock) -> None:
    deletes = plan.deletes
    _check_no_new_children(catalog, plan)  # under the lock: no backup can register meanwhile
    done = Deleted()
    for batch in marker_batches(deletes):
        lock.confirm("deleting manifests")
        done.add(catalog.store.delete(batch))
        report.deleted_keys += len(batch)
        crash_point("retention.between_rounds")
    # A restore that started after planning wrote its lease before re-reading its manifests.
    late = leased_items(catalog)
    kept = [item for item in deletes if item.name in late]
    for item in kept:
        log.warning("a %s started meanwhile: keeping the data of %s", late[item.name], item.name)
    report.kept_leased = [item.name for item in kept]
    rest = [k for item in deletes if item.name not in late for k in item.keys[item.markers :]]
    crash_point("retention.before_data")
    lock.confirm("deleting data")
    done.add(catalog.store.delete(rest))
    crash_point("retention.after_data")
    report.deleted_keys += len(rest)
    report.deleted = [item.name for item in deletes if item.name not in late]
    report.deleted_bytes = sum(item.size for item in deletes if item.name not in late)
    report.freed_bytes = report.deleted_bytes if done.freed_bytes is None else done.freed_bytes
    report.retained = done.retained
    log.info(
        "deleted %d item(s), %d object(s): %d bytes freed",
        len(report.deleted),
        report.deleted_keys,
        report.freed_bytes,
    )
    for retained in done.retained:
        log.warning("kept under Object Lock: %s", retained)


def marker_batches(deletes: Sequence[PlanItem]) -> list[list[str]]:
    """Commit markers grouped by chain depth, deepest first (binlog markers last)."""
    by_depth: dict[int, list[str]] = {}
    for item in deletes:
        if item.markers:
            depth = item.depth if item.kind == "backup" else -1
            by_depth.setdefault(depth, []).extend(item.keys[: item.markers])
    return [by_depth[d] for d in sorted(by_depth, reverse=True)]


def _check_scope(catalog: Catalog, deletes: Sequence[PlanItem]) -> None:
    """Never delete outside this host's prefix, whatever a binlog adapter handed in."""
    own = catalog.host_prefix + "/"
    for item in deletes:
        for key in item.keys:
            if not key.startswith(own):
                raise RetentionError(
                    f"{item.kind} {item.name}: key {key!r} is outside {catalog.describe()}; refusing to delete"
                )


def _check_no_new_children(catalog: Catalog, plan: Plan) -> None:
    """A backup registered since planning must not depend on a backup the plan deletes."""
    planned = {i.name for i in plan.items if i.kind == "backup"}
    doomed = {i.name for i in plan.deletes if i.kind == "backup"}
    for bid in catalog.backup_ids():
        if bid in planned:
            continue
        try:
            parent = catalog.get(bid).parent_id
        except CatalogError as exc:
            raise RetentionError(
                f"backup {bid} appeared since planning and cannot be read ({exc}); re-plan"
            ) from exc
        if parent in doomed:
            raise RetentionError(
                f"backup {bid} appeared since planning and depends on {parent}, which the plan deletes; "
                "nothing was deleted: plan again"
            )
