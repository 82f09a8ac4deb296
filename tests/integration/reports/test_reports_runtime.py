"""Reports and the worker runtime (real DuckDB over a Delta lake on disk): each machine's rows
say which runtime produced them, and ``regressions`` judges a figure only against history of its
own runtime: a change of runtime is 'software_stack_changed', never a regression."""

from __future__ import annotations

import datetime as dt

import pytest

from gpucompare.lake.tables import open_lake
from gpucompare.reports.build import build_reports
from gpucompare.reports.page import render_page
from gpucompare.reports.report_set import RegressionRule
from tests.support.page_site import GENERATED_AT
from tests.support.reports_data import ingest, inputs, price, record

NIGHT = dt.date(2026, 3, 10)
RULE = RegressionRule(history_runs=7, min_history=3, mad_factor=3.0, min_drop=0.05, lookback_days=28)


@pytest.fixture
def lake(tmp_path):
    return open_lake(str(tmp_path / "lake"))


def _run(night: dt.date, ips: float, runtime: str | None, batch: int = 32) -> dict:
    row = record(images_per_sec=ips, night=night, batch_size=batch, gpu_model="NVIDIA H100 80GB HBM3")
    return {**row, "worker_runtime": runtime,
            "framework_build": None if runtime is None else '{"mxnet": "1.9.1"}'}


def _nights(count: int) -> list[dt.date]:
    return [NIGHT - dt.timedelta(days=count - 1 - i) for i in range(count)]


def test_a_runtime_change_is_a_software_stack_change_not_a_regression(lake) -> None:
    nights = _nights(6)
    # batch 32: five nights at 100 on pip-cu112 (one written before schema 3: no runtime), then
    # 60 on ngc-24.06: slower, but another stack; batch 8: the same stack all along, then 60
    for i, night in enumerate(nights):
        runtime = None if i == 0 else "pip-cu112"
        ingest(lake, [_run(night, 100.0 if i < 5 else 60.0, "ngc-24.06" if i == 5 else runtime),
                      _run(night, 100.0 if i < 5 else 60.0, runtime, batch=8)])
    table = build_reports(inputs(lake, [], []), rule=RULE).tables["regressions"]
    got = {row["batch_size"]: row for row in table.to_pylist()}
    changed = got[32]
    assert changed["verdict"] == "software_stack_changed" and changed["regression"] is False
    assert (changed["worker_runtime"], changed["previous_runtime"]) == ("ngc-24.06", "pip-cu112")
    assert changed["history_runs"] == 0  # no history of its own stack yet
    same = got[8]
    assert same["verdict"] == "regression" and same["regression"] is True
    assert same["history_runs"] == 5  # the record without a runtime counts as pip-cu112 (a GPU row)


def test_the_next_night_on_the_new_stack_is_judged_against_that_stack_only(lake) -> None:
    nights = _nights(8)
    values = [100.0, 100.0, 100.0, 100.0, 60.0, 61.0, 60.5, 60.0]
    runtimes = ["pip-cu112"] * 4 + ["ngc-24.06"] * 4
    for night, value, runtime in zip(nights, values, runtimes, strict=True):
        ingest(lake, [_run(night, value, runtime)])
    (row,) = build_reports(inputs(lake, [], []), rule=RULE).tables["regressions"].to_pylist()
    assert row["verdict"] == "steady" and row["history_runs"] == 3 and row["history_median"] == 60.5


def test_reports_show_the_runtime_beside_each_machine(lake) -> None:
    ingest(lake, [_run(NIGHT, 900.0, "ngc-24.06")], instance_type="p5.48xlarge")
    ingest(lake, [_run(NIGHT, 300.0, "pip-cu112")], instance_type="g5.xlarge")
    prices = [price("p5.48xlarge", 98.32), price("g5.xlarge", 1.006)]
    tables = build_reports(inputs(lake, prices, [])).tables
    for name in ("throughput", "cost_per_million"):
        shown = {r["instance_type"]: r["worker_runtime"] for r in tables[name].to_pylist()}
        assert shown == {"p5.48xlarge": "ngc-24.06", "g5.xlarge": "pip-cu112"}, name
    assert "worker_runtime" in tables["best_value"].column_names


def test_a_framework_build_change_on_one_runtime_starts_a_new_baseline(lake) -> None:
    """Same runtime, another MXNet build (e.g. a new image digest): judged like a runtime change;
    a record without a build (before schema 3) still counts as history of its runtime."""
    nights = _nights(6)
    old = '{"mxnet": "1.9.1", "image_digest": "sha256:aaa"}'
    new = '{"mxnet": "1.9.1", "image_digest": "sha256:bbb"}'
    for i, night in enumerate(nights):
        row = _run(night, 100.0 if i < 5 else 60.0, "ngc-24.06")
        same = _run(night, 100.0 if i < 5 else 60.0, "ngc-24.06", batch=8)
        row["framework_build"] = None if i == 0 else (new if i == 5 else old)
        same["framework_build"] = None if i == 0 else old
        ingest(lake, [row, same])
    table = build_reports(inputs(lake, [], []), rule=RULE).tables["regressions"]
    got = {r["batch_size"]: r for r in table.to_pylist()}
    changed = got[32]
    assert changed["verdict"] == "software_stack_changed"
    assert (changed["regression"], changed["build_changed"]) == (False, True)
    assert changed["history_runs"] == 1  # only the record with no build is history of the new build
    same = got[8]
    assert (same["verdict"], same["build_changed"], same["history_runs"]) == ("regression", False, 5)


def test_the_page_lists_a_drop_within_the_floor_and_announces_a_stack_change(lake) -> None:
    nights = _nights(8)
    quiet = [100.0, 100.1, 99.9, 100.0, 100.05, 99.95, 100.0, 98.0]  # tonight: 2 % below, p < 0.001
    for i, night in enumerate(nights):
        ingest(lake, [_run(night, quiet[i], "pip-cu112", batch=4),
                      _run(night, 100.0, "ngc-24.06" if i == 7 else "pip-cu112", batch=16)])
    report_set = build_reports(inputs(lake, [], []), rule=RULE)
    got = {r["batch_size"]: r for r in report_set.tables["regressions"].to_pylist()}
    assert (got[4]["verdict"], got[4]["regression"]) == ("significant_below_floor", False)
    assert got[4]["p_value"] < 0.001 and got[16]["verdict"] == "software_stack_changed"
    page = render_page(report_set, GENERATED_AT)
    section = page[page.index('id="regressions"'): page.index('id="missing"')]
    assert "significant, below floor (p " in section and "-2.0 %" in section
    assert "Software stack changed" in section
    assert "g5.xlarge" in section and "worker runtime pip-cu112 → ngc-24.06; 1 configuration start" in section
