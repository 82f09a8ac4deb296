"""The page's first screen: per workload (network and mode), the best buy, its cost per million
with its interval (or why it has none), its verdict against the runner-up, and how old its figures
and price are, with the caveats that apply ("1 run", "device energy only (lower bound)").
Prepares the view objects the page template draws, from best_value rows already written as text
(:mod:`gpucompare.reports.page_rows`).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gpucompare.reports.formatting import methodology
from gpucompare.reports.page_parts import finite
from gpucompare.reports.page_rows import TEXT

#: Said wherever an energy or carbon figure is shown: what the worker measures (docs/worker.md).
DEVICE_ENERGY = "device energy only (lower bound): the GPU board or CPU package, not the whole host"


@dataclass(frozen=True)
class Answer:
    """One workload's answer, every field already text."""

    workload: str
    best: str
    cost: str
    interval: str
    runner_up: str
    age: str
    caveats: list[str] = field(default_factory=list)


def _age(row: dict[str, Any], today: dt.date) -> str:
    """'measured 2026-03-10 (3 days before this report) · price of 2026-03-01'."""
    date, text = row.get("result_date"), row[TEXT]
    if isinstance(date, dt.datetime):
        date = date.date()
    if not isinstance(date, dt.date):
        when = "measured on an unknown date"
    elif text.published:
        when = f"published {date.year} ({today.year - date.year} years old)"
    else:
        days = (today - date).days
        ago = ("the night of this report" if days <= 0
               else f"{days} day{'s' if days > 1 else ''} before this report")
        when = f"measured {date.isoformat()} ({ago})"
    return f"{when} · price of {text.price}"


def _interval(row: dict[str, Any]) -> tuple[str, list[str]]:
    """The cost interval and what it covers, or why there is none (and the caveat that says so)."""
    if row[TEXT].cost_interval is not None:
        covers = row.get("interval_covers") or "95 % interval"
        parts = row.get("interval_parts")
        text = f"95 %: {row[TEXT].cost_interval} ({covers}"
        return text + (f"; covers {parts})" if parts else ")"), []
    reason = row.get("interval_reason") or (
        "1 run: no interval" if row.get("samples") == 1 else "no interval")
    caveat = ["1 run: a single repeat, so no interval; the figure can be off by the run-to-run spread"] \
        if reason.startswith("1 run") else []
    return reason, caveat


def _runner_up(ranked: list[dict[str, Any]]) -> str:
    """The verdict of the second-cheapest ranked machine against the best."""
    if len(ranked) < 2:
        return "the only machine ranked for this workload"
    second = ranked[1][TEXT]
    return f"runner-up {second.machine}: {second.verdict or 'no verdict'}"


def answers(best_value: list[dict[str, Any]], today: dt.date) -> list[Answer]:
    """One answer per network and mode from its official ranking (or the only methodology it has)."""
    groups: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for row in best_value:
        if row["ranked"] and finite(row.get("cost_per_million")):
            groups[(row["network"], row["mode"])][methodology(row)].append(row)
    out = []
    for (network, mode), by_method in sorted(groups.items()):
        method = "official" if "official" in by_method else sorted(by_method)[0]
        ranked = sorted(by_method[method], key=lambda r: r["cost_per_million"])
        best = ranked[0]
        interval, caveats = _interval(best)
        if any(finite(r.get(k)) for r in ranked[:2] for k in ("kwh_per_million", "joules_per_image")):
            caveats.append(DEVICE_ENERGY)
        if best[TEXT].published:
            caveats.append("a published figure, not measured by gpucompare")
        out.append(Answer(
            workload=f"{network} · {mode}" + ("" if method == "official" else f" ({method})"),
            best=f"{best[TEXT].label}, {best[TEXT].devices}, batch {best['batch_size']}",
            cost=f"{best[TEXT].cost} per million images",
            interval=interval,
            runner_up=_runner_up(ranked),
            age=_age(best, today),
            caveats=caveats,
        ))
    return out
