"""Bar charts as inline SVG, drawn here: no script, stylesheet or font from anywhere.

Values come with units (bytes, seconds, counts) so the axes get round ticks in one unit
(0, 5, 10, 15 MiB); sizes spanning orders of magnitude get a log axis of powers of two.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
        ticks, fmt = linear_ticks(max(values, default=0), c.units)
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
        f'<svg class="chart" viewBox="0 0 {W} {c.height}" role="img" aria-label="{esc(c.title)}">',
        f'<text x="{LEFT}" y="18" class="ct">{esc(c.title)}{" (log scale)" if c.log else ""}</text>',
    ]
    for t in ticks:
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(t):.1f}" y2="{y(t):.1f}" class="grid"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(t) + 4:.1f}" class="yl">{esc(fmt(t))}</text>')
    for b in c.bars:
        width = min(max(band * b.width, 1.0), MAX_BAR * b.width / 0.8)
        for i, v in enumerate(b.values):
            x = LEFT + band * i + (band - width) / 2
            top = min(y(v), y(lo) - 2)  # a zero still shows, as a sliver on the axis
            out.append(
                f'<rect x="{x:.1f}" y="{top:.1f}" width="{width:.1f}" height="{y(lo) - top:.1f}" '
                f'fill="{b.colors[i]}"><title>{esc(c.tips[i])}\n{esc(b.name)}: {esc(c.tip(v))}</title></rect>'
            )
    for i, marked in enumerate(c.marks):
        if marked:
            top = min(y(b.values[i]) for b in c.bars)
            out.append(f'<text x="{LEFT + band * (i + 0.5):.1f}" y="{top - 4:.1f}" class="mark">✓</text>')
    if c.limit:
        ly = y(c.limit[0])
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{ly:.1f}" y2="{ly:.1f}" class="limit"/>')
        out.append(f'<text x="{W - RIGHT - 4}" y="{ly - 4:.1f}" class="ll">{esc(c.limit[1])}</text>')
    out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(lo):.1f}" y2="{y(lo):.1f}" class="axis"/>')
    step = max(1, math.ceil(n / 7))
    for i in range(0, n, step):
        x = LEFT + band * (i + 0.5)
        out.append(f'<text x="{x:.1f}" y="{c.height - BOTTOM + 16}" class="xl">{esc(c.labels[i])}</text>')
    out += legend(c.legend)
    out.append("</svg>")
    return "\n".join(out)


def legend(items: list[tuple[str, str]]) -> list[str]:
    """A row under the title, so a long title never runs into it."""
    out, x = [], LEFT
    for name, color in items:
        out.append(f'<rect x="{x}" y="25" width="11" height="11" fill="{color}"/>')
        out.append(f'<text x="{x + 15}" y="35" class="lg">{esc(name)}</text>')
        x += 15 + 7 * len(name) + 16
    return out


def _unit_of(value: float, units: list[Unit], least: float = 2) -> Unit:
    """The largest unit the value is `least` times of (90 s stays in seconds, 3 min is minutes)."""
    return next((u for u in reversed(units) if value >= least * u[0]), units[0])


def _in_unit(value: float, unit: Unit) -> str:
    return "0" if value == 0 else f"{value / unit[0]:g} {unit[1]}".strip()


def linear_ticks(top: float, units: list[Unit]) -> tuple[list[float], Callable[[float], str]]:
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


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)
