"""The page with the report columns other work adds (COMMON "Shared contracts"): 95 % intervals,
tie groups, energy, the worker runtime and declared prices. Stands in for the reports of the
``stats``, ``hopper`` and ``firstanswer`` work: the small lake's real report frames with those
columns appended, rendered through the real templates. Without the columns the page is as before."""

from __future__ import annotations

import dataclasses
import re

import pyarrow as pa
import pytest

from gpucompare.reports.page import render_page
from gpucompare.reports.report_set import ReportSet
from tests.integration.reports.test_html import small_report
from tests.support.page_site import GENERATED_AT


def _with(table: pa.Table, columns: dict[str, list]) -> pa.Table:
    for name, values in columns.items():
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, pa.array(values))
        else:
            table = table.append_column(name, pa.array(values))
    return table


#: the interval columns the page draws error bars from
INTERVAL_ENDS = ("images_per_sec_low", "images_per_sec_high", "cost_per_million_low", "cost_per_million_high")


def _stats_columns(table: pa.Table, *, best: bool) -> pa.Table:
    rows = table.to_pylist()
    speed = [r["images_per_sec"] for r in rows]
    columns: dict[str, list] = {
        "images_per_sec_low": [None if s is None else s * 0.95 for s in speed],
        "images_per_sec_high": [None if s is None else s * 1.05 for s in speed],
        "samples": [10] * len(rows),
        "nights": [1] * len(rows),
        "worker_runtime": ["pip-cu112"] * len(rows),
    }
    if "cost_per_million" in table.column_names:
        cost = [r["cost_per_million"] for r in rows]
        columns["cost_per_million_low"] = [None if c is None else c * 0.9 for c in cost]
        columns["cost_per_million_high"] = [None if c is None else c * 1.1 for c in cost]
        columns["joules_per_image"] = [0.5] * len(rows)
        columns["kwh_per_million"] = [0.139] * len(rows)
        columns["gco2e_per_million"] = [None if r["instance_type"] == "g4dn.xlarge" else 52.0 for r in rows]
        declared = [r["instance_type"] == "g4dn.xlarge" for r in rows]
        columns["price_source"] = ["declared" if d else r["price_source"]
                                   for d, r in zip(declared, rows, strict=True)]
        columns["price_note"] = ["example price for this test machine" if d else None for d in declared]
    if best:
        # alexnet scoring: the runner-up cannot be told from the best yet
        second = [r["network"] == "alexnet" and r["mode"] == "score" and r["rank"] == 2 for r in rows]
        runner_up = {"verdict": "undetermined", "cost_ratio": 1.01, "cost_ratio_low": 0.97,
                     "cost_ratio_high": 1.05, "settle_with": "about 4 more repeats of each machine"}
        for name, value in runner_up.items():
            columns[name] = [value if s else r[name] for s, r in zip(second, rows, strict=True)]
    return _with(table, columns)


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> ReportSet:
    return small_report(tmp_path_factory.mktemp("contracts") / "lake")


@pytest.fixture(scope="module")
def extended(plain) -> ReportSet:
    tables = dict(plain.tables)
    tables["best_value"] = _stats_columns(tables["best_value"], best=True)
    tables["cost_per_million"] = _stats_columns(tables["cost_per_million"], best=False)
    tables["throughput"] = _stats_columns(tables["throughput"], best=False)
    return dataclasses.replace(plain, tables=tables)


def test_intervals_become_error_bars_on_cost_and_throughput_charts(plain, extended):
    page = render_page(extended, GENERATED_AT)
    cost = page[page.index('<section id="cost"'):page.index('<section id="where-else"')]
    speed = page[page.index('<section id="throughput"'):page.index('<section id="scaling"')]
    assert cost.count('class="error-bar"') >= 3 and speed.count('class="error-bar"') >= 3
    bare = {name: _with(table, {column: [None] * table.num_rows for column in INTERVAL_ENDS
                                if column in table.column_names})
            for name, table in plain.tables.items()}
    assert 'class="error-bar"' not in render_page(dataclasses.replace(plain, tables=bare), GENERATED_AT)
    # and the tables write each figure with its interval
    assert re.search(r"€[\d.]+ \([\d.]+–[\d.]+\)", cost)


def test_verdicts_show_in_the_ranking(extended):
    page = render_page(extended, GENERATED_AT)
    [second] = [r for r in extended.tables["best_value"].to_pylist()
                if r["network"] == "alexnet" and r["mode"] == "score" and r["rank"] == 2]
    line = (f"aws {second['instance_type']} · us-east-1: undetermined, ×1.01 (0.97–1.05); to settle: about 4 "
            "more repeats of each machine")
    # written one way (reports/page_rows.verdict_text) in the alexnet chart's summary, the best-buy
    # table and the first screen's runner-up line (before, the first screen wrote it its own way)
    assert page.count(line) == 3
    assert f"runner-up {line}" in page


def test_energy_runtime_and_declared_prices_are_labelled(plain, extended):
    page = render_page(extended, GENERATED_AT)
    assert '<th scope="col" class="wrap">energy (device only: a lower bound)</th>' in page
    assert "0.139 kWh per million · 52 gCO₂e (grid of 2020 or earlier)" in page
    assert "0.139 kWh per million<" in page  # g4dn: no carbon figure, never 0 gCO₂e
    assert "runtime pip-cu112" in page
    assert "2025-01-01, declared: example price for this test machine" in page
    before = render_page(plain, GENERATED_AT)
    # (plain shows runtimes too: GPU records older than schema 3 ran on pip-cu112, the only runtime then)
    assert "energy (device only" not in before and "declared" not in before


def _every_figure(table: pa.Table, value: float) -> pa.Table:
    """Every throughput, cost and speedup figure of ``table`` replaced by ``value``."""
    columns = {name: [value] * table.num_rows for name in
               ("images_per_sec", "cost_per_million", "seconds_per_million", "speedup", "efficiency")
               if name in table.column_names}
    return _with(table, columns)


@pytest.mark.parametrize("value", [0.0, 1e-100, 1e13, 1e300, float("nan"), float("inf"), -1.0])
def test_the_page_and_summary_survive_any_figure(plain, value):
    """A lake row at 1e13 images/s made `report` exit 1 (ZeroDivisionError in the old svg.py); any
    value now renders, and what cannot be drawn is listed under its chart."""
    from gpucompare.reports.summary import render_summary

    tables = {name: _every_figure(table, value) for name, table in plain.tables.items()}
    odd = dataclasses.replace(plain, tables=tables)
    page = render_page(odd, GENERATED_AT)
    assert page.count("<svg") == render_page(plain, GENERATED_AT).count("<svg")
    drawable = value >= 0 and value < float("inf")
    assert ("not drawn: " in page) == (not drawable)
    assert render_summary(odd).startswith("# gpucompare report")
