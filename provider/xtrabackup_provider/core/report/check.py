"""Watched: is every host's recovery still possible, read from the catalogs alone (no keys, no
database connection, independent of whether the backup DAG ran).

Per host, against its cluster's `check:` settings:
  - the newest restorable backup (its chain resolves from the manifests and every object of it is
    stored at its size on some target): older than `rpo_hours`, or none: critical;
  - restore tests: the last one failed, none passed yet, or the newest pass is older than
    `restore_test_max_age_days`: warning;
  - binlogs (a cluster with `binlogs:`, or a host that has shipped some): a gap after the newest
    restorable backup's binlog position (point-in-time recovery from it stops there), no binlog
    shipped, or the shipped binlogs lagging more than `binlog_max_lag_minutes`: critical;
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
from ..catalog.backups import Catalog
from ..catalog.chain import resolve_chain
from ..catalog.manifest import CatalogError, Manifest
from ..common.values import binlog_number
from ..config.schema import CheckConfig, FleetConfig
from ..config.wiring import make_store
from ..storage.base import ObjectStore, StorageError
from .html import fmt_seconds
from .model import newest_binlog, restore_tests

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
        }


def exit_code(checks: Sequence[HostCheck]) -> int:
    return max((LEVEL[c.status] for c in checks), default=0)


def check_fleet(
    config: FleetConfig,
    cluster: str | None = None,
    now: datetime | None = None,
    stores: dict[str, ObjectStore] | None = None,
) -> list[HostCheck]:
    """Every host of `cluster` (default: every cluster). `stores`: target name -> store, for the
    targets the caller has already built (the DAG's hooks); the others come from the config."""
    now = now or datetime.now(UTC)
    stores = dict(stores or {})
    for target in config.targets():
        if target.name not in stores:
            stores[target.name] = make_store(target)
    clusters = [config.cluster(cluster)] if cluster else config.clusters
    out = []
    for c in clusters:
        for h in c.hosts:
            catalogs = [(t.name, Catalog(stores[t.name], t.prefix, c.name, h.name)) for t in config.targets()]
            out.append(check_host(catalogs, c.check, c.binlogs is not None, now, c.name))
    return out


def check_host(
    catalogs: list[tuple[str, Catalog]], settings: CheckConfig, binlogs_on: bool, now: datetime, cluster: str
) -> HostCheck:
    """One host: `catalogs` are its catalog on each storage target, the first target first."""
    primary = catalogs[0][1]
    result = HostCheck(cluster, primary.host)
    problems: list[str] = []
    try:
        manifests = primary.manifests(problems)
    except (StorageError, CatalogError) as exc:
        result.add("critical", f"cannot read the catalog at {primary.describe()}: {exc}")
        return result
    for problem in problems[:3]:
        result.add("warning", f"unreadable manifest: {problem}")
    newest = _backups(result, manifests, catalogs, settings, now)
    _restore_tests(result, primary, settings, now)
    _binlogs(result, primary, newest, settings, binlogs_on, now)
    _copies(result, primary, manifests, catalogs[1:], settings, now)
    return result


def _backups(
    result: HostCheck,
    manifests: list[Manifest],
    catalogs: list[tuple[str, Catalog]],
    settings: CheckConfig,
    now: datetime,
) -> Manifest | None:
    rpo = settings.rpo_hours * 3600
    by_id = {m.backup_id: m for m in manifests}
    skipped: list[str] = []
    newest = None
    for m in sorted(manifests, key=lambda m: m.backup_id, reverse=True):
        why = _unrestorable(m, by_id, catalogs)
        if why is None:
            newest = m
            break
        skipped.append(f"{m.backup_id} ({why})")
    if skipped:
        result.add("warning", f"not restorable: {'; '.join(skipped[:3])}")
    if newest is None:
        result.add("critical", f"no restorable backup at {catalogs[0][1].describe()}")
        return None
    age = max((now - newest.finished_at).total_seconds(), 0.0)
    result.backup_age_seconds, result.newest_restorable = age, newest.backup_id
    text = f"newest restorable backup {newest.backup_id} is {fmt_seconds(age)} old"
    if age > rpo:
        result.add("critical", f"{text}, over the RPO of {fmt_seconds(rpo)}")
    else:
        result.add("ok", f"{text} (RPO {fmt_seconds(rpo)})")
    return newest


def _unrestorable(m: Manifest, by_id: dict[str, Manifest], catalogs: list[tuple[str, Catalog]]) -> str | None:
    """Why backup `m` cannot be restored now, or None: its chain resolves from the manifests and
    each object of it is stored at its size on one of the targets (HEAD only: a deep check is
    `verify --deep`)."""
    try:
        chain = resolve_chain(by_id, m.backup_id, catalogs[0][1].describe())
    except CatalogError as exc:
        return str(exc)
    for link in chain:
        for piece in (p for obj in link.objects for p in obj.pieces()):
            if not any(_stored(c, link, piece.key, piece.size) for _, c in catalogs):
                return f"{piece.key} is missing on every target"
    return None


def _stored(catalog: Catalog, m: Manifest, key: str, size: int) -> bool:
    primary_dir = key.rsplit("/", 1)[0]
    here = catalog.backup_dir(m.backup_id) + "/" + key[len(primary_dir) + 1 :]
    try:
        info = catalog.store.head(here)
    except StorageError:
        return False
    return info is not None and info.size == size


def _restore_tests(result: HostCheck, catalog: Catalog, settings: CheckConfig, now: datetime) -> None:
    problems: list[str] = []
    try:
        rows = restore_tests(catalog, problems)
    except StorageError as exc:
        result.add("warning", f"cannot read the restore tests: {exc}")
        return
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
    catalog: Catalog,
    newest: Manifest | None,
    settings: CheckConfig,
    on: bool,
    now: datetime,
) -> None:
    problems: list[str] = []
    try:
        status = newest_binlog(catalog, now, problems)
    except (StorageError, BinlogError) as exc:
        result.add("critical" if on else "warning", f"cannot read the shipped binlogs: {exc}")
        return
    if newest is not None and newest.binlog_file:
        _gaps(result, catalog, newest)
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


def _gaps(result: HostCheck, catalog: Catalog, newest: Manifest) -> None:
    """Gaps after the newest restorable backup's binlog position: point-in-time recovery from it
    cannot cross them (an older gap no longer matters: that backup starts after it)."""
    assert newest.binlog_file
    try:
        index = BinlogCatalog(catalog, newest.server_uuid).index()
    except (StorageError, BinlogError) as exc:
        result.add("warning", f"cannot read the binlog gaps: {exc}")
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
    primary: Catalog,
    manifests: list[Manifest],
    others: list[tuple[str, Catalog]],
    settings: CheckConfig,
    now: datetime,
) -> None:
    limit = settings.copies_max_behind_hours * 3600
    for name, catalog in others:
        state = copy_state(primary, manifests, name, catalog)
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
