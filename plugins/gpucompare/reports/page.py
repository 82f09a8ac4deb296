"""The human side of the reports: one self-contained ``index.html`` and a short ``summary.md``.

Rendering only: functions here take the built report tables (a
:class:`gpucompare.reports.report_set.ReportSet`) and return strings; :mod:`gpucompare.reports.build`
writes them. This module never imports the builder (build → page → svg → formatting); the charts are
in :mod:`gpucompare.reports.svg`, the formatting of figures in :mod:`gpucompare.reports.formatting`.

The page needs no network to be viewed: its style sheet is inline and every chart is an
inline SVG written here directly (a few kilobytes and a millisecond or two each; text stays
text). What a reader can rely on, on every chart:

* a key of measured vs published figures drawn in the chart itself, and a second channel
  besides colour: measured bars are solid and published ones hatched; measured lines are
  solid with filled dots, published ones dashed with hollow squares; the ideal scaling line
  is dotted grey, distinct from both;
* one colour per machine (provider and instance type) across the whole page, and the
  provider with every machine name;
* the date of every figure (measured night or publication year) and, for money, the date of
  the price;
* a heading, a text summary, and the chart's numbers as a table (collapsed in ``<details>``)
  so no value needs a mouse hover; each section links its CSV and Parquet files.

Charts show a bounded selection (the cheapest, the fastest, the published machines) so the
page stays readable and quick to build on a lake of any size; the tables beside it hold
everything. The layout reflows down to a 390 px phone screen: charts scale to the width,
wide tables scroll inside their own box and the key tables turn into label/value lists.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpucompare.reports.formatting import (
    CURRENCY_SIGN,
    CURVE_COLOURS,
    IDEAL_COLOUR,
    MAX_BARS,
    MAX_LINES,
    Colours,
    _date,
    _esc,
    _flags,
    _hardware_label,
    _is_published,
    _slug,
    devices,
    duration,
    machine_label,
    machine_name,
    money,
    provenance,
    when,
)
from gpucompare.reports.page_projections import where_else_section
from gpucompare.reports.report_set import DERIVED, REPORTS, ReportSet
from gpucompare.reports.svg import (
    Bar,
    Series,
    bar_chart,
    line_chart,
)


# ---- tables ------------------------------------------------------------------------------
def _table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    numeric: Sequence[bool],
    *,
    caption: str,
    reflow: bool = False,
) -> str:
    """A table with a caption, column headers (scope col) and the first cell of each row as its
    row header (scope row). ``reflow``: on a narrow screen each row becomes a list of
    label: value lines instead of a wide row."""
    head = "".join(
        f"<th scope=col{' class=num' if n else ''}>{_esc(h)}</th>"
        for h, n in zip(headers, numeric, strict=True)
    )
    body = []
    for row in rows:
        cells = []
        for index, (value, n, header) in enumerate(zip(row, numeric, headers, strict=True)):
            tag, scope = ("th", " scope=row") if index == 0 else ("td", "")
            cells.append(
                f"<{tag}{scope}{' class=num' if n else ''} data-label='{_esc(header)}'>{_esc(value)}</{tag}>"
            )
        body.append("<tr>" + "".join(cells) + "</tr>")
    css = " class=reflow" if reflow else ""
    return (
        f"<table{css}><caption>{_esc(caption)}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


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


# ---- the figures of each section -------------------------------------------------------------
@dataclass
class Figure:
    """One chart with what goes with it: heading, text summary, data table."""

    chart_id: str
    title: str
    svg: str
    summary: str
    table: str


def _figure(figure: Figure) -> str:
    return (
        f"<figure class=chart id='{figure.chart_id}'>"
        f"<h3 id='{figure.chart_id}-title'>{_esc(figure.title)}</h3>"
        f"<div class=plot>{figure.svg}</div>"
        f"<p class=summary id='{figure.chart_id}-summary'>{_esc(figure.summary)}</p>"
        f"<details><summary>Data table: {_esc(figure.title)}</summary><div class=scroll>{figure.table}</div>"
        "</details></figure>"
    )


def _figures(figures: list[Figure]) -> str:
    if not figures:
        return "<p class=empty>No data for this chart yet.</p>"
    return "<div class=charts>" + "".join(_figure(f) for f in figures) + "</div>"


def _not_ranked_text(row: dict[str, Any], report_set: ReportSet) -> str:
    reason = row.get("not_ranked_reason")
    if reason == "flagged":
        return "not ranked: flagged (" + ", ".join(_flags(row)) + ")"
    if reason == "old_published":
        return f"not ranked: published over {report_set.options.published_max_age_years} years ago"
    return ""


def cost_figures(
    best_value: list[dict[str, Any]], mode: str, report_set: ReportSet, colours: Colours
) -> list[Figure]:
    """Bars per network: the cheapest ranked machines (cost per million images), and a few
    shown-but-not-ranked ones (old published, flagged) for comparison."""
    currency = report_set.currency
    by_network: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in best_value:
        if row["mode"] == mode:
            by_network[row["network"]].append(row)
    figures = []
    for network in sorted(by_network):
        rows = _cheapest_with_unranked(by_network[network])
        bars = [
            Bar(
                machine_name(r),
                r["cost_per_million"],
                colours(r),
                money(r["cost_per_million"], currency),
                published=_is_published(r),
                note=f"{when(r)} · price of {_date(r['price_effective_from'])}"
                + ("" if r["ranked"] else " · not ranked"),
            )
            for r in rows
        ]
        chart_id = _slug("cost", mode, network)
        title = f"{network}, {mode}: cost per million images"
        ranked = [r for r in by_network[network] if r["ranked"]]
        figures.append(
            Figure(
                chart_id,
                title,
                bar_chart(
                    chart_id, bars, f"{CURRENCY_SIGN.get(currency, currency)} per million images", title=title
                ),
                _cost_summary(ranked, by_network[network], report_set),
                _table(
                    [
                        "machine",
                        "rank",
                        "devices",
                        "batch",
                        "images/s",
                        "per hour",
                        "per million",
                        "figure",
                        "price date",
                        "ranking",
                    ],
                    (
                        [
                            machine_label(r),
                            r["rank"] if r["rank"] is not None else "–",
                            devices(r),
                            r["batch_size"],
                            _num(r["images_per_sec"]),
                            money(r["price_per_hour"], currency, 2),
                            money(r["cost_per_million"], currency),
                            provenance(r),
                            _date(r["price_effective_from"]),
                            _not_ranked_text(r, report_set) or "ranked",
                        ]
                        for r in sorted(by_network[network], key=lambda r: r["cost_per_million"])
                    ),
                    [False, True, False, True, True, True, True, False, False, False],
                    caption=f"{title}, every priced machine ({currency})",
                ),
            )
        )
    return figures


def _cost_summary(ranked: list[dict[str, Any]], rows: list[dict[str, Any]], report_set: ReportSet) -> str:
    currency = report_set.currency
    unranked = [r for r in rows if not r["ranked"]]
    text = ""
    if ranked:
        best = min(ranked, key=lambda r: r["cost_per_million"])
        text = (
            f"Best buy: {machine_label(best)}, {devices(best)}, batch {best['batch_size']}: "
            f"{money(best['cost_per_million'], currency)} per million images ({provenance(best)}; "
            f"price of {_date(best['price_effective_from'])}). "
        )
    else:
        text = "No machine ranked: every priced figure here is flagged or an old published one. "
    measured = sum(1 for r in rows if not _is_published(r))
    published_years = sorted({r["result_date"].year for r in rows if _is_published(r) and r["result_date"]})
    text += f"{len(ranked)} machine(s) ranked, {measured} measured, {len(rows) - measured} published"
    if published_years:
        text += " (" + ", ".join(str(y) for y in published_years) + ")"
    if unranked:
        text += f"; {len(unranked)} shown but not ranked"
    return text + "."


def _cheapest_with_unranked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cheapest ranked machines, and up to two cheaper-looking unranked ones for context."""
    ranked = sorted((r for r in rows if r["ranked"]), key=lambda r: r["cost_per_million"])
    others = sorted((r for r in rows if not r["ranked"]), key=lambda r: r["cost_per_million"])[:2]
    chosen = ranked[: MAX_BARS - len(others)] + others
    return sorted(chosen, key=lambda r: r["cost_per_million"])


def throughput_figures(throughput: list[dict[str, Any]], mode: str, colours: Colours) -> list[Figure]:
    """Lines: images/s against batch size per machine (one device, float32), a chart per network."""
    lines: dict[str, dict[tuple, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    info: dict[tuple, dict[str, Any]] = {}
    for row in throughput:
        if row["mode"] != mode or row["images_per_sec"] is None or row["gpu_count"] != 1:
            continue
        if row["dtype"] not in (None, "float32") or row["num_nodes"] not in (None, 1):
            continue
        machine = (row["provider"], row["instance_type"], row["region"], row["market"], row["origin"])
        lines[row["network"]][machine].append((row["batch_size"], row["images_per_sec"]))
        info[machine] = row
    figures = []
    for network in sorted(lines):
        chosen = _top_machines(lines[network], info)
        series = [
            Series(
                f"{_hardware_label(info[m])}, {when(info[m])}",
                lines[network][m],
                colours(info[m]),
                "published" if _is_published(info[m]) else "measured",
            )
            for m in chosen
        ]
        chart_id = _slug("throughput", mode, network)
        title = f"{network}, {mode}: images/s against batch size (one device, float32)"
        batches = sorted({int(x) for m in chosen for x, _ in lines[network][m]})
        table_rows = []
        for m in chosen:
            values = dict(lines[network][m])
            table_rows.append(
                [_hardware_label(info[m]), provenance(info[m])] + [_num(values.get(b)) for b in batches]
            )
        fastest = max(chosen, key=lambda m: max(y for _, y in lines[network][m]))
        best_batch, best_speed = max(lines[network][fastest], key=lambda p: p[1])
        published = [m for m in chosen if _is_published(info[m])]
        summary = (
            f"Fastest: {_hardware_label(info[fastest])} at {best_speed:,.2f} images/s "
            f"(batch {int(best_batch)}, "
            f"{when(info[fastest])}). {len(chosen) - len(published)} measured and {len(published)} published "
            "machine(s) drawn; every value is in the data table."
        )
        figures.append(
            Figure(
                chart_id,
                title,
                line_chart(chart_id, series, "batch size (log scale)", "images/s", log2_x=True, title=title),
                summary,
                _table(
                    ["machine", "figure"] + [f"batch {b}" for b in batches],
                    table_rows,
                    [False, False] + [True] * len(batches),
                    caption=f"{title}: images/s per batch size",
                ),
            )
        )
    return figures


def _top_machines(
    lines: dict[tuple, list[tuple[float, float]]], info: dict[tuple, dict[str, Any]]
) -> list[tuple]:
    """The fastest machines (by best images/s); published ones fill what measured ones leave, two at least."""
    ranked = []
    seen_types: set[tuple] = set()
    for machine in sorted(lines, key=lambda m: -max(y for _, y in lines[m])):
        # the same instance type in another region or market is the same hardware: draw it once
        identity = (machine[0], machine[1], machine[4])
        if identity not in seen_types:
            seen_types.add(identity)
            ranked.append(machine)
    measured = [m for m in ranked if not _is_published(info[m])]
    published = [m for m in ranked if _is_published(info[m])]
    published = published[: max(2, MAX_LINES - len(measured))]
    return measured[: MAX_LINES - len(published)] + published


def scaling_figures(scaling: list[dict[str, Any]], colours: Colours, metric: str = "speedup") -> list[Figure]:
    """Speedup (or efficiency = speedup ÷ GPUs) against GPU count per network: the ideal line,
    our series, the published ones and the published curves."""
    if metric not in ("speedup", "efficiency"):
        raise ValueError(f"metric {metric!r} is not one of speedup, efficiency")
    curves: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    labels: dict[tuple, str] = {}
    first_row: dict[tuple, dict[str, Any]] = {}
    for row in scaling:
        if row[metric] is None or row["gpu_count"] is None:
            continue
        if row["origin"] == "published_curve":
            key = (row["network"], "curve", row["framework"], row["gpu_model"], row["result_source"])
            labels[key] = f"{row['framework']} {row['gpu_model']}, published curve"
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
                + f", {when(row)}"
            )
        curves[key].append((row["gpu_count"], row[metric]))
        first_row.setdefault(key, row)
    figures = []
    for network in sorted({key[0] for key, points in curves.items() if len(points) > 1}):
        mine = {k: v for k, v in curves.items() if k[0] == network and len(v) > 1}
        measured = sorted((k for k in mine if k[1] != "curve"), key=lambda k: (-len(mine[k]), -(k[-1] or 0)))
        chosen = _one_series_per_machine(measured)[:MAX_LINES]
        series = [
            Series(
                labels[k], mine[k], colours(first_row[k]), "published" if k[1] == "published" else "measured"
            )
            for k in chosen
        ]
        curve_keys = [k for k in mine if k[1] == "curve"]
        series += [
            Series(labels[k], mine[k], CURVE_COLOURS[n % len(CURVE_COLOURS)], "published")
            for n, k in enumerate(curve_keys)
        ]
        top = max(x for s in series for x, _ in s.points)
        ideal = [(1, 1), (top, top)] if metric == "speedup" else [(1, 1.0), (top, 1.0)]
        series.insert(0, Series("ideal (linear)", ideal, IDEAL_COLOUR, "ideal"))
        ticks = sorted({x for s in series for x, _ in s.points} | {1})
        chart_id = _slug("scaling", metric, network)
        if metric == "speedup":
            title = f"{network}: speedup over one GPU"
            svg = line_chart(chart_id, series, "GPUs", "speedup over 1 GPU", x_ticks=ticks, title=title)
        else:
            title = f"{network}: efficiency (speedup ÷ GPUs)"
            svg = line_chart(chart_id, series, "GPUs", "speedup ÷ GPUs", x_ticks=ticks, title=title)
        counts = sorted({int(x) for k in (*chosen, *curve_keys) for x, _ in mine[k]})
        table_rows = []
        for k in (*chosen, *curve_keys):
            values = dict(mine[k])
            figure = "published curve: " + str(k[4]) if k[1] == "curve" else provenance(first_row[k])
            table_rows.append([labels[k], figure] + [_num(values.get(c)) for c in counts])
        best = max(
            ((k, x, y) for k in chosen for x, y in mine[k] if x > 1),
            key=lambda t: t[1] * 1000 + t[2],
            default=None,
        )
        summary = (
            f"Widest measured or published run: {labels[best[0]]} at {int(best[1])} GPUs, {metric} "
            f"{best[2]:.2f}. "
            if best
            else ""
        ) + f"{len(chosen)} series and {len(curve_keys)} published curve(s) drawn; dotted: ideal (linear)."
        figures.append(
            Figure(
                chart_id,
                title,
                svg,
                summary,
                _table(
                    ["series", "figure"] + [f"{c} GPU{'s' if c > 1 else ''}" for c in counts],
                    table_rows,
                    [False, False] + [True] * len(counts),
                    caption=f"{title}, per GPU count",
                ),
            )
        )
    return figures


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


# ---- the other tables ------------------------------------------------------------------------
def regressions_table(rows: list[dict[str, Any]], limit: int = 60) -> str:
    flagged = [r for r in rows if r["regression"]][:limit]
    return _table(
        [
            "machine",
            "mode",
            "network",
            "dtype",
            "batch",
            "devices",
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
                devices(r),
                _num(r["images_per_sec"]),
                _num(r["history_median"]),
                _num(r["noise"]),
                _pct(r["change"]),
                r["verdict"] if r["status"] == "ok" else f"{r['verdict']} ({r['status']})",
                _date(r["result_date"]),
            ]
            for r in flagged
        ),
        [False, False, False, False, True, False, True, True, True, True, False, False],
        caption="Flagged regressions: tonight's result against its history",
        reflow=True,
    )


def missing_table(rows: list[dict[str, Any]]) -> str:
    return _table(
        ["machine", "mode", "network", "batch", "devices", "images/s", "why", "figure"],
        (
            [
                machine_label(r),
                r["mode"],
                r["network"],
                r["batch_size"],
                devices(r),
                _num(r["images_per_sec"]),
                "no price" if r["price_source"] == "missing" else "no exchange rate",
                provenance(r),
            ]
            for r in rows
        ),
        [False, False, False, True, False, True, False, False],
        caption="Results without a price",
        reflow=True,
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
        for r in throughput.filter(pc.equal(throughput["origin"], "published")).to_pylist()
        if any(flag in _flags(r) for flag in SUSPICIOUS_FLAGS)
    ]
    if not rows:
        return None
    return _table(
        ["machine", "mode", "network", "batch", "devices", "images/s as published", "flags", "figure"],
        (
            [
                machine_label(r),
                r["mode"],
                r["network"],
                r["batch_size"],
                devices(r),
                _num(r["images_per_sec"]),
                ", ".join(_flags(r)),
                provenance(r),
            ]
            for r in rows
        ),
        [False, False, False, True, False, True, False, False],
        caption="Published values flagged as suspicious",
        reflow=True,
    )


def best_table(rows: list[dict[str, Any]], currency: str) -> str:
    return _table(
        [
            "network",
            "mode",
            "best buy",
            "devices",
            "batch",
            "images/s",
            "per hour",
            "per million",
            "time per million",
            "90 ImageNet epochs",
            "figure",
            "price date",
            "Pareto machines",
        ],
        (
            [
                r["network"],
                r["mode"],
                machine_label(r),
                devices(r),
                r["batch_size"],
                _num(r["images_per_sec"]),
                money(r["price_per_hour"], currency, 2),
                money(r["cost_per_million"], currency),
                duration(1e6 / r["images_per_sec"]),
                _epochs90(r, currency),
                provenance(r),
                _date(r["price_effective_from"]),
                r["pareto"],
            ]
            for r in rows
        ),
        [False, False, False, False, True, True, True, True, True, True, False, False, False],
        caption=f"Best buy per network and mode (ranked rows only, {currency})",
        reflow=True,
    )


def _best_per_network(best_value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rank-1 row of each network and mode, with the names of its Pareto partners."""
    front: dict[tuple, list[str]] = defaultdict(list)
    firsts = {}
    for row in best_value:
        key = (row["mode"], row["network"])
        if row["on_pareto_front"]:
            front[key].append(
                machine_name({"provider": row["provider"], "instance_type": row["instance_type"]})
            )
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
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: var(--ink); background: var(--bg); overflow-wrap: anywhere; }
header { background: #14263b; color: #fff; padding: 22px 40px; }
header h1 { margin: 0; font-size: 22px; font-weight: 600; }
header p { margin: 4px 0 0; color: #c9d3de; }
nav { background: #fff; border-bottom: 1px solid var(--line); padding: 8px 40px; position: sticky; top: 0;
  display: flex; flex-wrap: wrap; gap: 4px 18px; z-index: 1; }
nav a, a { color: var(--accent); }
nav a { text-decoration: none; font-weight: 500; }
main { padding: 24px 40px; max-width: 1400px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 18px 22px;
  margin-bottom: 22px; min-width: 0; }
h2 { margin: 0 0 6px; font-size: 18px; }
h3 { font-size: 15px; margin: 4px 0 6px; }
p.note, p.files { color: var(--muted); margin: 0 0 12px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 160px), 1fr)); gap: 12px;
  margin-bottom: 22px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; }
.card b { display: block; font-size: 20px; }
.card span { color: var(--muted); }
.card.warn b { color: var(--warn); }
.card.published { border-style: dashed; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 520px), 1fr));
  gap: 10px 24px; }
figure.chart { margin: 8px 0 14px; min-width: 0; }
.plot svg { width: 100%; height: auto; display: block; }
p.summary { color: var(--ink); font-size: 13px; margin: 4px 0; }
details summary { cursor: pointer; color: var(--accent); font-size: 13px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
caption { text-align: left; color: var(--muted); font-size: 12px; padding: 4px 0; }
th, td { padding: 5px 8px; border-bottom: 1px solid var(--line); text-align: left; white-space: nowrap; }
thead th { background: #f0f2f5; font-weight: 600; }
tbody th { font-weight: 500; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.scroll { overflow: auto; max-width: 100%; max-height: 520px; }
.empty { color: var(--muted); font-style: italic; }
footer { color: var(--muted); padding: 0 40px 30px; font-size: 12px; }
@media (max-width: 640px) {
  header, nav, main, footer { padding-left: 12px; padding-right: 12px; }
  header h1 { font-size: 18px; }
  nav { position: static; }
  /* charts keep a legible scale and scroll inside their own box rather than shrink to 5 px text */
  .plot { overflow-x: auto; }
  .plot svg { min-width: 540px; }
  .card b { font-size: 17px; }
  section { padding: 12px; }
  /* key tables: each row becomes a short list of label: value lines (nothing hides sideways) */
  table.reflow thead { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
  table.reflow, table.reflow tbody, table.reflow tr, table.reflow th, table.reflow td { display: block; }
  table.reflow tr { border-bottom: 2px solid var(--line); padding: 6px 0; }
  table.reflow th, table.reflow td { border: 0; padding: 1px 0; white-space: normal; text-align: left; }
  table.reflow td::before { content: attr(data-label) ": "; color: var(--muted); }
  table.reflow caption { display: block; width: auto; }
  table.reflow tbody th { font-weight: 600; }
  .scroll:has(table.reflow) { max-height: none; }
}
"""


def _card(value: str, label: str, *, warn: bool = False, kind: str = "") -> str:
    css = " ".join(c for c in ("card", "warn" if warn else "", kind) if c)
    return f"<div class='{css}'><b>{_esc(value)}</b><span>{_esc(label)}</span></div>"


def _links(*names: str) -> str:
    """Links to the CSV and the Parquet file of each named table (relative: they sit beside the page)."""
    return (
        "<p class=files>Data: "
        + " · ".join(
            f"{_esc(name)} (<a href='{name}.csv'>CSV</a>, <a href='{name}/{name}.parquet'>Parquet</a>)"
            for name in names
        )
        + "</p>"
    )


def _headline_cards(report_set: ReportSet, best: list[dict[str, Any]], missing: int, flagged: int) -> str:
    """Measured and published apart: the newest measured night, and the published figures' years."""
    throughput = report_set.tables["throughput"]
    measured = (
        throughput.filter(pc.equal(throughput["origin"], "measured")) if throughput.num_rows else throughput
    )
    published = (
        throughput.filter(pc.equal(throughput["origin"], "published")) if throughput.num_rows else throughput
    )
    newest_measured = pc.max(measured["result_date"]).as_py() if measured.num_rows else None
    years = sorted({d.year for d in published["result_date"].to_pylist() if d}) if published.num_rows else []
    sources = sorted({s for s in published["result_source"].to_pylist() if s}) if published.num_rows else []
    machines = {(r["provider"], r["instance_type"], r["region"], r["market"]) for r in best if r["ranked"]}
    cards = [
        _card(
            _date(newest_measured) if newest_measured else "none yet",
            f"newest measured night · {measured.num_rows:,} measured configurations",
        ),
        _card(
            ", ".join(str(y) for y in years) or "none",
            f"published figures: {published.num_rows:,} from {len(sources)} publication(s), "
            "shown for comparison",
            kind="published",
        ),
        _card(str(len(machines)), "machines in the ranking"),
        _card(str(flagged), "regressions flagged", warn=bool(flagged)),
        _card(str(missing), "results without a price", warn=bool(missing)),
    ]
    return "<div class=cards>" + "".join(cards) + "</div>"


def _ranking_note(report_set: ReportSet, best: list[dict[str, Any]]) -> str:
    options = report_set.options
    old = sum(1 for r in best if r["not_ranked_reason"] == "old_published")
    flagged = sum(1 for r in best if r["not_ranked_reason"] == "flagged")
    rules = []
    if not options.rank_old_published:
        rules.append(
            f"published figures dated before {options.published_cutoff} (older than "
            f"{options.published_max_age_years} years) are shown but not ranked ({old} machine rows)"
        )
    if not options.rank_flagged:
        rules.append(f"figures carrying flags are shown but not ranked ({flagged} machine rows)")
    if not rules:
        return "Ranking: every priced figure is ranked, old published and flagged ones included."
    return (
        "Ranking: "
        + "; ".join(rules)
        + ". Bars marked 'not ranked' are such figures; --rank-old-published and --rank-flagged "
        "(or GPUCOMPARE_RANK_OLD_PUBLISHED, GPUCOMPARE_RANK_FLAGGED) rank them too."
    )


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
    colours = Colours()

    cost = [f for mode in modes for f in cost_figures(best, mode, report_set, colours)]
    throughput_charts = [f for mode in modes for f in throughput_figures(throughput, mode, colours)]
    scaling_charts = scaling_figures(scaling, colours) + scaling_figures(scaling, colours, "efficiency")
    best_rows = _best_per_network(best)
    sections = [
        (
            "cost",
            "Cost per million images",
            f"In {currency}; each price is the one valid on the figure's date, converted at that date's "
            "rate. Under every bar: when its figure was measured or published, and the date of its price. "
            + _ranking_note(report_set, best),
            _links("best_value", "cost_per_million")
            + _figures(cost)
            + (
                "<div class=scroll>" + best_table(best_rows, currency) + "</div>"
                if best_rows
                else "<p class=empty>No machine ranked yet.</p>"
            ),
        ),
        (
            "throughput",
            "Throughput against batch size",
            "Images per second on one device (GPU or CPU), float32.",
            _links("throughput", "throughput_matrix") + _figures(throughput_charts),
        ),
        (
            "scaling",
            "Multi-GPU scaling",
            "Speedup = images/s ÷ images/s of the same network, mode and GPU model on one GPU; strong = "
            "global batch held, weak = per-device batch held (b = the 1-GPU batch); efficiency = speedup ÷ "
            "GPUs.",
            _links("scaling") + _figures(scaling_charts),
        ),
        (
            "regressions",
            "Regressions",
            (
                f"Latest result of each machine and configuration against its {rule.history_runs} previous "
                f"results: flagged when below median − max({rule.mad_factor:g} × 1.4826 × MAD, "
                f"{rule.min_drop:.0%} of the median), or when it failed where the history ran."
            ),
            _links("regressions")
            + (
                ("<div class=scroll>" + regressions_table(regressions) + "</div>")
                if flagged
                else "<p class=empty>No regression flagged.</p>"
            ),
        ),
        (
            "missing",
            "Results without a price",
            "Kept in cost_per_million with empty cost columns; add a price (data/prices or refresh-prices) "
            "to fill them.",
            _links("cost_per_million")
            + (
                ("<div class=scroll>" + missing_table(missing) + "</div>")
                if missing
                else "<p class=empty>Every result found a price.</p>"
            ),
        ),
    ]
    sections.insert(1, where_else_section(report_set, _table))  # projections: after the measured costs
    suspicious = _suspicious_published(tables["throughput"])
    if suspicious:
        sections.append(
            (
                "flags",
                "Published values that look wrong",
                "Kept exactly as published, never ranked unless asked; the import flags them, never rewrites "
                "them. Decimal commas and the article's × 8 batch labels are flagged too: see the flags "
                "column.",
                _links("throughput") + "<div class=scroll>" + suspicious + "</div>",
            )
        )
    nav = "".join(f"<a href='#{key}'>{_esc(title)}</a>" for key, title, _, _ in sections)
    body = "".join(
        f"<section id={key} aria-labelledby='{key}-heading'><h2 id='{key}-heading'>{_esc(title)}</h2>"
        f"<p class=note>{_esc(note)}</p>{content}</section>"
        for key, title, note, content in sections
    )
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    files = " · ".join(
        f"<a href='{name}.csv'>{name}.csv</a> (<a href='{name}/{name}.parquet'>Parquet</a>)"
        for name in (*REPORTS, *DERIVED)
    )
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>"
        f"<title>gpucompare — GPU cost and throughput report</title><style>{_CSS}</style></head><body>"
        "<header><h1>gpucompare — which GPU machine gives the most images per "
        f"{_esc(CURRENCY_SIGN.get(currency, currency))}?</h1>"
        "<p>MXNet scoring and training benchmarks, priced per million images · "
        f"generated {generated}</p></header>"
        f"<nav aria-label=sections>{nav}</nav><main>"
        f"{_headline_cards(report_set, best, len(missing), len(flagged))}{body}</main>"
        f"<footer>Tables beside this page: {files}.</footer>"
        "</body></html>"
    )


def _chartable_throughput(table: pa.Table) -> pa.Table:
    """Only what the throughput chart draws (one device, one node, ok): keeps to_pylist small."""
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
            for r in cost.filter(pc.equal(cost["origin"], "published")).to_pylist()
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
    dates = sorted({_date(r["result_date"]) for r in rows})
    lines = [
        "",
        f"## Published machines, time and cost of 1,000,000 images (score, batch {PUBLISHED_COST_BATCH})",
        "",
        f"Published {', '.join(dates)}, at the publication's prices; not ranked when older than the age "
        "limit.",
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
    provenance_lines = [
        f"- {name}: "
        + ", ".join(
            f"{origin} {count}" + (f" (newest {newest})" if newest else "")
            for origin, (count, newest) in per_origin.items()
        )
        for name, per_origin in report_set.provenance().items()
    ]
    lines = [
        "# gpucompare report",
        "",
        f"{report_set.rows_scanned:,} results; money in {currency}.",
        "",
        "Where each table came from (rows; newest result date):",
        "",
        *provenance_lines,
        "",
        "## Best buy per network (cost per million images, ranked figures only)",
        "",
        "| mode | network | machine | devices | batch | images/s | time per million | cost per million "
        "| figure | price date |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in best:
        lines.append(
            f"| {r['mode']} | {r['network']} | {machine_label(r)} | {devices(r)} | {r['batch_size']} | "
            f"{r['images_per_sec']:,.2f} | {duration(1e6 / r['images_per_sec'])} | "
            f"{money(r['cost_per_million'], currency)} | {provenance(r)} | "
            f"{_date(r['price_effective_from'])} |"
        )
    if not best:
        lines += [
            "",
            f"No ranked figure yet: published figures dated before {report_set.options.published_cutoff} "
            "and flagged ones are not ranked (best_value.csv lists them with not_ranked_reason).",
        ]
    lines += _published_cost_table(report_set.tables["cost_per_million"], currency)
    lines += ["", f"## Regressions: {len(regressions)}", ""]
    for r in regressions[:20]:
        lines.append(
            f"- {machine_label(r)} {r['mode']} {r['network']} batch {r['batch_size']} "
            f"{devices(r)}: {_num(r['images_per_sec'])} images/s vs median "
            f"{_num(r['history_median'])} ({_pct(r['change'])}, {r['verdict']})"
        )
    lines += [
        "",
        f"## Results without a price: {missing}",
        "",
        "Details: index.html and the CSV/Parquet tables beside it.",
        "",
    ]
    manifest = report_set.manifest
    if manifest:
        versions = ", ".join(f"{table} {'absent' if version is None else f'v{version}'}"
                             for table, version in dict(manifest.get("table_versions") or {}).items())
        as_of = f" (as of {manifest['as_of']})" if manifest.get("as_of") else ""
        lines += [f"Built from the lake {manifest.get('lake')} at table versions: {versions}{as_of}.", ""]
    return "\n".join(lines)
