"""The page from a prepared view (issue 31): the report set becomes its view once, then the
templates render it in one pass. Real report set of the small lake (test_html's), real Jinja2
templates, the calls watched with ``sys.setprofile`` as ``scripts/trace_report_calls.py`` does.
Before: the first screen's answers were prepared after the page template had started, and the
first screen wrote the runner-up's verdict its own way."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpucompare.reports.page import render_page
from gpucompare.reports.page_rows import TEXT, prepared, verdict_lines, verdict_text
from gpucompare.reports.page_view import build_page_view
from gpucompare.reports.report_set import ReportSet
from gpucompare.reports.templating import environment
from tests.integration.reports.test_html import small_report
from tests.support.page_site import GENERATED_AT


@pytest.fixture(scope="module")
def report_set(tmp_path_factory) -> ReportSet:
    return small_report(tmp_path_factory.mktemp("page_view"))


def _layers(report_set: ReportSet) -> list[str]:
    """'python' or 'templates' for every call of the project's code while the page renders."""
    layers: list[str] = []

    def watch(frame, event, _arg):  # noqa: ANN001, ANN202 - the profile hook's signature
        if event != "call":
            return
        if frame.f_code.co_filename.endswith(".j2"):
            layers.append("templates")
        elif frame.f_globals.get("__name__", "").startswith("gpucompare."):
            layers.append("python")

    sys.setprofile(watch)
    try:
        render_page(report_set, GENERATED_AT)
    finally:
        sys.setprofile(None)
    return layers


def test_the_page_renders_in_one_pass(report_set):
    layers = _layers(report_set)
    first_template = layers.index("templates")
    assert "python" in layers[:first_template]  # the view is built first …
    assert "python" not in layers[first_template:]  # … and the templates never call back into Python


def test_the_view_is_complete_text_before_rendering(report_set):
    view = build_page_view(report_set, GENERATED_AT)
    assert view.answers and view.cards and view.sections  # the small lake ranks machines
    assert all(isinstance(a.cost, str) and isinstance(a.runner_up, str) for a in view.answers)
    assert not view.failures
    assert view.sections[0].key == "cost" and view.sections[0].data["figures"]


def test_a_verdict_is_written_one_way(report_set):
    rows = prepared(report_set.tables["best_value"].to_pylist(), report_set.currency)
    judged = [r for r in rows if r[TEXT].verdict is not None]
    assert judged, "the small lake has ranked machines beside the best"
    for row in judged:
        assert row[TEXT].verdict == verdict_text(row)
        assert row[TEXT].verdict.startswith(row["verdict"])
    lines = verdict_lines(rows)
    assert len(lines) == len(judged)
    page = render_page(report_set, GENERATED_AT)
    runners_up = [a.runner_up for a in build_page_view(report_set, GENERATED_AT).answers
                  if a.runner_up.startswith("runner-up ")]
    assert runners_up
    for line in runners_up:
        assert line.removeprefix("runner-up ") in lines  # the same words as the ranking's
        assert line in page


def test_one_jinja_environment_for_the_page_and_the_plugin():
    page, plugin = environment("gpucompare.reports"), environment("gpucompare.airflow")
    for env in (page, plugin):
        assert env.autoescape is True
        assert env.from_string("{{ x }}").render(x="<script>") == "&lt;script&gt;"
    from gpucompare.airflow import plugin as airflow_plugin

    html = airflow_plugin.no_report_page("/srv/<b>reports</b>", remote=False)
    assert "&lt;b&gt;reports&lt;/b&gt;" in html and "<b>reports</b>" not in html
    assert Path(airflow_plugin.__file__).read_text(encoding="utf-8").count("jinja2.Environment(") == 0


def test_a_cost_table_shows_the_cheapest_machines_and_every_bar(report_set, monkeypatch):
    """Issue 27: the page's cost table is cut to the cheapest machines (the files hold every one),
    never dropping a machine its chart draws. The small lake has two priced machines, so the cut and
    the bars drawn are set to 1."""
    from gpucompare.reports import page_cost

    full = {f.chart_id: f for f in build_page_view(report_set, GENERATED_AT).sections[0].data["figures"]}
    monkeypatch.setattr(page_cost, "COST_TABLE_ROWS", 1)
    monkeypatch.setattr(page_cost, "MAX_BARS", 1)
    cut = build_page_view(report_set, GENERATED_AT).sections[0].data["figures"]
    shortened = 0
    for figure in cut:
        rows, every = figure.table.rows, full[figure.chart_id].table.rows
        assert rows == [row for row in every if row in rows]  # cheapest first, as the full table
        assert rows[0] == every[0]  # the cheapest machine is always listed
        bars = len(figure.chart.bars)
        assert bars <= len(rows) <= bars + 1  # every machine drawn keeps its row, and the cheapest one
        if len(rows) < len(every):
            shortened += 1
            assert f"cheapest of {len(every)} priced machines" in figure.table.caption
        else:
            assert "every priced machine" in figure.table.caption
    assert shortened  # the small lake ranks two machines in a network


#: The helpers that write a row's figures and words (formatting and page_parts).
FORMATTING_HELPERS = {"num", "pct", "money", "duration", "date_text", "hardware_label", "machine_label",
                      "machine_name", "provenance", "when", "devices", "methodology", "with_interval",
                      "energy", "price_label", "time_per_million", "is_published"}


def _imported(module) -> tuple[set[str], set[str]]:  # noqa: ANN001 - a module
    """The modules ``module`` imports from and the names it imports."""
    import ast

    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    return {node.module for node in imports}, {alias.name for node in imports for alias in node.names}


def test_the_section_modules_format_nothing():
    """Issue 31: every section's rows are written once by the view builder (page_rows), before the
    sections pick them; the section modules import no formatting helper (before: the throughput,
    scaling and projections sections wrote their rows while they were drawn, and so did the
    regressions and campaign sections before them). The throughput, scaling and projections
    modules still take the chart's constants, colours, ids and titles from formatting."""
    from gpucompare.reports import (
        page_campaign,
        page_projections,
        page_regressions,
        page_scaling,
        page_throughput,
    )

    for module in (page_campaign, page_regressions):
        modules, _ = _imported(module)
        assert "gpucompare.reports.formatting" not in modules, module.__name__
    for module in (page_campaign, page_regressions, page_throughput, page_scaling, page_projections):
        _, names = _imported(module)
        assert not names & FORMATTING_HELPERS, (module.__name__, names & FORMATTING_HELPERS)


def test_failed_rows_are_recorded_once(report_set, monkeypatch):
    """A section whose rows could not be written says so in its place, and the failure is recorded
    once, as the rows' (before: 'index.html: regressions rows', then 'index.html: regressions')."""
    from gpucompare.reports import page_view

    def broken(_row):  # noqa: ANN001, ANN202 - stands in for a row the cells cannot be written of
        raise ValueError("no cells")

    monkeypatch.setattr(page_view, "regression_cells", broken)
    monkeypatch.setattr(page_view, "chart_rows", lambda _rows, _columns: broken(None))
    failures_before = dict(report_set.failures)
    try:
        view = build_page_view(report_set, GENERATED_AT)
        added = {k: v for k, v in report_set.failures.items() if k not in failures_before}
    finally:
        report_set.failures.clear()
        report_set.failures.update(failures_before)
    assert set(added) == {"index.html: regressions rows", "index.html: throughput rows",
                          "index.html: scaling rows"}, added
    assert all(v == "ValueError: no cells" for v in added.values()), added
    drawn = {s.key: s.template for s in view.sections}
    for key in ("regressions", "throughput", "scaling"):
        assert drawn[key] == "failed.html.j2", key
    assert drawn["cost"] != "failed.html.j2" and drawn["campaign"] != "failed.html.j2"
