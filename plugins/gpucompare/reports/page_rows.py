"""The view builder's rows: each best_value row (and each row of cost_per_million without a
price) with its figures written as text once (:class:`RowText`, under the row's ``"text"`` key),
before any section is drawn. The cost section, the first screen's answers and the tables read
the text; only this module calls the formatting helpers for them, so a figure is written one way
wherever it appears (``€0.115 (0.110–0.121)`` in the table, the bar and the answer alike).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpucompare.reports.formatting import (
    date_text,
    devices,
    duration,
    is_published,
    machine_label,
    machine_name,
    methodology,
    money,
    price_label,
    provenance,
    time_per_million,
    when,
)
from gpucompare.reports.page_parts import energy, finite, num, with_interval

#: The key of a prepared row's :class:`RowText`.
TEXT = "text"


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
