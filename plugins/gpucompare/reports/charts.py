"""The page's charts as a small typed model: Python computes every position (scales, ticks, bars,
lines, keys, labels), ``templates/charts.html.j2`` draws the SVG from it (autoescaped like the rest
of the page).

What holds for every chart:

* it scales to its box (an SVG ``viewBox`` :data:`VIEW_WIDTH` units wide, no pixel width);
* any value can be given: zero, 1e-100, 1e13, NaN, ±inf, None; a value that cannot be drawn
  (not finite, negative, or outside :data:`DRAWABLE`) is listed in ``undrawn`` with the reason,
  never raised;
* every line has its own (dash, marker) pair within its chart, filled markers for measured figures
  and hollow ones for published figures, and a number at its end repeated in the legend, so no
  series needs colour to be told apart;
* a measured line never lies on the axis: when the linear scale would put a positive series within
  :data:`MIN_LIFT_PX` of the axis, the chart switches to a log scale (and says so on the axis);
* figures with a 95 % interval (``low``/``high``) carry error bars.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

#: The width of every chart in SVG units; the page scales it to its box. The box is 340 px wide on a
#: 390 px phone and about 400 px at 1366 px, so one unit is at least one pixel there and the smallest
#: text (11 units) reads at 11 px or more on a phone (the page tests measure it).
VIEW_WIDTH = 340
#: Values that can be drawn: 0, or a magnitude in this closed range (floats beyond it lose the
#: arithmetic of the axes).
DRAWABLE = (1e-300, 1e300)
#: A measured series is drawn at least this far (in SVG units, ≈ px at 1366) above the axis.
MIN_LIFT_PX = 12.0
#: Dash patterns and markers: measured lines are solid or finely dashed with filled markers,
#: published ones dashed with hollow markers; the ideal line dotted without markers.
MEASURED_DASHES = ("", "5 3", "1.5 3")
PUBLISHED_DASHES = ("7 4", "10 3 2 3", "3 3")
MARKERS = ("circle", "triangle", "square", "diamond")
IDEAL_DASH = "1.5 4"


def drawable(value: float | None) -> str:
    """'' when ``value`` can be drawn on an axis from 0, else why not ('not a number', …)."""
    if value is None:
        return "no value"
    if math.isnan(value):
        return "not a number"
    if math.isinf(value):
        return "infinite"
    if value < 0:
        return "negative"
    if value != 0 and not DRAWABLE[0] <= value <= DRAWABLE[1]:
        return "too small to draw" if value < DRAWABLE[0] else "too large to draw"
    return ""


def tick_text(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e7 or abs(value) < 1e-3:
        return f"{value:.3g}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:g}"
    return f"{value:.3g}"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 × 10^k steps) covering [low, high]; at least two, each a
    whole multiple of the step (no rounding that turns a tiny axis into zeros)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"ticks need finite bounds, not {low!r}..{high!r}")
    span = high - low
    if span <= 0:
        span = abs(high) or 1.0
    raw = max(span / count, DRAWABLE[0])
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    k = math.floor(low / step)
    ticks = [k * step]
    while ticks[-1] < high or len(ticks) < 2:
        k += 1
        ticks.append(k * step)
    return ticks


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Label:
    """A text at (x, y) in SVG units."""

    x: float
    y: float
    text: str
    size: float = 11
    anchor: str = "start"
    muted: bool = False
    rotate: bool = False


@dataclass(frozen=True)
class Tick:
    position: float
    text: str


@dataclass(frozen=True)
class Style:
    """How one line is drawn besides its colour."""

    dash: str
    marker: str  # circle | triangle | square | diamond | none
    filled: bool


IDEAL_STYLE = Style(IDEAL_DASH, "none", False)


def line_styles(published: Sequence[bool], colours: Sequence[str] = ()) -> list[Style]:
    """A (dash, marker) pair per line, none repeated within a chart (12 of each kind before one
    repeats; consecutive lines differ in both dash and marker). Lines of one colour (one machine's
    strong and weak runs) also get different markers while there are markers left: told apart by
    colour or marker, never by dash alone."""
    styles: list[Style] = []
    counters = {True: 0, False: 0}
    for index, is_published in enumerate(published):
        n = counters[is_published]
        counters[is_published] += 1
        dashes = PUBLISHED_DASHES if is_published else MEASURED_DASHES
        dash = dashes[n % len(dashes)]
        colour = colours[index] if index < len(colours) else None
        taken = {s.marker for s, c in zip(styles, colours, strict=False) if c == colour and colour}
        used = {(s.dash, s.marker) for s in styles}
        order = [MARKERS[(n + k) % len(MARKERS)] for k in range(len(MARKERS))]
        # first a marker that keeps the (dash, marker) pair unique and differs from the colour's other
        # lines, else one that keeps the pair unique, else the counter's
        marker = next((m for m in order if (dash, m) not in used and m not in taken),
                      next((m for m in order if (dash, m) not in used), order[0]))
        styles.append(Style(dash, marker, not is_published))
    return styles


# ---- bars ------------------------------------------------------------------------------------
@dataclass
class Bar:
    """One bar as given: label, value, colour, how the value is written, a note under it and an
    optional 95 % interval."""

    label: str
    value: float | None
    colour: str
    value_text: str
    published: bool = False
    note: str = ""
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class BarMark:
    """One drawn bar: its row's label, the bar, its value text and note, its error bar."""

    label: Label
    x: float
    y: float
    width: float
    height: float
    colour: str
    published: bool
    value: Label
    note: Label
    tooltip: str
    error: tuple[float, float] | None


@dataclass
class BarChart:
    chart_id: str
    title: str
    width: float
    height: float
    plot_left: float
    plot_top: float
    plot_bottom: float
    ticks: list[Tick]
    axis_label: Label
    bars: list[BarMark]
    undrawn: list[str] = field(default_factory=list)
    kind: str = "bar"


_BAR_ROW = 54
_BAR_LEFT, _BAR_RIGHT, _BAR_TOP = 10, 14, 30


def bar_chart(chart_id: str, bars: Sequence[Bar], axis_label: str, *, title: str = "") -> BarChart:
    """Horizontal bars from 0, one row each: the machine above its bar, the value at the bar's end
    (inside it when the bar is long), the note (dates, origin) below."""
    kept = [b for b in bars if not drawable(b.value)]
    undrawn = [f"{b.label}: {b.value_text} ({drawable(b.value)})" for b in bars if drawable(b.value)]
    ends = [v for b in kept for v in (b.value, b.high) if v is not None and not drawable(v)]
    ticks = nice_ticks(0.0, max(ends, default=0.0) or 1.0)
    plot_width = VIEW_WIDTH - _BAR_LEFT - _BAR_RIGHT
    scale = plot_width / ticks[-1]
    bottom = _BAR_TOP + _BAR_ROW * len(kept) + 4
    marks = []
    for index, bar in enumerate(kept):
        y = _BAR_TOP + index * _BAR_ROW
        width = max(bar.value * scale, 1.0)
        inside = width > plot_width * 0.62
        value_x = _BAR_LEFT + width + (-4 if inside else 4)
        error = None
        if bar.low is not None and bar.high is not None and not drawable(bar.low) and not drawable(bar.high):
            error = (_BAR_LEFT + min(bar.low, bar.high) * scale, _BAR_LEFT + max(bar.low, bar.high) * scale)
        marks.append(BarMark(
            label=Label(_BAR_LEFT, y + 12, clip(bar.label, 42), size=13),
            x=_BAR_LEFT, y=y + 17, width=width, height=15, colour=bar.colour, published=bar.published,
            value=Label(value_x, y + 29, bar.value_text, size=12, anchor="end" if inside else "start"),
            note=Label(_BAR_LEFT, y + 45, clip(bar.note, 50), size=11, muted=True),
            tooltip=f"{bar.label}: {bar.value_text}" + (f" · {bar.note}" if bar.note else ""),
            error=error,
        ))
    tick_marks = [Tick(_BAR_LEFT + t * scale, tick_text(t)) for t in ticks]
    height = bottom + 36
    return BarChart(chart_id, title, VIEW_WIDTH, height, _BAR_LEFT, _BAR_TOP + 12, bottom, tick_marks,
                    Label(_BAR_LEFT + plot_width / 2, height - 6, axis_label, anchor="middle", muted=True),
                    marks, undrawn)


# ---- lines -----------------------------------------------------------------------------------
@dataclass
class Series:
    """One line as given: ``style`` is measured, published or ideal; ``intervals`` the 95 %
    interval (low, high) of each point, by x; ``tag`` a short word written at the line's end."""

    label: str
    points: list[tuple[float, float | None]]
    colour: str
    style: str = "measured"
    intervals: dict[float, tuple[float | None, float | None]] = field(default_factory=dict)
    tag: str = ""


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    tooltip: str
    error: tuple[float, float] | None = None


@dataclass(frozen=True)
class Line:
    number: int  # 0: the ideal line (not numbered)
    label: str
    colour: str
    style: Style
    path: str
    points: list[Point]
    end: Label | None
    legend: Label
    legend_x: float
    legend_y: float


@dataclass
class LineChart:
    chart_id: str
    title: str
    width: float
    height: float
    plot_left: float
    plot_top: float
    plot_right: float
    plot_bottom: float
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    x_label: Label
    y_label: Label
    lines: list[Line]
    ideal: bool
    log_y: bool
    undrawn: list[str] = field(default_factory=list)
    kind: str = "line"


_LEFT, _RIGHT, _TOP, _PLOT_HEIGHT, _LEGEND_ROW = 58, 60, 34, 200, 17
#: An end label's box in SVG units (11-unit text, a number and a short word such as "3 strong").
_END_WIDTH, _END_HEIGHT = 52.0, 12.0


class _Axis:
    """One axis: linear from 0, log10 or log2, from a value to an SVG position."""

    def __init__(self, low: float, high: float, start: float, length: float, *, log: str = ""):
        self.log = log
        self.low, self.high = self._t(low), self._t(high)
        if self.high == self.low:  # one value: centre it
            self.low, self.high = self.low - 1.0, self.high + 1.0
        self.start, self.length = start, length

    def _t(self, value: float) -> float:
        if self.log == "10":
            return math.log10(value)
        if self.log == "2":
            return math.log2(value)
        return value

    def __call__(self, value: float) -> float:
        return self.start + (self._t(value) - self.low) / (self.high - self.low) * self.length


def _log_ticks(low: float, high: float) -> tuple[float, float, list[float]]:
    """Decades around [low, high] (low pushed a decade down when it would sit on the axis)."""
    low_exp = math.floor(math.log10(low))
    if math.log10(low) - low_exp < 0.15:
        low_exp -= 1
    high_exp = max(math.ceil(math.log10(high)), low_exp + 1)
    every = max(1, math.ceil((high_exp - low_exp) / 6))
    ticks = [10.0 ** e for e in range(low_exp, high_exp + 1, every)]
    return 10.0 ** low_exp, 10.0 ** high_exp, ticks


def _y_axis(values: list[float], lowest_of_series: list[float]) -> tuple[_Axis, list[float]]:
    """Linear from 0, unless a series of positive values would then lie on the axis: log10."""
    linear = nice_ticks(0.0, max(values, default=0.0) or 1.0)
    top = linear[-1]
    lifted = all(v / top * _PLOT_HEIGHT >= MIN_LIFT_PX for v in lowest_of_series)
    if lifted or not values or min(values) <= 0:
        return _Axis(0.0, top, _TOP + _PLOT_HEIGHT, -_PLOT_HEIGHT), linear
    low, high, ticks = _log_ticks(min(values), max(values))
    return _Axis(low, high, _TOP + _PLOT_HEIGHT, -_PLOT_HEIGHT, log="10"), ticks


def _spread(ends: list[tuple[float, float, int]]) -> dict[int, float]:
    """End-label heights (labels at (x, y), by line index) moved apart so no two boxes overlap: a
    label that would cover one already placed goes just below it, or above when that is nearer."""
    placed: dict[int, tuple[float, float]] = {}
    for x, y, index in sorted(ends, key=lambda e: (e[1], e[0])):
        candidates = sorted({y, *(py + d for px, py in placed.values() if abs(px - x) < _END_WIDTH
                                  for d in (_END_HEIGHT, -_END_HEIGHT))}, key=lambda c: (abs(c - y), c))
        free = next(c for c in candidates if all(abs(px - x) >= _END_WIDTH or abs(py - c) >= _END_HEIGHT
                                                 for px, py in placed.values()))
        placed[index] = (x, free)
    return {index: y for index, (_, y) in placed.items()}


def _kept_points(series: Sequence[Series], log_x: bool) -> tuple[list[list[tuple[float, float]]], list[str]]:
    kept, undrawn = [], []
    for line in series:
        points = []
        for x, y in line.points:
            why = drawable(x) or ("zero on a log scale" if log_x and x == 0 else "") or drawable(y)
            if why:
                undrawn.append(f"{line.label}: {tick_text(x) if x is not None else '?'} → {y} ({why})")
            else:
                points.append((x, y))
        kept.append(sorted(points))
    return kept, undrawn


def line_chart(
    chart_id: str,
    series: Sequence[Series],
    x_label: str,
    y_label: str,
    *,
    log2_x: bool = False,
    x_ticks: Sequence[float] | None = None,
    title: str = "",
) -> LineChart:
    """Lines over a shared x axis (log2 for batch sizes), the origin key on top, a numbered legend
    below (the number also at each line's end)."""
    kept, undrawn = _kept_points(series, log2_x)
    ys = [y for points in kept for _, y in points]
    ys += [v for line, points in zip(series, kept, strict=True) for x, _ in points
           for v in line.intervals.get(x, ()) if v is not None and not drawable(v)]
    measured_lows = [min(y for _, y in points) for line, points in zip(series, kept, strict=True)
                     if points and line.style != "ideal"]
    y_axis, y_values = _y_axis(ys, measured_lows)
    xs = sorted({x for points in kept for x, _ in points} | set(
        x for x in (x_ticks or ()) if not drawable(x) and (x > 0 or not log2_x)))
    plot_width = VIEW_WIDTH - _LEFT - _RIGHT
    x_axis = _Axis(min(xs, default=1.0), max(xs, default=1.0), _LEFT, plot_width, log="2" if log2_x else "")
    numbered = [s for s in series if s.style != "ideal"]
    styles = iter(line_styles([s.style == "published" for s in numbered], [s.colour for s in numbered]))
    bottom = _TOP + _PLOT_HEIGHT
    ends = [(x_axis(points[-1][0]), y_axis(points[-1][1]), i) for i, points in enumerate(kept)
            if points and series[i].style != "ideal"]
    end_y = _spread(ends)
    lines, number = [], 0
    for index, (line, points) in enumerate(zip(series, kept, strict=True)):
        ideal = line.style == "ideal"
        style = IDEAL_STYLE if ideal else next(styles)
        number += 0 if ideal else 1
        drawn = [_point(line, x, y, x_axis, y_axis) for x, y in points]
        path = " ".join(f"{'M' if i == 0 else 'L'}{p.x:.1f},{p.y:.1f}" for i, p in enumerate(drawn))
        tag = f"{number} {line.tag}".strip() if not ideal else ""
        end = (Label(drawn[-1].x + 7, end_y[index] + 4, clip(tag, 10), size=11, anchor="start")
               if drawn and tag else None)
        row = len(lines)
        legend_y = bottom + 50 + row * _LEGEND_ROW
        text = line.label if ideal else f"{number} · {line.label}"
        lines.append(Line(number if not ideal else 0, line.label, line.colour, style, path, drawn, end,
                          Label(38, legend_y, clip(text, 47), size=11), 8, legend_y - 4))
    height = bottom + 50 + len(lines) * _LEGEND_ROW
    return LineChart(
        chart_id, title, VIEW_WIDTH, height, _LEFT, _TOP, _LEFT + plot_width, bottom,
        [Tick(x_axis(x), tick_text(x)) for x in _thin(xs, 10)],
        [Tick(y_axis(t), tick_text(t)) for t in y_values],
        Label(_LEFT + plot_width / 2, bottom + 32, x_label, anchor="middle", muted=True),
        Label(12, _TOP + _PLOT_HEIGHT / 2, y_label + (" (log scale)" if y_axis.log else ""),
              anchor="middle", muted=True, rotate=True),
        lines, any(s.style == "ideal" for s in series), bool(y_axis.log), undrawn,
    )


def _point(line: Series, x: float, y: float, x_axis: _Axis, y_axis: _Axis) -> Point:
    low, high = line.intervals.get(x, (None, None))
    error = None
    if low is not None and high is not None and not drawable(low) and not drawable(high):
        if not y_axis.log or (low > 0 and high > 0):
            error = (y_axis(max(low, high)), y_axis(min(low, high)))
    return Point(x_axis(x), y_axis(y), f"{line.label}: {tick_text(x)} → {y:,.4g}", error)


def _thin(values: Sequence[float], limit: int) -> list[float]:
    if len(values) <= limit:
        return list(values)
    step = math.ceil(len(values) / limit)
    return list(values[::step])
