"""Watched: is every host's recovery still possible, read from the catalogs alone (no keys, no
database connection, independent of whether the backup DAG ran).

Per host, against its cluster's `check:` settings, over every storage target (`storage` then
`copies`, as a restore reads them: core/catalog/targets.py):
  - a storage target that cannot be read: the first (`storage`, where backups and binlogs are
    written): critical; a further one: warning;
  - the newest restorable backup: its chain resolves from the manifests of some target, and every
    object of it is stored at its size on a target whose manifest names the same object (sha256),
    so a restore can fetch it there (`restorable_from` names the targets, the chain's first):
    older than `rpo_hours`, or none: critical;
  - restore tests: the last one failed, none passed yet, or the newest pass is older than
    `restore_test_max_age_days`: warning;
  - binlogs (a cluster with `binlogs:`, or a host that has shipped some): a gap after the newest
    restorable backup's binlog position (point-in-time recovery from it stops there), no binlog
    shipped, or the shipped binlogs lagging more than `binlog_max_lag_minutes`: critical;
  - a promoted server (core/binlog/timeline.py, the newest timeline) with no backup of its own:
    nothing it wrote can be restored to a point in time (PITR on a timeline starts from its first
    full backup): warning, critical once the promotion is older than `rpo_hours`;
  - further storage targets: a backup not there `copies_max_behind_hours` after it finished, or a
    target that cannot be read: warning;
  - a manifest or restore report that cannot be read: warning.
The status of a host is its worst finding; `exit_code` maps the worst of all to 0 / 1 / 2, what
monitoring systems (Nagios, Icinga, Sensu) expect.
"""

from __future__ import annotations

__all__ = ["check_fleet", "check_host"]

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from ..backup.copies import copy_state
from ..binlog.catalog import BinlogCatalog, BinlogError
from ..binlog.timeline import timelines
from ..catalog.backups import Catalog
from ..catalog.chain import resolve_chain
from ..catalog.manifest import CatalogError, Manifest
from ..catalog.targets import Source, Targets
from ..common.values import binlog_number
from ..config.schema import CheckConfig, FleetConfig
from ..config.wiring import make_store
from ..storage.base import ObjectStore, StorageError
from .html import fmt_seconds
from .model import BinlogStatus, newest_binlog, restore_tests_on

Status = Literal["ok", "warning", "critical"]
LEVEL: dict[str, int] = {"ok": 0, "warning": 1, "critical": 2}
STATUSES: tuple[Status, ...] = ("ok", "warning", "critical")


@dataclass(frozen=True)
class Finding:
    status: Status
    text: str


@dataclass
class HostCheck:
    cluster: str
    host: str
    findings: list[Finding] = field(default_factory=list)
    # The figures behind the findings, for metrics and --json (seconds; None: nothing to measure).
    backup_age_seconds: float | None = None
    newest_restorable: str | None = None
    restore_test_age_seconds: float | None = None
    last_restore_test: str | None = None  # its verdict
    binlog_lag_seconds: float | None = None
    binlog_gaps: int = 0
    copies_behind: dict[str, int] = field(default_factory=dict)  # target -> backups not there yet
    restorable_from: list[str] = field(default_factory=list)  # targets the newest restorable reads
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> location, backups | error

    @property
    def status(self) -> Status:
        return STATUSES[max((LEVEL[f.status] for f in self.findings), default=0)]

    def add(self, status: Status, text: str) -> None:
        self.findings.append(Finding(status, text))

    def line(self) -> str:
        """One line per host: the status first, the worst findings first."""
        ordered = sorted(self.findings, key=lambda f: -LEVEL[f.status])
        return f"{self.status.upper()} {self.cluster}/{self.host}: " + "; ".join(f.text for f in ordered)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "host": self.host,
            "status": self.status,
            "findings": [{"status": f.status, "text": f.text} for f in self.findings],
            "backup_age_seconds": self.backup_age_seconds,
            "newest_restorable": self.newest_restorable,
            "restore_test_age_seconds": self.restore_test_age_seconds,
            "last_restore_test": self.last_restore_test,
            "binlog_lag_seconds": self.binlog_lag_seconds,
            "binlog_gaps": self.binlog_gaps,
            "copies_behind": self.copies_behind,
            "restorable_from": self.restorable_from,
            "targets": self.targets,
        }


def exit_code(checks: Sequence[HostCheck]) -> int:
    return max((LEVEL[c.status] for c in checks), default=0)


def check_fleet(
    config: FleetConfig,
    cluster: str | None = None,
    now: datetime | None = None,
    stores: dict[str, ObjectStore] | None = None,
    only: str | None = None,
) -> list[HostCheck]:
    """Every host of `cluster` (default: every cluster). `stores`: target name -> store, for the
    targets the caller has already built (the DAG's hooks); the others come from the config.
    `only`: that storage target alone (`check --target-store`)."""
    now = now or datetime.now(UTC)
    targets = [config.target(only)] if only else config.targets()
    stores = dict(stores or {})
    for target in targets:
        if target.name not in stores:
            stores[target.name] = make_store(target)
    clusters = [config.cluster(cluster)] if cluster else config.clusters
    out = []
    for c in clusters:
        for h in c.hosts:
            catalogs = [(t.name, Catalog(stores[t.name], t.prefix, c.name, h.name)) for t in targets]
            out.append(check_host(catalogs, c.check, c.binlogs is not None, now, c.name))
    return out


def check_host(
    catalogs: list[tuple[str, Catalog]], settings: CheckConfig, binlogs_on: bool, now: datetime, cluster: str
) -> HostCheck:
    """One host: `catalogs` are its catalog on each storage target, the first target first."""
    targets = Targets([Source(name, catalog) for name, catalog in catalogs])
    result = HostCheck(cluster, catalogs[0][1].host)
    problems: list[str] = []
    errors: dict[str, str] = {}
    held = {s.name: ms for s, ms in targets.each(lambda c: c.manifests(problems), [], errors, one=False)}
    for source in targets.sources:
        where = source.catalog.describe()
        result.targets[source.name] = {"location": where} | (
            {"error": errors[source.name]} if source.name in errors else {"backups": len(held[source.name])}
        )
    first = targets.first
    if first.name in errors:  # where backups and binlogs are written
        result.add("critical", f"storage target {first.name} cannot be read: {errors[first.name]}")
    for problem in problems[:3]:
        result.add("warning", f"unreadable manifest: {problem}")
    readable = [s for s in targets.sources if s.name in held]
    newest = _backups(result, held, readable, first.name, settings, now)
    if readable:  # else there is nothing to judge them by: the targets' errors say so
        _restore_tests(result, readable, settings, now)
        _binlogs(result, readable, newest, settings, binlogs_on, now)
        _timeline(result, readable, held, settings, now)
    _copies(result, targets, held, errors, settings, now)
    return result


def _backups(
    result: HostCheck,
    held: dict[str, list[Manifest]],
    readable: list[Source],
    first: str,
    settings: CheckConfig,
    now: datetime,
) -> Manifest | None:
    rpo = settings.rpo_hours * 3600
    by_target = {name: {m.backup_id: m for m in ms} for name, ms in held.items()}
    every = {
        bid: m for ms in reversed(list(by_target.values())) for bid, m in ms.items()
    }  # the first target's wins
    skipped: list[str] = []
    newest = None
    for m in sorted(every.values(), key=lambda m: m.backup_id, reverse=True):
        found = _restorable(m.backup_id, by_target, readable)
        if isinstance(found, list):
            newest, result.restorable_from = m, found
            break
        skipped.append(f"{m.backup_id} ({found})")
    if skipped:
        result.add("warning", f"not restorable: {'; '.join(skipped[:3])}")
    if newest is None:
        where = ", ".join(s.catalog.describe() for s in readable) or "no readable storage target"
        result.add("critical", f"no restorable backup at {where}")
        return None
    age = max((now - newest.finished_at).total_seconds(), 0.0)
    result.backup_age_seconds, result.newest_restorable = age, newest.backup_id
    text = f"newest restorable backup {newest.backup_id} is {fmt_seconds(age)} old"
    if result.restorable_from != [first]:  # not (all) from the first target
        text += f" (from {' and '.join(result.restorable_from)})"
    if age > rpo:
        result.add("critical", f"{text}, over the RPO of {fmt_seconds(rpo)}")
    else:
        result.add("ok", f"{text} (RPO {fmt_seconds(rpo)})")
    return newest


def _restorable(
    backup_id: str, by_target: dict[str, dict[str, Manifest]], readable: list[Source]
) -> list[str] | str:
    """The targets a restore of `backup_id` reads (the one whose manifests resolve its chain first,
    then those objects fall back to), or why it cannot be restored now: the chain resolves on no
    target, or an object of it is stored at its size on none (HEAD only: a deep check is
    `verify --deep`)."""
    why = ""
    for source in readable:
        if backup_id not in by_target[source.name]:
            continue
        try:
            chain = resolve_chain(by_target[source.name], backup_id, source.catalog.describe())
        except CatalogError as exc:
            why = why or str(exc)
            continue
        order = [source, *(s for s in readable if s is not source)]
        used: list[str] = []
        for link in chain:
            where = next((s for s in order if _holds(s, by_target[s.name].get(link.backup_id), link)), None)
            if where is None:
                return f"{link.backup_id}: its objects are missing on every target"
            if where.name not in used:
                used.append(where.name)
        return [source.name, *(n for n in used if n != source.name)]
    return why or "its chain resolves on no target"


def _holds(source: Source, there: Manifest | None, link: Manifest) -> bool:
    """Does `source` hold backup `link` as the chain names it (the same streams), every object at
    its size?"""
    if there is None or [(o.sha256, o.size) for o in there.streams] != [
        (o.sha256, o.size) for o in link.streams
    ]:
        return False
    for piece in (p for obj in there.objects for p in obj.pieces()):
        try:
            info = source.catalog.store.head(piece.key)
        except StorageError:
            return False
        if info is None or info.size != piece.size:
            return False
    return True


def _restore_tests(result: HostCheck, readable: list[Source], settings: CheckConfig, now: datetime) -> None:
    """The restore tests reported on any target (a report is copied with its backup, and written
    where the test read the chain)."""
    problems: list[str] = []
    errors: list[str] = []
    rows = restore_tests_on([(s.name, s.catalog) for s in readable], problems, errors)
    for error in errors:
        result.add("warning", error)
    for problem in problems[:2]:
        result.add("warning", f"unreadable restore report: {problem}")
    limit = settings.restore_test_max_age_days * 86400
    passed = [r for r in rows if r.passed]
    if rows:
        last = rows[-1]
        result.last_restore_test = last.verdict
        if not last.passed:
            why = "; ".join(last.reasons[:2]) or last.verdict
            checks = f" check(s) {', '.join(last.failed_checks)}" if last.failed_checks else ""
            result.add("warning", f"the last restore test ({last.backup_id}) failed{checks}: {why}")
    if not passed:
        result.add("warning", "no restore test has passed yet")
        return
    newest = passed[-1]
    age = max((now - newest.finished_at).total_seconds(), 0.0) if newest.finished_at else None
    result.restore_test_age_seconds = age
    if age is None:
        return
    text = f"restore test passed {fmt_seconds(age)} ago ({newest.backup_id})"
    result.add(
        "warning" if age > limit else "ok", text + (f", over {fmt_seconds(limit)}" if age > limit else "")
    )


def _binlogs(
    result: HostCheck,
    readable: list[Source],
    newest: Manifest | None,
    settings: CheckConfig,
    on: bool,
    now: datetime,
) -> None:
    """The newest binlog shipped to any target (a PITR reads the target that has it), and the gaps."""
    problems: list[str] = []
    status: BinlogStatus | None = None
    failed: list[str] = []
    for source in readable:
        try:
            here = newest_binlog(source.catalog, now, problems)
        except (StorageError, BinlogError) as exc:
            failed.append(f"{source.name}: {exc}")
            continue
        if here and (status is None or _later(here, status)):
            status = here
    if failed and len(failed) == len(readable):
        result.add("critical" if on else "warning", f"cannot read the shipped binlogs: {'; '.join(failed)}")
        return
    if newest is not None and newest.binlog_file:
        _gaps(result, readable, newest)
    if status is None and not on:
        return  # binlogs are not shipped for this cluster
    for problem in problems[:2]:
        result.add("warning", problem)
    if status is None:
        result.add("critical", "no binlog is shipped: point-in-time recovery is impossible")
        return
    limit = settings.binlog_max_lag_minutes * 60
    result.binlog_lag_seconds = status.lag_seconds
    lag = status.lag_seconds
    text = (
        f"binlogs shipped up to {fmt_seconds(lag)} ago ({status.name})"
        if lag is not None
        else "binlog lag unknown"
    )
    if lag is None or lag > limit:
        result.add("critical", text + f", over {fmt_seconds(limit)}")
    else:
        result.add("ok", text)


def _timeline(
    result: HostCheck,
    readable: list[Source],
    held: dict[str, list[Manifest]],
    settings: CheckConfig,
    now: datetime,
) -> None:
    """The newest promoted identity of the host, when no target holds a backup of it."""
    for source in readable:
        try:
            records = timelines(source.catalog)  # copied with the binlogs: the first readable says
            break
        except (StorageError, BinlogError) as exc:
            result.add("warning", f"cannot read the timeline records on {source.name}: {exc}")
    else:
        return
    if not records or any(m.server_uuid == records[-1].server_uuid for ms in held.values() for m in ms):
        return
    current = records[-1]
    age = max((now - current.promoted_at).total_seconds(), 0.0)
    result.add(
        "critical" if age > settings.rpo_hours * 3600 else "warning",
        f"promoted {fmt_seconds(age)} ago to the new timeline {current.server_uuid} (forked from "
        f"{current.parent_server_uuid} at {current.fork_gtid or '-'}), which has no backup yet: nothing written "
        "since can be restored to a point in time; take a full backup of the new primary",
    )


def _later(a: BinlogStatus, b: BinlogStatus) -> bool:
    return a.covers_until is not None and (b.covers_until is None or a.covers_until > b.covers_until)


def _gaps(result: HostCheck, readable: list[Source], newest: Manifest) -> None:
    """Gaps after the newest restorable backup's binlog position: point-in-time recovery from it
    cannot cross them (an older gap no longer matters: that backup starts after it). Gap markers
    are copied with the binlogs: the first target that can be read says."""
    assert newest.binlog_file
    index = None
    for source in readable:
        try:
            index = BinlogCatalog(source.catalog, newest.server_uuid).index()
            break
        except (StorageError, BinlogError) as exc:
            why = str(exc)
    if index is None:
        result.add("warning", f"cannot read the binlog gaps: {why}")
        return
    base, start = binlog_number(newest.binlog_file)
    after = [g for g in index.gaps if binlog_number(g.last_missing) >= (base, start)]
    result.binlog_gaps = len(after)
    for gap in after[:2]:
        result.add(
            "critical",
            f"binlog gap {gap.describe()} after backup {newest.backup_id}: point-in-time recovery stops "
            "there; take a full backup",
        )


def _copies(
    result: HostCheck,
    targets: Targets,
    held: dict[str, list[Manifest]],
    errors: dict[str, str],
    settings: CheckConfig,
    now: datetime,
) -> None:
    """How far each further target is behind the first (unknown while the first cannot be read)."""
    limit = settings.copies_max_behind_hours * 3600
    primary = targets.first
    for source in targets.sources[1:]:
        name = source.name
        result.copies_behind[name] = 0
        if name in errors:
            result.add("warning", f"copy target {name} cannot be read: {errors[name]}")
            continue
        if primary.name in errors:
            continue
        state = copy_state(primary.catalog, held[primary.name], name, source.catalog)
        result.copies_behind[name] = len(state.behind)
        if state.error:
            result.add("warning", f"copy target {name} cannot be read: {state.error}")
            continue
        oldest = state.oldest_behind()
        binlogs = f", {state.binlogs_behind} binlog(s) being copied" if state.binlogs_behind else ""
        if oldest is None:
            result.add("ok", f"copies on {name}: none behind{binlogs}")
            continue
        age = max((now - oldest).total_seconds(), 0.0)
        text = f"copies on {name}: {len(state.behind)} backup(s) behind, the oldest finished {fmt_seconds(age)} ago"
        text += binlogs
        result.add("warning" if age > limit else "ok", text)
