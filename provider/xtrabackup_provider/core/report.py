"""A self-contained HTML page per cluster: backup sizes, durations, chain lengths, restore tests
and binlog lag per host, read from the catalog alone (manifests hold no secrets: no keys needed).

The charts are inline SVG drawn here and the page loads nothing (no script, stylesheet, font or
image from anywhere), so it can be mailed, attached to a ticket or opened on an air-gapped host.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .binlog_catalog import BinlogCatalog, BinlogError, server_uuids
from .catalog import Catalog, Manifest
from .config import FleetConfig
from .restore_test import REPORT_NAME, read_report
from .storage import ObjectStore, StorageError

CHART_BACKUPS = 200  # the charts show the newest this many backups; the table shows them all
RESTORE_ROWS = 10  # restore tests listed per host, newest first
RESTORE_PHASES = ("fetch_extract", "prepare", "copy_back")
FULL, INCREMENTAL, RAW, STORED = "#1f5f99", "#7fb2de", "#c5d3e0", "#1f5f99"
PASS, FAIL, MUTED = "#1e7b34", "#b3261e", "#6b7280"


# ---------------------------------------------------------------------------------------------
# what the report shows, read from the catalog


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

    @property
    def latest(self) -> BackupRow | None:
        return self.backups[-1] if self.backups else None

    @property
    def last_verified(self) -> RestoreTestRow | None:
        return next((t for t in reversed(self.restore_tests) if t.passed), None)

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
    config: FleetConfig, cluster: str, store: ObjectStore | None = None, now: datetime | None = None
) -> ClusterReport:
    from .factory import make_store

    settings = config.cluster(cluster)
    store = store or make_store(config.storage)
    now = now or datetime.now(UTC)
    catalogs = [Catalog(store, config.storage.prefix, cluster, h.name) for h in settings.hosts]
    with ThreadPoolExecutor(4) as pool:
        hosts = list(pool.map(lambda c: host_report(c, now), catalogs))
    where = "/".join(p for p in (store.location, config.storage.prefix.strip("/"), cluster) if p)
    return ClusterReport(cluster, where, now, config.policy.max_chain_length, hosts)


def host_report(catalog: Catalog, now: datetime) -> HostReport:
    report = HostReport(catalog.host)
    manifests = catalog.manifests(report.problems)
    report.backups = backup_rows(manifests, report.problems)
    report.restore_tests = restore_tests(catalog, report.problems)
    report.binlog = newest_binlog(catalog, now, report.problems)
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
        )
    except (TypeError, ValueError, AttributeError) as exc:
        return f"not a restore report: {exc}"


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


# ---------------------------------------------------------------------------------------------
# formatting


def fmt_bytes(n: float) -> str:
    value, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            break
        value /= 1024
    if unit == "B":
        return f"{value:.0f} B"
    return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "n/a"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    if s < 86400:
        return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"
    return f"{int(s // 86400)} d {int(s % 86400 // 3600)} h"


def fmt_time(when: datetime | None) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if when else "n/a"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


# ---------------------------------------------------------------------------------------------
# SVG charts

Unit = tuple[float, str]
BYTES: list[Unit] = [(1, "B"), (1024, "KiB"), (1024**2, "MiB"), (1024**3, "GiB"), (1024**4, "TiB")]
SECONDS: list[Unit] = [(1, "s"), (60, "min"), (3600, "h"), (86400, "d")]
COUNT: list[Unit] = [(1, "")]


@dataclass
class Bars:
    """One bar per category; `width` is the share of the band the bar takes."""

    name: str
    values: list[float]
    colors: list[str]
    width: float = 0.7


@dataclass
class Chart:
    title: str
    labels: list[str]  # x: one per category
    tips: list[str]  # hover text per category
    bars: list[Bars]  # drawn in order: the first is behind
    units: list[Unit]
    tip: Callable[[float], str]  # a value in a tooltip
    legend: list[tuple[str, str]] = field(default_factory=list)
    marks: list[bool] = field(default_factory=list)  # a check mark above the category
    limit: tuple[float, str] | None = None  # a dashed reference line and its label
    log: bool = False
    height: int = 240


W, LEFT, RIGHT, TOP, BOTTOM = 900, 76, 14, 48, 40
MAX_BAR = 56  # px: a handful of backups must not become slabs


def svg_chart(c: Chart) -> str:
    n = len(c.labels)
    # Headroom above a reference line, so its label clears the legend.
    values = [v for b in c.bars for v in b.values] + ([c.limit[0] * 1.2] if c.limit else [])
    if c.log:
        ticks, fmt = _log_ticks(values), lambda v: _in_unit(v, _unit_of(v, c.units, 1))
    else:
        ticks, fmt = _ticks(max(values, default=0), c.units)
    lo, hi = ticks[0], ticks[-1]
    ph, pw = c.height - TOP - BOTTOM, W - LEFT - RIGHT
    band = pw / max(n, 1)

    def y(v: float) -> float:
        if c.log:
            frac = (math.log(max(v, lo)) - math.log(lo)) / (math.log(hi) - math.log(lo))
        else:
            frac = (v - lo) / (hi - lo)
        return TOP + ph - frac * ph

    out = [
        f'<svg class="chart" viewBox="0 0 {W} {c.height}" role="img" aria-label="{_e(c.title)}">',
        f'<text x="{LEFT}" y="18" class="ct">{_e(c.title)}{" (log scale)" if c.log else ""}</text>',
    ]
    for t in ticks:
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(t):.1f}" y2="{y(t):.1f}" class="grid"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(t) + 4:.1f}" class="yl">{_e(fmt(t))}</text>')
    for b in c.bars:
        width = min(max(band * b.width, 1.0), MAX_BAR * b.width / 0.8)
        for i, v in enumerate(b.values):
            x = LEFT + band * i + (band - width) / 2
            top = min(y(v), y(lo) - 2)  # a zero still shows, as a sliver on the axis
            out.append(
                f'<rect x="{x:.1f}" y="{top:.1f}" width="{width:.1f}" height="{y(lo) - top:.1f}" '
                f'fill="{b.colors[i]}"><title>{_e(c.tips[i])}\n{_e(b.name)}: {_e(c.tip(v))}</title></rect>'
            )
    for i, marked in enumerate(c.marks):
        if marked:
            top = min(y(b.values[i]) for b in c.bars)
            out.append(f'<text x="{LEFT + band * (i + 0.5):.1f}" y="{top - 4:.1f}" class="mark">✓</text>')
    if c.limit:
        ly = y(c.limit[0])
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{ly:.1f}" y2="{ly:.1f}" class="limit"/>')
        out.append(f'<text x="{W - RIGHT - 4}" y="{ly - 4:.1f}" class="ll">{_e(c.limit[1])}</text>')
    out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(lo):.1f}" y2="{y(lo):.1f}" class="axis"/>')
    step = max(1, math.ceil(n / 7))
    for i in range(0, n, step):
        x = LEFT + band * (i + 0.5)
        out.append(f'<text x="{x:.1f}" y="{c.height - BOTTOM + 16}" class="xl">{_e(c.labels[i])}</text>')
    out += _legend(c.legend)
    out.append("</svg>")
    return "\n".join(out)


def _legend(items: list[tuple[str, str]]) -> list[str]:
    """A row under the title, so a long title never runs into it."""
    out, x = [], LEFT
    for name, color in items:
        out.append(f'<rect x="{x}" y="25" width="11" height="11" fill="{color}"/>')
        out.append(f'<text x="{x + 15}" y="35" class="lg">{_e(name)}</text>')
        x += 15 + 7 * len(name) + 16
    return out


def _unit_of(value: float, units: list[Unit], least: float = 2) -> Unit:
    """The largest unit the value is `least` times of (90 s stays in seconds, 3 min is minutes)."""
    return next((u for u in reversed(units) if value >= least * u[0]), units[0])


def _in_unit(value: float, unit: Unit) -> str:
    return "0" if value == 0 else f"{value / unit[0]:g} {unit[1]}".strip()


def _ticks(top: float, units: list[Unit]) -> tuple[list[float], Callable[[float], str]]:
    """Round ticks in one unit (0, 5, 10, 15 MiB), from zero to at least `top`."""
    unit = _unit_of(top, units)
    scaled = top / unit[0]
    if scaled <= 0:
        return [0.0, unit[0]], lambda v: _in_unit(v, unit)
    raw = scaled / 4
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    if units is COUNT:
        step = max(1, math.ceil(step))
    count = math.ceil(scaled / step - 1e-9)
    return [step * i * unit[0] for i in range(count + 1)], lambda v: _in_unit(v, unit)


def _log_ticks(values: list[float]) -> list[float]:
    """Powers of two (1 MiB, 4 MiB, 16 MiB ...) spanning every positive value, at most 7 of them."""
    positive = [v for v in values if v > 0] or [1.0]
    low, high = math.log2(min(positive)), math.log2(max(positive))
    for step in (1, 2, 3, 4, 5, 10):
        lo, hi = math.floor(low / step) * step, math.ceil(high / step) * step
        if (hi - lo) / step <= 6:
            break
    hi = max(hi, lo + step)
    return [2.0**e for e in range(lo, hi + 1, step)]


def _x_labels(times: list[datetime]) -> list[str]:
    """As precise as the span needs: hourly backups show the hour, a year of them the date."""
    span = (max(times) - min(times)).total_seconds() if times else 0
    fmt = "%H:%M:%S" if span < 600 else "%m-%d %H:%M" if span < 300 * 86400 else "%Y-%m-%d"
    return [t.astimezone(UTC).strftime(fmt) for t in times]


def host_charts(host: HostReport, max_chain: int) -> str:
    rows = host.backups[-CHART_BACKUPS:]
    if not rows:
        return '<p class="muted">no backups yet</p>'
    labels = _x_labels([r.started_at for r in rows])
    tips = [f"{r.backup_id} ({r.kind})" for r in rows]
    kind_colors = [FULL if r.kind == "full" else INCREMENTAL for r in rows]
    verified = {t.backup_id for t in host.restore_tests if t.passed}
    sizes = [v for r in rows for v in (r.raw_bytes, r.stored_bytes) if v > 0]
    shown = f" (newest {len(rows)} of {len(host.backups)})" if len(rows) < len(host.backups) else ""
    charts = [
        Chart(
            f"Backup size per backup: raw and stored{shown}",
            labels,
            tips,
            [
                Bars("raw", [r.raw_bytes for r in rows], [RAW] * len(rows), 0.8),
                Bars("stored", [r.stored_bytes for r in rows], [STORED] * len(rows), 0.45),
            ],
            BYTES,
            fmt_bytes,
            legend=[("raw", RAW), ("stored", STORED), ("✓ restore verified", PASS)],
            marks=[r.backup_id in verified for r in rows],
            log=bool(sizes) and max(sizes) > 50 * min(sizes),
            height=270,
        ),
        Chart(
            "Backup duration",
            labels,
            tips,
            [Bars("duration", [r.seconds for r in rows], kind_colors)],
            SECONDS,
            fmt_seconds,
            legend=[("full", FULL), ("incremental", INCREMENTAL)],
        ),
        Chart(
            "Chain length (incrementals since the full)",
            labels,
            tips,
            [Bars("incrementals", [float(r.chain_length) for r in rows], kind_colors)],
            COUNT,
            lambda v: f"{v:g}",
            legend=[("full", FULL), ("incremental", INCREMENTAL)],
            limit=(float(max_chain), f"policy max_chain_length {max_chain}"),
            height=200,
        ),
    ]
    return "\n".join(svg_chart(c) for c in charts)


def lag_chart(hosts: list[HostReport]) -> str:
    """Horizontal bars: binlog lag per host, 'n/a' where no binlog is shipped."""
    lags = [h.binlog.lag_seconds if h.binlog else None for h in hosts]
    known = [v for v in lags if v is not None]
    ticks, fmt = _ticks(max(known, default=0), SECONDS)
    row, height, left = 26, 44 + 26 * len(hosts), 160
    pw = W - left - RIGHT - 70  # room for the value printed after the longest bar
    out = [
        f'<svg class="chart" viewBox="0 0 {W} {height}" role="img" aria-label="binlog lag per host">',
        f'<text x="{left}" y="18" class="ct">Binlog lag per host (now − newest shipped event)</text>',
    ]
    for t in ticks if known else []:
        x = left + t / ticks[-1] * pw
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="28" y2="{height - 14}" class="grid"/>')
        out.append(f'<text x="{x:.1f}" y="{height - 2}" class="xl">{_e(fmt(t))}</text>')
    for i, (h, lag) in enumerate(zip(hosts, lags, strict=True)):
        top = 30 + i * row
        out.append(f'<text x="{left - 8}" y="{top + 15}" class="yl">{_e(h.host)}</text>')
        if lag is None:
            out.append(f'<text x="{left + 6}" y="{top + 15}" class="na">n/a: no binlogs shipped</text>')
            continue
        width = max(lag / ticks[-1] * pw, 1.0)
        out.append(
            f'<rect x="{left}" y="{top + 3}" width="{width:.1f}" height="{row - 8}" fill="{STORED}">'
            f"<title>{_e(h.host)}: {_e(fmt_seconds(lag))}</title></rect>"
        )
        out.append(
            f'<text x="{left + width + 6:.1f}" y="{top + 15}" class="lg">{_e(fmt_seconds(lag))}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# the page

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:24px;
color:#1f2933;background:#fff;max-width:1180px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 6px;border-bottom:1px solid #d9dee5;
padding-bottom:4px}h3{font-size:14px;margin:14px 0 4px}
.muted{color:#6b7280}.small{font-size:12px}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{border-bottom:1px solid #e5e7eb;padding:4px 10px;text-align:left;vertical-align:top}
th{background:#f3f5f8;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#1e7b34;font-weight:600}.fail{color:#b3261e;font-weight:600}.none{color:#6b7280}
.warn{background:#fff4e5;border-left:4px solid #e8a33d;padding:6px 10px;font-size:13px;margin:6px 0}
svg.chart{width:100%;height:auto;display:block;margin:6px 0 12px}
svg text{font-family:inherit;font-size:11px;fill:#374151}
svg .ct{font-size:13px;font-weight:600;fill:#1f2933}svg .yl{text-anchor:end}svg .xl{text-anchor:middle}
svg .grid{stroke:#e5e7eb}svg .axis{stroke:#9ca3af}svg .limit{stroke:#b3261e;stroke-dasharray:5 4}
svg .ll{text-anchor:end;fill:#b3261e}svg .mark{text-anchor:middle;fill:#1e7b34;font-size:12px;font-weight:700}
svg .na{fill:#6b7280;font-style:italic}
"""


def render_html(report: ClusterReport) -> str:
    title = f"Backups of cluster {report.cluster}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="muted small">generated {_e(fmt_time(report.generated_at))} from {_e(report.location)}'
        f" · {len(report.hosts)} host(s)</p>",
        summary_table(report),
        lag_chart(report.hosts),
    ]
    for host in report.hosts:
        parts.append(host_section(host, report.max_chain_length))
    parts.append("</body></html>")
    return "\n".join(parts)


def summary_table(report: ClusterReport) -> str:
    head = (
        "<tr><th>Host</th><th>Backups</th><th>Latest backup</th><th>Raw / stored</th><th>Chain</th>"
        "<th>Last verified restore</th><th>Binlog lag</th></tr>"
    )
    rows = [_summary_row(h, report) for h in report.hosts]
    return f'<table class="summary">{head}{"".join(rows)}</table>'


def _summary_row(h: HostReport, report: ClusterReport) -> str:
    latest = h.latest
    if latest:
        age = fmt_seconds((report.generated_at - latest.finished_at).total_seconds())
        backup = f"{_e(latest.backup_id)}<br><span class='muted small'>{latest.kind}, {age} ago</span>"
        sizes = f"{fmt_bytes(latest.raw_bytes)} / {fmt_bytes(latest.stored_bytes)}"
        chain = f"{latest.chain_length} / {report.max_chain_length}"
    else:
        backup, sizes, chain = '<span class="none">no backups</span>', "–", "–"
    return (
        f'<tr data-host="{_e(h.host)}"><td><a href="#host-{_e(h.host)}">{_e(h.host)}</a></td>'
        f'<td class="n">{len(h.backups)}</td><td>{backup}</td><td class="n">{sizes}</td>'
        f'<td class="n">{chain}</td><td>{_verified_cell(h)}</td><td>{_binlog_cell(h.binlog)}</td></tr>'
    )


def _verified_cell(h: HostReport) -> str:
    ok, last = h.last_verified, h.last_test
    cell = (
        f'<span class="pass">PASS</span> {_e(ok.backup_id)}<br><span class="muted small">'
        f"{_e(fmt_time(ok.finished_at))}, {_e(ok.level)}, restore {_e(fmt_seconds(ok.restore_seconds))}</span>"
        if ok
        else '<span class="none">never verified</span>'
    )
    if last and not last.passed:
        cell += f'<br><span class="fail">newest test FAILED</span> <span class="small">{_e(last.backup_id)}</span>'
    return cell


def _binlog_cell(b: BinlogStatus | None) -> str:
    if b is None:
        return '<span class="none">n/a</span><br><span class="muted small">no binlogs shipped</span>'
    state = "" if b.complete else ", open"
    return (
        f"{_e(fmt_seconds(b.lag_seconds))}<br><span class='muted small'>{_e(b.name)}{state}, "
        f"until {_e(fmt_time(b.covers_until))}</span>"
    )


def host_section(h: HostReport, max_chain: int) -> str:
    parts = [f'<h2 id="host-{_e(h.host)}">{_e(h.host)}</h2>']
    parts += [f'<div class="warn">{_e(p)}</div>' for p in h.problems[:20]]
    parts.append(host_charts(h, max_chain))
    parts.append(restore_table(h))
    parts.append(backup_table(h))
    return "\n".join(parts)


def restore_table(h: HostReport) -> str:
    if not h.restore_tests:
        return '<h3>Restore tests</h3><p class="muted">no restore test has run for this host</p>'
    rows = []
    for t in reversed(h.restore_tests[-RESTORE_ROWS:]):
        verdict = f'<span class="{"pass" if t.passed else "fail"}">{_e(t.verdict.upper())}</span>'
        rows.append(
            f'<tr data-restore="{_e(t.backup_id)}"><td>{_e(fmt_time(t.finished_at))}</td>'
            f"<td>{_e(t.backup_id)}</td><td class='n'>{len(t.chain)}</td><td>{_e(t.level)}</td>"
            f"<td>{verdict}</td><td class='n'>{_e(fmt_seconds(t.restore_seconds))}</td>"
            f"<td class='n'>{_e(fmt_seconds(t.total_seconds))}</td><td>{_e('; '.join(t.reasons) or '-')}</td></tr>"
        )
    head = (
        "<tr><th>Finished</th><th>Backup</th><th>Chain</th><th>Level</th><th>Verdict</th>"
        "<th>Restore time</th><th>Whole test</th><th>Reasons</th></tr>"
    )
    shown = (
        f" (newest {RESTORE_ROWS} of {len(h.restore_tests)})" if len(h.restore_tests) > RESTORE_ROWS else ""
    )
    return f"<h3>Restore tests{shown}</h3><table>{head}{''.join(rows)}</table>"


def backup_table(h: HostReport) -> str:
    if not h.backups:
        return ""
    verified = {t.backup_id: t.verdict for t in h.restore_tests}
    rows = []
    for r in reversed(h.backups):
        test = verified.get(r.backup_id)
        mark = f'<span class="{"pass" if test == "pass" else "fail"}">{_e(test)}</span>' if test else ""
        rows.append(
            f'<tr data-backup-id="{_e(r.backup_id)}"><td>{_e(r.backup_id)}</td><td>{r.kind}</td>'
            f"<td>{_e(r.parent_id or '-')}</td><td>{_e(fmt_time(r.started_at))}</td>"
            f'<td class="n" title="{r.raw_bytes:,} bytes">{fmt_bytes(r.raw_bytes)}</td>'
            f'<td class="n" title="{r.stored_bytes:,} bytes">{fmt_bytes(r.stored_bytes)}</td>'
            f'<td class="n">{_e(fmt_seconds(r.seconds))}</td><td class="n">{r.chain_length}</td>'
            f"<td>{_e(r.storage_class)}</td><td>{mark}</td></tr>"
        )
    head = (
        "<tr><th>Backup</th><th>Kind</th><th>Parent</th><th>Started</th><th>Raw</th><th>Stored</th>"
        "<th>Duration</th><th>Chain</th><th>Class</th><th>Restore test</th></tr>"
    )
    opened = " open" if len(rows) <= 20 else ""
    return (
        f"<details{opened}><summary>{len(rows)} backup(s)</summary><table class='backups'>{head}"
        f"{''.join(rows)}</table></details>"
    )


def write_report(
    config: FleetConfig, cluster: str, out: Path, store: ObjectStore | None = None
) -> ClusterReport:
    report = collect(config, cluster, store)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(report), encoding="utf-8")
    return report
