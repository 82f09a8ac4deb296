"""The page's cost section: cost per million images per network (bars), the best buy per network
and mode, and the results without a price. Renders strings from best_value / cost_per_million rows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gpucompare.reports.formatting import (
    CURRENCY_SIGN,
    MAX_BARS,
    Colours,
    _date,
    _flags,
    _is_published,
    _slug,
    devices,
    duration,
    machine_label,
    machine_name,
    methodology,
    money,
    provenance,
    titled,
    when,
)
from gpucompare.reports.page_parts import (
    Figure,
    by_methodology,
    html_table,
    num,
)
from gpucompare.reports.report_set import ReportSet
from gpucompare.reports.svg import Bar, bar_chart


def _not_ranked_text(row: dict[str, Any], report_set: ReportSet) -> str:
    reason = row.get("not_ranked_reason")
    if reason == "flagged":
        return "not ranked: flagged (" + ", ".join(_flags(row)) + ")"
    if reason == "old_published":
        return f"not ranked: published over {report_set.options.published_max_age_years} years ago"
    return ""


def cost_figures(
    best_value: list[dict[str, Any]], mode: str, report_set: ReportSet, colours: Colours
) -> list[Figure]:
    """Bars per network and methodology: the cheapest ranked machines (cost per million
    images), and a few shown-but-not-ranked ones (old published, flagged) for comparison. Each
    methodology is a chart and a ranking of its own (best_value ranks them apart)."""
    currency = report_set.currency
    by_network: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for method, rows in by_methodology(r for r in best_value if r["mode"] == mode).items():
        for row in rows:
            by_network[(row["network"], method)].append(row)
    figures = []
    for network, method in sorted(by_network, key=lambda k: (k[0], k[1] != "official", k[1])):
        group = by_network[(network, method)]
        rows = _cheapest_with_unranked(group)
        bars = [
            Bar(
                machine_name(r),
                r["cost_per_million"],
                colours(r),
                money(r["cost_per_million"], currency),
                published=_is_published(r),
                note=f"{when(r)} · price of {_date(r['price_effective_from'])}"
                + ("" if r["ranked"] else " · not ranked"),
            )
            for r in rows
        ]
        chart_id = _slug("cost", mode, network, *([] if method == "official" else [method]))
        title = titled(f"{network}, {mode}: cost per million images", method)
        ranked = [r for r in group if r["ranked"]]
        figures.append(
            Figure(
                chart_id,
                title,
                bar_chart(
                    chart_id, bars, f"{CURRENCY_SIGN.get(currency, currency)} per million images", title=title
                ),
                _cost_summary(ranked, group, report_set),
                html_table(
                    [
                        "machine",
                        "rank",
                        "devices",
                        "batch",
                        "images/s",
                        "per hour",
                        "per million",
                        "figure",
                        "price date",
                        "ranking",
                    ],
                    (
                        [
                            machine_label(r),
                            r["rank"] if r["rank"] is not None else "–",
                            devices(r),
                            r["batch_size"],
                            num(r["images_per_sec"]),
                            money(r["price_per_hour"], currency, 2),
                            money(r["cost_per_million"], currency),
                            provenance(r),
                            _date(r["price_effective_from"]),
                            _not_ranked_text(r, report_set) or "ranked",
                        ]
                        for r in sorted(group, key=lambda r: r["cost_per_million"])
                    ),
                    [False, True, False, True, True, True, True, False, False, False],
                    caption=f"{title}, every priced machine ({currency})",
                ),
            )
        )
    return figures


def _cost_summary(ranked: list[dict[str, Any]], rows: list[dict[str, Any]], report_set: ReportSet) -> str:
    currency = report_set.currency
    unranked = [r for r in rows if not r["ranked"]]
    text = ""
    if ranked:
        best = min(ranked, key=lambda r: r["cost_per_million"])
        text = (
            f"Best buy: {machine_label(best)}, {devices(best)}, batch {best['batch_size']}: "
            f"{money(best['cost_per_million'], currency)} per million images ({provenance(best)}; "
            f"price of {_date(best['price_effective_from'])}). "
        )
    else:
        text = "No machine ranked: every priced figure here is flagged or an old published one. "
    measured = sum(1 for r in rows if not _is_published(r))
    published_years = sorted({r["result_date"].year for r in rows if _is_published(r) and r["result_date"]})
    text += f"{len(ranked)} machine(s) ranked, {measured} measured, {len(rows) - measured} published"
    if published_years:
        text += " (" + ", ".join(str(y) for y in published_years) + ")"
    if unranked:
        text += f"; {len(unranked)} shown but not ranked"
    return text + "."


def _cheapest_with_unranked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cheapest ranked machines, and up to two cheaper-looking unranked ones for context."""
    ranked = sorted((r for r in rows if r["ranked"]), key=lambda r: r["cost_per_million"])
    others = sorted((r for r in rows if not r["ranked"]), key=lambda r: r["cost_per_million"])[:2]
    chosen = ranked[: MAX_BARS - len(others)] + others
    return sorted(chosen, key=lambda r: r["cost_per_million"])


def best_table(rows: list[dict[str, Any]], currency: str) -> str:
    return html_table(
        [
            "network",
            "mode",
            "methodology",
            "best buy",
            "devices",
            "batch",
            "images/s",
            "per hour",
            "per million",
            "time per million",
            "90 ImageNet epochs",
            "figure",
            "price date",
            "Pareto machines",
        ],
        (
            [
                r["network"],
                r["mode"],
                methodology(r),
                machine_label(r),
                devices(r),
                r["batch_size"],
                num(r["images_per_sec"]),
                money(r["price_per_hour"], currency, 2),
                money(r["cost_per_million"], currency),
                duration(1e6 / r["images_per_sec"]),
                _epochs90(r, currency),
                provenance(r),
                _date(r["price_effective_from"]),
                r["pareto"],
            ]
            for r in rows
        ),
        [False, False, False, False, False, True, True, True, True, True, True, False, False, False],
        caption=f"Best buy per network, mode and methodology (ranked rows only, {currency})",
        reflow=True,
    )


def best_per_network(best_value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rank-1 row of each network, mode and methodology (each ranked on its own), with the
    names of its Pareto partners (of the same methodology)."""
    front: dict[tuple, list[str]] = defaultdict(list)
    firsts = {}
    for row in best_value:
        key = (row["mode"], row["network"], methodology(row) != "official", methodology(row))
        if row["on_pareto_front"]:
            front[key].append(
                machine_name({"provider": row["provider"], "instance_type": row["instance_type"]})
            )
        if row["rank"] == 1 and key not in firsts:
            firsts[key] = row
    return [dict(firsts[key], pareto=_short_list(sorted(set(front[key])))) for key in sorted(firsts)]


def _short_list(names: list[str], limit: int = 4) -> str:
    """'a, b, c, d +3 more': a list that fits a table cell."""
    shown = ", ".join(names[:limit])
    return f"{shown} +{len(names) - limit} more" if len(names) > limit else shown


def _epochs90(row: dict[str, Any], currency: str) -> str:
    """Training rows: how long and how much 90 epochs of ImageNet take (the unit users plan in)."""
    if row.get("epochs90_hours") is None:
        return "–"
    return f"{duration(row['epochs90_hours'] * 3600)}, {money(row['epochs90_cost'], currency, 0)}"


def missing_table(rows: list[dict[str, Any]]) -> str:
    return html_table(
        ["machine", "mode", "network", "batch", "devices", "images/s", "why", "figure"],
        (
            [
                machine_label(r),
                r["mode"],
                r["network"],
                r["batch_size"],
                devices(r),
                num(r["images_per_sec"]),
                "no price" if r["price_source"] == "missing" else "no exchange rate",
                provenance(r),
            ]
            for r in rows
        ),
        [False, False, False, True, False, True, False, False],
        caption="Results without a price",
        reflow=True,
    )
