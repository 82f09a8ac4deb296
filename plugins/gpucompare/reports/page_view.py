"""The page's view: the report set turned once into the objects ``templates/page.html.j2`` draws
(:class:`PageView`: headline cards, the first answer when nothing is ranked, the best buy per
workload, one :class:`~gpucompare.reports.page_parts.Section` per section with its tables and chart
models), every figure already written as text.

This module and the section modules it calls (``page_*``, :mod:`~gpucompare.reports.formatting`,
:mod:`~gpucompare.reports.charts`) are the view builder: the only code that formats figures. The
templates only place the text; :mod:`gpucompare.reports.page` builds the view, then renders it, in
one pass (``scripts/trace_report_calls.py`` shows it). No I/O and no clock: the time the page
states is an argument.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpucompare.reports import page_campaign, page_projections
from gpucompare.reports.formatting import CURRENCY_SIGN, Colours, date_text
from gpucompare.reports.page_answer import Answer, answers
from gpucompare.reports.page_campaign import campaign_section, recent_runs
from gpucompare.reports.page_cost import (
    best_per_network,
    best_table,
    cost_figures,
    missing_tables,
    unpriced_machines,
)
from gpucompare.reports.page_parts import (
    Section,
    flagged_rows,
    methodology_note,
    reported_rows,
    rows_of,
    stack_change_rows,
)
from gpucompare.reports.page_projections import candidate_rows, measured_machines, where_else_section
from gpucompare.reports.page_regressions import regressions_table, stack_change_lines
from gpucompare.reports.page_rows import (
    TEXT,
    campaign_cells,
    campaign_reclaims_line,
    chart_rows,
    prepared,
    projection_cells,
    regression_cells,
    stack_change_cells,
    suspicious_cells,
    with_cells,
)
from gpucompare.reports.page_scaling import scaling_figures
from gpucompare.reports.page_throughput import (
    chartable_throughput,
    suspicious_rows,
    suspicious_table,
    throughput_figures,
)
from gpucompare.reports.report_set import DERIVED, REPORTS, ReportSet

#: Where a user learns to price their own machine (the install guide's section).
PRICE_DOCS = "docs/install.md"


@dataclass(frozen=True)
class Card:
    value: str
    label: str
    warn: bool = False
    published: bool = False


@dataclass
class FirstAnswer:
    """Shown on the first screen when nothing is ranked: why, and what to do (text between backticks is
    a command, set as code)."""

    reasons: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)


def _counts(report_set: ReportSet) -> dict[str, Any]:
    throughput = report_set.tables["throughput"]
    def of(origin: str) -> pa.Table:
        if throughput.num_rows == 0:
            return throughput
        return throughput.filter(pc.equal(throughput["origin"], origin))

    measured, published = of("measured"), of("published")
    return {
        "measured": measured.num_rows,
        "newest": pc.max(measured["result_date"]).as_py() if measured.num_rows else None,
        "published": published.num_rows,
        "years": sorted({d.year for d in published["result_date"].to_pylist() if d}),
        "sources": len({s for s in published["result_source"].to_pylist() if s}),
    }


def headline_cards(
    report_set: ReportSet, ranked: int, missing: list[dict[str, Any]], flagged: int
) -> list[Card]:
    """Each card says what it counts: measured and published apart, the user's unpriced results apart
    from the published ones."""
    counts = _counts(report_set)
    years = ", ".join(str(y) for y in counts["years"])
    own = sum(1 for r in missing if not r[TEXT].published)
    return [
        Card(date_text(counts["newest"]) if counts["newest"] else "none yet",
             f"newest measured night · {counts['measured']:,} measured configurations"),
        Card(f"{counts['published']:,}",
             f"published figures{', from ' + years if years else ''} · {counts['sources']} publication(s), "
             "shown for comparison", published=True),
        Card(str(ranked), f"machine{'' if ranked == 1 else 's'} in the ranking", warn=ranked == 0),
        Card(str(flagged), f"regression{'' if flagged == 1 else 's'} flagged", warn=bool(flagged)),
        Card(f"{own:,}", f"your results without a price · published figures without a price: "
             f"{len(missing) - own:,}", warn=bool(own)),
    ]


def first_answer(
    report_set: ReportSet, best: list[dict[str, Any]], missing: list[dict[str, Any]]
) -> FirstAnswer | None:
    """Why nothing is ranked and what to do about it (None when something is ranked)."""
    if any(r["ranked"] for r in best):
        return None
    answer = FirstAnswer()
    unpriced = unpriced_machines(missing)
    if unpriced:
        answer.reasons.append(f"your measured machine{'s' if len(unpriced) > 1 else ''} "
                              f"{', '.join(unpriced)} {'have' if len(unpriced) > 1 else 'has'} no price")
        answer.steps.append(
            "Declare its price: `gpucompare add-price` (per hour, per month or an amortised purchase), or a "
            f"`prices` entry for the target in the fleet file; `{PRICE_DOCS}` shows both. The next report "
            "ranks it, labelled as declared.")
    elif _counts(report_set)["measured"] == 0:
        answer.reasons.append("nothing has been measured yet: the nightly DAG has not run, or its results "
                              "are in another lake")
        answer.steps.append(
            "Run the nightly DAG (`airflow dags trigger gpucompare_nightly`) on a target with a price, or "
            f"declare a price for your own machine (`gpucompare add-price`; `{PRICE_DOCS}`).")
    elif not any(r.get("origin") == "measured" for r in best):
        answer.reasons.append("no measured result has a price")
        answer.steps.append(f"Declare a price for your machine (`gpucompare add-price`; `{PRICE_DOCS}`).")
    options = report_set.options
    if any(r.get("not_ranked_reason") == "old_published" for r in best):
        answer.reasons.append(
            f"the published figures are dated before {options.published_cutoff} (older than "
            f"{options.published_max_age_years} years): shown for comparison, not ranked")
        answer.steps.append("To rank them anyway: `gpucompare report --rank-old-published` "
                            "(or `GPUCOMPARE_RANK_OLD_PUBLISHED=true`).")
    if any(r.get("not_ranked_reason") == "flagged" for r in best):
        answer.reasons.append("some figures carry flags and are not ranked (`--rank-flagged` ranks them)")
    return answer


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
        "Ranking: " + "; ".join(rules) + ". Bars marked 'not ranked' are such figures; "
        "--rank-old-published and --rank-flagged (or GPUCOMPARE_RANK_OLD_PUBLISHED, "
        "GPUCOMPARE_RANK_FLAGGED) rank them too."
    )


def _cost_section(report_set: ReportSet, best: list[dict[str, Any]], colours: Colours) -> Section:
    report_set.tables["best_value"]  # noqa: B018 - without it (it failed) the section says so, not "empty"
    best_rows = best_per_network(best)
    return Section(
        "cost", "Cost per million images",
        f"In {report_set.currency}; each price is the one valid on the figure's date, converted at that "
        "date's rate. Under every bar: when its figure was measured or published, and the date of its price. "
        "Each methodology (how a figure was timed) is charted and ranked on its own. "
        + _ranking_note(report_set, best),
        "cost.html.j2", ("best_value", "cost_per_million"),
        {"methodology": methodology_note(best),
         "figures": [f for mode in _modes(report_set, best)
                     for f in cost_figures(best, mode, report_set, colours)],
         "best": best_table(best_rows, report_set.currency) if best_rows else None},
    )


def _modes(report_set: ReportSet, best: list[dict[str, Any]]) -> list[str]:
    """The modes drawn: those ranked or measured (a failed throughput report leaves the ranked ones)."""
    throughput = report_set.tables.get("throughput")
    measured = set() if throughput is None else set(throughput.column("mode").to_pylist())
    return sorted({r["mode"] for r in best} | measured)


def _throughput_section(report_set: ReportSet, best: list[dict[str, Any]], throughput: list[dict[str, Any]],
                        colours: Colours) -> Section:
    return Section(
        "throughput", "Throughput against batch size",
        "Images per second on one device (GPU or CPU), float32.",
        "figures.html.j2", ("throughput", "throughput_matrix"),
        {"methodology": methodology_note(throughput),
         "figures": [f for mode in _modes(report_set, best)
                     for f in throughput_figures(throughput, mode, colours)]},
    )


def _scaling_section(scaling: list[dict[str, Any]], colours: Colours) -> Section:
    return Section(
        "scaling", "Multi-GPU scaling",
        "Speedup = images/s ÷ images/s of the same network, mode and GPU model on one GPU; strong = global "
        "batch held, weak = per-device batch held (b = the 1-GPU batch); efficiency = speedup ÷ GPUs. A "
        "series and its baseline are always of one methodology.",
        "figures.html.j2", ("scaling",),
        {"methodology": methodology_note(r for r in scaling if r["origin"] != "published_curve"),
         "figures": scaling_figures(scaling, colours) + scaling_figures(scaling, colours, "efficiency")},
    )


#: What a part of the view is when preparing it failed (recorded once, under the part's name).
_FAILED: Any = object()


class _Parts:
    """The page's parts, each drawn on its own: a part that fails (a report it needs failed, or
    drawing it raised) becomes a section saying so, the rest of the page is still drawn, and a
    failure of its own is recorded in the set's ``failures`` as ``index.html: <part>``, once: a
    section whose rows failed says so without recording it again."""

    def __init__(self, report_set: ReportSet) -> None:
        self.report_set = report_set

    def value(self, name: str, build: Callable[[], Any], fallback: Any = _FAILED) -> Any:
        try:
            return build()
        except Exception as exc:  # noqa: BLE001 - recorded, the page goes on without this part
            missing = exc.args[0] if isinstance(exc, KeyError) and exc.args else None
            if missing not in self.report_set.failures:  # else a consequence of that failure
                self.report_set.fail(f"index.html: {name}", exc)
            return fallback

    def section(self, key: str, title: str, build: Callable[[], Section],
                needs: tuple[Any, ...] = ()) -> Section:
        """The section ``build`` draws, or one saying it failed (``needs``: the rows it is drawn
        from; one of them failed: already recorded)."""
        failed = Section(key, title, "A part of the report set this section needs failed.",
                         "failed.html.j2")
        if any(rows is _FAILED for rows in needs):
            return failed
        return self.value(key, build, failed)


def _regression_rows(report_set: ReportSet) -> dict[str, list[dict[str, Any]]]:
    """The regressions rows the page lists (``reported``) and the series whose stack changed
    (``stack``), their cells written."""
    table = report_set.tables["regressions"]
    return {"reported": with_cells(reported_rows(table), regression_cells),
            "stack": with_cells(stack_change_rows(table), stack_change_cells)}


def _campaign_rows(report_set: ReportSet) -> list[dict[str, Any]]:
    """The campaign's recent runs, their cells written (none when the campaign report failed: the
    section then says no run recorded its phases, as without runs)."""
    table = report_set.tables.get("campaign")
    return [] if table is None else with_cells(recent_runs(table), campaign_cells)


def projection_rows(report_set: ReportSet) -> dict[str, Any]:
    """The projections the section can show, their cells written, and the measured machines
    projected from (none when the projections report is not built)."""
    table = report_set.tables.get("projections")
    if table is None:
        return {"rows": [], "measured": {}}
    currency = report_set.currency
    return {"rows": with_cells(candidate_rows(table), lambda row: projection_cells(row, currency)),
            "measured": measured_machines(table)}


#: The chart rows of the throughput and scaling sections (``page_rows.chart_rows``), each drawn
#: from one table: part name → (that table, how its rows are written).
CHART_ROWS: dict[str, tuple[str, Callable[[pa.Table], list[dict[str, Any]]]]] = {
    "throughput rows": ("throughput", lambda table: chart_rows(rows_of(chartable_throughput(table)),
                                                               ("images_per_sec",))),
    "scaling rows": ("scaling", lambda table: chart_rows(rows_of(table), ("speedup", "efficiency"))),
}


def prepare_rows(report_set: ReportSet, table_name: str) -> None:
    """Write the chart rows drawn from ``table_name`` ahead, into the set's ``prepared`` (a build
    does it on a lane that has finished its tables while another lane is still building). The rows
    depend on that table only, not on the rest of the page (colours, order): the page is the same
    with or without them. A failure here is left for the page, which writes the part again and
    records it."""
    for part, (table, write) in CHART_ROWS.items():
        if table == table_name and table in report_set.tables:
            try:
                report_set.prepared[part] = write(report_set.tables[table])
            except Exception:  # noqa: BLE001, S110 - the page writes the part again and records the failure
                pass


def _chart_rows(report_set: ReportSet, part: str) -> list[dict[str, Any]]:
    if part in report_set.prepared:
        return report_set.prepared[part]
    table, write = CHART_ROWS[part]
    return write(report_set.tables[table])


def _section_rows(report_set: ReportSet, parts: _Parts) -> dict[str, Any]:
    """The rows of the sections' charts and tables, their words and cells written (``page_rows``),
    each on its own: rows that fail are ``_FAILED`` (recorded as ``index.html: <name> rows``)."""
    tables = report_set.tables
    return {
        "regressions": parts.value("regressions rows", lambda: _regression_rows(report_set)),
        "campaign": parts.value("campaign rows", lambda: _campaign_rows(report_set), []),
        "throughput": parts.value("throughput rows", lambda: _chart_rows(report_set, "throughput rows")),
        "scaling": parts.value("scaling rows", lambda: _chart_rows(report_set, "scaling rows")),
        "projections": parts.value("projections rows", lambda: projection_rows(report_set)),
        "flags": parts.value("flags rows", lambda: with_cells(
            suspicious_rows(tables["throughput"]), suspicious_cells)),
    }


def _regressions_section(report_set: ReportSet, rows: dict[str, list[dict[str, Any]]]) -> Section:
    rule = report_set.rule
    regressions = rows["reported"]
    stack_changes = stack_change_lines(rows["stack"])
    return Section(
        "regressions", "Regressions",
        f"Latest result of each machine and configuration against its {rule.history_runs} previous "
        "results of the same methodology and software stack (worker runtime and framework build): "
        f"flagged when below median − max(noise, floor), noise = {rule.mad_factor:g} × 1.4826 × MAD of "
        f"the history, floor = {rule.min_drop:.0%} of the median, and the U test of the repeats finds "
        "the drop significant, or when it failed where the history ran. A significant drop beyond the "
        "noise but within the floor is listed as \"significant, below floor\", not flagged.",
        "regressions.html.j2", ("regressions",),
        {"table": regressions_table(regressions) if regressions else None,
         "stack_changes": stack_changes},
    )


def _missing_section(missing: list[dict[str, Any]]) -> Section:
    own, published = missing_tables(missing)
    return Section(
        "missing", "Results without a price",
        "Kept in cost_per_million with empty cost columns. Your own machines: declare a price "
        f"(gpucompare add-price or a prices entry in the fleet file, {PRICE_DOCS}); other machines: add "
        "a price list (data/prices or refresh-prices).",
        "missing.html.j2", ("cost_per_million",), {"own": own, "published": published},
    )


def _flags_section(rows: list[dict[str, Any]]) -> Section | None:
    suspicious = None if rows is _FAILED else suspicious_table(rows)
    if suspicious is None:
        return None
    return Section(
        "flags", "Published values that look wrong",
        "Kept exactly as published, never ranked unless asked; the import flags them, never rewrites "
        "them. Decimal commas and the article's × 8 batch labels are flagged too: see the flags column.",
        "flags.html.j2", ("throughput",), {"table": suspicious},
    )


def _sections(report_set: ReportSet, parts: _Parts, best: list[dict[str, Any]],
              missing: list[dict[str, Any]]) -> list[Section]:
    """Every section in page order, each drawn on its own (``_Parts``). The rows of their charts and
    tables are written first (``page_rows``), like best and missing."""
    colours = Colours()
    rows = _section_rows(report_set, parts)
    projections, currency = rows["projections"], report_set.currency
    sections = [
        parts.section("cost", "Cost per million images", lambda: _cost_section(report_set, best, colours)),
        parts.section(page_projections.KEY, page_projections.TITLE, lambda: where_else_section(
            projections["rows"], projections["measured"], currency), needs=(projections,)),
        parts.section("throughput", "Throughput against batch size",
                      lambda: _throughput_section(report_set, best, rows["throughput"], colours),
                      needs=(rows["throughput"],)),
        parts.section("scaling", "Multi-GPU scaling", lambda: _scaling_section(rows["scaling"], colours),
                      needs=(rows["scaling"],)),
        parts.section("regressions", "Regressions",
                      lambda: _regressions_section(report_set, rows["regressions"]),
                      needs=(rows["regressions"],)),
        parts.section("missing", "Results without a price", lambda: _missing_section(missing)),
        parts.section(page_campaign.KEY, page_campaign.TITLE, lambda: campaign_section(
            rows["campaign"], campaign_reclaims_line(rows["campaign"]))),
    ]
    flags = parts.value("flags", lambda: _flags_section(rows["flags"]), None)
    return sections + ([flags] if flags is not None else [])


@dataclass
class PageView:
    """Everything index.html shows, prepared: the template places it and formats nothing."""

    sign: str
    generated: str
    cards: list[Card]
    first_answer: FirstAnswer | None
    answers: list[Answer]
    failures: dict[str, str]
    sections: list[Section]
    files: tuple[str, ...]


def build_page_view(report_set: ReportSet, generated_at: dt.datetime) -> PageView:
    """The report set as the page's view, in page order. A part that cannot be prepared never stops
    the others: it says so in its place (``_Parts``), and the failures are listed at the top."""
    parts = _Parts(report_set)
    currency = report_set.currency
    best = parts.value("best_value", lambda: prepared(rows_of(report_set.tables["best_value"]), currency), [])
    missing = parts.value("missing prices",
                          lambda: prepared(rows_of(report_set.missing_prices), currency), [])
    sections = _sections(report_set, parts, best, missing)
    ranked = {(r["provider"], r["instance_type"], r["region"], r["market"]) for r in best if r["ranked"]}
    flagged = parts.value("regressions", lambda: sum(
        1 for r in flagged_rows(report_set.tables["regressions"]) if r["regression"]), 0)
    generated = generated_at.astimezone(dt.UTC)
    return PageView(
        sign=CURRENCY_SIGN.get(report_set.currency, report_set.currency),
        generated=generated.strftime("%Y-%m-%d %H:%M UTC"),
        cards=parts.value("cards", lambda: headline_cards(report_set, len(ranked), missing, flagged), []),
        first_answer=parts.value("first answer", lambda: first_answer(report_set, best, missing), None),
        answers=parts.value("answers", lambda: answers(best, generated.date()), []),
        failures=dict(report_set.failures),  # last: every part above has recorded its own failure
        sections=sections,
        files=(*REPORTS, *DERIVED),
    )
