"""Prove a backup restores: restore into scratch, check it, start a sandbox, verify, report, clean up.

Levels trade time for depth; each check is named in the report and its failures say which.
coverage.CHECKS says, per check, the levels that run it, what it catches and what it cannot (the
HTML report and the docs show it: read it before trusting a green result).

The sandbox runs with --skip-grant-tables and --skip-networking: it is reachable only through
a unix socket in a private directory, so no credentials are needed or exposed; at level deep it
connects out to the source as a replica, and nothing listens on TCP.
The report (restore-report.json, next to the backup) is what retention reads as "verified"; a
backup whose chain does not resolve gets one too (check `chain` failed), so `check` names it.
"""

from __future__ import annotations

__all__ = ["run_restore_test", "LEVELS"]

import json
import logging
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from ..catalog.backups import Catalog
from ..catalog.manifest import CatalogError, Manifest
from ..catalog.reports import REPORT_NAME
from ..catalog.targets import Source, Targets
from ..common.values import GtidSet
from ..db.heartbeat import SOURCE_HEARTBEAT_TABLE
from ..db.sandbox import SandboxServer, quote_ident
from ..db.shape import SYSTEM_SCHEMAS
from ..engine.metadata import read_binlog_position
from .chain import RestoreRequest, read_chain, restore
from .coverage import QUICK_SAMPLE
from .evidence import (
    CheckResult,
    innochecksum_check,
    innodb_position_problems,
    row_counts_check,
    shape_check,
)
from .server_program import ServerProgramError, backup_dialect, check_server_program

log = logging.getLogger(__name__)

LEVELS = ("quick", "full", "deep")
SANDBOX_SERVER_ID = 4_000_000_000


class RollForward(Protocol):
    """Replays the host's shipped binlogs into a restored, stopped datadir up to the newest shipped
    point and checks the GTID reached (core.pitr.roll_forward.ShippedBinlogs). Its result's
    detail["gtid"] is the position the copy is at afterwards."""

    def __call__(self, datadir: Path, manifest: Manifest, scratch: Path) -> CheckResult: ...


class DeepCompare(Protocol):
    """Attaches the restored datadir as a replica of the host's source from `gtid`, waits until it
    has caught up and compares it with pt-table-checksum (core.restore.replica_compare).
    `preflight` runs before the restore: what it raises fails the check, never attached."""

    def preflight(self) -> None: ...

    def __call__(self, datadir: Path, basedir: Path, gtid: str) -> CheckResult: ...


@dataclass
class RestoreTestRequest:
    catalog: Catalog
    workdir: Path  # scratch on the restore worker; removed afterwards
    backup_id: str | None = None  # None: the newest backup
    private_key: str | None = None
    passphrase: str | None = None
    level: Literal["quick", "full", "deep"] = "quick"
    binary: str | None = None
    write_report: bool = True
    roll_forward: RollForward | None = None  # levels full and deep
    deep: DeepCompare | None = None  # level deep
    innochecksum: str = "innochecksum"
    origin: dict[str, Any] = field(default_factory=dict)  # the Airflow task running it (catalog/origin.py)
    source_name: str = "primary"  # the name of `catalog`'s storage target
    fallbacks: list[Source] = field(default_factory=list)  # further targets (core/catalog/targets.py)
    # Go on when the chain restore's read lease cannot be written (core/catalog/lease.py); the
    # roll-forward has its own (core.pitr.roll_forward.ShippedBinlogs.without_read_lease).
    without_read_lease: bool = False
    # Fault injection for tests: called with the started sandbox before the checks run, to leave
    # the restored copy the way a faulty restore would (rows lost, a table emptied).
    before_checks: Callable[[SandboxServer], None] | None = None


@dataclass
class RestoreTestReport:
    cluster: str
    host: str
    backup_id: str
    chain: list[str]
    verdict: Literal["pass", "fail"]
    level: str
    reasons: list[str] = field(default_factory=list)
    checks: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    started_at: str = ""
    finished_at: str = ""
    failed_checks: list[str] = field(default_factory=list)  # names of the checks that failed
    results: list[dict[str, Any]] = field(default_factory=list)  # every check: name, status, reasons, note
    airflow: dict[str, Any] = field(default_factory=dict)  # the task that ran it (catalog/origin.py)
    source: str = ""  # the storage target the chain was read from (the report is written there)
    fallbacks: list[str] = field(default_factory=list)  # what came from another target, and why

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def headline(self) -> str:
        """One line: the verdict and, on a failure, the checks that failed and the first reason."""
        if self.passed:
            return f"restore test of {self.cluster}/{self.host} {self.backup_id} ({self.level}) passed"
        first = (self.reasons[0].splitlines() or [""])[0] if self.reasons else ""
        return (
            f"restore test of {self.cluster}/{self.host} {self.backup_id} ({self.level}) failed check(s) "
            f"{', '.join(self.failed_checks) or '?'}: {first[:400]}"
        )


def run_restore_test(req: RestoreTestRequest) -> RestoreTestReport:
    """Restore and check one backup; the report is written (unless asked not to) whatever failed,
    beside the chain on the target it was read from. Raises only when there is no such backup to
    report on."""
    targets = Targets.of(req.catalog, req.source_name, req.fallbacks)
    report = RestoreTestReport(
        req.catalog.cluster,
        req.catalog.host,
        req.backup_id or "",
        [],
        "fail",
        req.level,
        started_at=datetime.now(UTC).isoformat(),
        airflow=dict(req.origin),
        source=targets.first.name,
        fallbacks=targets.notes,
    )
    results: list[CheckResult] = []
    try:
        try:
            chain = read_chain(targets, req.backup_id)
        except CatalogError as exc:
            report.backup_id = _broken(req, exc)
            results.append(CheckResult.of("chain", [str(exc)]))
        else:
            manifest = chain[-1]
            report.source = targets.first.name  # the target the chain resolved on
            report.backup_id, report.chain = manifest.backup_id, [m.backup_id for m in chain]
            results.append(CheckResult.of("chain", [], _describe_chain(chain)))
            _run_checks(req, manifest, req.workdir / "data", report, results, targets)
    finally:
        shutil.rmtree(req.workdir, ignore_errors=True)
    return _conclude(req, report, results, targets)


def _broken(req: RestoreTestRequest, exc: CatalogError) -> str:
    """The backup a chain error is about (its report goes beside it); re-raises when it has no
    manifest: there is no backup to test."""
    ids = req.catalog.backup_ids()
    backup_id = req.backup_id or (ids[-1] if ids else None)
    if backup_id is None or backup_id not in ids:
        raise exc
    log.error("restore test of %s: its chain does not resolve: %s", backup_id, exc)
    return backup_id


def _describe_chain(chain: list[Manifest]) -> str:
    links = f" + {len(chain) - 1} incremental(s)" if len(chain) > 1 else ""
    return f"full {chain[0].backup_id}{links}, validated from the manifests"


def _conclude(
    req: RestoreTestRequest, report: RestoreTestReport, results: list[CheckResult], targets: Targets
) -> RestoreTestReport:
    report.finished_at = datetime.now(UTC).isoformat()
    report.results = [r.as_dict() for r in results]
    report.failed_checks = [r.name for r in results if r.failed]
    report.reasons = [reason for r in results for reason in r.reasons]
    report.verdict = "fail" if report.failed_checks else "pass"
    if req.write_report:  # beside the chain it tested, on the target it was read from
        catalog = targets.first.catalog
        key = catalog.object_key(report.backup_id, REPORT_NAME)
        catalog.store.put_bytes(key, json.dumps(asdict(report), indent=2).encode())
    for r in results:
        log.info("  %-16s %-7s %s", r.name, r.status.upper(), "; ".join(r.reasons) or r.note)
    (log.info if report.passed else log.error)("%s", report.headline())
    return report


def _run_checks(
    req: RestoreTestRequest,
    manifest: Manifest,
    datadir: Path,
    report: RestoreTestReport,
    results: list[CheckResult],
    targets: Targets,
) -> None:
    """Restore, then each check of the level in turn; a step that raises is the failed check."""
    stage = "restore"
    server: SandboxServer | None = None
    try:
        _refuse_flavour(manifest)
        check_server_program(manifest)
    except (RestoreTestError, ServerProgramError) as exc:
        results.append(CheckResult.of(stage, [f"{type(exc).__name__}: {exc}"]))
        return
    refused = _deep_preflight(req)
    try:
        restored = restore(
            RestoreRequest(
                catalog=targets.first.catalog,
                target_datadir=datadir,
                backup_id=manifest.backup_id,
                private_key=req.private_key,
                passphrase=req.passphrase,
                binary=req.binary,
                scratch_dir=req.workdir / "scratch",
                without_read_lease=req.without_read_lease,
            ),
            targets,
        )
        report.timings.update(restored.timings)
        stage = "innochecksum"
        t0 = time.monotonic()
        results.append(innochecksum_check(datadir, req.innochecksum))  # offline: before the server opens them
        report.timings["innochecksum"] = time.monotonic() - t0
        stage = "server_start"
        t0 = time.monotonic()
        dialect = backup_dialect(manifest)
        server = SandboxServer.on_datadir(
            datadir,
            req.workdir / "sb",
            server_id=SANDBOX_SERVER_ID,
            extra_args=[dialect.skip_replica_start_option],
            family=dialect.family,
        )
        server.start()
        report.timings["start"] = time.monotonic() - t0
        if req.before_checks is not None:
            req.before_checks(server)
        stage = "verify"
        t0 = time.monotonic()
        verify(server, datadir, manifest, req.level, report.checks, results)
        stage = "row_counts"
        counted = row_counts_check(server, manifest)
        results.append(counted)
        report.checks["row_counts_compared"] = counted.detail.get("compared", 0)
        stage = "source_shape"
        gtid = read_binlog_position(datadir).gtid
        results.append(shape_check(manifest.source_shape, server, gtid, manifest.table_rows.keys()))
        report.timings["verify"] = time.monotonic() - t0
        server.stop()
        server = None
        gtid = read_binlog_position(datadir).gtid or manifest.gtid or ""
        if req.level in ("full", "deep"):
            stage = "roll_forward"
            t0 = time.monotonic()
            rolled = _roll_forward(req, datadir, manifest)
            results.append(rolled)
            report.timings["roll_forward"] = time.monotonic() - t0
            if not rolled.failed:
                gtid = str(rolled.detail.get("gtid") or gtid)
            if req.level == "deep":
                stage = "replica_checksum"
                t0 = time.monotonic()
                results.append(refused or _deep(req, datadir, gtid, rolled))
                report.timings["replica_checksum"] = time.monotonic() - t0
    except Exception as exc:  # noqa: BLE001 - any failure is the verdict, reported with its check
        results.append(CheckResult.of(stage, [f"{type(exc).__name__}: {exc}"]))
        log.error("restore test of %s: %s failed: %s", manifest.backup_id, stage, exc)
    finally:
        if server is not None:
            server.stop()


# Engines whose restored copies a restore test has been proven to start and check: mariabackup (a
# mariadbd sandbox), clone (a mysqld sandbox: MySQL's own server and innochecksum on the worker).
TESTED_FLAVOURS = ("mariabackup", "clone")


def _refuse_flavour(manifest: Manifest) -> None:
    if manifest.engine_flavour not in TESTED_FLAVOURS:
        raise RestoreTestError(
            f"backup {manifest.backup_id} was taken with {manifest.engine_flavour}: restore tests run on mariabackup "
            "(MariaDB) and clone (MySQL) backups only. Set `restore_test: false` on the host and restore it by hand, "
            "or back it up with flavour clone"
        )


def _roll_forward(req: RestoreTestRequest, datadir: Path, manifest: Manifest) -> CheckResult:
    if req.roll_forward is None:
        return CheckResult.skipped(
            "roll_forward", "not run: the caller gave no roll-forward (core.pitr.roll_forward)"
        )
    return req.roll_forward(datadir, manifest, req.workdir / "roll-forward")


def _deep_preflight(req: RestoreTestRequest) -> CheckResult | None:
    """Level deep: the replica's checks before the restore (the replication account logs in); a
    refusal is the failed replica_checksum, and the sandbox is never attached to the source."""
    if req.level != "deep" or req.deep is None:
        return None
    try:
        req.deep.preflight()
    except Exception as exc:  # noqa: BLE001 - any refusal is the check's verdict
        return CheckResult.of(
            "replica_checksum",
            [f"{type(exc).__name__}: {exc}; the restored copy was not attached to the source"],
        )
    return None


def _deep(req: RestoreTestRequest, datadir: Path, gtid: str, rolled: CheckResult) -> CheckResult:
    if rolled.failed and rolled.detail.get("replayed"):
        return CheckResult.skipped(
            "replica_checksum",
            "not run: the roll-forward replayed binlogs and failed, so the copy is at no known position",
        )
    if req.deep is None:
        return CheckResult.of(
            "replica_checksum",
            [
                "level deep needs the host's source: give the cluster a `replication` section (source and account)"
            ],
        )
    return req.deep(datadir, req.workdir / "replica", gtid)


class RestoreTestError(RuntimeError):
    """A restore test cannot run for this backup; the message names what is missing."""


def verify(
    server: SandboxServer,
    datadir: Path,
    manifest: Manifest,
    level: str,
    checks: dict[str, Any],
    results: list[CheckResult] | None = None,
    reached_gtid: str | None = None,
) -> list[str]:
    """Every failed check as a sentence; an empty list means the restore is good. `results`, if
    given, receives each check's CheckResult. `reached_gtid`: the GTID set a MySQL server's data
    must hold when binlogs were replayed past the backup (a point-in-time restore)."""
    results = [] if results is None else results
    tables = [
        f"{quote_ident(s)}.{quote_ident(t)}"  # names come from the restored data: quote them
        for s, t in server.query(
            "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
            f" AND table_schema NOT IN ({', '.join(repr(s) for s in SYSTEM_SCHEMAS)})"
        )
    ]
    sample = (
        tables if level != "quick" or len(tables) <= QUICK_SAMPLE else random.sample(tables, QUICK_SAMPLE)
    )
    bad = _check_tables(server, sample)
    checks["tables"] = len(tables)
    checks["tables_checked"] = len(sample)
    failed = [f"CHECK TABLE failed for {len(bad)} table(s): {'; '.join(bad[:5])}"] if bad else []
    table_check = CheckResult.of("check_table", failed, f"{len(sample)} of {len(tables)} table(s)")
    results.append(table_check)  # kept even when the server it killed fails the checks below
    ours = [
        table_check,
        CheckResult.of("canary", _check_canary(server, manifest, checks), str(checks.get("canary", ""))),
        CheckResult.of(
            "position",
            _check_position(datadir, manifest, checks)
            + _server_gtid_problems(server, manifest, reached_gtid, checks)
            + innodb_position_problems(datadir, manifest, checks),
            f"GTID {checks.get('gtid') or '-'}",
        ),
    ]
    results += ours[1:]
    return [reason for r in ours for reason in r.reasons]


_SERVER_GONE = (2006, 2013)  # CR_SERVER_GONE_ERROR, CR_SERVER_LOST


def _check_tables(server: SandboxServer, tables: list[str]) -> list[str]:
    """`table: what CHECK TABLE said` for each table it did not find OK. A CHECK TABLE that fails is
    that table's problem; one that takes the server down (InnoDB stops a server on a page it cannot
    read: MySQL does so on a missing page) ends the check, naming the table."""
    bad = []
    for t in tables:
        try:
            rows = server.query(f"CHECK TABLE {t}")
        except Exception as exc:  # noqa: BLE001 - MySQLdb errors: the table's verdict
            errno = exc.args[0] if exc.args else 0
            if errno in _SERVER_GONE:
                bad.append(f"{t}: the server stopped during CHECK TABLE ({exc}): a page it read is damaged")
                break
            bad.append(f"{t}: {exc}")
            continue
        bad += [
            f"{row[0]}: {row[3]}"
            for row in rows
            if row[2] in ("status", "error") and row[3] not in ("OK", "Table is already up to date")
        ]
    return bad


def _check_canary(server: SandboxServer, manifest: Manifest, checks: dict[str, Any]) -> list[str]:
    if not manifest.extra.get("heartbeat"):
        checks["canary"] = "not written for this backup"
        return []
    # Manifests before the host-local canary name no table: theirs was the source's, replicated.
    schema, _, table = str(manifest.extra.get("heartbeat_table", ".".join(SOURCE_HEARTBEAT_TABLE))).partition(
        "."
    )
    try:
        rows = server.query(
            f"SELECT created_at FROM {quote_ident(schema)}.{quote_ident(table)} WHERE backup_id = %s",
            (manifest.backup_id,),
        )
    except Exception as exc:  # noqa: BLE001 - a missing table is a failed canary
        rows, error = [], str(exc)
    else:
        error = ""
    checks["canary"] = "found" if rows else "missing"
    if rows:
        return []
    return [f"canary row for {manifest.backup_id} missing from {schema}.{table} {error}".strip()]


def _server_gtid_problems(
    server: SandboxServer, manifest: Manifest, reached: str | None, checks: dict[str, Any]
) -> list[str]:
    """MySQL: the restored server's own gtid_executed (what its data holds: mysql.gtid_executed, not
    a file the backup wrote) must be the expected GTID set (the manifest's, or the point a replay
    reached), or a replica started from it would skip or repeat transactions."""
    expected, what = (
        (reached, "the GTID set the replay reached")
        if reached
        else (manifest.gtid, "the manifest's GTID set")
    )
    if server.family != "mysql" or not expected:
        return []
    held = "".join(str(server.query("SELECT @@global.gtid_executed")[0][0] or "").split())
    checks["gtid_executed"] = held
    if GtidSet.parse(held, "the restored gtid_executed") == GtidSet.parse(expected, "the expected GTID set"):
        return []
    return [f"the restored server's gtid_executed {held or '(empty)'} is not {what} {expected}"]


def _check_position(datadir: Path, manifest: Manifest, checks: dict[str, Any]) -> list[str]:
    """The restored copy's own binlog coordinates must be the manifest's."""
    restored = read_binlog_position(datadir)
    checks["gtid"] = restored.gtid
    if manifest.gtid and restored.gtid != manifest.gtid:
        return [f"restored GTID {restored.gtid} differs from the manifest's {manifest.gtid}"]
    if manifest.binlog_file and (restored.file, restored.position) != (
        manifest.binlog_file,
        manifest.binlog_position,
    ):
        return [
            f"restored binlog position {restored.file}:{restored.position} differs from the manifest's "
            f"{manifest.binlog_file}:{manifest.binlog_position}"
        ]
    return []
