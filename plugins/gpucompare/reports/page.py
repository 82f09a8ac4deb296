"""The human side of the reports: one self-contained ``index.html`` and a short ``summary.md``.

Rendering only: functions here take the built report tables (a
:class:`gpucompare.reports.report_set.ReportSet`) and return strings;
:mod:`gpucompare.reports.publish` writes them. This module is the page's skeleton (style,
headline cards, navigation, one section after another); each section is rendered by a module
of its own (``page_cost``, ``page_throughput``, ``page_scaling``, ``page_regressions``) from the
building blocks of ``page_parts``; ``summary.md`` is :mod:`gpucompare.reports.summary`. None of
them imports the builder (publish → page → page_* → svg → formatting → report_set).

The page needs no network to be viewed: its style sheet is inline and every chart is an
inline SVG written here directly (a few kilobytes and a millisecond or two each; text stays
text). What a reader can rely on, on every chart:

* a key of measured vs published figures drawn in the chart itself, and a second channel
  besides colour: measured bars are solid and published ones hatched; measured lines are
  solid with filled dots, published ones dashed with hollow squares; the ideal scaling line
  is dotted grey, distinct from both;
* one colour per machine (provider and instance type) across the whole page, and the
  provider with every machine name;
* the date of every figure (measured night or publication year) and, for money, the date of
  the price;
* a heading, a text summary, and the chart's numbers as a table (collapsed in ``<details>``)
  so no value needs a mouse hover; each section links its CSV and Parquet files.

Charts show a bounded selection (the cheapest, the fastest, the published machines) so the
page stays readable and quick to build on a lake of any size; the tables beside it hold
everything. The layout reflows down to a 390 px phone screen: charts scale to the width,
wide tables scroll inside their own box and the key tables turn into label/value lists.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow.compute as pc

from gpucompare.reports.formatting import (
    CURRENCY_SIGN,
    Colours,
    _date,
    _esc,
)
from gpucompare.reports.page_campaign import campaign_section
from gpucompare.reports.page_cost import best_per_network, best_table, cost_figures, missing_table
from gpucompare.reports.page_parts import (
    figures_html,
    flagged_rows,
    links,
    methodology_note,
    rows_of,
)
from gpucompare.reports.page_projections import where_else_section
from gpucompare.reports.page_regressions import regressions_table
from gpucompare.reports.page_scaling import scaling_figures
from gpucompare.reports.page_throughput import chartable_throughput, suspicious_published, throughput_figures
from gpucompare.reports.report_set import DERIVED, REPORTS, ReportSet

_CSS = """
:root { --ink: #1d2733; --muted: #5b6673; --line: #e3e6ea; --accent: #1f5fa8; --bg: #f6f7f9;
  --warn: #b3261e; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: var(--ink); background: var(--bg); overflow-wrap: anywhere; }
header { background: #14263b; color: #fff; padding: 22px 40px; }
header h1 { margin: 0; font-size: 22px; font-weight: 600; }
header p { margin: 4px 0 0; color: #c9d3de; }
nav { background: #fff; border-bottom: 1px solid var(--line); padding: 8px 40px; position: sticky; top: 0;
  display: flex; flex-wrap: wrap; gap: 4px 18px; z-index: 1; }
nav a, a { color: var(--accent); }
nav a { text-decoration: none; font-weight: 500; }
main { padding: 24px 40px; max-width: 1400px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 18px 22px;
  margin-bottom: 22px; min-width: 0; }
h2 { margin: 0 0 6px; font-size: 18px; }
h3 { font-size: 15px; margin: 4px 0 6px; }
p.note, p.files { color: var(--muted); margin: 0 0 12px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 160px), 1fr)); gap: 12px;
  margin-bottom: 22px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; }
.card b { display: block; font-size: 20px; }
.card span { color: var(--muted); }
.card.warn b { color: var(--warn); }
.card.published { border-style: dashed; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 520px), 1fr));
  gap: 10px 24px; }
figure.chart { margin: 8px 0 14px; min-width: 0; }
.plot svg { width: 100%; height: auto; display: block; }
p.summary { color: var(--ink); font-size: 13px; margin: 4px 0; }
details summary { cursor: pointer; color: var(--accent); font-size: 13px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
caption { text-align: left; color: var(--muted); font-size: 12px; padding: 4px 0; }
th, td { padding: 5px 8px; border-bottom: 1px solid var(--line); text-align: left; white-space: nowrap; }
thead th { background: #f0f2f5; font-weight: 600; }
tbody th { font-weight: 500; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.scroll { overflow: auto; max-width: 100%; max-height: 520px; }
.empty { color: var(--muted); font-style: italic; }
footer { color: var(--muted); padding: 0 40px 30px; font-size: 12px; }
@media (max-width: 640px) {
  header, nav, main, footer { padding-left: 12px; padding-right: 12px; }
  header h1 { font-size: 18px; }
  nav { position: static; }
  /* charts keep a legible scale and scroll inside their own box rather than shrink to 5 px text */
  .plot { overflow-x: auto; }
  .plot svg { min-width: 540px; }
  .card b { font-size: 17px; }
  section { padding: 12px; }
  /* key tables: each row becomes a short list of label: value lines (nothing hides sideways) */
  table.reflow thead { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
  table.reflow, table.reflow tbody, table.reflow tr, table.reflow th, table.reflow td { display: block; }
  table.reflow tr { border-bottom: 2px solid var(--line); padding: 6px 0; }
  table.reflow th, table.reflow td { border: 0; padding: 1px 0; white-space: normal; text-align: left; }
  table.reflow td::before { content: attr(data-label) ": "; color: var(--muted); }
  table.reflow caption { display: block; width: auto; }
  table.reflow tbody th { font-weight: 600; }
  .scroll:has(table.reflow) { max-height: none; }
}
"""


def _card(value: str, label: str, *, warn: bool = False, kind: str = "") -> str:
    css = " ".join(c for c in ("card", "warn" if warn else "", kind) if c)
    return f"<div class='{css}'><b>{_esc(value)}</b><span>{_esc(label)}</span></div>"


def _headline_cards(report_set: ReportSet, best: list[dict[str, Any]], missing: int, flagged: int) -> str:
    """Measured and published apart: the newest measured night, and the published figures' years."""
    throughput = report_set.tables["throughput"]
    measured = (
        throughput.filter(pc.equal(throughput["origin"], "measured")) if throughput.num_rows else throughput
    )
    published = (
        throughput.filter(pc.equal(throughput["origin"], "published")) if throughput.num_rows else throughput
    )
    newest_measured = pc.max(measured["result_date"]).as_py() if measured.num_rows else None
    years = sorted({d.year for d in published["result_date"].to_pylist() if d}) if published.num_rows else []
    sources = sorted({s for s in published["result_source"].to_pylist() if s}) if published.num_rows else []
    machines = {(r["provider"], r["instance_type"], r["region"], r["market"]) for r in best if r["ranked"]}
    cards = [
        _card(
            _date(newest_measured) if newest_measured else "none yet",
            f"newest measured night · {measured.num_rows:,} measured configurations",
        ),
        _card(
            ", ".join(str(y) for y in years) or "none",
            f"published figures: {published.num_rows:,} from {len(sources)} publication(s), "
            "shown for comparison",
            kind="published",
        ),
        _card(str(len(machines)), "machines in the ranking"),
        _card(str(flagged), "regressions flagged", warn=bool(flagged)),
        _card(str(missing), "results without a price", warn=bool(missing)),
    ]
    return "<div class=cards>" + "".join(cards) + "</div>"


def _ranking_note(report_set: ReportSet, best: list[dict[str, Any]]) -> str:
    options = report_set.options
    old = sum(1 for r in best if r["not_ranked_reason"] == "old_published")
    flagged = sum(1 for r in best if r["not_ranked_reason"] == "flagged")
    rules = []
    if not options.rank_old_published:
        rules.append(
            f"published figures dated before {options.published_cutoff} (older than "
            f"{options.published_max_age_years} years) are shown but not ranked ({old} machine rows)"
        )
    if not options.rank_flagged:
        rules.append(f"figures carrying flags are shown but not ranked ({flagged} machine rows)")
    if not rules:
        return "Ranking: every priced figure is ranked, old published and flagged ones included."
    return (
        "Ranking: "
        + "; ".join(rules)
        + ". Bars marked 'not ranked' are such figures; --rank-old-published and --rank-flagged "
        "(or GPUCOMPARE_RANK_OLD_PUBLISHED, GPUCOMPARE_RANK_FLAGGED) rank them too."
    )


def render_page(report_set: ReportSet) -> str:
    """The whole index.html as a string."""
    tables = report_set.tables
    currency = report_set.currency
    best = rows_of(tables["best_value"])
    throughput = rows_of(chartable_throughput(tables["throughput"]))
    scaling = rows_of(tables["scaling"])
    regressions = flagged_rows(tables["regressions"])
    missing = rows_of(report_set.missing_prices)
    flagged = [r for r in regressions if r["regression"]]
    rule = report_set.rule
    modes = sorted({r["mode"] for r in best} | {r["mode"] for r in throughput})
    colours = Colours()

    cost = [f for mode in modes for f in cost_figures(best, mode, report_set, colours)]
    throughput_charts = [f for mode in modes for f in throughput_figures(throughput, mode, colours)]
    scaling_charts = scaling_figures(scaling, colours) + scaling_figures(scaling, colours, "efficiency")
    best_rows = best_per_network(best)
    sections = [
        (
            "cost",
            "Cost per million images",
            f"In {currency}; each price is the one valid on the figure's date, converted at that date's "
            "rate. Under every bar: when its figure was measured or published, and the date of its price. "
            "Each methodology (how a figure was timed) is charted and ranked on its own. "
            + _ranking_note(report_set, best),
            links("best_value", "cost_per_million")
            + methodology_note(best)
            + figures_html(cost)
            + (
                "<div class=scroll>" + best_table(best_rows, currency) + "</div>"
                if best_rows
                else "<p class=empty>No machine ranked yet.</p>"
            ),
        ),
        (
            "throughput",
            "Throughput against batch size",
            "Images per second on one device (GPU or CPU), float32.",
            links("throughput", "throughput_matrix") + methodology_note(throughput)
            + figures_html(throughput_charts),
        ),
        (
            "scaling",
            "Multi-GPU scaling",
            "Speedup = images/s ÷ images/s of the same network, mode and GPU model on one GPU; strong = "
            "global batch held, weak = per-device batch held (b = the 1-GPU batch); efficiency = speedup ÷ "
            "GPUs. A series and its baseline are always of one methodology.",
            links("scaling") + methodology_note(r for r in scaling if r["origin"] != "published_curve")
            + figures_html(scaling_charts),
        ),
        (
            "regressions",
            "Regressions",
            (
                f"Latest result of each machine and configuration against its {rule.history_runs} previous "
                "results of the same methodology (never against figures timed another way): flagged "
                f"when below median − max({rule.mad_factor:g} × 1.4826 × MAD, "
                f"{rule.min_drop:.0%} of the median), or when it failed where the history ran."
            ),
            links("regressions")
            + (
                ("<div class=scroll>" + regressions_table(regressions) + "</div>")
                if flagged
                else "<p class=empty>No regression flagged.</p>"
            ),
        ),
        (
            "missing",
            "Results without a price",
            "Kept in cost_per_million with empty cost columns; add a price (data/prices or refresh-prices) "
            "to fill them.",
            links("cost_per_million")
            + (
                ("<div class=scroll>" + missing_table(missing) + "</div>")
                if missing
                else "<p class=empty>Every result found a price.</p>"
            ),
        ),
    ]
    sections.append(campaign_section(report_set))  # what the nights themselves cost
    suspicious = suspicious_published(tables["throughput"])
    if suspicious:
        sections.append(
            (
                "flags",
                "Published values that look wrong",
                "Kept exactly as published, never ranked unless asked; the import flags them, never rewrites "
                "them. Decimal commas and the article's × 8 batch labels are flagged too: see the flags "
                "column.",
                links("throughput") + "<div class=scroll>" + suspicious + "</div>",
            )
        )
    sections.insert(1, where_else_section(report_set))  # projections: after the measured costs
    nav = "".join(f"<a href='#{key}'>{_esc(title)}</a>" for key, title, _, _ in sections)
    body = "".join(
        f"<section id={key} aria-labelledby='{key}-heading'><h2 id='{key}-heading'>{_esc(title)}</h2>"
        f"<p class=note>{_esc(note)}</p>{content}</section>"
        for key, title, note, content in sections
    )
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    files = " · ".join(
        f"<a href='{name}.csv'>{name}.csv</a> (<a href='{name}/{name}.parquet'>Parquet</a>)"
        for name in (*REPORTS, *DERIVED)
    )
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>"
        f"<title>gpucompare — GPU cost and throughput report</title><style>{_CSS}</style></head><body>"
        "<header><h1>gpucompare — which GPU machine gives the most images per "
        f"{_esc(CURRENCY_SIGN.get(currency, currency))}?</h1>"
        "<p>MXNet scoring and training benchmarks, priced per million images · "
        f"generated {generated}</p></header>"
        f"<nav aria-label=sections>{nav}</nav><main>"
        f"{_headline_cards(report_set, best, len(missing), len(flagged))}{body}</main>"
        f"<footer>Tables beside this page: {files}.</footer>"
        "</body></html>"
    )
