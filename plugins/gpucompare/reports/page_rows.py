"""The view builder's rows: each best_value row (and each row of cost_per_million without a
price) with its figures written as text once (:class:`RowText`, under the row's ``"text"`` key),
each throughput and scaling row its chart draws with its words and figures written once
(:class:`ChartText`, under ``"text"`` too), and each regressions, campaign, projections and
suspicious published row the page lists with its table cells written once (under ``"cells"``),
before any section is drawn. The sections, the first screen's answers and the tables read the
text; only this module calls the formatting helpers for them, so a figure is written one way
wherever it appears (``€0.115 (0.110–0.121)`` in the table, the bar and the answer alike).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpucompare.reports.formatting import (
    date_text,
    devices,
    duration,
    hardware_label,
    is_published,
    machine_label,
    machine_name,
    methodology,
    money,
    price_label,
    provenance,
    row_flags,
    time_per_million,
    when,
)
from gpucompare.reports.page_parts import energy, finite, num, pct, with_interval

#: The key of a prepared row's :class:`RowText`.
TEXT = "text"
#: The key of a prepared row's table cells (:func:`with_cells`).
CELLS = "cells"
#: A table cell without a figure.
NO_VALUE = num(None)


@dataclass(frozen=True)
class RowText:
    """One row's figures as the page writes them."""

    machine: str  # provider and instance type (region, spot)
    label: str  # the machine with its GPU model and runtime
    devices: str
    method: str
    published: bool
    when: str  # 'measured 2026-11-30' / 'published 2017'
    figure: str  # long provenance
    price: str  # the price's date (declared: its note)
    date: str
    images_per_sec: str  # with its 95 % interval when the row has one
    per_hour: str
    cost: str  # cost per million
    cost_with_interval: str
    cost_interval: str | None  # '€0.110–€0.121', None without an interval
    time_per_million: str
    epochs90: str  # training: how long and how much 90 ImageNet epochs take ('–' otherwise)
    energy: str | None
    verdict: str | None  # against the best of its ranking; None for the best or an unranked row


def verdict_text(row: dict[str, Any]) -> str | None:
    """'dearer, ×2.00 (1.96–2.04); to settle: …': best_value's verdict of ``row`` against the
    best of its ranking (None for the best, an unranked row or one without a verdict)."""
    verdict = row.get("verdict")
    if verdict is None or verdict == "best" or not row.get("ranked", True):
        return None
    text = str(verdict)
    if finite(row.get("cost_ratio")):
        text += f", ×{row['cost_ratio']:.2f}"
        if finite(row.get("cost_ratio_low")) and finite(row.get("cost_ratio_high")):
            text += f" ({row['cost_ratio_low']:.2f}–{row['cost_ratio_high']:.2f})"
    if row.get("settle_with"):
        text += f"; to settle: {row['settle_with']}"
    return text


def verdict_lines(rows: Iterable[dict[str, Any]]) -> list[str]:
    """'B: dearer, ×2.00 (1.96–2.04)', one line per ranked row other than the best, in rank order."""
    ordered = sorted(rows, key=lambda r: (r.get("rank") is None, r.get("rank") or 0))
    return [f"{machine_name(row)}: {text}" for row in ordered if (text := verdict_text(row)) is not None]


def row_text(row: dict[str, Any], currency: str) -> RowText:
    cost = row.get("cost_per_million")
    low, high = row.get("cost_per_million_low"), row.get("cost_per_million_high")
    return RowText(
        machine=machine_name(row),
        label=machine_label(row),
        devices=devices(row),
        method=methodology(row),
        published=is_published(row),
        when=when(row),
        figure=provenance(row),
        price=price_label(row),
        date=date_text(row.get("result_date")),
        images_per_sec=with_interval(row, "images_per_sec", num(row.get("images_per_sec"))),
        per_hour=money(row.get("price_per_hour"), currency, 2),
        cost=money(cost, currency),
        cost_with_interval=with_interval(row, "cost_per_million", money(cost, currency)),
        cost_interval=(f"{money(low, currency)}–{money(high, currency)}"
                       if finite(low) and finite(high) else None),
        time_per_million=time_per_million(row.get("images_per_sec")),
        epochs90=_epochs90(row, currency),
        energy=energy(row),
        verdict=verdict_text(row),
    )


def _epochs90(row: dict[str, Any], currency: str) -> str:
    """Training rows: how long and how much 90 epochs of ImageNet take (the unit users plan in)."""
    if row.get("epochs90_hours") is None:
        return "–"
    return f"{duration(row['epochs90_hours'] * 3600)}, {money(row.get('epochs90_cost'), currency, 0)}"


def prepared(rows: Iterable[dict[str, Any]], currency: str) -> list[dict[str, Any]]:
    """The rows, each with its :class:`RowText` under :data:`TEXT`."""
    return [{**row, TEXT: row_text(row, currency)} for row in rows]


def with_cells(rows: Iterable[dict[str, Any]], cells: Callable[[dict[str, Any]], list[Any]]
               ) -> list[dict[str, Any]]:
    """The rows, each with its table cells (``cells(row)``) under :data:`CELLS`."""
    return [{**row, CELLS: cells(row)} for row in rows]


def regression_cells(row: dict[str, Any]) -> list[Any]:
    """A regressions row as the page's table lists it (page_regressions.REGRESSION_COLUMNS)."""
    return [machine_label(row), row["mode"], row["network"], row["dtype"], row["batch_size"], devices(row),
            methodology(row), num(row["images_per_sec"]), num(row["history_median"]), num(row["noise"]),
            num(row["floor"]), pct(row["change"]), _regression_verdict(row), date_text(row["result_date"])]


def _regression_verdict(row: dict[str, Any]) -> str:
    if row["verdict"] == "significant_below_floor":
        return f"significant, below floor (p {row['p_value']:.3g})"
    return row["verdict"] if row["status"] == "ok" else f"{row['verdict']} ({row['status']})"


def stack_change_cells(row: dict[str, Any]) -> list[Any]:
    """A series whose software stack changed: [its machine, what changed]."""
    if row["build_changed"]:
        return [machine_label(row), f"framework build changed on {row['worker_runtime']}"]
    return [machine_label(row), f"worker runtime {row['previous_runtime']} → {row['worker_runtime']}"]


#: (column suffix, label) of the phases whose money the campaign table splits, in the order they happen.
PHASES = (
    ("provision", "provision"), ("deploy", "deploy"), ("setup", "setup"), ("warmup", "warm-up"),
    ("timed", "timed"), ("sweep_other", "other sweep"), ("reclaim", "reclaims"), ("teardown", "teardown"),
    ("idle", "idle"),
)


def campaign_cells(row: dict[str, Any]) -> list[Any]:
    """A campaign row (one target run) as the page's table lists it (page_campaign.HEADERS)."""
    return [
        row["target"] + ("" if row["torn_down"] else " (not torn down)"),
        date_text(row["night"]),
        f"{row['kind']}: {row['provider']} {row['instance_type']}",
        row["configurations"],
        _reclaims(row),
        duration(row["billed_seconds"]),
        duration(row["timed_seconds"]),
        "–" if row["timed_share"] is None else f"{row['timed_share'] * 100:.1f} %",
        "–" if row["overhead_ratio"] is None else f"{row['overhead_ratio']:,.1f}",
        money(row["billed_cost"], row["currency"] or "", 2) if row["currency"] else "–",
        _where_the_money_went(row),
    ]


def _reclaims(row: dict[str, Any]) -> str:
    """'1 · €0.42' (machines lost mid-sweep and what they cost: their time when unpriced), '–'."""
    if not row["reclaims"]:
        return "–"
    cost = (money(row["reclaim_cost"], row["currency"], 2) if row["currency"]
            else duration(row["reclaim_seconds"]))
    return f"{row['reclaims']} · {cost}"


def campaign_reclaims_line(rows: Iterable[dict[str, Any]]) -> str:
    """Above the campaign table, when any run listed lost machines mid-sweep: '2 spot reclaims cost
    €0.84 of €12.30 billed' (over the priced runs; their time when none is priced); else ''."""
    rows = list(rows)
    count = sum(row["reclaims"] or 0 for row in rows)
    if not count:
        return ""
    lost = f"{count} spot reclaim{'s' if count > 1 else ''}"
    priced = [row for row in rows if row["currency"]]
    if not priced:
        return (f"{lost} cost {duration(sum(row['reclaim_seconds'] or 0.0 for row in rows))} of "
                f"{duration(sum(row['billed_seconds'] or 0.0 for row in rows))} billed")
    currency = priced[0]["currency"]
    spent = sum(row["reclaim_cost"] or 0.0 for row in priced)
    billed = sum(row["billed_cost"] or 0.0 for row in priced)
    return f"{lost} cost {money(spent, currency, 2)} of {money(billed, currency, 2)} billed"


def _where_the_money_went(row: dict[str, Any]) -> str:
    """The phases that cost something, largest first: 'setup €1.20 · timed €0.30 · …'."""
    if row["price_per_hour"] is None:
        return f"no price ({row['price_source']})"
    parts = [(row[f"{key}_cost"] or 0.0, label) for key, label in PHASES]
    return " · ".join(f"{label} {money(cost, row['currency'], 2)}"
                      for cost, label in sorted(parts, reverse=True) if cost > 0.005) or "–"


def _written_once(write: Callable[[dict[str, Any]], Any]) -> Any:
    """A :class:`ChartText` attribute: ``write(row)``, computed on first read and kept."""
    return functools.cached_property(lambda text: write(text._row))


class ChartText:
    """A throughput or scaling row's words and figures as its chart and table write them, each
    written when first read: a chart draws a few of the rows it is given (the fastest machines,
    one series per machine), and the others are never written. ``hardware``: provider, instance
    type and GPU model, whatever the region or market; ``when``: 'measured 2026-11-30' /
    'published 2017'; ``figure``: the long provenance; ``method``; ``published``; ``values``:
    column → its figure as the table writes it."""

    def __init__(self, row: dict[str, Any], columns: tuple[str, ...]) -> None:
        self._row, self._columns = row, columns

    hardware = _written_once(hardware_label)
    when = _written_once(when)
    figure = _written_once(provenance)
    method = _written_once(methodology)
    published = _written_once(is_published)

    @functools.cached_property
    def values(self) -> dict[str, str]:
        return {c: num(self._row.get(c)) for c in self._columns}


def chart_rows(rows: list[dict[str, Any]], columns: Iterable[str]) -> list[dict[str, Any]]:
    """The rows (fresh dicts, e.g. ``to_pylist``'s: they are given their text in place), each
    with its :class:`ChartText` (the figures of ``columns``) under :data:`TEXT`."""
    columns = tuple(columns)
    for row in rows:
        row[TEXT] = ChartText(row, columns)
    return rows


def suspicious_cells(row: dict[str, Any]) -> list[Any]:
    """A published value flagged as suspicious as the flags table lists it
    (page_throughput.SUSPICIOUS_HEADERS)."""
    return [machine_label(row), row["mode"], row["network"], row["batch_size"], devices(row),
            num(row["images_per_sec"]), ", ".join(row_flags(row)), provenance(row)]


def gpus_only(row: dict[str, Any]) -> bool:
    """The catalog priced the GPUs alone (GCP): the host VM is billed on top, the cost is a lower bound."""
    return row.get("price_covers") == "gpus_only"


def projection_money(row: dict[str, Any], column: str, currency: str, digits: int = 3) -> str:
    """A projection's money, '≥ ' before a price of the GPUs alone (a lower bound)."""
    return ("≥ " if gpus_only(row) else "") + money(row[column], currency, digits)


#: A projections row's mark when it is the measured machine at its catalog price.
MEASURED_MARK = "★ measured machine"


def projection_cells(row: dict[str, Any], currency: str) -> list[Any]:
    """A projections row as the section's table lists it (page_projections.HEADERS; the 90 epochs
    cell on a training row only)."""
    per_node = row["gpu_count"] // max(row["num_nodes"] or 1, 1)
    nodes = f" on {row['num_nodes']} instances" if (row["num_nodes"] or 1) > 1 else ""
    epochs90 = ([f"{duration(row['epochs90_seconds'])}, "
                 f"{projection_money(row, 'epochs90_cost', currency, 0)}"] if row["mode"] == "train" else [])
    return [
        f"{row['provider']} {row['instance_type']}" + (" ★" if row["measured_machine"] else ""),
        f"{row['gpu_model']} × {per_node}{nodes}",
        row["region"] or "any",
        "spot" if row["market"] == "spot" else "on-demand",
        f"{row['images_per_sec']:,.2f}",
        row["batch_size"],
        projection_money(row, "price_per_hour", currency, 2),
        projection_money(row, "cost_per_million", currency),
        *epochs90,
        _projection_note(row),
        date_text(row["price_effective_from"]),
    ]


def _projection_note(row: dict[str, Any]) -> str:
    extra = "; GPUs only, host VM extra" if gpus_only(row) else ""
    if row["measured_machine"]:
        return MEASURED_MARK + extra
    return (f"projected from {row['measured_provider']} {row['measured_instance_type']}, "
            f"measured {date_text(row['result_date'])}{extra}")
