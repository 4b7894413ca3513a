"""Prove point-in-time recovery works: restore to a time into scratch, start a sandbox, verify.

The checks are the restore test's (CHECK TABLE, the base backup's canary row), except the
backup-time row counts: the replay legitimately changed them. The report is written next to
the base backup as pitr-report.json.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from ..catalog.backups import Catalog
from ..catalog.targets import Source, Targets
from ..common.tempdirs import private_dir
from ..db.dialect import Dialect, dialect_for
from ..db.sandbox import SandboxServer, stop_orphans
from ..restore.restore_test import verify
from ..restore.server_program import backup_dialect
from .mysql_pipe import mysql_point_in_time_restore
from .plan import PitrTarget
from .recover import PitrRequest, point_in_time_restore

log = logging.getLogger(__name__)

PITR_REPORT_NAME = "pitr-report.json"


@dataclass
class PitrTestReport:
    cluster: str
    host: str
    target: str
    verdict: Literal["pass", "fail"] = "fail"
    backup_id: str = ""
    reached: dict[str, Any] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    checks: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    finished_at: str = ""
    source: str = ""  # the storage target the plan was read from (the report is written there)
    fallbacks: list[str] = field(default_factory=list)  # what came from another target, and why

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


def run_pitr_test(
    catalog: Catalog,
    workdir: Path,
    target: PitrTarget,
    *,
    private_key: str | None = None,
    passphrase: str | None = None,
    level: Literal["quick", "full"] = "quick",
    binary: str | None = None,
    source_name: str = "primary",
    fallbacks: Sequence[Source] = (),
) -> PitrTestReport:
    """`catalog` is the target `source_name`; `fallbacks` the further targets (core/catalog/targets.py)."""
    report = PitrTestReport(catalog.cluster, catalog.host, target.describe())
    targets = Targets.of(catalog, source_name, fallbacks)
    datadir = workdir / "data"
    basedir = private_dir("pitrsb", "/tmp", on_sweep=stop_orphans)  # short socket path
    server: SandboxServer | None = None
    try:
        req = PitrRequest(
            catalog=catalog,
            target_datadir=datadir,
            target=target,
            private_key=private_key,
            passphrase=passphrase,
            binary=binary,
            scratch_dir=workdir / "scratch",
            source_name=source_name,
            fallbacks=list(fallbacks),
        )
        dialect = _host_dialect(targets)
        _restore(req, targets, dialect, report)
        t0 = time.monotonic()
        server = SandboxServer.on_datadir(
            datadir,
            basedir,
            server_id=4_000_000_001,
            log_bin=False,
            extra_args=[dialect.skip_replica_start_option],
            family=dialect.family,
        )
        server.start()
        manifest = targets.first.catalog.get(report.backup_id)
        reached = report.reached.get("gtid") if not dialect.is_mariadb else None
        report.reasons = verify(server, datadir, manifest, level, report.checks, reached_gtid=reached)
        report.timings["verify"] = time.monotonic() - t0
        report.verdict = "fail" if report.reasons else "pass"
    except Exception as exc:  # noqa: BLE001 - any failure is the verdict, reported with its reason
        report.reasons.append(f"{type(exc).__name__}: {exc}")
        log.error("point-in-time restore test to %s failed: %s", report.target, exc)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(basedir, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)
        report.finished_at = datetime.now(UTC).isoformat()
        report.source, report.fallbacks = targets.first.name, targets.notes
    if report.backup_id:  # beside the base backup, on the target it was read from
        catalog = targets.first.catalog
        key = catalog.object_key(report.backup_id, PITR_REPORT_NAME)
        catalog.store.put_bytes(key, json.dumps(asdict(report), indent=2).encode())
    return report


def _restore(req: PitrRequest, targets: Targets, dialect: Dialect, report: PitrTestReport) -> None:
    """Restore and replay into req.target_datadir by the family's own path; what it reached goes in the report."""
    if dialect.is_mariadb:
        pitr = point_in_time_restore(req, targets)
        report.backup_id, report.reached, report.timings = pitr.backup_id, pitr.summary(), pitr.timings
        return
    t0 = time.monotonic()
    mysql = mysql_point_in_time_restore(req)
    report.backup_id, report.reached = (
        mysql.backup_id,
        {"backup_id": mysql.backup_id, "gtid": mysql.reached_gtid},
    )
    report.reached["binlogs"] = len(mysql.binlogs)
    report.timings["restore_and_replay"] = time.monotonic() - t0


def _host_dialect(targets: Targets) -> Dialect:
    """The host's server family, from its newest backup (a host without backups: MariaDB's path,
    which says there is none)."""
    newest = targets.read("the host's newest backup", lambda catalog: catalog.latest())
    return backup_dialect(newest) if newest is not None else dialect_for("10.11.0-MariaDB")
