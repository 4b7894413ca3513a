"""Prove a backup restores: restore into scratch, start a sandbox, verify, report, clean up.

The sandbox runs with --skip-grant-tables and --skip-networking: it is reachable only through
a unix socket in a private directory, so no credentials are needed or exposed.
The report (restore-report.json, next to the backup) is what retention reads as "verified".
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from ..catalog.backups import Catalog
from ..catalog.manifest import Manifest
from ..catalog.reports import REPORT_NAME
from ..db.heartbeat import SOURCE_HEARTBEAT_TABLE
from ..db.sandbox import SandboxServer, quote_ident
from ..engine.metadata import read_binlog_position
from .chain import RestoreRequest, plan_chain, restore

log = logging.getLogger(__name__)

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
QUICK_SAMPLE = 50


@dataclass
class RestoreTestRequest:
    catalog: Catalog
    workdir: Path  # scratch on the restore worker; removed afterwards
    backup_id: str | None = None  # None: the newest backup
    private_key: str | None = None
    passphrase: str | None = None
    level: Literal["quick", "full"] = "quick"
    binary: str | None = None
    write_report: bool = True


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

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


def run_restore_test(req: RestoreTestRequest) -> RestoreTestReport:
    chain = plan_chain(req.catalog, req.backup_id)
    manifest = chain[-1]
    report = RestoreTestReport(
        req.catalog.cluster,
        req.catalog.host,
        manifest.backup_id,
        [m.backup_id for m in chain],
        "fail",
        req.level,
        started_at=datetime.now(UTC).isoformat(),
    )
    datadir = req.workdir / "data"
    server: SandboxServer | None = None
    try:
        restored = restore(
            RestoreRequest(
                catalog=req.catalog,
                target_datadir=datadir,
                backup_id=manifest.backup_id,
                private_key=req.private_key,
                passphrase=req.passphrase,
                binary=req.binary,
                scratch_dir=req.workdir / "scratch",
            )
        )
        report.timings.update(restored.timings)
        t0 = time.monotonic()
        server = SandboxServer.on_datadir(datadir, req.workdir / "sb", server_id=4_000_000_000 % 2**32)
        server.start()
        report.timings["start"] = time.monotonic() - t0
        t0 = time.monotonic()
        report.reasons = verify(server, datadir, manifest, req.level, report.checks)
        report.timings["verify"] = time.monotonic() - t0
        report.verdict = "fail" if report.reasons else "pass"
    except Exception as exc:  # noqa: BLE001 - any failure is the verdict, reported with its reason
        report.reasons.append(f"{type(exc).__name__}: {exc}")
        log.error("restore test of %s failed: %s", manifest.backup_id, exc)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(req.workdir, ignore_errors=True)
        report.finished_at = datetime.now(UTC).isoformat()
    if req.write_report:
        key = req.catalog.object_key(manifest.backup_id, REPORT_NAME)
        req.catalog.store.put_bytes(key, json.dumps(asdict(report), indent=2).encode())
    log.info(
        "restore test of %s/%s %s: %s",
        report.host,
        report.backup_id,
        report.verdict.upper(),
        "; ".join(report.reasons) or "all checks passed",
    )
    return report


def verify(
    server: SandboxServer, datadir: Path, manifest: Manifest, level: str, checks: dict[str, Any]
) -> list[str]:
    """Every failed check as a sentence; an empty list means the restore is good."""
    reasons: list[str] = []
    tables = [
        f"{quote_ident(s)}.{quote_ident(t)}"  # names come from the restored data: quote them
        for s, t in server.query(
            "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
            f" AND table_schema NOT IN ({', '.join(repr(s) for s in SYSTEM_SCHEMAS)})"
        )
    ]
    sample = tables if level == "full" or len(tables) <= QUICK_SAMPLE else random.sample(tables, QUICK_SAMPLE)
    bad = [
        f"{row[0]}: {row[3]}"
        for t in sample
        for row in server.query(f"CHECK TABLE {t}")
        if row[2] in ("status", "error") and row[3] not in ("OK", "Table is already up to date")
    ]
    checks["tables"] = len(tables)
    checks["tables_checked"] = len(sample)
    if bad:
        reasons.append(f"CHECK TABLE failed for {len(bad)} table(s): {'; '.join(bad[:5])}")
    reasons += _check_canary(server, manifest, checks)
    reasons += _check_row_counts(server, manifest, checks)
    reasons += _check_position(datadir, manifest, checks)
    return reasons


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


def _check_row_counts(server: SandboxServer, manifest: Manifest, checks: dict[str, Any]) -> list[str]:
    wrong = []
    for name, expected in manifest.table_rows.items():
        schema, _, table = name.partition(".")
        # Names come from the manifest, which anyone with write access to the bucket can edit.
        got = server.query(f"SELECT COUNT(*) FROM {quote_ident(schema)}.{quote_ident(table)}")[0][0]
        if got != expected:
            wrong.append(f"{name}: {got} rows, {expected} at backup time")
    checks["row_counts_compared"] = len(manifest.table_rows)
    return [f"row counts differ: {'; '.join(wrong[:5])}"] if wrong else []


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
