"""``gpucompare rank``: the best_value ranking as a terminal table or JSON, the answer in one screen.

One block per network, mode and methodology: each machine with its cost per million images and the
95 % interval, the verdict against the cheapest (``best``, ``dearer``, ``equivalent``, ``undetermined``
and what would settle it), the age of the measurement and of the price, and the price's source. Rows
that are shown but not ranked (old published figures, flagged ones) come after the ranked ones with
the reason. Columns a best_value of an older gpucompare lacks (``verdict``, ``interval_covers``,
``interval_reason``, ``settle_with``) are left out, not invented.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

#: The fields of one JSON row, in order (those absent from the report are left out).
JSON_FIELDS = (
    "network", "mode", "methodology", "rank", "ranked", "not_ranked_reason", "verdict", "provider",
    "instance_type", "region", "market", "gpu_model", "gpu_count", "batch_size", "cost_per_million",
    "cost_per_million_low", "cost_per_million_high", "currency", "interval_covers", "interval_reason",
    "settle_with", "measured_at", "price_effective_from", "price_source", "price_note", "origin",
)
#: The widest a cell may be before it is cut with an ellipsis (the price source can be long).
MAX_CELL = 44


def rank_rows(best_value: list[dict[str, Any]], *, network: str | None = None,
              mode: str | None = None) -> list[dict[str, Any]]:
    """The rows of best_value for ``network`` and ``mode`` (None: all), ranked ones first in rank order
    within each network, mode and methodology, then the unranked by cost."""
    kept = [r for r in best_value if (network is None or r["network"] == network)
            and (mode is None or r["mode"] == mode)]
    return sorted(kept, key=lambda r: (r["network"], r["mode"], r.get("methodology") or "",
                                       not r.get("ranked"), r.get("rank") or 0,
                                       _cost_key(r.get("cost_per_million"))))


def _cost_key(value: Any) -> float:
    return value if isinstance(value, int | float) and math.isfinite(value) else math.inf


def json_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as JSON-ready dicts (dates as ISO text), with the fields the report has."""
    return [{name: _jsonable(row[name]) for name in JSON_FIELDS if name in row} for row in rows]


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def age_text(when: Any, today: dt.date) -> str:
    """'today', '3 d', '5 mo', '8 y': how old a measurement or a price is."""
    if when is None:
        return "–"
    day = when.date() if isinstance(when, dt.datetime) else when
    days = (today - day).days
    if days <= 0:
        return "today"
    if days < 60:
        return f"{days} d"
    if days < 730:
        return f"{days // 30} mo"
    return f"{days // 365} y"


def money_text(value: Any) -> str:
    if not isinstance(value, int | float) or not math.isfinite(value):
        return "–"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:,.2f}"


def cost_text(row: dict[str, Any]) -> str:
    """'0.0123 [0.011–0.014]' (the 95 % interval in brackets when there is one)."""
    text = money_text(row.get("cost_per_million"))
    low, high = row.get("cost_per_million_low"), row.get("cost_per_million_high")
    if low is not None and high is not None:
        text += f" [{money_text(low)}–{money_text(high)}]"
    return text


def verdict_text(row: dict[str, Any]) -> str:
    """The verdict (with what would settle an undetermined one), or why the row is not ranked."""
    if not row.get("ranked"):
        return f"not ranked: {str(row.get('not_ranked_reason') or '?').replace('_', ' ')}"
    verdict = row.get("verdict")
    if verdict is None:
        return f"rank {row.get('rank')}" if row.get("rank") is not None else "ranked"
    settle = row.get("settle_with")
    return f"{verdict} ({settle})" if verdict == "undetermined" and settle else str(verdict)


def machine_text(row: dict[str, Any]) -> str:
    device = row.get("gpu_model") or "CPU"
    count = row.get("gpu_count")
    device = f"{count}× {device}" if count and count > 1 else device
    return f"{row.get('provider')} {row.get('instance_type')} ({device})"


def source_text(row: dict[str, Any]) -> str:
    source = str(row.get("price_source") or "–")
    note = row.get("price_note")
    return f"{note}" if source == "declared" and note else source


def clip(text: str, limit: int = MAX_CELL) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table_lines(rows: list[dict[str, Any]], *, today: dt.date) -> list[str]:
    """The table, one block per network, mode and methodology; an empty ranking says so."""
    if not rows:
        return ["no priced result in the lake for this selection (gpucompare lake-info shows what it holds)"]
    header = ("machine", "cost/1M imgs [95 %]", "verdict", "measured", "price", "price source")
    lines: list[str] = []
    blocks: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        blocks.setdefault((row["network"], row["mode"], row.get("methodology") or "official"), []).append(row)
    for (network, mode, method), block in blocks.items():
        currency = block[0].get("currency") or ""
        cells = [[clip(machine_text(r)), cost_text(r), clip(verdict_text(r), 36),
                  age_text(r.get("measured_at"), today), age_text(r.get("price_effective_from"), today),
                  clip(source_text(r))] for r in block]
        widths = [max(len(c[i]) for c in [list(header), *cells]) for i in range(len(header))]
        ranked = sum(1 for r in block if r.get("ranked"))
        lines.append(f"{network} · {mode} · {method} methodology · {currency} per million images · "
                     f"{ranked} ranked of {len(block)}")
        for cell_row in [list(header), *cells]:
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(cell_row, widths, strict=True)).rstrip())
        lines.append("")
    return lines[:-1]
