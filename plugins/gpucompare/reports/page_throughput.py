"""The page's throughput section: images/s against batch size per machine (one device, float32),
and the published values flagged as suspicious. Prepares the chart models and tables the section
template draws, from throughput rows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpucompare.reports.charts import Series, line_chart
from gpucompare.reports.formatting import (
    MAX_LINES,
    Colours,
    devices,
    hardware_label,
    is_published,
    machine_label,
    methodology,
    provenance,
    row_flags,
    slug,
    titled,
    when,
)
from gpucompare.reports.page_parts import (
    Figure,
    Table,
    data_table,
    finite,
    interval,
    num,
)


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
    and methodology (figures timed differently are never drawn against each other)."""
    lines: dict[tuple[str, str], dict[tuple, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    info: dict[tuple, dict[str, Any]] = {}
    intervals: dict[tuple, dict[float, tuple[Any, Any]]] = defaultdict(dict)
    for row in throughput:
        if row["mode"] != mode or row["images_per_sec"] is None or row["gpu_count"] != 1:
            continue
        if row["dtype"] not in (None, "float32") or row["num_nodes"] not in (None, 1):
            continue
        method = methodology(row)
        machine = (row["provider"], row["instance_type"], row["region"], row["market"], row["origin"], method)
        lines[(row["network"], method)][machine].append((row["batch_size"], row["images_per_sec"]))
        intervals[machine][row["batch_size"]] = interval(row, "images_per_sec")
        info[machine] = row
    figures = []
    for network, method in sorted(lines, key=lambda k: (k[0], k[1] != "official", k[1])):
        chart = lines[(network, method)]
        chosen = _top_machines(chart, info)
        series = [
            Series(
                f"{hardware_label(info[m])}, {when(info[m])}",
                chart[m],
                colours(info[m]),
                "published" if is_published(info[m]) else "measured",
                intervals=intervals[m],
            )
            for m in chosen
        ]
        chart_id = slug("throughput", mode, network, *([] if method == "official" else [method]))
        batches = sorted({int(x) for m in chosen for x, _ in chart[m]})
        sizes = f"batch {batches[0]}" if len(batches) == 1 else f"batch {batches[0]}–{batches[-1]}"
        title = titled(f"{network}, {mode}, {sizes}: images/s against batch size (one device, float32)",
                       method)
        table_rows = []
        for m in chosen:
            values = dict(chart[m])
            table_rows.append(
                [hardware_label(info[m]), provenance(info[m])] + [num(values.get(b)) for b in batches]
            )
        model = line_chart(chart_id, series, "batch size (log scale)", "images/s", log2_x=True, title=title)
        figures.append(
            Figure(
                chart_id,
                title,
                model,
                _summary(chosen, chart, info, model.log_y),
                data_table(
                    ["machine", "figure"] + [f"batch {b}" for b in batches],
                    table_rows,
                    [False, False] + [True] * len(batches),
                    caption=f"{title}: images/s per batch size",
                ),
            )
        )
    return figures


def _best(points: list[tuple[float, float]]) -> float:
    values = [y for _, y in points if finite(y)]
    return max(values, default=float("-inf"))


def _summary(chosen: list[tuple], chart: dict[tuple, list[tuple[float, float]]],
             info: dict[tuple, dict[str, Any]], log_y: bool) -> str:
    published = [m for m in chosen if is_published(info[m])]
    drawn = (f"{len(chosen) - len(published)} measured and {len(published)} published machine(s) drawn"
             + ("; images/s on a log scale so the slowest line stays readable" if log_y else "")
             + "; every value is in the data table.")
    fastest = max(chosen, key=lambda m: _best(chart[m]))
    if not finite(_best(chart[fastest])):
        return "No finite images/s to compare. " + drawn
    best_batch, best_speed = max(((x, y) for x, y in chart[fastest] if finite(y)), key=lambda p: p[1])
    return (f"Fastest: {hardware_label(info[fastest])} at {best_speed:,.2f} images/s "
            f"(batch {int(best_batch)}, {when(info[fastest])}). " + drawn)


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
    measured = [m for m in ranked if not is_published(info[m])]
    published = [m for m in ranked if is_published(info[m])]
    published = published[: max(2, MAX_LINES - len(measured))]
    return measured[: MAX_LINES - len(published)] + published


#: Flags that say a published value itself looks wrong (others note how it was printed).
SUSPICIOUS_FLAGS = ("outlier_vs_neighbours",)


def suspicious_published(throughput: pa.Table) -> Table | None:
    """A table of the published cells whose value is flagged as suspicious, or None."""
    if throughput.num_rows == 0:
        return None
    rows = [
        r
        for r in throughput.filter(pc.equal(throughput["origin"], "published")).to_pylist()
        if any(flag in row_flags(r) for flag in SUSPICIOUS_FLAGS)
    ]
    if not rows:
        return None
    return data_table(
        ["machine", "mode", "network", "batch", "devices", "images/s as published", "flags", "figure"],
        (
            [
                machine_label(r),
                r["mode"],
                r["network"],
                r["batch_size"],
                devices(r),
                num(r["images_per_sec"]),
                ", ".join(row_flags(r)),
                provenance(r),
            ]
            for r in rows
        ),
        [False, False, False, True, False, True, False, False],
        caption="Published values flagged as suspicious",
    )
