"""The page's cost section: cost per million images per network (bars), the best buy per network
and mode with the ranking's verdicts against the best, and the results without a price (the user's
own apart from the published figures). Prepares the data the section templates draw, from best_value /
cost_per_million rows already written as text (:mod:`gpucompare.reports.page_rows`): it picks,
groups and orders them; it formats nothing.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gpucompare.reports.charts import Bar, bar_chart
from gpucompare.reports.formatting import CURRENCY_SIGN, MAX_BARS, Colours, row_flags, slug, titled
from gpucompare.reports.page_parts import (
    ENERGY_HEADER,
    Figure,
    Table,
    by_methodology,
    data_table,
    finite,
    has_energy,
    interval,
)
from gpucompare.reports.page_rows import TEXT, verdict_lines
from gpucompare.reports.report_set import ReportSet

#: Rows of a cost table on the page: the cheapest priced machines of the network, mode and
#: methodology (and every machine drawn as a bar); best_value.csv / .parquet hold every one.
COST_TABLE_ROWS = 15


def _not_ranked_text(row: dict[str, Any], report_set: ReportSet) -> str:
    reason = row.get("not_ranked_reason")
    if reason == "flagged":
        return "not ranked: flagged (" + ", ".join(row_flags(row)) + ")"
    if reason == "old_published":
        return f"not ranked: published over {report_set.options.published_max_age_years} years ago"
    return ""


def batch_text(rows: list[dict[str, Any]]) -> str:
    """'batch 32' when every figure has one batch size, else 'batch 16–64' (each machine at its best)."""
    sizes = sorted({int(r["batch_size"]) for r in rows if r.get("batch_size") is not None})
    if not sizes:
        return "batch –"
    return f"batch {sizes[0]}" if len(sizes) == 1 else f"batch {sizes[0]}–{sizes[-1]}"


def _bar(row: dict[str, Any], colours: Colours, several_batches: bool) -> Bar:
    low, high = interval(row, "cost_per_million")
    batch = f" · b{row['batch_size']}" if several_batches else ""
    text = row[TEXT]
    return Bar(
        text.machine + batch,
        row["cost_per_million"],
        colours(row),
        text.cost,
        published=text.published,
        note=f"{text.when} · price of {text.price}" + ("" if row["ranked"] else " · not ranked"),
        low=low,
        high=high,
    )


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
        drawn = _cheapest_with_unranked(group)
        several = len({r["batch_size"] for r in drawn}) > 1
        chart_id = slug("cost", mode, network, *([] if method == "official" else [method]))
        title = titled(f"{network}, {mode}, {batch_text(drawn)}: cost per million images", method)
        chart = bar_chart(chart_id, [_bar(r, colours, several) for r in drawn],
                          f"{CURRENCY_SIGN.get(currency, currency)} per million images", title=title)
        figures.append(Figure(chart_id, title, chart, _cost_summary(drawn, group, report_set),
                              _cost_table(group, drawn, title, report_set)))
    return figures


def _cost_table(group: list[dict[str, Any]], drawn: list[dict[str, Any]], title: str,
                report_set: ReportSet) -> Table:
    """The ``COST_TABLE_ROWS`` cheapest priced machines and every one drawn, cheapest first; the
    caption says how many more the best_value files hold."""
    currency = report_set.currency
    ordered = sorted(group, key=_by_cost)
    drawn_ids = {id(r) for r in drawn}
    shown = [r for i, r in enumerate(ordered) if i < COST_TABLE_ROWS or id(r) in drawn_ids]
    with_energy = has_energy(group)
    headers = ["machine", "rank", "devices", "batch", "images/s", "per hour", "per million", "figure",
               "price", "ranking", *([ENERGY_HEADER] if with_energy else [])]
    numeric = [False, True, False, True, True, True, True, False, False, False]
    numeric += [False] if with_energy else []
    rows = [
        [
            t.label,
            r["rank"] if r["rank"] is not None else "–",
            t.devices,
            r["batch_size"],
            t.images_per_sec,
            t.per_hour,
            t.cost_with_interval,
            t.figure,
            t.price,
            _not_ranked_text(r, report_set) or "ranked",
            *([t.energy] if with_energy else []),
        ]
        for r in shown
        for t in (r[TEXT],)
    ]
    more = len(group) - len(shown)
    which = (f"the {len(shown)} cheapest of {len(group)} priced machines, every one in best_value.csv"
             if more else "every priced machine")
    return data_table(headers, rows, numeric, caption=f"{title}, {which} ({currency})")


def _by_cost(row: dict[str, Any]) -> tuple:
    value = row["cost_per_million"]
    return (not finite(value), value if finite(value) else 0.0)


def _cost_summary(drawn: list[dict[str, Any]], rows: list[dict[str, Any]], report_set: ReportSet) -> str:
    """What the chart draws, in words: the best buy, then the counts of the bars themselves."""
    ranked = [r for r in rows if r["ranked"] and finite(r["cost_per_million"])]
    if ranked:
        best = min(ranked, key=_by_cost)
        t = best[TEXT]
        text = (
            f"Best buy: {t.label}, {t.devices}, batch {best['batch_size']}: "
            f"{t.cost} per million images ({t.figure}; price of {t.price}). "
        )
    else:
        text = "No machine ranked: every priced figure here is flagged or an old published one. "
    drawn_ranked = sum(1 for r in drawn if r["ranked"])
    drawn_published = sum(1 for r in drawn if r[TEXT].published)
    text += (f"{len(drawn)} bar(s) drawn of {len(rows)} priced figure(s): {drawn_ranked} ranked, "
             f"{len(drawn) - drawn_ranked} not ranked (drawn for comparison); "
             f"{len(drawn) - drawn_published} measured, {drawn_published} published")
    years = sorted({r["result_date"].year for r in drawn if r[TEXT].published and r["result_date"]})
    if years:
        text += " (" + ", ".join(str(y) for y in years) + ")"
    ties = verdict_lines(ranked)
    return text + "." + "".join(f" {t}." for t in ties)


def _cheapest_with_unranked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cheapest ranked machines, and up to two cheaper-looking unranked ones for context."""
    ranked = sorted((r for r in rows if r["ranked"]), key=_by_cost)
    others = sorted((r for r in rows if not r["ranked"]), key=_by_cost)[:2]
    chosen = ranked[: MAX_BARS - len(others)] + others
    return sorted(chosen, key=_by_cost)


def best_table(rows: list[dict[str, Any]], currency: str) -> Table:
    with_energy = has_energy(rows)
    headers = ["network", "mode", "methodology", "best buy", "devices", "batch", "images/s", "per hour",
               "per million", "time per million", "90 ImageNet epochs", "figure", "price", "verdicts",
               "Pareto machines", *([ENERGY_HEADER] if with_energy else [])]
    numeric = [False, False, False, False, False, True, True, True, True, True, True, False, False, False,
               False, *([False] if with_energy else [])]
    body = [
        [
            r["network"],
            r["mode"],
            t.method,
            t.label,
            t.devices,
            r["batch_size"],
            t.images_per_sec,
            t.per_hour,
            t.cost_with_interval,
            t.time_per_million,
            t.epochs90,
            t.figure,
            t.price,
            r["ties"] or "–",
            r["pareto"],
            *([t.energy] if with_energy else []),
        ]
        for r in rows
        for t in (r[TEXT],)
    ]
    return data_table(headers, body, numeric,
                      caption=f"Best buy per network, mode and methodology (ranked rows only, {currency})",
                      reflow=True)


def best_per_network(best_value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rank-1 row of each network, mode and methodology (each ranked on its own), with the
    names of its Pareto partners (of the same methodology) and the verdicts of its ranking."""
    front: dict[tuple, list[str]] = defaultdict(list)
    members: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    firsts = {}
    for row in best_value:
        method = str(row.get("methodology") or "official")
        key = (row["mode"], row["network"], method != "official", method)
        members[key].append(row)
        if row["on_pareto_front"]:
            front[key].append(f"{row['provider']} {row['instance_type']}" if row["provider"]
                              else str(row["instance_type"] or "?"))
        if row["rank"] == 1 and key not in firsts:
            firsts[key] = row
    return [
        dict(firsts[key], pareto=_short_list(sorted(set(front[key]))),
             ties="; ".join(verdict_lines([r for r in members[key] if r["ranked"]])))
        for key in sorted(firsts)
    ]


def _short_list(names: list[str], limit: int = 4) -> str:
    """'a, b, c, d +3 more': a list that fits a table cell."""
    shown = ", ".join(names[:limit])
    return f"{shown} +{len(names) - limit} more" if len(names) > limit else shown


def missing_tables(rows: list[dict[str, Any]]) -> tuple[Table, Table]:
    """The results without a price: the user's own measurements, and the published figures (which
    the page collapses with their count)."""
    headers = ["machine", "mode", "network", "batch", "devices", "images/s", "why", "figure"]
    numeric = [False, False, False, True, False, True, False, False]

    def body(chosen: list[dict[str, Any]]) -> list[list[Any]]:
        return [
            [r[TEXT].label, r["mode"], r["network"], r["batch_size"], r[TEXT].devices, r[TEXT].images_per_sec,
             "no price" if r["price_source"] == "missing" else "no exchange rate", r[TEXT].figure]
            for r in chosen
        ]

    own = [r for r in rows if not r[TEXT].published]
    published = [r for r in rows if r[TEXT].published]
    return (
        data_table(headers, body(own), numeric, caption=f"Your results without a price: {len(own)}"),
        data_table(headers, body(published), numeric,
                   caption=f"Published figures without a price: {len(published)}"),
    )


def unpriced_machines(rows: list[dict[str, Any]]) -> list[str]:
    """The measured machines (not published ones) that have results but no price, by name."""
    return sorted({r[TEXT].label for r in rows if not r[TEXT].published})

