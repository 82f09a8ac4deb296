"""The page's scaling section: speedup and efficiency against GPU count per network, with the
ideal line and the published curves. Prepares the chart models and tables the section template
draws, from scaling rows; strong and weak series of one machine differ in dash and marker and carry
their rule at the line's end. The rows' words and figures are written by the view builder
(``page_rows.chart_rows``): this module picks and draws, it formats nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from gpucompare.reports.charts import Series, line_chart
from gpucompare.reports.formatting import CURVE_COLOURS, IDEAL_COLOUR, MAX_LINES, Colours, slug, titled
from gpucompare.reports.page_parts import Figure, data_table, finite
from gpucompare.reports.page_rows import NO_VALUE, TEXT


def scaling_figures(scaling: list[dict[str, Any]], colours: Colours, metric: str = "speedup") -> list[Figure]:
    """Speedup (or efficiency = speedup ÷ GPUs) against GPU count per network and methodology:
    the ideal line, our series, the published ones and the published curves (official). Series
    of different methodologies are never drawn on one chart. ``scaling``: rows with their
    :class:`~gpucompare.reports.page_rows.ChartText` of ``speedup`` and ``efficiency``."""
    if metric not in ("speedup", "efficiency"):
        raise ValueError(f"metric {metric!r} is not one of speedup, efficiency")
    curves, labels, first_row, texts = _curves(scaling, metric)
    groups = {key[0] for key, points in curves.items() if len(points) > 1}
    return [
        _figure(network, method,
                {k: v for k, v in curves.items() if k[0] == (network, method) and len(v) > 1},
                labels, first_row, texts, colours, metric)
        for network, method in sorted(groups, key=lambda g: (g[0], g[1] != "official", g[1]))
    ]


def _curves(scaling: list[dict[str, Any]], metric: str) -> tuple[dict, dict, dict, dict]:
    """The points of each series (machine, scaling rule, baseline batch) and published curve, its label,
    its first row and its points' rows (whose text writes the values of the series drawn)."""
    curves: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    texts: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    first_row: dict[tuple, dict[str, Any]] = {}
    for row in scaling:
        if row[metric] is None or row["gpu_count"] is None:
            continue
        if row["origin"] == "published_curve":
            key = ((row["network"], row[TEXT].method), "curve", row["framework"], row["gpu_model"],
                   row["result_source"])
        else:
            key = ((row["network"], row[TEXT].method), row["origin"], row["provider"], row["instance_type"],
                   row["region"], row["market"], row["mode"], row["dtype"], row["scaling"],
                   row["baseline_batch"])
        curves[key].append((row["gpu_count"], row[metric]))
        texts[key].append(row)
        if key not in first_row:  # a series is labelled once, from its first row
            first_row[key] = row
    labels = _Labels(first_row)
    return curves, labels, first_row, texts


class _Labels(dict):
    """A series' label, from its first row, written when first asked for (only the series drawn are)."""

    def __init__(self, first_row: dict[tuple, dict[str, Any]]) -> None:
        super().__init__()
        self.first_row = first_row

    def __missing__(self, key: tuple) -> str:
        self[key] = label = _label(self.first_row[key])
        return label


def _label(row: dict[str, Any]) -> str:
    if row["origin"] == "published_curve":
        return f"{row['framework']} {row['gpu_model']}, published curve"
    return (f"{row[TEXT].hardware} {row['scaling']}, b{row['baseline_batch']}"
            + (" (score)" if row["mode"] == "score" else "") + f", {row[TEXT].when}")


def _figure(network: str, method: str, mine: dict[tuple, list[tuple[float, float]]], labels: _Labels,
            first_row: dict[tuple, dict[str, Any]], texts: dict[tuple, list[dict[str, Any]]],
            colours: Colours, metric: str) -> Figure:
    measured = sorted((k for k in mine if k[1] != "curve"), key=lambda k: (-len(mine[k]), -(k[-1] or 0)))
    chosen = _one_series_per_machine(measured)[:MAX_LINES]
    curve_keys = [k for k in mine if k[1] == "curve"]
    series = [Series(labels[k], mine[k], colours(first_row[k]),
                     "published" if k[1] == "published" else "measured", tag=str(k[8] or "")) for k in chosen]
    series += [Series(labels[k], mine[k], CURVE_COLOURS[n % len(CURVE_COLOURS)], "published")
               for n, k in enumerate(curve_keys)]
    # through every GPU count drawn, not a chord from 1 to the widest: on a log axis the chord from
    # (1, 1) to (16, 16) bends below y = x (it read 3.6 at 8 GPUs)
    counts_drawn = sorted({x for s in series for x, _ in s.points} | {1})
    ideal = [(x, x if metric == "speedup" else 1.0) for x in counts_drawn]
    series.insert(0, Series("ideal (linear)", ideal, IDEAL_COLOUR, "ideal"))
    batches = sorted({int(k[9]) for k in chosen if k[9] is not None})
    sizes = ("" if not batches else f", b = {batches[0]}" if len(batches) == 1
             else f", b = {batches[0]}–{batches[-1]}")
    chart_id = slug("scaling", metric, network, *([] if method == "official" else [method]))
    what, y_label = (("speedup over one GPU", "speedup over 1 GPU") if metric == "speedup"
                     else ("efficiency (speedup ÷ GPUs)", "speedup ÷ GPUs"))
    title = titled(f"{network}{sizes}: {what}", method)
    ticks = sorted({x for s in series for x, _ in s.points} | {1})
    chart = line_chart(chart_id, series, "GPUs", y_label, x_ticks=ticks, title=title)
    counts = sorted({int(x) for k in (*chosen, *curve_keys) for x, _ in mine[k]})
    table_rows = []
    for k in (*chosen, *curve_keys):
        values = dict(zip((x for x, _ in mine[k]), (r[TEXT].values[metric] for r in texts[k]), strict=True))
        figure = "published curve: " + str(k[4]) if k[1] == "curve" else first_row[k][TEXT].figure
        table_rows.append([labels[k], figure] + [values.get(c, NO_VALUE) for c in counts])
    best = max(((k, x, y) for k in chosen for x, y in mine[k] if x > 1 and finite(y)),
               key=lambda t: (t[1], t[2]), default=None)
    summary = (
        f"Widest measured or published run: {labels[best[0]]} at {int(best[1])} GPUs, {metric} "
        f"{best[2]:.2f}. "
        if best else ""
    ) + (f"{len(chosen)} series and {len(curve_keys)} published curve(s) drawn, each numbered at its end "
         "(strong and weak apart); dotted: ideal (linear).")
    table = data_table(["series", "figure"] + [f"{c} GPU{'s' if c > 1 else ''}" for c in counts], table_rows,
                       [False, False] + [True] * len(counts), caption=f"{title}, per GPU count")
    return Figure(chart_id, title, chart, summary, table)


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
