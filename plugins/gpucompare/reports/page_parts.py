"""The page's building blocks: an accessible table, a chart figure with its summary and data
table, links to a table's files, how a number or a change is written in a cell, and the
grouping of figures by methodology (never compared across) with the page's note about it.

Pure functions returning HTML strings; every section module builds on them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpucompare.reports.formatting import _esc, methodology


def html_table(
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


def rows_of(table: pa.Table) -> list[dict[str, Any]]:
    return table.to_pylist()


def pct(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value * 100:+.1f} %"


def num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:,.{digits}f}"


@dataclass
class Figure:
    """One chart with what goes with it: heading, text summary, data table."""

    chart_id: str
    title: str
    svg: str
    summary: str
    table: str


def figure_html(figure: Figure) -> str:
    return (
        f"<figure class=chart id='{figure.chart_id}'>"
        f"<h3 id='{figure.chart_id}-title'>{_esc(figure.title)}</h3>"
        f"<div class=plot>{figure.svg}</div>"
        f"<p class=summary id='{figure.chart_id}-summary'>{_esc(figure.summary)}</p>"
        f"<details><summary>Data table: {_esc(figure.title)}</summary><div class=scroll>{figure.table}</div>"
        "</details></figure>"
    )


def figures_html(figures: list[Figure]) -> str:
    if not figures:
        return "<p class=empty>No data for this chart yet.</p>"
    return "<div class=charts>" + "".join(figure_html(f) for f in figures) + "</div>"


def flagged_rows(regressions: pa.Table) -> list[dict[str, Any]]:
    """The flagged rows only (filtered in Arrow: the table has a row per configuration)."""
    if regressions.num_rows == 0:
        return []
    return regressions.filter(pc.fill_null(regressions["regression"], False)).to_pylist()


def links(*names: str) -> str:
    """Links to the CSV and the Parquet file of each named table (relative: they sit beside the page)."""
    return (
        "<p class=files>Data: "
        + " · ".join(
            f"{_esc(name)} (<a href='{name}.csv'>CSV</a>, <a href='{name}/{name}.parquet'>Parquet</a>)"
            for name in names
        )
        + "</p>"
    )


def by_methodology(rows: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The rows per methodology (official first): each group is charted and ranked on its own."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[methodology(row)].append(row)
    return {key: groups[key] for key in sorted(groups, key=lambda m: (m != "official", m))}


def methodology_note(rows: Iterable[dict[str, Any]]) -> str:
    """A note naming each network that has figures under more than one methodology (they are
    shown apart, never compared); empty when every network has one."""
    seen: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        if row.get("network"):
            seen[row["network"]].add(methodology(row))
    mixed = [f"{network} ({', '.join(sorted(found, key=lambda m: (m != 'official', m)))})"
             for network, found in sorted(seen.items()) if len(found) > 1]
    if not mixed:
        return ""
    return (
        "<p class='note methodology'>More than one methodology: " + _esc("; ".join(mixed))
        + ". Figures timed differently are charted, ranked and checked for regressions apart, "
        "never against each other.</p>"
    )

