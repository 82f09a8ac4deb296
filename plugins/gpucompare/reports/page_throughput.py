"""The page's throughput section: images/s against batch size per machine (one device, float32),
and the published values flagged as suspicious. Prepares the chart models and tables the section
template draws, from throughput rows whose words and figures the view builder wrote
(``page_rows.chart_rows``, ``page_rows.suspicious_cells``): this module picks and draws, it
formats nothing.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpucompare.reports.charts import Series, line_chart
from gpucompare.reports.formatting import MAX_LINES, Colours, row_flags, slug, titled
from gpucompare.reports.page_parts import Figure, Table, data_table, finite, interval
from gpucompare.reports.page_rows import CELLS, NO_VALUE, TEXT


def chartable_throughput(table: pa.Table) -> pa.Table:
    """Only what the throughput chart draws (one device, one node, float32, ok, a figure): keeps
    to_pylist small (the chart's own tests of each row, :func:`throughput_figures`, in Arrow)."""
    if table.num_rows == 0:
        return table
    mask = pc.and_(pc.equal(table["gpu_count"], 1), pc.equal(table["status"], "ok"))
    mask = pc.and_(mask, pc.is_valid(table["images_per_sec"]))
    mask = pc.and_(mask, pc.fill_null(pc.equal(table["dtype"], "float32"), True))
    mask = pc.and_(mask, pc.fill_null(pc.equal(table["num_nodes"], 1), True))
    return table.filter(pc.fill_null(mask, False))


def throughput_figures(throughput: list[dict[str, Any]], mode: str, colours: Colours) -> list[Figure]:
    """Lines: images/s against batch size per machine (one device, float32), a chart per network
    and methodology (figures timed differently are never drawn against each other). ``throughput``:
    rows with their :class:`~gpucompare.reports.page_rows.ChartText` of ``images_per_sec``."""
    lines: dict[tuple[str, str], dict[tuple, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    info: dict[tuple, dict[str, Any]] = {}
    # by chart and machine: one machine's interval at a batch size differs between networks
    intervals: dict[tuple, dict[float, tuple[Any, Any]]] = defaultdict(dict)
    texts: dict[tuple[str, str], dict[tuple, list[dict[str, Any]]]] = defaultdict(  # each point's row
        lambda: defaultdict(list)
    )
    for row in throughput:
        if row["mode"] != mode or row["images_per_sec"] is None or row["gpu_count"] != 1:
            continue
        if row["dtype"] not in (None, "float32") or row["num_nodes"] not in (None, 1):
            continue
        method = row[TEXT].method
        machine = (row["provider"], row["instance_type"], row["region"], row["market"], row["origin"], method)
        lines[(row["network"], method)][machine].append((row["batch_size"], row["images_per_sec"]))
        intervals[(row["network"], method, machine)][row["batch_size"]] = interval(row, "images_per_sec")
        texts[(row["network"], method)][machine].append(row)
        info[machine] = row
    figures = []
    for network, method in sorted(lines, key=lambda k: (k[0], k[1] != "official", k[1])):
        chart = lines[(network, method)]
        chosen = _top_machines(chart, info)
        series = [
            Series(
                f"{info[m][TEXT].hardware}, {info[m][TEXT].when}",
                chart[m],
                colours(info[m]),
                "published" if info[m][TEXT].published else "measured",
                intervals=intervals[(network, method, m)],
            )
            for m in chosen
        ]
        chart_id = slug("throughput", mode, network, *([] if method == "official" else [method]))
        batches = sorted({int(x) for m in chosen for x, _ in chart[m]})
        sizes = f"batch {batches[0]}" if len(batches) == 1 else f"batch {batches[0]}–{batches[-1]}"
        title = titled(f"{network}, {mode}, {sizes}: images/s against batch size (one device, float32)",
                       method)
        model = line_chart(chart_id, series, "batch size (log scale)", "images/s", log2_x=True, title=title)
        figures.append(
            Figure(
                chart_id,
                title,
                model,
                _summary(chosen, chart, info, texts[(network, method)], model.log_y),
                data_table(
                    ["machine", "figure"] + [f"batch {b}" for b in batches],
                    _table_rows(chosen, chart, info, texts[(network, method)], batches),
                    [False, False] + [True] * len(batches),
                    caption=f"{title}: images/s per batch size",
                ),
            )
        )
    return figures


def _table_rows(chosen: list[tuple], chart: dict[tuple, list[tuple[float, float]]],
                info: dict[tuple, dict[str, Any]], texts: dict[tuple, list[dict[str, Any]]],
                batches: list[int]) -> list[list]:
    """Per machine drawn: its hardware, its figure's provenance and its images/s at each batch size."""
    rows = []
    for m in chosen:
        values = dict(zip((x for x, _ in chart[m]), (_written(r) for r in texts[m]), strict=True))
        text = info[m][TEXT]
        rows.append([text.hardware, text.figure] + [values.get(b, NO_VALUE) for b in batches])
    return rows


def _written(row: dict[str, Any]) -> str:
    """A point's images/s as the table writes it."""
    return row[TEXT].values["images_per_sec"]


def _best(points: list[tuple[float, float]]) -> float:
    values = [y for _, y in points if finite(y)]
    return max(values, default=float("-inf"))


def _summary(chosen: list[tuple], chart: dict[tuple, list[tuple[float, float]]],
             info: dict[tuple, dict[str, Any]], texts: dict[tuple, list[dict[str, Any]]], log_y: bool) -> str:
    published = [m for m in chosen if info[m][TEXT].published]
    drawn = (f"{len(chosen) - len(published)} measured and {len(published)} published machine(s) drawn"
             + ("; images/s on a log scale so the slowest line stays readable" if log_y else "")
             + "; every value is in the data table.")
    fastest = max(chosen, key=lambda m: _best(chart[m]))
    if not finite(_best(chart[fastest])):
        return "No finite images/s to compare. " + drawn
    points = chart[fastest]
    best = max((i for i, (_, y) in enumerate(points) if finite(y)), key=lambda i: points[i][1])
    text = info[fastest][TEXT]
    return (f"Fastest: {text.hardware} at {_written(texts[fastest][best])} images/s "
            f"(batch {int(points[best][0])}, {text.when}). " + drawn)


def _top_machines(
    lines: dict[tuple, list[tuple[float, float]]], info: dict[tuple, dict[str, Any]]
) -> list[tuple]:
    """The fastest machines (by best images/s); published ones fill what measured ones leave, two at least."""
    ranked = []
    seen_types: set[tuple] = set()
    for machine in sorted(lines, key=lambda m: -_best(lines[m])):
        # the same instance type in another region or market is the same hardware: draw it once
        identity = (machine[0], machine[1], machine[4])
        if identity not in seen_types:
            seen_types.add(identity)
            ranked.append(machine)
    measured = [m for m in ranked if not info[m][TEXT].published]
    published = [m for m in ranked if info[m][TEXT].published]
    published = published[: max(2, MAX_LINES - len(measured))]
    return measured[: MAX_LINES - len(published)] + published


#: Flags that say a published value itself looks wrong (others note how it was printed).
SUSPICIOUS_FLAGS = ("outlier_vs_neighbours",)


#: The flags table's columns (page_rows.suspicious_cells writes a row's cells in this order).
SUSPICIOUS_HEADERS = ("machine", "mode", "network", "batch", "devices", "images/s as published", "flags",
                      "figure")


def suspicious_rows(throughput: pa.Table) -> list[dict[str, Any]]:
    """The published rows whose value is flagged as suspicious."""
    if throughput.num_rows == 0:
        return []
    return [r for r in throughput.filter(pc.equal(throughput["origin"], "published")).to_pylist()
            if any(flag in row_flags(r) for flag in SUSPICIOUS_FLAGS)]


def suspicious_table(rows: list[dict[str, Any]]) -> Table | None:
    """A table of the suspicious published values (:func:`suspicious_rows`, their cells written by
    ``page_rows.suspicious_cells``), or None without any."""
    if not rows:
        return None
    return data_table(SUSPICIOUS_HEADERS, (r[CELLS] for r in rows),
                      [False, False, False, True, False, True, False, False],
                      caption="Published values flagged as suspicious")
