"""The human side of the reports: one self-contained ``index.html`` and a short ``summary.md``.

The page needs no network to be viewed: its style sheet is inline and every chart is an
inline SVG written here directly (bars, lines, axes: a few kilobytes and a millisecond or two
each, where matplotlib took seconds for the same page; text stays text, sharp and
searchable, and each bar and point carries its value as a tooltip). It shows, from the
report tables of :mod:`gpucompare.reports`:

* cost per million images: the cheapest machines of each network, as bars;
* throughput against batch size, one line per machine (one GPU, float32, as published);
* speedup against GPU count with the ideal line and the published curves;
* the regressions the nightly runs flagged, and every result that found no price.

Charts show a bounded selection (the cheapest, the fastest, the published machines) so the
page stays readable and quick to build on a lake of any size; the CSV/Parquet tables beside
it hold everything.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpucompare.reports import REPORTS, ReportSet, write_bytes

#: Bars per network in the cost chart, lines per panel in the throughput and scaling charts.
MAX_BARS = 8
MAX_LINES = 7
PUBLISHED_COLOUR = "#9a6b00"
MEASURED_COLOURS = ("#1f5fa8", "#2e8b57", "#c0392b", "#7d3c98", "#d35400", "#16a085", "#34495e", "#b03a6f")
CURRENCY_SIGN = {"EUR": "€", "USD": "$"}


# ---- formatting --------------------------------------------------------------------------
def duration(seconds: float | None) -> str:
    """Seconds as the published tables write them: '5 min 3 s', '2 h 05 min', '41 s'."""
    if seconds is None or not math.isfinite(seconds):
        return "–"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours >= 48:
        return f"{hours / 24:.1f} days"
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def money(value: float | None, currency: str, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{CURRENCY_SIGN.get(currency, currency + ' ')}{value:,.{digits}f}"


def machine_label(row: dict[str, Any], *, with_gpu: bool = True) -> str:
    """Short name of a machine: instance type, then region and market when they tell apart."""
    parts = [str(row.get("instance_type") or row.get("provider") or "?")]
    if row.get("region"):
        parts.append(str(row["region"]))
    if row.get("market") == "spot":
        parts.append("spot")
    gpu = row.get("gpu_model") if with_gpu else None
    label = " · ".join(parts)
    return f"{label} ({gpu})" if gpu else label


def _hardware_label(row: dict[str, Any]) -> str:
    """Instance type and GPU model: the hardware, whatever the region or market."""
    name = str(row.get("instance_type") or row.get("provider") or "?")
    return f"{name} ({row['gpu_model']})" if row.get("gpu_model") else name


def _is_published(row: dict[str, Any]) -> bool:
    return row.get("target") == "published" or row.get("origin") in ("published", "published_curve")


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


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


def bar_chart(title: str, bars: Sequence[tuple[str, float, str, str]], axis_label: str) -> str:
    """Horizontal bars: (label, value, colour, value text) each; the axis starts at 0."""
    left, right, top, row_height = 200, 190, 30, 22
    width = 640
    height = top + row_height * len(bars) + 44
    plot_width = width - left - right
    ticks = nice_ticks(0, max(value for _, value, _, _ in bars) or 1.0)
    scale = plot_width / ticks[-1]
    parts = [_text(left, 18, title, size=13, weight="600")]
    for tick in ticks:
        x = left + tick * scale
        parts.append(f"<line x1='{x:.1f}' y1='{top - 4}' x2='{x:.1f}' y2='{height - 40}' stroke='#e3e6ea'/>")
        parts.append(_text(x, height - 26, _tick_text(tick), size=10, anchor="middle", colour="#5b6673"))
    for index, (label, value, colour, value_text) in enumerate(bars):
        y = top + index * row_height
        bar = max(value * scale, 1.0)
        parts.append(_text(left - 8, y + 15, _clip(label, 32), size=11, anchor="end"))
        parts.append(
            f"<rect x='{left}' y='{y + 4}' width='{bar:.1f}' height='{row_height - 8}' rx='2' "
            f"fill='{colour}'><title>{_esc(label)}: {_esc(value_text)}</title></rect>"
        )
        parts.append(_text(left + bar + 5, y + 15, value_text, size=10, colour="#333"))
    parts.append(f"<line x1='{left}' y1='{top - 4}' x2='{left}' y2='{height - 40}' stroke='#9aa3ad'/>")
    parts.append(
        _text(left + plot_width / 2, height - 8, axis_label, size=11, anchor="middle", colour="#5b6673")
    )
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' width='{width}' "
        f"height='{height}' role='img' aria-label='{_esc(title)}' {_FONT}>{''.join(parts)}</svg>"
    )


@dataclass
class Series:
    """One line of a line chart."""

    label: str
    points: list[tuple[float, float]]
    colour: str
    dashed: bool = False
    marker: bool = True


def line_chart(
    title: str,
    series: Sequence[Series],
    x_label: str,
    y_label: str,
    *,
    log2_x: bool = False,
    x_ticks: Sequence[float] | None = None,
) -> str:
    """Lines over a shared x axis (log2 for batch sizes), legend below the plot."""
    width, left, right, top, plot_height = 640, 64, 16, 30, 230
    legend_rows = math.ceil(len(series) / 2)
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

    parts = [_text(left, 18, title, size=13, weight="600")]
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
        dash = " stroke-dasharray='5 3'" if line.dashed else ""
        parts.append(f"<path d='{path}' fill='none' stroke='{line.colour}' stroke-width='1.8'{dash}/>")
        if line.marker:
            for x, y in points:
                parts.append(
                    f"<circle cx='{px(x):.1f}' cy='{py(y):.1f}' r='2.8' fill='{line.colour}'>"
                    f"<title>{_esc(line.label)}: {_tick_text(x)} → {y:,.2f}</title></circle>"
                )
    parts.append(
        _text(
            left + plot_width / 2, top + plot_height + 32, x_label, size=11, anchor="middle", colour="#5b6673"
        )
    )
    parts.append(
        _text(14, top + plot_height / 2, y_label, size=11, anchor="middle", colour="#5b6673", rotate=True)
    )
    for index, line in enumerate(series):
        x = left + (index % 2) * (plot_width / 2)
        y = top + plot_height + 50 + (index // 2) * 17
        dash = " stroke-dasharray='5 3'" if line.dashed else ""
        parts.append(
            f"<line x1='{x:.1f}' y1='{y - 4:.1f}' x2='{x + 18:.1f}' y2='{y - 4:.1f}' "
            f"stroke='{line.colour}' stroke-width='2'{dash}/>"
        )
        parts.append(_text(x + 23, y, _clip(line.label, 48), size=10))
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' width='{width}' "
        f"height='{height}' role='img' aria-label='{_esc(title)}' {_FONT}>{''.join(parts)}</svg>"
    )


def _thin(values: Sequence[float], limit: int) -> list[float]:
    if len(values) <= limit:
        return list(values)
    step = math.ceil(len(values) / limit)
    return list(values[::step])


def cost_charts(best_value: list[dict[str, Any]], mode: str, currency: str) -> list[str]:
    """Bars per network: the cheapest machines (cost per million images), a colour per GPU model,
    published figures in amber."""
    by_network: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in best_value:
        if row["mode"] == mode:
            by_network[row["network"]].append(row)
    # one colour per GPU model, the same in every chart of the page
    models = sorted({str(r["gpu_model"]) for r in best_value})
    colour_of = {model: MEASURED_COLOURS[i % len(MEASURED_COLOURS)] for i, model in enumerate(models)}
    charts = []
    for network in sorted(by_network):
        rows = _cheapest_with_published(by_network[network])
        bars = [
            (
                machine_label(r, with_gpu=False),
                r["cost_per_million"],
                PUBLISHED_COLOUR if _is_published(r) else colour_of[str(r["gpu_model"])],
                f"{money(r['cost_per_million'], currency)} · {r['gpu_model'] or r.get('device_kind') or ''}"
                f" ×{r['gpu_count']} · b{r['batch_size']}",
            )
            for r in rows
        ]
        charts.append(
            bar_chart(
                f"{network} — {mode}", bars, f"{CURRENCY_SIGN.get(currency, currency)} per million images"
            )
        )
    return charts


def _cheapest_with_published(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ranked = sorted(rows, key=lambda r: r["cost_per_million"])
    chosen = ranked[:MAX_BARS]
    # keep up to two published machines in view even when today's machines are all cheaper
    published = [r for r in ranked if _is_published(r) and r not in chosen][:2]
    if not published:
        return chosen
    kept = chosen[: MAX_BARS - len(published)] + published
    return sorted(kept, key=lambda r: r["cost_per_million"])


def throughput_charts(throughput: list[dict[str, Any]], mode: str) -> list[str]:
    """Lines: images/s against batch size per machine (one GPU, float32), a chart per network."""
    lines: dict[str, dict[tuple, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    info: dict[tuple, dict[str, Any]] = {}
    for row in throughput:
        if row["mode"] != mode or row["images_per_sec"] is None or row["gpu_count"] != 1:
            continue
        if row["dtype"] not in (None, "float32") or row["num_nodes"] not in (None, 1):
            continue
        machine = (row["provider"], row["instance_type"], row["region"], row["market"])
        lines[row["network"]][machine].append((row["batch_size"], row["images_per_sec"]))
        info[machine] = row
    colour_of: dict[tuple, str] = {}
    charts = []
    for network in sorted(lines):
        series = []
        for machine in _top_machines(lines[network], info):
            published = _is_published(info[machine])
            # one colour per machine across every panel; published machines are drawn dashed
            next_colour = MEASURED_COLOURS[len(colour_of) % len(MEASURED_COLOURS)]
            colour = colour_of.setdefault(machine[:2], next_colour)  # by provider and instance type
            series.append(
                Series(
                    _hardware_label(info[machine]) + (" (published)" if published else ""),
                    lines[network][machine],
                    colour,
                    dashed=published,
                )
            )
        charts.append(
            line_chart(f"{network} — {mode}", series, "batch size (log scale)", "images/s", log2_x=True)
        )
    return charts


def _top_machines(
    lines: dict[tuple, list[tuple[float, float]]], info: dict[tuple, dict[str, Any]]
) -> list[tuple]:
    """The fastest machines (by best images/s); published ones fill what measured ones leave, two at least."""
    ranked = []
    seen_types: set[tuple] = set()
    for machine in sorted(lines, key=lambda m: -max(y for _, y in lines[m])):
        # the same instance type in another region or market is the same hardware: draw it once
        if machine[:2] not in seen_types:
            seen_types.add(machine[:2])
            ranked.append(machine)
    measured = [m for m in ranked if not _is_published(info[m])]
    published = [m for m in ranked if _is_published(info[m])]
    published = published[: max(2, MAX_LINES - len(measured))]
    return measured[: MAX_LINES - len(published)] + published


def scaling_charts(scaling: list[dict[str, Any]], metric: str = "speedup") -> list[str]:
    """Speedup (or efficiency = speedup ÷ GPUs) against GPU count per network: the ideal line,
    our series, the published curves."""
    if metric not in ("speedup", "efficiency"):
        raise ValueError(f"metric {metric!r} is not one of speedup, efficiency")
    curves: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    labels: dict[tuple, str] = {}
    for row in scaling:
        if row[metric] is None or row["gpu_count"] is None:
            continue
        if row["origin"] == "published_curve":
            key = (row["network"], "curve", row["framework"], row["gpu_model"], row["result_source"])
            labels[key] = f"{row['framework']} {row['gpu_model']} (published)"
        else:
            key = (
                row["network"],
                row["origin"],
                row["provider"],
                row["instance_type"],
                row["region"],
                row["market"],
                row["mode"],
                row["dtype"],
                row["scaling"],
                row["baseline_batch"],
            )
            labels[key] = (
                f"{_hardware_label(row)} {row['scaling']}, b{row['baseline_batch']}"
                + (" (score)" if row["mode"] == "score" else "")
                + (" (published)" if row["origin"] == "published" else "")
            )
        curves[key].append((row["gpu_count"], row[metric]))
    charts = []
    for network in sorted({key[0] for key, points in curves.items() if len(points) > 1}):
        mine = {k: v for k, v in curves.items() if k[0] == network and len(v) > 1}
        measured = sorted((k for k in mine if k[1] != "curve"), key=lambda k: (-len(mine[k]), -(k[-1] or 0)))
        series = []
        for number, key in enumerate(_one_series_per_machine(measured)[:MAX_LINES]):
            colour = MEASURED_COLOURS[number % len(MEASURED_COLOURS)]
            series.append(Series(labels[key], mine[key], colour, dashed=key[1] == "published"))
        for number, key in enumerate(k for k in mine if k[1] == "curve"):
            series.append(
                Series(labels[key], mine[key], ("#6c757d", "#b08d57", "#8e6c8a")[number % 3], dashed=True)
            )
        top = max(x for s in series for x, _ in s.points)
        ideal = [(1, 1), (top, top)] if metric == "speedup" else [(1, 1.0), (top, 1.0)]
        series.insert(0, Series("ideal (linear)", ideal, "#9aa3ad", dashed=True, marker=False))
        ticks = sorted({x for s in series for x, _ in s.points} | {1})
        if metric == "speedup":
            charts.append(line_chart(f"{network}", series, "GPUs", "speedup over 1 GPU", x_ticks=ticks))
        else:
            charts.append(
                line_chart(f"{network}: efficiency", series, "GPUs", "speedup ÷ GPUs", x_ticks=ticks)
            )
    return charts


def _one_series_per_machine(keys: Iterable[tuple]) -> list[tuple]:
    """Keep the longest series (then the largest batch) of each instance type, mode and batch rule
    (regions and markets of one instance type are the same hardware)."""
    seen: set[tuple] = set()
    chosen = []
    for key in keys:
        identity = key[:4] + key[6:9]
        if identity not in seen:
            seen.add(identity)
            chosen.append(key)
    return chosen


# ---- tables ------------------------------------------------------------------------------
def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Sequence[bool]) -> str:
    head = "".join(
        f"<th{' class=num' if n else ''}>{_esc(h)}</th>" for h, n in zip(headers, numeric, strict=True)
    )
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=num' if n else ''}>{_esc(v)}</td>" for v, n in zip(row, numeric, strict=True))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return table.to_pylist()


def _flagged(regressions: pa.Table) -> list[dict[str, Any]]:
    """The flagged rows only (filtered in Arrow: the table has a row per configuration)."""
    if regressions.num_rows == 0:
        return []
    return regressions.filter(pc.fill_null(regressions["regression"], False)).to_pylist()


def _pct(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value * 100:+.1f} %"


def _num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:,.{digits}f}"


def regressions_table(rows: list[dict[str, Any]], limit: int = 60) -> str:
    flagged = [r for r in rows if r["regression"]][:limit]
    return _table(
        [
            "machine",
            "mode",
            "network",
            "dtype",
            "batch",
            "GPUs",
            "images/s",
            "history median",
            "noise",
            "change",
            "verdict",
            "night",
        ],
        (
            [
                machine_label(r),
                r["mode"],
                r["network"],
                r["dtype"],
                r["batch_size"],
                r["gpu_count"],
                _num(r["images_per_sec"]),
                _num(r["history_median"]),
                _num(r["noise"]),
                _pct(r["change"]),
                r["verdict"] if r["status"] == "ok" else f"{r['verdict']} ({r['status']})",
                r["result_date"],
            ]
            for r in flagged
        ),
        [False, False, False, False, True, True, True, True, True, True, False, False],
    )


def missing_table(rows: list[dict[str, Any]]) -> str:
    return _table(
        ["provider", "machine", "mode", "network", "batch", "GPUs", "images/s", "why", "result date"],
        (
            [
                r["provider"],
                machine_label(r),
                r["mode"],
                r["network"],
                r["batch_size"],
                r["gpu_count"],
                _num(r["images_per_sec"]),
                "no price" if r["price_source"] == "missing" else "no exchange rate",
                r["result_date"],
            ]
            for r in rows
        ),
        [False, False, False, False, True, True, True, False, False],
    )


def _epochs90(row: dict[str, Any], currency: str) -> str:
    """Training rows: how long and how much 90 epochs of ImageNet take (the unit users plan in)."""
    if row.get("epochs90_hours") is None:
        return "–"
    return f"{duration(row['epochs90_hours'] * 3600)}, {money(row['epochs90_cost'], currency, 0)}"


#: Flags that say a published value itself looks wrong (others note how it was printed).
SUSPICIOUS_FLAGS = ("outlier_vs_neighbours",)


def _suspicious_published(throughput: pa.Table) -> str | None:
    """A table of the published cells whose value is flagged as suspicious, or None."""
    if throughput.num_rows == 0:
        return None
    rows = [
        r
        for r in throughput.filter(pc.equal(throughput["target"], "published")).to_pylist()
        if any(flag in (r["flags"] or "").split(";") for flag in SUSPICIOUS_FLAGS)
    ]
    if not rows:
        return None
    return _table(
        ["machine", "mode", "network", "batch", "GPUs", "images/s as published", "flags", "source"],
        (
            [
                machine_label(r),
                r["mode"],
                r["network"],
                r["batch_size"],
                r["gpu_count"],
                _num(r["images_per_sec"]),
                r["flags"].replace(";", ", "),
                r["result_source"],
            ]
            for r in rows
        ),
        [False, False, False, True, True, True, False, False],
    )


def best_table(rows: list[dict[str, Any]], currency: str) -> str:
    return _table(
        [
            "mode",
            "network",
            "cheapest machine",
            "GPUs",
            "batch",
            "images/s",
            "per hour",
            "per million",
            "time per million",
            "90 ImageNet epochs",
            "Pareto machines",
        ],
        (
            [
                r["mode"],
                r["network"],
                machine_label(r),
                r["gpu_count"],
                r["batch_size"],
                _num(r["images_per_sec"]),
                money(r["price_per_hour"], currency, 2),
                money(r["cost_per_million"], currency),
                duration(1e6 / r["images_per_sec"]),
                _epochs90(r, currency),
                r["pareto"],
            ]
            for r in rows
        ),
        [False, False, False, True, True, True, True, True, True, True, False],
    )


def _best_per_network(best_value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    front: dict[tuple, list[str]] = defaultdict(list)
    firsts = {}
    for row in best_value:
        key = (row["mode"], row["network"])
        if row["on_pareto_front"]:
            front[key].append(row["instance_type"] or "?")
        if row["rank"] == 1 and key not in firsts:
            firsts[key] = row
    return [dict(firsts[key], pareto=_short_list(sorted(set(front[key])))) for key in sorted(firsts)]


def _short_list(names: list[str], limit: int = 4) -> str:
    """'a, b, c, d +3 more': a list that fits a table cell."""
    shown = ", ".join(names[:limit])
    return f"{shown} +{len(names) - limit} more" if len(names) > limit else shown


# ---- page --------------------------------------------------------------------------------
_CSS = """
:root { --ink: #1d2733; --muted: #5b6673; --line: #e3e6ea; --accent: #1f5fa8; --bg: #f6f7f9;
  --warn: #b3261e; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: var(--ink); background: var(--bg); }
header { background: #14263b; color: #fff; padding: 22px 40px; }
header h1 { margin: 0; font-size: 22px; font-weight: 600; }
header p { margin: 4px 0 0; color: #c9d3de; }
nav { background: #fff; border-bottom: 1px solid var(--line); padding: 8px 40px; position: sticky; top: 0; }
nav a { color: var(--accent); text-decoration: none; margin-right: 18px; font-weight: 500; }
main { padding: 24px 40px; max-width: 1400px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 18px 22px;
  margin-bottom: 22px; }
h2 { margin: 0 0 6px; font-size: 18px; }
h3 { font-size: 15px; margin: 16px 0 4px; }
p.note { color: var(--muted); margin: 0 0 12px; }
.cards { display: flex; gap: 14px; flex-wrap: wrap; margin-bottom: 22px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 18px;
  min-width: 170px; }
.card b { display: block; font-size: 22px; }
.card span { color: var(--muted); }
.card.warn b { color: var(--warn); }
figure { margin: 10px 0 18px; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 10px 24px; }
.chart svg { width: 100%; height: auto; display: block; }
figcaption { color: var(--muted); font-size: 13px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { padding: 5px 8px; border-bottom: 1px solid var(--line); text-align: left; white-space: nowrap; }
th { background: #f0f2f5; font-weight: 600; position: sticky; top: 0; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.scroll { overflow: auto; max-height: 520px; }
.empty { color: var(--muted); font-style: italic; }
footer { color: var(--muted); padding: 0 40px 30px; font-size: 12px; }
"""


def _figure(svgs: list[str], caption: str) -> str:
    if not svgs:
        return "<p class=empty>No data for this chart yet.</p>"
    cells = "".join(f"<div class=chart>{svg}</div>" for svg in svgs)
    return f"<figure><div class=charts>{cells}</div><figcaption>{_esc(caption)}</figcaption></figure>"


def _card(value: str, label: str, *, warn: bool = False) -> str:
    return f"<div class='card{' warn' if warn else ''}'><b>{_esc(value)}</b><span>{_esc(label)}</span></div>"


def render_page(report_set: ReportSet) -> str:
    """The whole index.html as a string."""
    tables = report_set.tables
    currency = report_set.currency
    best = _rows(tables["best_value"])
    throughput = _rows(_chartable_throughput(tables["throughput"]))
    scaling = _rows(tables["scaling"])
    regressions = _flagged(tables["regressions"])
    missing = _rows(report_set.missing_prices)
    flagged = [r for r in regressions if r["regression"]]
    rule = report_set.rule
    modes = sorted({r["mode"] for r in best} | {r["mode"] for r in throughput})

    machines = {(r["provider"], r["instance_type"], r["region"], r["market"]) for r in best}
    cards = "".join(
        [
            _card(f"{report_set.rows_scanned:,}", "results in the lake"),
            _card(str(len(machines)), "priced machines"),
            _card(str(report_set.newest_date or "–"), "newest night"),
            _card(str(len(flagged)), "regressions flagged", warn=bool(flagged)),
            _card(str(len(missing)), "results without a price", warn=bool(missing)),
        ]
    )
    cost_figures = "".join(
        _figure(
            cost_charts(best, mode, currency),
            f"{mode}: cheapest configuration of each machine (batch, dtype, GPU count), the {MAX_BARS} "
            "cheapest machines per network; a colour per GPU model, published figures in amber.",
        )
        for mode in modes
    ) or _figure([], "")
    throughput_figures = "".join(
        _figure(
            throughput_charts(throughput, mode),
            f"{mode}: one GPU, float32; the {MAX_LINES} fastest machines per network; published figures "
            "dashed.",
        )
        for mode in modes
    ) or _figure([], "")
    scaling_figure = _figure(
        scaling_charts(scaling) + scaling_charts(scaling, "efficiency"),
        "Speedup = images/s ÷ images/s of the same network, mode and GPU model on one GPU; strong = global "
        "batch held, weak = per-device batch held (b = the 1-GPU batch); efficiency = speedup ÷ GPUs. "
        "Dotted: ideal. "
        "Dashed: published curves.",
    )
    sections = [
        (
            "cost",
            "Cost per million images",
            f"In {currency}, each price taken at the result's date and "
            f"converted at that date's rate. Full table: cost_per_million.csv.",
            cost_figures + "<div class=scroll>" + best_table(_best_per_network(best), currency) + "</div>",
        ),
        (
            "throughput",
            "Throughput against batch size",
            "Images per second; full matrix: throughput_matrix.csv.",
            throughput_figures,
        ),
        ("scaling", "Multi-GPU scaling", "Full table: scaling.csv.", scaling_figure),
        (
            "regressions",
            "Regressions",
            (
                f"Latest result of each machine and configuration against its {rule.history_runs} previous "
                f"results: flagged when below median − max({rule.mad_factor:g} × 1.4826 × MAD, "
                f"{rule.min_drop:.0%} of the "
                f"median), or when it failed where the history ran. Full table: regressions.csv."
            ),
            ("<div class=scroll>" + regressions_table(regressions) + "</div>")
            if flagged
            else "<p class=empty>No regression flagged.</p>",
        ),
        (
            "missing",
            "Results without a price",
            "Kept in cost_per_million.csv with empty cost columns; add a "
            "price (data/prices or refresh-prices) to fill them.",
            ("<div class=scroll>" + missing_table(missing) + "</div>")
            if missing
            else "<p class=empty>Every result found a price.</p>",
        ),
    ]
    suspicious = _suspicious_published(tables["throughput"])
    if suspicious:
        sections.append(
            (
                "flags",
                "Published values that look wrong",
                "Kept exactly as published (and used as such above); the import flags them, never "
                "rewrites them. Decimal commas and the article's × 8 batch labels are flagged too: "
                "see the flags column of throughput.csv.",
                "<div class=scroll>" + suspicious + "</div>",
            )
        )
    nav = "".join(f"<a href='#{key}'>{_esc(title)}</a>" for key, title, _, _ in sections)
    body = "".join(
        f"<section id={key}><h2>{_esc(title)}</h2><p class=note>{_esc(note)}</p>{content}</section>"
        for key, title, note, content in sections
    )
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    files = " · ".join(f"{name}.csv" for name in REPORTS)
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>"
        f"<title>gpucompare — GPU cost and throughput report</title><style>{_CSS}</style></head><body>"
        "<header><h1>gpucompare — which GPU machine gives the most images per "
        f"{_esc(CURRENCY_SIGN.get(currency, currency))}?</h1>"
        "<p>MXNet scoring and training benchmarks, priced per million images · "
        f"generated {generated}</p></header>"
        f"<nav>{nav}</nav><main><div class=cards>{cards}</div>{body}</main>"
        f"<footer>Tables beside this page (CSV and Parquet): {files}, throughput_matrix.csv.</footer>"
        "</body></html>"
    )


def _chartable_throughput(table: pa.Table) -> pa.Table:
    """Only what the throughput chart draws (one GPU, one node, ok): keeps to_pylist small."""
    if table.num_rows == 0:
        return table
    mask = pc.and_(pc.equal(table["gpu_count"], 1), pc.equal(table["status"], "ok"))
    return table.filter(pc.fill_null(mask, False))


#: The published cost table's cell: scoring at batch 32 on one GPU.
PUBLISHED_COST_BATCH = 32


def _published_cost_table(cost: pa.Table, currency: str) -> list[str]:
    """The article's cost table, recomputed from its own throughput and prices (Markdown lines)."""
    rows = (
        [
            r
            for r in cost.filter(pc.equal(cost["target"], "published")).to_pylist()
            if r["mode"] == "score"
            and r["batch_size"] == PUBLISHED_COST_BATCH
            and r["gpu_count"] == 1
            and r["cost_per_million"] is not None
        ]
        if cost.num_rows
        else []
    )
    if not rows:
        return []
    lines = [
        "",
        f"## Published machines, time and cost of 1,000,000 images (score, batch {PUBLISHED_COST_BATCH})",
        "",
        "| GPU | network | images/s | time | per hour | cost |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in sorted(rows, key=lambda r: (str(r["gpu_model"]), r["network"])):
        lines.append(
            f"| {r['gpu_model']} | {r['network']} | {r['images_per_sec']:,.2f} | "
            f"{duration(r['seconds_per_million'])} | {money(r['price_per_hour'], currency, 2)} | "
            f"{money(r['cost_per_million'], currency)} |"
        )
    return lines


def render_summary(report_set: ReportSet) -> str:
    """summary.md: the headline figures in a few lines of Markdown."""
    currency = report_set.currency
    best = _best_per_network(_rows(report_set.tables["best_value"]))
    regressions = _flagged(report_set.tables["regressions"])
    missing = report_set.missing_prices.num_rows
    lines = [
        "# gpucompare report",
        "",
        f"{report_set.rows_scanned:,} results, newest night {report_set.newest_date or '–'}; "
        f"money in {currency}.",
        "",
        "## Cheapest machine per network (cost per million images)",
        "",
        "| mode | network | machine | batch | images/s | time per million | cost per million |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in best:
        lines.append(
            f"| {r['mode']} | {r['network']} | {machine_label(r)} | {r['batch_size']} | "
            f"{r['images_per_sec']:,.2f} | {duration(1e6 / r['images_per_sec'])} | "
            f"{money(r['cost_per_million'], currency)} |"
        )
    lines += _published_cost_table(report_set.tables["cost_per_million"], currency)
    lines += ["", f"## Regressions: {len(regressions)}", ""]
    for r in regressions[:20]:
        lines.append(
            f"- {machine_label(r)} {r['mode']} {r['network']} batch {r['batch_size']} "
            f"×{r['gpu_count']}: {_num(r['images_per_sec'])} images/s vs median "
            f"{_num(r['history_median'])} ({_pct(r['change'])}, {r['verdict']})"
        )
    lines += [
        "",
        f"## Results without a price: {missing}",
        "",
        "Details: index.html and the CSV/Parquet tables beside it.",
        "",
    ]
    return "\n".join(lines)


def write_site(report_set: ReportSet, out: str) -> list[str]:
    """Write index.html and summary.md below ``out`` (local path or s3://); returns their paths."""
    return [
        write_bytes(out, "index.html", render_page(report_set).encode("utf-8")),
        write_bytes(out, "summary.md", render_summary(report_set).encode("utf-8")),
    ]
