"""Figures timed under different methodologies are never ranked, paired or compared silently.

The worker records ``methodology`` (official = MXNet's fixed 5 + 10 batches, robust = at
least 2 s per repeat until the CV is under 3 %, custom; null in records from before the
field = official). Every report that ranks, compares or joins results keeps them apart, and
the page says which methodology each figure used. Each lake here is written through the real
ingest path and read by the real SQL; every record of one cell carries the same config_id
whatever its methodology, so only the ``methodology`` column can keep them apart.
"""

from __future__ import annotations

import datetime as dt

import pytest

from gpucompare.lake.tables import open_lake
from gpucompare.reports.build import build_reports
from gpucompare.reports.page import render_page
from gpucompare.reports.report_set import COLUMN_DOCS, RegressionRule
from gpucompare.reports.summary import render_summary
from tests.support.page_site import GENERATED_AT
from tests.support.reports_data import ingest, inputs, price, record

NIGHT = dt.date(2026, 3, 10)
RULE = RegressionRule(history_runs=7, min_history=3, mad_factor=3.0, min_drop=0.05, lookback_days=28)


@pytest.fixture
def lake(tmp_path):
    return open_lake(str(tmp_path / "lake"))


def _nights(count: int, last: dt.date = NIGHT) -> list[dt.date]:
    return [last - dt.timedelta(days=count - 1 - i) for i in range(count)]


def _ingest_by_night(lake, records) -> None:
    for night in sorted({r["started_at"][:10] for r in records}):
        ingest(lake, [r for r in records if r["started_at"][:10] == night])


# ---- regressions -----------------------------------------------------------------------------
def test_an_official_figure_is_never_judged_against_a_robust_history(lake):
    records = []
    # batch 32: five robust nights at 100, then tonight an official 70 (30 % lower than the
    # robust figure of the night before): a change of methodology, not a regression
    records += [record(batch_size=32, images_per_sec=100.0, night=n, methodology="robust")
                for n in _nights(6)[:-1]]
    records.append(record(batch_size=32, images_per_sec=70.0, night=NIGHT, methodology="official"))
    # batch 64: the same 30 % drop within one methodology (official): flagged
    records += [record(batch_size=64, images_per_sec=100.0, night=n, methodology="official")
                for n in _nights(6)[:-1]]
    records.append(record(batch_size=64, images_per_sec=70.0, night=NIGHT, methodology="official"))
    # batch 128: the same drop within robust: flagged too
    records += [record(batch_size=128, images_per_sec=100.0, night=n, methodology="robust")
                for n in _nights(6)[:-1]]
    records.append(record(batch_size=128, images_per_sec=70.0, night=NIGHT, methodology="robust", minute=1))
    # batch 16: both methodologies every night, official at 100 and robust at 130; a mixed
    # history's median would be 130 and tonight's official 100 would look 23 % slower
    for n in _nights(8):
        records.append(record(batch_size=16, images_per_sec=100.0, night=n, methodology="official"))
        records.append(record(batch_size=16, images_per_sec=130.0, night=n, methodology="robust", minute=2))
    _ingest_by_night(lake, records)

    table = build_reports(inputs(lake, [], []), rule=RULE).tables["regressions"]
    got = {(r["batch_size"], r["methodology"]): r for r in table.to_pylist()}

    assert set(got) == {(32, "official"), (32, "robust"), (64, "official"), (128, "robust"),
                        (16, "official"), (16, "robust")}
    official_32 = got[(32, "official")]
    assert official_32["verdict"] == "insufficient_history" and official_32["regression"] is False
    assert official_32["history_runs"] == 0  # the robust nights are not its history
    assert got[(32, "robust")]["verdict"] == "steady"  # its own latest is the night before
    assert got[(64, "official")]["verdict"] == "regression" and got[(64, "official")]["regression"]
    assert got[(64, "official")]["change"] == pytest.approx(-0.3)
    assert got[(128, "robust")]["verdict"] == "regression" and got[(128, "robust")]["regression"]
    for method, median in (("official", 100.0), ("robust", 130.0)):
        row = got[(16, method)]
        assert row["history_median"] == pytest.approx(median) and row["history_runs"] == 7
        assert row["verdict"] == "steady" and row["regression"] is False
    flagged = {key for key, row in got.items() if row["regression"]}
    assert flagged == {(64, "official"), (128, "robust")}


def test_a_record_without_methodology_continues_the_official_history(lake):
    # older records (null methodology) and new official ones are one series
    records = [record(images_per_sec=100.0, night=n, methodology=None) for n in _nights(6)[:-1]]
    records.append(record(images_per_sec=70.0, night=NIGHT, methodology="official"))
    _ingest_by_night(lake, records)
    [row] = build_reports(inputs(lake, [], []), rule=RULE).tables["regressions"].to_pylist()
    assert row["methodology"] == "official" and row["history_runs"] == 5
    assert row["verdict"] == "regression"


# ---- latest results, throughput, cost ---------------------------------------------------------
def test_each_methodology_keeps_its_own_latest_figure(lake):
    # the robust figure is newer; the official one must not disappear behind it, and neither
    # may be merged into one throughput cell
    _ingest_by_night(lake, [
        record(images_per_sec=100.0, night=NIGHT - dt.timedelta(days=3), methodology=None),
        record(images_per_sec=95.0, night=NIGHT, methodology="robust"),
    ])
    tables = build_reports(inputs(lake, [price("g5.xlarge", 1.0)], []), currency="USD").tables
    throughput = {r["methodology"]: r["images_per_sec"] for r in tables["throughput"].to_pylist()}
    assert throughput == {"official": 100.0, "robust": 95.0}
    cost = {r["methodology"]: r["cost_per_million"] for r in tables["cost_per_million"].to_pylist()}
    assert cost["official"] == pytest.approx(1.0 * 1e6 / 100.0 / 3600)
    assert cost["robust"] == pytest.approx(1.0 * 1e6 / 95.0 / 3600)
    matrix = {r["methodology"]: r["batch_32_images_per_sec"] for r in tables["throughput_matrix"].to_pylist()}
    assert matrix == {"official": 100.0, "robust": 95.0}


# ---- best_value ------------------------------------------------------------------------------
def test_best_value_ranks_each_methodology_on_its_own(lake):
    # p3 (robust) is cheaper per hour and faster than g5 (official): compared across
    # methodologies it would take rank 1 and push g5 off the Pareto front
    ingest(lake, [record(images_per_sec=1000.0, night=NIGHT, methodology="official"),
                  record(images_per_sec=900.0, night=NIGHT, methodology="robust", minute=1)])
    ingest(lake, [record(images_per_sec=2000.0, night=NIGHT, methodology="robust", gpu_model="Tesla V100")],
           instance_type="p3.2xlarge")
    prices = [price("g5.xlarge", 1.0), price("p3.2xlarge", 0.5)]
    best = build_reports(inputs(lake, prices, []), currency="USD").tables["best_value"].to_pylist()
    got = {(r["methodology"], r["instance_type"]): r for r in best}
    assert set(got) == {("official", "g5.xlarge"), ("robust", "g5.xlarge"), ("robust", "p3.2xlarge")}
    assert got[("official", "g5.xlarge")]["rank"] == 1
    assert got[("official", "g5.xlarge")]["on_pareto_front"] is True
    assert got[("robust", "p3.2xlarge")]["rank"] == 1 and got[("robust", "p3.2xlarge")]["on_pareto_front"]
    assert got[("robust", "g5.xlarge")]["rank"] == 2
    assert got[("robust", "g5.xlarge")]["on_pareto_front"] is False  # dominated within robust


# ---- scaling ---------------------------------------------------------------------------------
def test_scaling_pairs_a_series_only_with_a_baseline_of_its_methodology(lake):
    night = [
        record(batch_size=32, images_per_sec=100.0, night=NIGHT, methodology="official"),
        record(batch_size=128, gpu_count=4, images_per_sec=300.0, night=NIGHT, methodology="official"),
        record(batch_size=128, gpu_count=4, images_per_sec=360.0, night=NIGHT, methodology="robust",
               minute=1),
    ]
    ingest(lake, night)
    rows = build_reports(inputs(lake, [], [])).tables["scaling"].to_pylist()
    weak = {(r["methodology"], r["gpu_count"]): r["speedup"] for r in rows
            if r["origin"] == "measured" and r["scaling"] == "weak"}
    # no robust 1-GPU figure yet: the robust 4-GPU run has no series (never 360 / 100 = 3.6)
    assert weak == {("official", 1): 1.0, ("official", 4): pytest.approx(3.0)}

    # the night's run again, now with a robust 1-GPU figure (a run's rows are replaced whole)
    ingest(lake, [*night, record(batch_size=32, images_per_sec=90.0, night=NIGHT, methodology="robust",
                                 minute=2)])
    curve = [{"source": "white paper", "framework": "MXNet", "network": "resnet-50", "gpu_model": "V100",
              "gpu_count": n, "speedup": n * 0.9} for n in (1, 2, 4)]
    rows = build_reports(inputs(lake, [], [], curve)).tables["scaling"].to_pylist()
    weak = {(r["methodology"], r["gpu_count"]): r["speedup"] for r in rows
            if r["origin"] == "measured" and r["scaling"] == "weak"}
    assert weak[("robust", 4)] == pytest.approx(360.0 / 90.0)
    assert weak[("official", 4)] == pytest.approx(3.0)
    curves = [r for r in rows if r["origin"] == "published_curve"]
    assert curves and {r["methodology"] for r in curves} == {"official"}


# ---- the page --------------------------------------------------------------------------------
def test_the_page_names_each_figures_methodology_and_notes_mixed_networks(lake):
    ingest(lake, [record(network="resnet-50", images_per_sec=1000.0, night=NIGHT, methodology="official"),
                  record(network="resnet-50", images_per_sec=900.0, night=NIGHT, methodology="robust",
                         minute=1),
                  record(network="alexnet", images_per_sec=3000.0, night=NIGHT, methodology="official",
                         minute=2)])
    report = build_reports(inputs(lake, [price("g5.xlarge", 1.0)], []), currency="USD")
    page = render_page(report, GENERATED_AT)
    # one chart per methodology, each titled with it; never one chart holding both
    assert "resnet-50, score, batch 32: cost per million images (official methodology)" in page
    assert "resnet-50, score, batch 32: cost per million images (robust methodology)" in page
    assert "alexnet, score, batch 32: cost per million images (official methodology)" in page
    assert 'id="cost-score-resnet-50-robust"' in page
    # the note names the network with figures under two methodologies, and only that one
    note = page.split("More than one methodology: ", 1)[1].split(".", 1)[0]
    assert note == "resnet-50 (official, robust)"
    # every figure's provenance carries its methodology (the tables' "figure" column)
    assert "on ec2 (robust)" in page and "on ec2 (official)" in page
    summary = render_summary(report)
    assert "| score | resnet-50 | robust |" in summary and "| score | resnet-50 | official |" in summary


def test_a_page_of_one_methodology_has_no_mixed_note(lake):
    ingest(lake, [record(images_per_sec=1000.0, night=NIGHT, methodology="robust")])
    report = build_reports(inputs(lake, [price("g5.xlarge", 1.0)], []), currency="USD")
    page = render_page(report, GENERATED_AT)
    assert "More than one methodology" not in page
    assert "cost per million images (robust methodology)" in page


def test_the_methodology_column_is_documented_with_the_rule():
    doc = COLUMN_DOCS["methodology"]
    assert "official" in doc and "robust" in doc and "custom" in doc and "never" in doc


def test_a_hostile_methodology_in_the_lake_stays_apart_and_is_escaped_on_the_page(lake):
    """The record contract refuses unknown methodologies at ingest; a row written by another
    writer (or a tampered lake) is still kept apart and never reaches the page as markup."""
    hostile = "<script>alert('x')</script>"
    ok = record(images_per_sec=1000.0, night=NIGHT, methodology="official")
    odd = {**record(images_per_sec=5000.0, night=NIGHT, minute=1), "methodology": hostile}
    ingest(lake, [ok, odd])  # results_rows + write_results: no contract check on this path
    report = build_reports(inputs(lake, [price("g5.xlarge", 1.0)], []), currency="USD")
    best = {r["methodology"]: r for r in report.tables["best_value"].to_pylist()}
    assert best["official"]["rank"] == 1 and best[hostile]["rank"] == 1  # two rankings, one row each
    page = render_page(report, GENERATED_AT)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "More than one methodology" in page
