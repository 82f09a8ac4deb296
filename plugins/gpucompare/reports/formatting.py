"""How the page writes figures, machines and dates (durations, money, labels, colours):
pure functions over one report row, returning plain text (the templates escape it).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

from gpucompare.config.models.prices import DECLARED

#: Bars per network in the cost chart, lines per panel in the throughput and scaling charts.
MAX_BARS = 8
MAX_LINES = 7
#: One colour per machine across the page (assigned in page order; repeats only beyond 12
#: machines, where the label and the pattern still tell them apart).
PALETTE = (
    "#1f5fa8",
    "#d35400",
    "#2e8b57",
    "#b03a6f",
    "#7d3c98",
    "#8c564b",
    "#16a085",
    "#c0392b",
    "#34495e",
    "#9a7d0a",
    "#2874a6",
    "#6c3483",
)
#: Published speedup curves (white papers) are not machines: their own muted colours.
CURVE_COLOURS = ("#6c757d", "#a0522d", "#8e6c8a")
IDEAL_COLOUR = "#8a939c"
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


def time_per_million(images_per_sec: float | None) -> str:
    """How long a million images take at ``images_per_sec`` ('–' for 0, negative or not finite)."""
    if images_per_sec is None or not math.isfinite(images_per_sec) or images_per_sec <= 0:
        return "–"
    return duration(1e6 / images_per_sec)


def money(value: float | None, currency: str, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{CURRENCY_SIGN.get(currency, currency + ' ')}{value:,.{digits}f}"


def machine_name(row: dict[str, Any]) -> str:
    """Provider and instance type, then region and market when they tell machines apart."""
    provider = row.get("provider")
    name = str(row.get("instance_type") or "?")
    parts = [f"{provider} {name}" if provider else name]
    if row.get("region"):
        parts.append(str(row["region"]))
    if row.get("market") == "spot":
        parts.append("spot")
    return " · ".join(parts)


def _device(row: dict[str, Any]) -> str | None:
    """The processor: the GPU model, or CPU for a CPU run."""
    if row.get("device_kind") == "cpu":
        return "CPU"
    return row.get("gpu_model")


def machine_label(row: dict[str, Any], *, with_gpu: bool = True) -> str:
    """Machine name with its GPU model (or CPU), and the worker runtime that measured it when the
    report says (``worker_runtime``)."""
    device = _device(row) if with_gpu else None
    name = machine_name(row)
    label = f"{name} ({device})" if device else name
    runtime = row.get("worker_runtime")
    return f"{label} · runtime {runtime}" if runtime else label


def price_label(row: dict[str, Any]) -> str:
    """The price's date, and for a price the user declared: 'declared: <note>'."""
    date = date_text(row.get("price_effective_from"))
    if row.get("price_source") == "declared":
        # the note starts with "declared: " itself (config.models.prices.DECLARED): said once, not twice
        note = str(row.get("price_note") or "").removeprefix(f"{DECLARED}: ")
        return f"{date}, declared" + (f": {note}" if note else "")
    return date


def hardware_label(row: dict[str, Any]) -> str:
    """Provider, instance type and GPU model (or CPU): the hardware, whatever the region or market."""
    provider = row.get("provider")
    name = str(row.get("instance_type") or "?")
    name = f"{provider} {name}" if provider else name
    device = _device(row)
    return f"{name} ({device})" if device else name


def devices(row: dict[str, Any]) -> str:
    """What ran the figure: '1 GPU', '4 GPUs', '8 GPUs on 2 nodes', 'CPU' (never 'GPUs 1' for a CPU)."""
    nodes = row.get("num_nodes") or 1
    on_nodes = f" on {nodes} nodes" if nodes > 1 else ""
    if row.get("device_kind") == "cpu":
        return "CPU" + on_nodes
    count = row.get("gpu_count")
    if count is None:
        return "–"
    return f"{count} GPU{'s' if count != 1 else ''}{on_nodes}"


def is_published(row: dict[str, Any]) -> bool:
    """A published figure (an article's table or curve), not one we measured."""
    return row.get("origin") in ("published", "published_curve") or row.get("target") == "published"


def date_text(value: Any) -> str:
    """A date as YYYY-MM-DD, a missing one as '–'."""
    return value.isoformat() if isinstance(value, dt.date) else ("–" if value is None else str(value))


def when(row: dict[str, Any]) -> str:
    """Short provenance for a chart label: 'measured 2026-11-30' or 'published 2017'."""
    date = row.get("result_date")
    if is_published(row):
        return f"published {date.year}" if isinstance(date, dt.date) else "published"
    return f"measured {date_text(date)}"


def methodology(row: dict[str, Any]) -> str:
    """How the figure was timed (official | robust | custom); a row without one is official."""
    return str(row.get("methodology") or "official")


def titled(title: str, method: str) -> str:
    """A chart or table title that names the one methodology of its figures."""
    return f"{title} ({method} methodology)"


def provenance(row: dict[str, Any]) -> str:
    """Long provenance for tables: where and when the figure was measured, or which publication,
    and its methodology."""
    date = date_text(row.get("result_date"))
    if is_published(row):
        return f"published {date}: {row.get('result_source') or '?'} ({methodology(row)})"
    return f"measured {date} on {row.get('target') or '?'} ({methodology(row)})"


def slug(*parts: Any) -> str:
    """An HTML id from the parts: lower-case letters and digits joined by '-'."""
    return re.sub(r"[^a-z0-9]+", "-", "-".join(str(p) for p in parts).lower()).strip("-")


def row_flags(row: dict[str, Any]) -> list[str]:
    """The row's flags as a list (none: empty)."""
    return list(row.get("flags") or [])


class Colours:
    """One colour per machine (provider, instance type) for the whole page."""

    def __init__(self) -> None:
        self.assigned: dict[tuple[Any, Any], str] = {}

    def __call__(self, row: dict[str, Any]) -> str:
        key = (row.get("provider"), row.get("instance_type"))
        if key not in self.assigned:
            self.assigned[key] = PALETTE[len(self.assigned) % len(PALETTE)]
        return self.assigned[key]


