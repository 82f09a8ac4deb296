"""The page's building blocks as data: a table (caption, columns, rows), a chart figure with its
summary and data table, a section, and the helpers every section module shares (how a number or a
change is written, the grouping of figures by methodology, the note about it, the energy and
runtime columns other reports may add).

Pure data: nothing here writes HTML; ``templates/macros.html.j2`` draws these objects.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpucompare.reports.charts import BarChart, LineChart
from gpucompare.reports.formatting import methodology

#: The year of the grid intensity figures (data/carbon/README.md: not the 2023 archive date).
CARBON_DATA_YEAR = "2020 or earlier"
#: The header of every energy column: the worker reads the device's energy only (docs/worker.md).
ENERGY_HEADER = "energy (device only: a lower bound)"


#: Text columns that may wrap inside their cell (long provenance and notes) instead of widening
#: the table past its box.
WRAPPED = frozenset({"figure", "why", "flags", "ranking", "Pareto machines", "where the money went",
                     "series", "machine", "best buy", "tied with", "energy", ENERGY_HEADER, "price"})


@dataclass(frozen=True)
class Column:
    name: str
    numeric: bool = False
    wrap: bool = False


@dataclass
class Table:
    """A table with a caption, column headers (scope col) and the first cell of each row as its row
    header. ``reflow``: on a narrow screen each row becomes a list of label: value lines."""

    caption: str
    columns: list[Column]
    rows: list[list[Any]]
    reflow: bool = False


def data_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    numeric: Sequence[bool],
    *,
    caption: str,
    reflow: bool = False,
) -> Table:
    columns = [Column(h, n, not n and h in WRAPPED) for h, n in zip(headers, numeric, strict=True)]
    body = [list(row) for row in rows]
    for row in body:
        if len(row) != len(columns):
            raise ValueError(f"table {caption!r}: a row of {len(row)} cells under {len(columns)} columns")
    return Table(caption, columns, body, reflow)


@dataclass
class Figure:
    """One chart with what goes with it: heading, text summary, data table."""

    chart_id: str
    title: str
    chart: BarChart | LineChart
    summary: str
    table: Table


@dataclass
class Section:
    """One section of the page: its anchor, heading, note, the data files it links, and what its
    template (``templates/sections/<template>``) draws from ``data``."""

    key: str
    title: str
    note: str
    template: str
    links: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict)


def rows_of(table: pa.Table) -> list[dict[str, Any]]:
    return table.to_pylist()


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def pct(value: float | None) -> str:
    return f"{value * 100:+.1f} %" if finite(value) else "–"


def num(value: float | None, digits: int = 2) -> str:
    return f"{value:,.{digits}f}" if finite(value) else "–"


def flagged_rows(regressions: pa.Table) -> list[dict[str, Any]]:
    """The flagged rows only (filtered in Arrow: the table has a row per configuration)."""
    if regressions.num_rows == 0:
        return []
    return regressions.filter(pc.fill_null(regressions["regression"], False)).to_pylist()


def reported_rows(regressions: pa.Table) -> list[dict[str, Any]]:
    """The rows the page lists: the flagged ones and the significant drops within the floor."""
    if regressions.num_rows == 0:
        return []
    below = pc.equal(regressions["verdict"], "significant_below_floor")
    return regressions.filter(pc.fill_null(pc.or_(regressions["regression"], below), False)).to_pylist()


def stack_change_rows(regressions: pa.Table) -> list[dict[str, Any]]:
    """The series whose software stack (worker runtime or framework build) changed tonight."""
    if regressions.num_rows == 0:
        return []
    return regressions.filter(pc.equal(regressions["verdict"], "software_stack_changed")).to_pylist()


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
    return ("More than one methodology: " + "; ".join(mixed)
            + ". Figures timed differently are charted, ranked and checked for regressions apart, "
            "never against each other.")


def interval(row: dict[str, Any], column: str) -> tuple[float | None, float | None]:
    """The 95 % interval of ``column`` (``<column>_low``/``_high``) when the report has one."""
    return row.get(f"{column}_low"), row.get(f"{column}_high")


def with_interval(row: dict[str, Any], column: str, text: str) -> str:
    """'€0.115 (0.110–0.121)' when the row carries an interval of ``column``, else ``text``."""
    low, high = interval(row, column)
    if finite(low) and finite(high):
        return f"{text} ({low:,.3g}–{high:,.3g})"
    return text


def energy(row: dict[str, Any]) -> str | None:
    """'0.12 kWh per million · 45 gCO₂e' when the report has energy columns, None when it has none
    ('–' for a row without a measurement: never 0)."""
    if not any(k in row for k in ("joules_per_image", "kwh_per_million", "gco2e_per_million")):
        return None
    parts = []
    if finite(row.get("kwh_per_million")):
        parts.append(f"{row['kwh_per_million']:,.3g} kWh per million")
    elif finite(row.get("joules_per_image")):
        parts.append(f"{row['joules_per_image']:,.3g} J per image")
    if finite(row.get("gco2e_per_million")):
        parts.append(f"{row['gco2e_per_million']:,.3g} gCO₂e (grid of {CARBON_DATA_YEAR})")
    return " · ".join(parts) or "–"


def has_energy(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether any row carries an energy measurement (the energy column is shown only then: the
    columns exist in every report since schema 3, mostly empty where nothing could be read)."""
    keys = ("joules_per_image", "kwh_per_million", "gco2e_per_million")
    return any(finite(row.get(key)) for row in rows for key in keys)
