"""Metrics of backups, restore tests and binlog shipping, sent through Airflow's Stats.

They reach StatsD, Datadog or OpenTelemetry as the [metrics] section sets (statsd_on, ...) and
go nowhere otherwise. Plain StatsD has no tags, so the names carry cluster and host:
`<statsd_prefix>.xtrabackup.backup.<cluster>.<host>.stored_bytes`; the same tags go along for
backends that use them. A metric that cannot be sent never fails the task.
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..core.backup.copies import CopyReport
    from ..core.catalog.manifest import Manifest
    from ..core.report.check import HostCheck

log = logging.getLogger(__name__)
PREFIX = "xtrabackup"


def metric_name(what: str, cluster: str, host: str, metric: str) -> str:
    # A dot inside a host name ("db1.example") would add levels to the StatsD hierarchy.
    parts = [re.sub(r"[^A-Za-z0-9_-]", "_", p) for p in (cluster, host)]
    return ".".join([PREFIX, what, *parts, metric])


def emit(
    what: str,
    cluster: str,
    host: str,
    *,
    gauges: dict[str, float] | None = None,
    timings: dict[str, float] | None = None,  # seconds
    counters: tuple[str, ...] = (),
    tags: dict[str, Any] | None = None,
) -> None:
    try:
        from airflow.providers.common.compat.sdk import Stats

        tags = {"cluster": cluster, "host": host, **(tags or {})}
        for metric, value in (gauges or {}).items():
            Stats.gauge(metric_name(what, cluster, host, metric), value, tags=tags)
        for metric, seconds in (timings or {}).items():
            Stats.timing(metric_name(what, cluster, host, metric), timedelta(seconds=seconds), tags=tags)
        for metric in counters:
            Stats.incr(metric_name(what, cluster, host, metric), tags=tags)
    except Exception:  # noqa: BLE001 - metrics are best effort; the backup itself succeeded
        log.warning("could not send %s metrics of %s/%s", what, cluster, host, exc_info=True)


def backup_done(cluster: str, host: str, manifest: Manifest) -> None:
    seconds = max((manifest.finished_at - manifest.started_at).total_seconds(), 1e-3)
    impact = manifest.impact
    # What the backup cost production: seconds its locks blocked commits, DDL, non-InnoDB writes.
    blocked = {f"{what}_blocked_seconds": s for what, s in (impact.blocked_seconds if impact else {}).items()}
    emit(
        "backup",
        cluster,
        host,
        gauges={
            "raw_bytes": manifest.raw_bytes,
            "stored_bytes": manifest.stored_bytes,
            "throughput_bytes_per_second": manifest.raw_bytes / seconds,
            **blocked,
            **({"upload_wait_seconds": impact.upload_wait_seconds} if impact else {}),
        },
        timings={"duration": seconds},
        counters=("succeeded", manifest.kind),
        tags={"kind": manifest.kind},
    )


def restore_test_done(cluster: str, host: str, passed: bool, timings: dict[str, float]) -> None:
    restore = sum(timings.get(k, 0.0) for k in ("fetch_extract", "prepare", "copy_back"))
    emit(
        "restore_test",
        cluster,
        host,
        timings={"restore_time": restore, "duration": sum(timings.values())},
        counters=("passed" if passed else "failed",),
    )


def binlogs_shipped(cluster: str, host: str, summary: dict[str, Any], catalog: Any) -> None:
    """After a shipping run: counts, and the lag the newest shipped binlog leaves (core.report.model)."""
    from datetime import UTC, datetime

    from ..core.report.model import newest_binlog

    gauges = {"shipped_count": float(summary.get("shipped_count") or 0)}
    try:
        status = newest_binlog(catalog, datetime.now(UTC), [])
    except Exception:  # noqa: BLE001 - best effort, like every metric
        log.warning("could not read the binlog lag of %s/%s", cluster, host, exc_info=True)
        status = None
    if status is not None and status.lag_seconds is not None:
        gauges["lag_seconds"] = status.lag_seconds
    emit("binlog", cluster, host, gauges=gauges, counters=("shipping_runs",))


def copy_done(cluster: str, host: str, report: CopyReport) -> None:
    """After a copy run to one further target: what it copied and what is still behind."""
    emit(
        "copy",
        cluster,
        host,
        gauges={
            "behind": float(len(report.behind)),
            "binlogs_behind": float(len(report.binlogs_behind)),
            "copied_bytes": float(report.bytes),
        },
        timings={"duration": report.seconds},
        counters=("copy_runs", "failed" if report.error else "succeeded"),
        tags={"target": report.target},
    )


def check_done(check: HostCheck) -> None:
    """Each figure of a host's check (core/report/check.py), and its status (0 ok, 1 warning, 2 critical)."""
    from ..core.report.check import LEVEL

    figures = {
        "status": LEVEL[check.status],
        "backup_age_seconds": check.backup_age_seconds,
        "restore_test_age_seconds": check.restore_test_age_seconds,
        "binlog_lag_seconds": check.binlog_lag_seconds,
        "binlog_gaps": check.binlog_gaps,
        "copies_behind": sum(check.copies_behind.values()),
        **{f"copies_behind_{name}": n for name, n in check.copies_behind.items()},
    }
    emit(
        "check", check.cluster, check.host, gauges={k: float(v) for k, v in figures.items() if v is not None}
    )
