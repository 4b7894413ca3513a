"""The Backups view's model (what the Airflow plugin in xtrabackup_provider/plugins/ serves): per
host, `check`'s verdict (core/report/check.py, the same fields as `check --json`) and the report's
rows (core/report/model.py), computed by that same code over ONE reading of the catalog: every
listing, manifest, restore report and HEAD the two ask for is fetched once (ReadOnceStore).

A fleet row adds what a person scans a fleet for: the newest backup and its age, the chain length,
the point-in-time window, the last passing restore test and its level, the worst finding. A host's
detail adds its backups (chains, sizes, storage classes, the restore tests that proved each, the
Airflow task that made each), its binlog coverage with the gaps, restore-test history with the
checks each ran, and the copies. Manifests and restore reports hold no secrets; neither does this.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from ..binlog.catalog import BinlogCatalog, BinlogError, BinlogGap, BinlogIndex, server_uuids
from ..catalog.backups import Catalog
from ..catalog.chain import resolve_chain
from ..catalog.manifest import CatalogError, Manifest
from ..common.values import binlog_number
from ..config.schema import CheckConfig, FleetConfig
from ..storage.base import ObjectInfo, ObjectStore, StorageError
from .check import LEVEL, Finding, HostCheck, check_host
from .model import BackupRow, HostReport, RestoreTestRow, host_report_on


class ReadOnceStore:
    """A store whose reads are each done once (failures too): `check` and the report ask for the
    same listings and objects. Read-only by use; everything else goes to the store."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._done: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def _once(self, op: str, key: str, read: Any) -> Any:
        with self._lock:
            found = self._done.get((op, key))
        if found is None:
            try:
                found = ("ok", read())
            except (StorageError, OSError) as exc:
                found = ("error", exc)
            with self._lock:
                self._done[(op, key)] = found
        if found[0] == "error":
            raise found[1]
        return found[1]

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        return iter(self._once("list", prefix, lambda: list(self._store.list(prefix))))

    def head(self, key: str) -> ObjectInfo | None:
        info: ObjectInfo | None = self._once("head", key, lambda: self._store.head(key))
        return info

    def get_bytes(self, key: str) -> bytes:
        data: bytes = self._once("get", key, lambda: self._store.get_bytes(key))
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@dataclass
class HostView:
    cluster: str
    host: str
    check: HostCheck
    report: HostReport
    now: datetime  # the instant the ages are measured from (when the catalog was read)
    manifests: list[Manifest] = field(default_factory=list)
    binlogs: dict[str, BinlogIndex] = field(default_factory=dict)  # server uuid -> its shipped binlogs
    pitr: tuple[datetime, datetime] | None = None  # any instant in it can be restored to
    catalog: Catalog | None = (
        None  # the target's read (report.source), read once: the detail reads binlog manifests
    )

    @property
    def dag_id(self) -> str:
        return f"mysql_backup_{self.cluster}"

    def row(self) -> dict[str, Any]:
        """The fleet page's row: `check --json`'s fields for the host, then the view's own."""
        latest, verified = self.report.latest, self.report.last_verified
        worst = max(self.check.findings, key=lambda f: LEVEL[f.status], default=None)
        age = (self.now - latest.finished_at).total_seconds() if latest else None
        return self.check.as_dict() | {
            "checked_at": self.now.isoformat(),
            "worst_finding": worst.text if worst and worst.status != "ok" else None,
            "newest_backup": {
                "backup_id": latest.backup_id,
                "kind": latest.kind,
                "finished_at": latest.finished_at.isoformat(),
                "age_seconds": max(age or 0.0, 0.0),
            }
            if latest
            else None,
            "chain_length": latest.chain_length if latest else None,
            "pitr": {"from": self.pitr[0].isoformat(), "until": self.pitr[1].isoformat()}
            if self.pitr
            else None,
            "last_verified": {
                "backup_id": verified.backup_id,
                "level": verified.level,
                "finished_at": _iso(verified.finished_at),
            }
            if verified
            else None,
            "dag_id": self.dag_id,
        }

    def detail(self) -> dict[str, Any]:
        """The host page: the row, then backups, restore tests, binlog coverage and copies."""
        proved = _proved_by(self.report.restore_tests)
        return {
            "row": self.row(),
            "source": self.report.source,  # the storage target the backups below were read from
            "backups": [
                _backup(b, proved.get(b.backup_id, [])) | {"targets": self.report.targets_of(b.backup_id)}
                for b in self.report.backups
            ],
            "restore_tests": [_restore_test(t) for t in self.report.restore_tests],
            "binlogs": self._binlog_coverage(),
            "copies": [
                {
                    "target": c.target,
                    "location": c.location,
                    "backups": c.backups,
                    "behind": [{"backup_id": b, "finished_at": w.isoformat()} for b, w in c.behind],
                    "binlogs_behind": c.binlogs_behind,
                    "error": c.error,
                }
                for c in self.report.copies
            ],
            "problems": list(self.report.problems),
        }

    def _binlog_coverage(self) -> list[dict[str, Any]]:
        out = []
        for uuid, index in sorted(self.binlogs.items()):
            try:
                shipped = index.shipped()
            except (StorageError, BinlogError) as exc:
                out.append({"server_uuid": uuid, "spans": [], "gaps": [], "error": str(exc)})
                continue
            out.append(
                {"server_uuid": uuid, **binlog_spans(shipped, index.gaps), "problems": index.problems[:5]}
            )
        return out


def build_host(
    catalogs: Sequence[tuple[str, Catalog]],
    settings: CheckConfig,
    binlogs_on: bool,
    now: datetime,
    cluster: str,
) -> HostView:
    """One host: `catalogs` are its catalog on each storage target, the first target first; the
    detail is read from the first of them that can be read."""
    once = [(name, Catalog(ReadOnceStore(c.store), c.prefix, c.cluster, c.host)) for name, c in catalogs]
    first = once[0][1]
    check = check_host(once, settings, binlogs_on, now, cluster)
    view = HostView(cluster, first.host, check, HostReport(first.host), now)
    try:
        view.report = host_report_on(once, now)
        view.catalog = read = dict(once)[view.report.source]
        view.manifests = read.manifests([])
        view.binlogs = _indexes(read)
    except (StorageError, CatalogError, BinlogError) as exc:
        view.report.problems.append(f"cannot read the catalog at {first.describe()}: {exc}")
        return view
    view.pitr = pitr_window(view.manifests, view.binlogs, view.report)
    return view


def _indexes(catalog: Catalog) -> dict[str, BinlogIndex]:
    out = {}
    for uuid in server_uuids(catalog):
        try:
            out[uuid] = BinlogCatalog(catalog, uuid).index()
        except (StorageError, BinlogError):
            continue  # check names it
    return out


def pitr_window(
    manifests: list[Manifest], indexes: dict[str, BinlogIndex], report: HostReport
) -> tuple[datetime, datetime] | None:
    """From the oldest backup a point-in-time restore can start at to the newest instant the shipped
    binlogs cover: the backup's chain resolves from the manifests, its server's binlogs are shipped
    from its binlog file on, and no gap lies after it (a restore cannot cross one)."""
    status = report.binlog
    if status is None or status.covers_until is None:
        return None
    index = indexes.get(status.server_uuid)
    if index is None or not index.names():
        return None
    oldest = binlog_number(index.names()[0])
    by_id = {m.backup_id: m for m in manifests}
    for m in sorted(manifests, key=lambda m: m.backup_id):
        if m.server_uuid != status.server_uuid or not m.binlog_file:
            continue
        at = binlog_number(m.binlog_file)
        if at[0] != oldest[0] or at < oldest or any(binlog_number(g.last_missing) >= at for g in index.gaps):
            continue
        try:
            resolve_chain(by_id, m.backup_id)
        except CatalogError:
            continue
        return (m.finished_at, status.covers_until) if m.finished_at < status.covers_until else None
    return None


def binlog_spans(shipped: Iterable[Any], gaps: list[BinlogGap]) -> dict[str, Any]:
    """Consecutive shipped binlogs merged into spans of time; a missing number between two is a gap
    (its record says why when the shipper saw the server purge it)."""
    spans: list[dict[str, Any]] = []
    holes: list[dict[str, Any]] = []
    for m in shipped:
        start = m.first_event_time or m.shipped_at
        until = m.covers_until or m.last_event_time or start
        last = spans[-1] if spans else None
        if last and binlog_number(m.name)[0] == last["base"] and m.number == last["last_number"] + 1:
            last.update(last=m.name, last_number=m.number, until=until, complete=m.complete)
            continue
        if last:
            first_missing = f"{last['base']}.{last['last_number'] + 1:06d}"
            record = next((g for g in gaps if g.covers(last["last_number"] + 1)), None)
            holes.append(
                {
                    "after": last["last"],
                    "before": m.name,
                    "first_missing": first_missing,
                    "from": last["until"].isoformat(),
                    "until": start.isoformat(),
                    "why": record.describe() if record else "not in the catalog",
                }
            )
        base = binlog_number(m.name)[0]
        spans.append(dict(base=base, first=m.name, last=m.name, last_number=m.number, start=start,
                          until=until, complete=m.complete))  # fmt: skip
    return {
        "spans": [
            {
                "first": s["first"],
                "last": s["last"],
                "from": s["start"].isoformat(),
                "until": s["until"].isoformat(),
                "open": not s["complete"],
            }
            for s in spans
        ],  # fmt: skip
        "gaps": holes,
    }


def _proved_by(tests: list[RestoreTestRow]) -> dict[str, list[dict[str, Any]]]:
    """backup id -> the passing restore tests whose restored chain included it."""
    out: dict[str, list[dict[str, Any]]] = {}
    for t in tests:
        if t.passed:
            for bid in t.chain or [t.backup_id]:
                out.setdefault(bid, []).append(
                    {"backup_id": t.backup_id, "level": t.level, "finished_at": _iso(t.finished_at)}
                )
    return out


def _backup(b: BackupRow, proved: list[dict[str, Any]]) -> dict[str, Any]:
    row = asdict(b)
    row["started_at"], row["finished_at"] = b.started_at.isoformat(), b.finished_at.isoformat()
    return row | {"seconds": b.seconds, "proved_by": proved}


def _restore_test(t: RestoreTestRow) -> dict[str, Any]:
    return asdict(t) | {"finished_at": _iso(t.finished_at), "passed": t.passed}


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when else None


# -- the fleet, cached -------------------------------------------------------------------------

Key = tuple[str, str]  # (cluster, host)


@dataclass
class _Entry:
    view: HostView
    at: float  # time.monotonic() when read


class FleetCache:
    """Host views kept `ttl` seconds; a read not done within `bound` seconds shows as that host's
    status (critical: nothing proves it restorable) while it goes on in the background, and the
    next request after it finished shows the result. One read per host at a time."""

    def __init__(self, ttl: float, bound: float, workers: int = 16) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.ttl, self.bound = ttl, bound
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="backups-view")
        self._entries: dict[Key, _Entry] = {}
        self._reading: dict[Key, Any] = {}
        self._lock = threading.Lock()

    def views(self, wanted: dict[Key, Any], now: datetime) -> list[HostView]:
        """`wanted`: key -> a function of `now` that reads that host (build_host with its settings)."""
        from concurrent.futures import wait

        fresh = time.monotonic() - self.ttl
        futures = {}
        with self._lock:
            for key, read in wanted.items():
                entry = self._entries.get(key)
                if entry is not None and entry.at >= fresh:
                    continue
                if key not in self._reading:
                    self._reading[key] = self._pool.submit(self._read, key, read, now)
                futures[key] = self._reading[key]
        if futures:
            wait(list(futures.values()), timeout=self.bound)
        out = []
        with self._lock:
            for key in wanted:
                entry = self._entries.get(key)
                if entry is not None and (key not in futures or futures[key].done()):
                    out.append(entry.view)
                elif entry is not None:  # the last reading, said to be old
                    out.append(self._stale(entry.view))
                else:
                    out.append(self._late(key, now))
        return out

    def _read(self, key: Key, read: Any, now: datetime) -> None:
        try:
            view = read(now)
        except Exception as exc:  # any failure is that host's status, never the page's
            view = self._failed(key, now, f"reading the catalog failed: {str(exc)[:300]}")
        with self._lock:
            self._entries[key] = _Entry(view, time.monotonic())
            self._reading.pop(key, None)

    def _late(self, key: Key, now: datetime) -> HostView:
        return self._failed(
            key, now, f"the catalog did not answer within {self.bound:g} s (still reading; reload later)"
        )

    def _stale(self, view: HostView) -> HostView:
        check = copy.copy(view.check)
        check.findings = [
            *view.check.findings,
            Finding("warning", f"figures from {view.now:%H:%M:%S} UTC: reading the catalog again took over "
                    f"{self.bound:g} s (still reading)"),
        ]  # fmt: skip
        return dataclasses.replace(view, check=check)

    @staticmethod
    def _failed(key: Key, now: datetime, text: str) -> HostView:
        check = HostCheck(*key)
        check.add("critical", text)
        return HostView(key[0], key[1], check, HostReport(key[1]), now)

    def detail(self, view: HostView) -> dict[str, Any]:
        """The host page's data; its binlog manifests are read within the same bound (the rest
        was read with the host's row)."""
        from concurrent.futures import TimeoutError as Late

        future = self._pool.submit(view.detail)
        try:
            detail: dict[str, Any] = future.result(timeout=self.bound)
        except Late:
            view = dataclasses.replace(view, binlogs={})
            detail = view.detail()
            detail["problems"].append(f"binlog coverage not read within {self.bound:g} s (reload later)")
        return detail

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def host_readers(
    config: FleetConfig, stores: dict[str, ObjectStore], clusters: Iterable[str]
) -> dict[Key, Callable[[datetime], HostView]]:
    """(cluster, host) -> a function of `now` that reads that host from every storage target."""
    readers: dict[Key, Callable[[datetime], HostView]] = {}
    for name in clusters:
        cluster = config.cluster(name)
        for host in cluster.hosts:
            catalogs = [
                (t.name, Catalog(stores[t.name], t.prefix, name, host.name)) for t in config.targets()
            ]
            readers[(name, host.name)] = functools.partial(
                _read_host, catalogs, cluster.check, cluster.binlogs is not None, name
            )
    return readers


def _read_host(
    catalogs: list[tuple[str, Catalog]], settings: CheckConfig, binlogs_on: bool, cluster: str, now: datetime
) -> HostView:
    return build_host(catalogs, settings, binlogs_on, now, cluster)


def fleet_payload(views: Sequence[HostView], now: datetime) -> dict[str, Any]:
    """The fleet page's data: rows worst first (status, then the oldest newest backup), and the time
    axis the PITR bars share."""
    rows = sorted((v.row() for v in views), key=_worst_first)
    starts = [r["pitr"]["from"] for r in rows if r["pitr"]] + [
        r["newest_backup"]["finished_at"] for r in rows if r["newest_backup"]
    ]
    return {
        "generated_at": now.isoformat(),
        "axis": {"from": min(starts), "until": now.isoformat()} if starts else None,
        "hosts": rows,
    }


def _worst_first(row: dict[str, Any]) -> tuple[int, float, str, str]:
    age = row["backup_age_seconds"]
    return (-LEVEL[row["status"]], -(age if age is not None else float("inf")), row["cluster"], row["host"])
