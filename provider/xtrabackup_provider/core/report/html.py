"""The report as one self-contained HTML page: a row per host, then per host its charts
(sizes, durations, chain lengths), restore tests and backups. It loads nothing from anywhere,
so it can be mailed, attached to a ticket or opened on an air-gapped host.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ..config.schema import FleetConfig
from ..restore.coverage import CHECKS
from ..storage.base import ObjectStore
from .charts import BYTES, COUNT, RIGHT, SECONDS, Bars, Chart, W, esc, linear_ticks, svg_chart
from .model import BackupRow, BinlogStatus, ClusterReport, HostReport, ReportError, collect

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


# ---------------------------------------------------------------------------------------------
# charts


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
    if any(r.blocked for r in rows):
        charts.append(lock_chart(rows, labels, tips))
    return "\n".join(svg_chart(c) for c in charts)


def lock_chart(rows: list[BackupRow], labels: list[str], tips: list[str]) -> Chart:
    """What each backup cost production: the seconds its locks blocked DDL and commits (the tool's
    log, core/backup/impact.py); commits over DDL, since a commit block is held inside the DDL one."""
    return Chart(
        "Time production was blocked per backup (backup locks)",
        labels,
        tips,
        [
            Bars("DDL blocked", [r.blocked.get("ddl", 0.0) for r in rows], [DDL] * len(rows), 0.8),
            Bars(
                "commits blocked", [r.blocked.get("commits", 0.0) for r in rows], [COMMITS] * len(rows), 0.45
            ),
        ],
        SECONDS,
        fmt_seconds,
        legend=[("DDL blocked", DDL), ("commits blocked", COMMITS)],
        height=200,
    )


def lag_chart(hosts: list[HostReport]) -> str:
    """Horizontal bars: binlog lag per host, 'n/a' where no binlog is shipped."""
    lags = [h.binlog.lag_seconds if h.binlog else None for h in hosts]
    known = [v for v in lags if v is not None]
    ticks, fmt = linear_ticks(max(known, default=0), SECONDS)
    row, height, left = 26, 44 + 26 * len(hosts), 160
    pw = W - left - RIGHT - 70  # room for the value printed after the longest bar
    out = [
        f'<svg class="chart" viewBox="0 0 {W} {height}" role="img" aria-label="binlog lag per host">',
        f'<text x="{left}" y="18" class="ct">Binlog lag per host (now − newest shipped event)</text>',
    ]
    for t in ticks if known else []:
        x = left + t / ticks[-1] * pw
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="28" y2="{height - 14}" class="grid"/>')
        out.append(f'<text x="{x:.1f}" y="{height - 2}" class="xl">{esc(fmt(t))}</text>')
    for i, (h, lag) in enumerate(zip(hosts, lags, strict=True)):
        top = 30 + i * row
        out.append(f'<text x="{left - 8}" y="{top + 15}" class="yl">{esc(h.host)}</text>')
        if lag is None:
            out.append(f'<text x="{left + 6}" y="{top + 15}" class="na">n/a: no binlogs shipped</text>')
            continue
        width = max(lag / ticks[-1] * pw, 1.0)
        out.append(
            f'<rect x="{left}" y="{top + 3}" width="{width:.1f}" height="{row - 8}" fill="{STORED}">'
            f"<title>{esc(h.host)}: {esc(fmt_seconds(lag))}</title></rect>"
        )
        out.append(
            f'<text x="{left + width + 6:.1f}" y="{top + 15}" class="lg">{esc(fmt_seconds(lag))}</text>'
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
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        f'<p class="muted small">generated {esc(fmt_time(report.generated_at))} from {esc(report.location)}'
        f" · {len(report.hosts)} host(s)</p>",
        summary_table(report),
        lag_chart(report.hosts),
    ]
    for host in report.hosts:
        parts.append(host_section(host, report.max_chain_length))
    parts.append(coverage_table())
    parts.append("</body></html>")
    return "\n".join(parts)


def summary_table(report: ClusterReport) -> str:
    head = (
        "<tr><th>Host</th><th>Backups</th><th>Latest backup</th><th>Raw / stored</th><th>Chain</th>"
        "<th>Last verified restore</th><th>Binlog lag</th><th>Copies</th></tr>"
    )
    rows = [_summary_row(h, report) for h in report.hosts]
    return f'<table class="summary">{head}{"".join(rows)}</table>'


def _summary_row(h: HostReport, report: ClusterReport) -> str:
    latest = h.latest
    if latest:
        age = fmt_seconds((report.generated_at - latest.finished_at).total_seconds())
        backup = f"{esc(latest.backup_id)}<br><span class='muted small'>{latest.kind}, {age} ago</span>"
        sizes = f"{fmt_bytes(latest.raw_bytes)} / {fmt_bytes(latest.stored_bytes)}"
        chain = f"{latest.chain_length} / {report.max_chain_length}"
    else:
        backup, sizes, chain = '<span class="none">no backups</span>', "–", "–"
    return (
        f'<tr data-host="{esc(h.host)}"><td><a href="#host-{esc(h.host)}">{esc(h.host)}</a></td>'
        f'<td class="n">{len(h.backups)}</td><td>{backup}</td><td class="n">{sizes}</td>'
        f'<td class="n">{chain}</td><td>{_verified_cell(h)}</td><td>{_binlog_cell(h.binlog)}</td>'
        f"<td>{_copies_cell(h)}</td></tr>"
    )


def _copies_cell(h: HostReport) -> str:
    """Per further storage target: up to date, or how many backups are behind (or unreadable)."""
    if not h.copies:
        return '<span class="none">n/a</span>'
    cells = []
    for c in h.copies:
        if c.error:
            cells.append(f'<span class="fail" title="{esc(c.error)}">{esc(c.target)}: unreadable</span>')
        elif c.behind:
            ids = ", ".join(b for b, _ in c.behind[:5])
            cells.append(
                f'<span class="fail" title="{esc(ids)}">{esc(c.target)}: {len(c.behind)} behind</span>'
            )
        else:
            cells.append(f'<span class="pass">{esc(c.target)}: up to date</span>')
        if c.binlogs_behind and not c.error:
            cells[-1] += f' <span class="muted small">({c.binlogs_behind} binlog(s) behind)</span>'
    return "<br>".join(
        f'<span data-copy="{esc(c.target)}">{cell}</span>' for c, cell in zip(h.copies, cells, strict=True)
    )


def _verified_cell(h: HostReport) -> str:
    ok, last = h.last_verified, h.last_test
    cell = (
        f'<span class="pass">PASS</span> {esc(ok.backup_id)}<br><span class="muted small">'
        f"{esc(fmt_time(ok.finished_at))}, {esc(ok.level)}, restore {esc(fmt_seconds(ok.restore_seconds))}</span>"
        if ok
        else '<span class="none">never verified</span>'
    )
    if last and not last.passed:
        failed = f": {esc(', '.join(last.failed_checks))}" if last.failed_checks else ""
        cell += f'<br><span class="fail">newest test FAILED{failed}</span> <span class="small">{esc(last.backup_id)}</span>'
    return cell


def _binlog_cell(b: BinlogStatus | None) -> str:
    if b is None:
        return '<span class="none">n/a</span><br><span class="muted small">no binlogs shipped</span>'
    state = "" if b.complete else ", open"
    return (
        f"{esc(fmt_seconds(b.lag_seconds))}<br><span class='muted small'>{esc(b.name)}{state}, "
        f"until {esc(fmt_time(b.covers_until))}</span>"
    )


def host_section(h: HostReport, max_chain: int) -> str:
    parts = [f'<h2 id="host-{esc(h.host)}">{esc(h.host)}</h2>']
    parts += [f'<div class="warn">{esc(p)}</div>' for p in h.problems[:20]]
    parts.append(host_charts(h, max_chain))
    parts.append(restore_table(h))
    parts.append(backup_table(h))
    return "\n".join(parts)


def restore_table(h: HostReport) -> str:
    if not h.restore_tests:
        return '<h3>Restore tests</h3><p class="muted">no restore test has run for this host</p>'
    rows = []
    for t in reversed(h.restore_tests[-RESTORE_ROWS:]):
        verdict = f'<span class="{"pass" if t.passed else "fail"}">{esc(t.verdict.upper())}</span>'
        if t.failed_checks:
            verdict += f'<br><span class="small" data-failed-checks>{esc(", ".join(t.failed_checks))}</span>'
        rows.append(
            f'<tr data-restore="{esc(t.backup_id)}"><td>{esc(fmt_time(t.finished_at))}</td>'
            f"<td>{esc(t.backup_id)}</td><td class='n'>{len(t.chain)}</td><td>{esc(t.level)}</td>"
            f"<td>{verdict}</td><td class='n'>{esc(fmt_seconds(t.restore_seconds))}</td>"
            f"<td class='n'>{esc(fmt_seconds(t.total_seconds))}</td><td>{esc('; '.join(t.reasons) or '-')}</td></tr>"
        )
    head = (
        "<tr><th>Finished</th><th>Backup</th><th>Chain</th><th>Level</th><th>Verdict</th>"
        "<th>Restore time</th><th>Whole test</th><th>Reasons</th></tr>"
    )
    shown = (
        f" (newest {RESTORE_ROWS} of {len(h.restore_tests)})" if len(h.restore_tests) > RESTORE_ROWS else ""
    )
    return f"<h3>Restore tests{shown}</h3><table>{head}{''.join(rows)}</table>"


def coverage_table() -> str:
    """What each check of a restore test can and cannot catch (core/restore/coverage.py)."""
    rows = "".join(
        f"<tr><td><code>{esc(c.name)}</code></td><td>{esc(c.levels)}</td><td>{esc(c.catches)}</td>"
        f"<td>{esc(c.misses)}</td></tr>"
        for c in CHECKS
    )
    head = "<tr><th>Check</th><th>Levels</th><th>Catches</th><th>A pass does not rule out</th></tr>"
    return (
        '<h2 id="restore-checks">What a passing restore test proves</h2>'
        f'<table class="checks">{head}{rows}</table>'
    )


def backup_table(h: HostReport) -> str:
    if not h.backups:
        return ""
    verified = {t.backup_id: t.verdict for t in h.restore_tests}
    rows = []
    for r in reversed(h.backups):
        test = verified.get(r.backup_id)
        mark = f'<span class="{"pass" if test == "pass" else "fail"}">{esc(test)}</span>' if test else ""
        rows.append(
            f'<tr data-backup-id="{esc(r.backup_id)}"><td>{esc(r.backup_id)}</td><td>{r.kind}</td>'
            f"<td>{esc(r.parent_id or '-')}</td><td>{esc(fmt_time(r.started_at))}</td>"
            f'<td class="n" title="{r.raw_bytes:,} bytes">{fmt_bytes(r.raw_bytes)}</td>'
            f'<td class="n" title="{r.stored_bytes:,} bytes">{fmt_bytes(r.stored_bytes)}</td>'
            f'<td class="n">{esc(fmt_seconds(r.seconds))}</td><td class="n">{r.chain_length}</td>'
            f"<td>{esc(r.storage_class)}</td><td>{mark}</td></tr>"
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
    config: FleetConfig, cluster: str, out: Path, store: ObjectStore | None = None, only: str | None = None
) -> ClusterReport:
    report = collect(config, cluster, store, only=only)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render_html(report), encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write the report to {out}: {exc.strerror or exc}") from exc
    return report


CHART_BACKUPS = 200  # the charts show the newest this many backups; the table shows them all
RESTORE_ROWS = 10  # restore tests listed per host, newest first
FULL, INCREMENTAL, RAW, STORED = "#1f5f99", "#7fb2de", "#c5d3e0", "#1f5f99"
PASS = "#1e7b34"
DDL, COMMITS = "#e8c07d", "#b3261e"
