"""What a cluster's backups look like, read from the catalog alone (manifests and restore
reports hold no secrets: no keys needed): sizes, durations and chain lengths per backup, restore
tests, and the binlog lag per host. core/report/html.py draws it as one self-contained page.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..backup.copies import CopyState, copy_state
from ..binlog.catalog import BinlogCatalog, BinlogError, server_uuids
from ..catalog.backups import Catalog
from ..catalog.manifest import Manifest
from ..catalog.origin import ORIGIN_KEY, airflow_origin
from ..catalog.reports import REPORT_NAME, read_report
from ..catalog.targets import Source, Targets
from ..config.schema import FleetConfig
from ..config.wiring import make_store
from ..storage.base import ObjectStore, StorageError


class ReportError(RuntimeError):
    """The report cannot be written; the message names the file."""


RESTORE_PHASES = ("fetch_extract", "prepare", "copy_back")  # what a real restore would take


@dataclass(frozen=True)
class BackupRow:
    backup_id: str
    kind: str
    parent_id: str | None
    started_at: datetime
    finished_at: datetime
    raw_bytes: int
    stored_bytes: int
    chain_length: int  # incrementals since the chain's full: 0 for a full
    storage_class: str
    blocked: dict[str, float] = field(default_factory=dict)  # what production could not do, seconds
    chain_root: str = ""
    # The Airflow task that took it (manifest.extra["airflow"]: dag_id, run_id, task_id, map_index,
    # try_number); empty for a backup taken with the CLI.
    origin: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return max((self.finished_at - self.started_at).total_seconds(), 0.0)


@dataclass(frozen=True)
class RestoreTestRow:
    backup_id: str
    verdict: str
    level: str
    chain: list[str]
    finished_at: datetime | None
    restore_seconds: float | None  # fetch + prepare + copy-back: what a real restore would take
    total_seconds: float | None  # including the sandbox start and the checks
    reasons: list[str]
    # The checks that failed (reports written before checks were named have none).
    failed_checks: list[str] = field(default_factory=list)
    # Every check the level ran: {"name", "status", "note"} (reasons are in `reasons`).
    results: list[dict[str, str]] = field(default_factory=list)
    origin: dict[str, Any] = field(default_factory=dict)  # the Airflow task that ran it, as BackupRow's
    source: str = ""  # the storage target the test read the chain from (older reports: unknown)

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


@dataclass(frozen=True)
class BinlogStatus:
    server_uuid: str
    name: str  # the newest shipped binlog
    complete: bool
    covers_until: datetime | None  # every event written before this instant is stored
    lag_seconds: float | None  # now - covers_until: how much a point-in-time restore would lose


@dataclass
class HostReport:
    host: str
    backups: list[BackupRow] = field(default_factory=list)  # oldest first
    restore_tests: list[RestoreTestRow] = field(default_factory=list)  # oldest first
    binlog: BinlogStatus | None = None
    problems: list[str] = field(default_factory=list)
    copies: list[CopyState] = field(default_factory=list)  # per further storage target
    source: str = ""  # the storage target the rows were read from (the first that can be read)

    def targets_of(self, backup_id: str) -> list[str]:
        """The storage targets that hold `backup_id`: the one read, and the copies that have it."""
        return [self.source, *(c.target for c in self.copies if backup_id in c.held)]

    @property
    def latest(self) -> BackupRow | None:
        return self.backups[-1] if self.backups else None

    @property
    def last_verified(self) -> RestoreTestRow | None:
        """The newest backup a restore test verified (not the latest test that passed: a test of an
        older backup run later does not hide a newer verified one)."""
        passed = [t for t in self.restore_tests if t.passed]
        return max(passed, key=lambda t: t.backup_id) if passed else None

    @property
    def last_test(self) -> RestoreTestRow | None:
        return self.restore_tests[-1] if self.restore_tests else None


@dataclass
class ClusterReport:
    cluster: str
    location: str
    generated_at: datetime
    max_chain_length: int
    hosts: list[HostReport]


def collect(
    config: FleetConfig,
    cluster: str,
    store: ObjectStore | None = None,
    now: datetime | None = None,
    copy_stores: dict[str, ObjectStore] | None = None,
    only: str | None = None,
) -> ClusterReport:
    """`store`: the first target's (default: from the config); `copy_stores`: by target name.
    Each host is read from the first target that can be read (host_report_on); `only`: that
    target alone (`report --target-store`)."""
    settings = config.cluster(cluster)
    now = now or datetime.now(UTC)
    targets = [config.target(only)] if only else config.targets()
    given = (copy_stores or {}) | ({config.storage.name: store} if store else {})
    stores = {t.name: given.get(t.name) or make_store(t) for t in targets}

    def one(host: str) -> HostReport:
        return host_report_on(
            [(t.name, Catalog(stores[t.name], t.prefix, cluster, host)) for t in targets], now
        )

    with ThreadPoolExecutor(4) as pool:
        hosts = list(pool.map(one, [h.name for h in settings.hosts]))
    first = targets[0]
    where = "/".join(p for p in (stores[first.name].location, first.prefix.strip("/"), cluster) if p)
    return ClusterReport(cluster, where, now, config.policy.max_chain_length, hosts)


def host_report_on(catalogs: Sequence[tuple[str, Catalog]], now: datetime) -> HostReport:
    """The host's report from the first storage target that can be read (`catalogs`: its catalog on
    each target, the first target first), the other targets as its copies; a target that could not
    be read is named in `problems`. With one target, exactly host_report."""
    targets = Targets([Source(name, catalog) for name, catalog in catalogs])

    def on(catalog: Catalog) -> HostReport:
        return host_report(catalog, now, [(n, c) for n, c in catalogs if c is not catalog])

    report = targets.read(f"the backups of {catalogs[0][1].host}", on)
    report.source = targets.first.name
    report.problems[:0] = targets.notes
    # A restore test writes its report where it read the chain: a test that proved a copy is there.
    others = {s.target for s in report.copies if not s.error}
    if others:
        readable = [(n, c) for n, c in catalogs if n in others]
        report.restore_tests = restore_tests_on(
            readable, report.problems, report.problems, report.restore_tests
        )
    return report


def restore_tests_on(
    catalogs: Sequence[tuple[str, Catalog]],
    problems: list[str],
    errors: list[str],
    known: Sequence[RestoreTestRow] = (),
) -> list[RestoreTestRow]:
    """The restore tests reported on any of the targets (a report is copied with its backup, and
    written where the test read the chain), and `known` (already read), each once, oldest first.
    Unreadable reports go to `problems`, targets whose reports cannot be listed to `errors`."""
    found = {(row.backup_id, row.finished_at): row for row in known}
    for name, catalog in catalogs:
        try:
            rows = restore_tests(catalog, problems)
        except StorageError as exc:
            errors.append(f"cannot read the restore tests on {name}: {exc}")
            continue
        for row in rows:
            found.setdefault((row.backup_id, row.finished_at), row)
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(found.values(), key=lambda r: (r.finished_at or epoch, r.backup_id))


def host_report(catalog: Catalog, now: datetime, copies: Sequence[tuple[str, Catalog]] = ()) -> HostReport:
    report = HostReport(catalog.host)
    manifests = catalog.manifests(report.problems)
    report.backups = backup_rows(manifests, report.problems)
    report.restore_tests = restore_tests(catalog, report.problems)
    report.binlog = newest_binlog(catalog, now, report.problems)
    report.copies = [copy_state(catalog, manifests, name, dest) for name, dest in copies]
    for state in report.copies:
        if state.error:
            report.problems.append(f"copy target {state.target} cannot be read: {state.error}")
    return report


def backup_rows(manifests: Sequence[Manifest], problems: list[str]) -> list[BackupRow]:
    lengths: dict[str, int] = {}
    rows = []
    for m in sorted(manifests, key=lambda m: m.backup_id):
        if m.kind == "full":
            length = 0
        elif m.parent_id in lengths:
            length = lengths[m.parent_id] + 1
        else:
            length = 1
            problems.append(f"{m.backup_id}: its parent {m.parent_id} has no readable manifest")
        lengths[m.backup_id] = length
        obj = m.backup_object
        rows.append(
            BackupRow(
                backup_id=m.backup_id,
                kind=m.kind,
                parent_id=m.parent_id,
                started_at=m.started_at,
                finished_at=m.finished_at,
                raw_bytes=m.raw_bytes,
                stored_bytes=m.stored_bytes,
                chain_length=length,
                storage_class=obj.storage_class,
                blocked={str(k): v for k, v in m.impact.blocked_seconds.items()} if m.impact else {},
                chain_root=m.chain_root,
                origin=airflow_origin(m.extra.get(ORIGIN_KEY)),
            )
        )
    return rows


def restore_tests(catalog: Catalog, problems: list[str]) -> list[RestoreTestRow]:
    """Every restore-report.json of the host (one LIST, then one read per report)."""
    base = f"{catalog.host_prefix}/backups/"
    ids = sorted(
        info.key[len(base) :].split("/")[0]
        for info in catalog.store.list(base)
        if info.key.endswith("/" + REPORT_NAME) and info.key[len(base) :].count("/") == 1
    )
    with ThreadPoolExecutor(8) as pool:
        found = list(pool.map(lambda i: _restore_row(catalog, i), ids))
    rows = []
    for backup_id, item in zip(ids, found, strict=True):
        if isinstance(item, str):
            problems.append(f"{catalog.object_key(backup_id, REPORT_NAME)}: {item}")
        elif item is not None:
            rows.append(item)
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(rows, key=lambda r: (r.finished_at or epoch, r.backup_id))


def _restore_row(catalog: Catalog, backup_id: str) -> RestoreTestRow | str | None:
    # Anyone who can write to the bucket can write a report: read it defensively.
    try:
        data = read_report(catalog, backup_id)
    except (StorageError, ValueError) as exc:
        return f"unreadable: {exc}"
    if data is None:
        return None
    try:
        timings = {k: float(v) for k, v in dict(data.get("timings") or {}).items()}
        started, finished = _time(data.get("started_at")), _time(data.get("finished_at"))
        restore = sum(timings[p] for p in RESTORE_PHASES) if set(RESTORE_PHASES) <= set(timings) else None
        return RestoreTestRow(
            backup_id=str(data.get("backup_id") or backup_id),
            verdict=str(data.get("verdict") or "unknown"),
            level=str(data.get("level") or "-"),
            chain=[str(c) for c in data.get("chain") or []],
            finished_at=finished,
            restore_seconds=restore,
            total_seconds=(finished - started).total_seconds() if started and finished else None,
            reasons=[str(r) for r in data.get("reasons") or []],
            failed_checks=[str(c) for c in data.get("failed_checks") or []],
            results=[_check_result(r) for r in data.get("results") or []],
            origin=airflow_origin(data.get(ORIGIN_KEY)),
            source=str(data.get("source") or ""),
        )
    except (TypeError, ValueError, AttributeError) as exc:
        return f"not a restore report: {exc}"


def _check_result(item: Any) -> dict[str, str]:
    return {k: str(dict(item).get(k) or "") for k in ("name", "status", "note")}


def _time(text: Any) -> datetime | None:
    if not text:
        return None
    when = datetime.fromisoformat(str(text))
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def newest_binlog(catalog: Catalog, now: datetime, problems: list[str]) -> BinlogStatus | None:
    """The newest shipped binlog of the host (over every server it had) and the lag it leaves."""
    best: BinlogStatus | None = None
    for uuid in server_uuids(catalog):
        try:
            index = BinlogCatalog(catalog, uuid).index()
            names = index.names()
            m = index.best(names[-1]) if names else None
        except (BinlogError, StorageError) as exc:
            problems.append(f"binlogs of server {uuid}: {exc}")
            continue
        if m is None:
            continue
        until = m.covers_until or m.last_event_time
        lag = max((now - until).total_seconds(), 0.0) if until else None
        status = BinlogStatus(uuid, m.name, m.complete, until, lag)
        if best is None or (until and (best.covers_until is None or until > best.covers_until)):
            best = status
    return best
