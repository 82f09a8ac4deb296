"""The page's charts, hand-written SVG: bar and line charts with their key (milliseconds per chart,
no fonts or network needed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpucompare.reports.formatting import (
    IDEAL_COLOUR,
    IDEAL_DASH,
    KEY_COLOUR,
    PUBLISHED_DASH,
    _esc,
)

# ---- charts: hand-written SVG (milliseconds per chart, no fonts or network needed) ----------
_FONT = "font-family='system-ui,-apple-system,Segoe UI,Roboto,sans-serif'"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 × 10^k steps) covering [low, high]."""
    span = high - low
    if span <= 0:
        span = abs(high) or 1.0
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.floor(low / step) * step
    ticks = []
    value = start
    while value < high + step * 0.999 or len(ticks) < 2:  # an axis needs two ticks, even at 0
        ticks.append(round(value, 10))
        value += step
    return ticks


def _tick_text(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:g}"
    return f"{value:.3g}"


def _text(
    x: float,
    y: float,
    text: str,
    *,
    size: int = 11,
    anchor: str = "start",
    colour: str = "#1d2733",
    weight: str = "normal",
    rotate: bool = False,
) -> str:
    transform = f" transform='rotate(-90 {x:.1f} {y:.1f})'" if rotate else ""
    return (
        f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='{anchor}' fill='{colour}' "
        f"font-weight='{weight}'{transform}>{_esc(text)}</text>"
    )


def _clip(label: str, limit: int) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def _hatch(pattern_id: str, colour: str) -> str:
    """Diagonal stripes of ``colour`` on white: the published bars' fill."""
    return (
        f"<pattern id='{pattern_id}' patternUnits='userSpaceOnUse' width='6' height='6' "
        f"patternTransform='rotate(45)'><rect width='6' height='6' fill='#fff'/>"
        f"<line x1='0' y1='0' x2='0' y2='6' stroke='{colour}' stroke-width='3.2'/></pattern>"
    )


def _marker(x: float, y: float, colour: str, published: bool, tooltip: str) -> str:
    """A filled dot (measured) or a hollow square (published): the second channel of a point."""
    title = f"<title>{_esc(tooltip)}</title>"
    if published:
        return (
            f"<rect x='{x - 3.2:.1f}' y='{y - 3.2:.1f}' width='6.4' height='6.4' fill='#fff' "
            f"stroke='{colour}' stroke-width='1.6'>{title}</rect>"
        )
    return f"<circle cx='{x:.1f}' cy='{y:.1f}' r='3' fill='{colour}'>{title}</circle>"


def _origin_key(chart_id: str, x: float, y: float, *, bars: bool, ideal: bool = False) -> str:
    """The key of measured vs published (and of the ideal line), drawn into every chart."""
    parts = ["<g class='key' data-key='origin'>"]
    if bars:
        parts.append(
            f"<defs>{_hatch(f'{chart_id}-key', KEY_COLOUR)}</defs>"
            f"<rect x='{x:.1f}' y='{y - 9:.1f}' width='16' height='10' fill='{KEY_COLOUR}'/>"
            + _text(x + 21, y, "measured (solid)", size=11)
            + f"<rect x='{x + 130:.1f}' y='{y - 9:.1f}' width='16' height='10' fill='url(#{chart_id}-key)' "
            f"stroke='{KEY_COLOUR}'/>" + _text(x + 151, y, "published (hatched)", size=11)
        )
    else:
        parts.append(
            f"<line x1='{x:.1f}' y1='{y - 4:.1f}' x2='{x + 20:.1f}' y2='{y - 4:.1f}' stroke='{KEY_COLOUR}' "
            f"stroke-width='2'/>"
            + _marker(x + 10, y - 4, KEY_COLOUR, False, "measured")
            + _text(x + 25, y, "measured", size=11)
            + f"<line x1='{x + 95:.1f}' y1='{y - 4:.1f}' x2='{x + 115:.1f}' y2='{y - 4:.1f}' "
            f"stroke='{KEY_COLOUR}' stroke-width='2' stroke-dasharray='{PUBLISHED_DASH}'/>"
            + _marker(x + 105, y - 4, KEY_COLOUR, True, "published")
            + _text(x + 120, y, "published", size=11)
        )
        if ideal:
            parts.append(
                f"<line x1='{x + 195:.1f}' y1='{y - 4:.1f}' x2='{x + 215:.1f}' y2='{y - 4:.1f}' "
                f"stroke='{IDEAL_COLOUR}' stroke-width='2' stroke-dasharray='{IDEAL_DASH}' "
                f"stroke-linecap='round'/>" + _text(x + 220, y, "ideal (linear)", size=11)
            )
    parts.append("</g>")
    return "".join(parts)


def _svg(chart_id: str, width: int, height: int, body: str, title: str) -> str:
    # labelled by the figure's heading and text summary (ids set by _figure); the <title>
    # names the chart when the SVG is saved or shown on its own
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' role='img' "
        f"aria-labelledby='{chart_id}-title {chart_id}-summary' {_FONT}><title>{_esc(title)}</title>"
        f"{body}</svg>"
    )


@dataclass
class Bar:
    """One bar of a bar chart."""

    label: str
    value: float
    colour: str
    value_text: str
    published: bool = False
    note: str = ""  # a second line under the bar: where and when the figure and its price are from


def bar_chart(chart_id: str, bars: Sequence[Bar], axis_label: str, *, title: str = "") -> str:
    """Horizontal bars, the axis from 0; published bars hatched; the key on top; under each bar
    its note (the figure's date and origin, the price's date)."""
    left, right, top, row_height = 190, 70, 30, 34
    width = 640
    height = top + row_height * len(bars) + 44
    plot_width = width - left - right
    ticks = nice_ticks(0, max(bar.value for bar in bars) or 1.0)
    scale = plot_width / ticks[-1]
    defs = []
    parts = [_origin_key(chart_id, 8, 14, bars=True)]
    for tick in ticks:
        x = left + tick * scale
        parts.append(f"<line x1='{x:.1f}' y1='{top - 4}' x2='{x:.1f}' y2='{height - 40}' stroke='#e3e6ea'/>")
        parts.append(_text(x, height - 26, _tick_text(tick), size=10, anchor="middle", colour="#5b6673"))
    hatches: dict[str, str] = {}
    for index, bar in enumerate(bars):
        y = top + index * row_height
        width_px = max(bar.value * scale, 1.0)
        fill = bar.colour
        if bar.published:
            if bar.colour not in hatches:
                hatches[bar.colour] = f"{chart_id}-h{len(hatches)}"
                defs.append(_hatch(hatches[bar.colour], bar.colour))
            fill = f"url(#{hatches[bar.colour]})"
        # each bar is labelled directly (machine on the left, value and date on the right):
        # its own legend entry
        parts.append("<g class='legend-entry'>")
        parts.append(_text(left - 8, y + 14, _clip(bar.label, 30), size=11, anchor="end"))
        parts.append(
            f"<rect x='{left}' y='{y + 4}' width='{width_px:.1f}' height='13' fill='{fill}' "
            f"stroke='{bar.colour}' stroke-width='1'><title>{_esc(bar.label)}: {_esc(bar.value_text)}"
            f"{' · ' + _esc(bar.note) if bar.note else ''}</title></rect>"
        )
        parts.append(_text(left + width_px + 5, y + 14, bar.value_text, size=10, colour="#333"))
        parts.append(_text(left + 1, y + 28, bar.note, size=9, colour="#5b6673") + "</g>")
    parts.append(f"<line x1='{left}' y1='{top - 4}' x2='{left}' y2='{height - 40}' stroke='#9aa3ad'/>")
    parts.append(
        _text(left + plot_width / 2, height - 8, axis_label, size=11, anchor="middle", colour="#5b6673")
    )
    return _svg(chart_id, width, height, f"<defs>{''.join(defs)}</defs>{''.join(parts)}", title)


@dataclass
class Series:
    """One line of a line chart: ``style`` is measured, published or ideal."""

    label: str
    points: list[tuple[float, float]]
    colour: str
    style: str = "measured"


def line_chart(
    chart_id: str,
    series: Sequence[Series],
    x_label: str,
    y_label: str,
    *,
    log2_x: bool = False,
    x_ticks: Sequence[float] | None = None,
    title: str = "",
) -> str:
    """Lines over a shared x axis (log2 for batch sizes); the origin key on top, a legend of
    the lines below the plot (each drawn in its own colour, dash and marker)."""
    width, left, right, top, plot_height = 640, 64, 16, 34, 230
    # two legend columns when the labels fit, else one (labels name provider, machine and date)
    columns = 2 if max((len(s.label) for s in series), default=0) <= 44 else 1
    legend_rows = math.ceil(len(series) / columns)
    height = top + plot_height + 48 + legend_rows * 17
    plot_width = width - left - right
    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points]
    x_values = sorted(set(x_ticks or xs))
    to_x = (lambda v: math.log2(v)) if log2_x else (lambda v: v)
    x_low, x_high = to_x(min(x_values)), to_x(max(x_values))
    if x_high == x_low:  # one x value: centre it
        x_low, x_high = x_low - 1.0, x_high + 1.0
    x_span = x_high - x_low
    y_ticks = nice_ticks(0, max(ys) if ys else 1.0)
    y_high = y_ticks[-1]

    def px(v: float) -> float:
        return left + (to_x(v) - x_low) / x_span * plot_width

    def py(v: float) -> float:
        return top + plot_height - v / y_high * plot_height

    parts = [_origin_key(chart_id, 8, 14, bars=False, ideal=any(s.style == "ideal" for s in series))]
    for tick in y_ticks:
        y = py(tick)
        parts.append(
            f"<line x1='{left}' y1='{y:.1f}' x2='{left + plot_width}' y2='{y:.1f}' stroke='#e3e6ea'/>"
        )
        parts.append(_text(left - 6, y + 4, _tick_text(tick), size=10, anchor="end", colour="#5b6673"))
    for tick in _thin(x_values, 12):
        x = px(tick)
        parts.append(
            f"<line x1='{x:.1f}' y1='{top + plot_height}' x2='{x:.1f}' y2='{top + plot_height + 4}' "
            f"stroke='#9aa3ad'/>"
        )
        parts.append(
            _text(x, top + plot_height + 16, _tick_text(tick), size=10, anchor="middle", colour="#5b6673")
        )
    parts.append(
        f"<path d='M{left},{top} V{top + plot_height} H{left + plot_width}' fill='none' stroke='#9aa3ad'/>"
    )
    for line in series:
        points = sorted(line.points)
        path = " ".join(f"{'M' if i == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for i, (x, y) in enumerate(points))
        parts.append(f"<path d='{path}' fill='none' stroke='{line.colour}' stroke-width='1.8'{_dash(line)}/>")
        if line.style != "ideal":
            for x, y in points:
                tooltip = f"{line.label}: {_tick_text(x)} → {y:,.2f}"
                parts.append(_marker(px(x), py(y), line.colour, line.style == "published", tooltip))
    parts.append(
        _text(
            left + plot_width / 2, top + plot_height + 32, x_label, size=11, anchor="middle", colour="#5b6673"
        )
    )
    parts.append(
        _text(14, top + plot_height / 2, y_label, size=11, anchor="middle", colour="#5b6673", rotate=True)
    )
    for index, line in enumerate(series):
        x = left + (index % columns) * (plot_width / 2)
        y = top + plot_height + 50 + (index // columns) * 17
        parts.append(
            f"<g class='legend-entry'><line x1='{x:.1f}' y1='{y - 4:.1f}' x2='{x + 20:.1f}' y2='{y - 4:.1f}' "
            f"stroke='{line.colour}' stroke-width='2'{_dash(line)}/>"
        )
        if line.style != "ideal":
            parts.append(_marker(x + 10, y - 4, line.colour, line.style == "published", line.label))
        parts.append(_text(x + 25, y, _clip(line.label, 46 if columns == 2 else 96), size=10) + "</g>")
    return _svg(chart_id, width, height, "".join(parts), title)


def _dash(line: Series) -> str:
    if line.style == "ideal":
        return f" stroke-dasharray='{IDEAL_DASH}' stroke-linecap='round'"
    if line.style == "published":
        return f" stroke-dasharray='{PUBLISHED_DASH}'"
    return ""


def _thin(values: Sequence[float], limit: int) -> list[float]:
    if len(values) <= limit:
        return list(values)
    step = math.ceil(len(values) / limit)
    return list(values[::step])


