"""Every figure says where and when it comes from, and the ranking admits only what it should.

A small lake holds a measured machine (2026) and figures imported from a publication
through the real import (``published.import_published`` on a CSV written here: 2017, one
of them flagged ``batch_scaled_x8``); the expected ranks are worked out in each test from
the prices and throughputs written, never copied from the output.
"""

from __future__ import annotations

import ast
import csv
import datetime as dt
import re
from pathlib import Path

import pyarrow as pa
import pytest

from bench_tasks.record import validate_record
from gpucompare.lake.tables import open_lake
from gpucompare.prices import published
from gpucompare.reports import formatting
from gpucompare.reports.athena import athena_ddl, report_schemas
from gpucompare.reports.build import build_reports, options_from_settings
from gpucompare.reports.page import render_page
from gpucompare.reports.publish import write_history
from gpucompare.reports.report_set import COLUMN_DOCS, ReportError, ReportOptions, column_doc
from gpucompare.reports.summary import describe_provenance
from gpucompare.settings import SettingError
from tests.conftest import REPO_ROOT
from tests.support.page_site import GENERATED_AT
from tests.support.reports_data import fx, ingest, inputs, price, record, rows

NIGHT = dt.date(2026, 3, 10)
TODAY = dt.date(2026, 11, 30)
SOURCE = "Test article (2017)"
#: instance type: (images/s at batch 32, EUR per minute, note)
PUBLISHED = {
    "ltbv14": (3000.0, 0.06, ""),  # cheaper than the measured g5 but from 2017
    "ltbv15": (9000.0, 0.06, "batch labels multiplied by 8"),  # cheapest of all, flagged
}


def _published_csv(path: Path) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=published.RESULT_COLUMNS)
        writer.writeheader()
        for instance_type, (speed, _per_minute, note) in PUBLISHED.items():
            writer.writerow(
                {
                    "source": SOURCE,
                    "provider": "leadergpu",
                    "instance_type": instance_type,
                    "gpu_model": "GTX 1080",
                    "gpu_count": "1",
                    "mode": "score",
                    "network": "resnet-50",
                    "batch_size": "32",
                    "images_per_sec": str(speed),
                    "status": "ok",
                    "published_value": str(speed),
                    "note": note,
                }
            )
    return path


def _cpu_record(**values) -> dict:
    row = record(gpu_model=None, **values)
    row.update(device_kind="cpu", devices=["cpu:0"], config_id=row["config_id"] + "-cpu")
    return validate_record(row)


@pytest.fixture(scope="module")
def lake_inputs(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("provenance")
    lake = open_lake(str(tmp_path / "lake"))
    ingest(lake, [record(network="resnet-50", batch_size=32, images_per_sec=1000.0, night=NIGHT)])
    ingest(
        lake,
        [_cpu_record(network="resnet-50", batch_size=32, images_per_sec=20.0, night=NIGHT)],
        provider="local",
        instance_type="laptop",
        region=None,
        target="local",
    )
    published.import_published(
        lake, results_csv=_published_csv(tmp_path / "published.csv"), prices_csv=None, scaling_csv=None
    )
    prices = [price("g5.xlarge", 2.0, currency="EUR")] + [
        price(
            t,
            per_minute,
            provider="leadergpu",
            region=None,
            currency="EUR",
            unit="minute",
            effective_from=dt.date(2017, 1, 1),
        )
        for t, (_speed, per_minute, _note) in PUBLISHED.items()
    ]
    return inputs(lake, prices, [fx(1.1, dt.date(2017, 1, 1))])


def _costs() -> dict[str, float]:
    """EUR per million images of each machine, from the inputs above."""
    costs = {"g5.xlarge": 2.0 * (1e6 / 1000.0) / 3600}
    for t, (speed, per_minute, _note) in PUBLISHED.items():
        costs[t] = per_minute * 60 * (1e6 / speed) / 3600
    assert costs["ltbv15"] < costs["ltbv14"] < costs["g5.xlarge"]  # the order the tests rely on
    return costs


def _ranking(report) -> dict[str, tuple]:
    return {
        r["instance_type"]: (r["rank"], r["ranked"], r["not_ranked_reason"])
        for r in rows(report.tables["best_value"], network="resnet-50", mode="score")
    }


def test_old_published_and_flagged_figures_are_shown_but_not_ranked_by_default(lake_inputs):
    _costs()
    report = build_reports(lake_inputs, options=ReportOptions(report_date=TODAY))
    assert _ranking(report) == {
        "g5.xlarge": (1, True, None),
        "ltbv14": (None, False, "old_published"),  # 2017 < 2023-11-30
        "ltbv15": (None, False, "flagged"),
    }
    best = {r["instance_type"]: r for r in report.tables["best_value"].to_pylist()}
    assert best["g5.xlarge"]["on_pareto_front"] and not best["ltbv14"]["on_pareto_front"]
    assert best["ltbv15"]["flags"] == ["batch_scaled_x8"]
    # the page says so next to the ranking and on the bars
    page = render_page(report, GENERATED_AT)
    assert "published figures dated before 2023-11-30 (older than 3 years) are shown but not ranked" in page
    assert "not ranked: flagged (batch_scaled_x8)" in page
    assert "Best buy: aws g5.xlarge" in page


def test_settings_rank_old_published_and_flagged_figures_when_asked(lake_inputs):
    costs = _costs()
    old = build_reports(
        lake_inputs, options=ReportOptions(report_date=TODAY, rank_old_published=True)
    )
    assert _ranking(old) == {
        "ltbv14": (1, True, None),
        "g5.xlarge": (2, True, None),
        "ltbv15": (None, False, "flagged"),
    }
    everything = build_reports(
        lake_inputs,
        options=ReportOptions(report_date=TODAY, rank_old_published=True, rank_flagged=True),
    )
    expected = {t: rank for rank, t in enumerate(sorted(costs, key=costs.get), start=1)}
    assert {t: r[0] for t, r in _ranking(everything).items()} == expected
    # the age limit counts from the report date: in 2019 the 2017 figures were recent
    in_2019 = build_reports(
        lake_inputs, options=ReportOptions(report_date=dt.date(2019, 1, 1))
    )
    assert _ranking(in_2019)["ltbv14"] == (1, True, None)
    one_year = ReportOptions(report_date=dt.date(2019, 1, 1), published_max_age_years=1)
    assert _ranking(build_reports(lake_inputs, options=one_year))["ltbv14"][2] == "old_published"


@pytest.mark.parametrize("age", [-1, 101, "3", True])
def test_a_bad_age_limit_is_refused_with_the_setting_named(lake_inputs, age):
    with pytest.raises(ReportError, match="published_max_age_years"):
        build_reports(lake_inputs, options=ReportOptions(published_max_age_years=age))


def test_every_figure_carries_its_dates_origin_and_device_kind(lake_inputs):
    tables = build_reports(lake_inputs, options=ReportOptions(report_date=TODAY)).tables
    for name in ("cost_per_million", "best_value", "throughput", "scaling", "throughput_matrix"):
        columns = tables[name].column_names
        assert {"origin", "result_date", "device_kind"} <= set(columns), name
    for name in ("cost_per_million", "best_value", "throughput", "scaling"):
        assert tables[name].schema.field("flags").type == pa.list_(pa.string()), name
        assert {"measured_at", "result_source"} <= set(tables[name].column_names)
    for name in ("cost_per_million", "best_value"):
        assert "price_effective_from" in tables[name].column_names
    cost = {r["instance_type"]: r for r in tables["cost_per_million"].to_pylist()}
    assert cost["ltbv14"]["origin"] == "published" and cost["ltbv14"]["result_source"] == SOURCE
    assert cost["ltbv14"]["result_date"] == published.PUBLISHED_ON
    # a published figure has no run: its measured_at is the publication date (not empty)
    assert cost["ltbv14"]["measured_at"] == dt.datetime(2017, 6, 1, tzinfo=dt.UTC)
    assert cost["ltbv14"]["price_effective_from"] == dt.date(2017, 1, 1)
    assert cost["g5.xlarge"]["origin"] == "measured" and cost["g5.xlarge"]["result_date"] == NIGHT
    assert cost["g5.xlarge"]["price_effective_from"] == dt.date(2025, 1, 1)
    assert cost["g5.xlarge"]["flags"] == [] and cost["ltbv15"]["flags"] == ["batch_scaled_x8"]
    assert cost["laptop"]["device_kind"] == "cpu" and cost["g5.xlarge"]["device_kind"] == "gpu"


def test_cpu_runs_say_cpu_never_gpus(lake_inputs):
    report = build_reports(lake_inputs, options=ReportOptions(report_date=TODAY))
    [laptop] = rows(report.tables["throughput"], instance_type="laptop")
    assert formatting.devices(laptop) == "CPU"
    assert formatting.machine_label(laptop) == "local laptop (CPU)"
    page = render_page(report, GENERATED_AT)
    missing = page[page.index('id="missing"') :]
    assert "local laptop (CPU)" in missing and ">CPU</td>" in missing
    assert "GPUs 1" not in page and "1 GPU</td>" not in missing


def test_provenance_counts_measured_and_published_rows_with_their_newest_dates(lake_inputs):
    report = build_reports(lake_inputs, options=ReportOptions(report_date=TODAY))
    found = report.provenance()
    assert found["cost_per_million"] == {"measured": (2, NIGHT), "published": (2, published.PUBLISHED_ON)}
    assert found["best_value"] == {"measured": (1, NIGHT), "published": (2, published.PUBLISHED_ON)}
    text = describe_provenance(report)
    assert "cost_per_million   measured 2 (newest 2026-03-10) · published 2 (newest 2017-06-01)" in text
    assert "published figures before 2023-11-30 not ranked" in text


def test_history_keeps_one_hive_partition_a_day_readable_by_duckdb(lake_inputs, tmp_path):
    import duckdb

    root = tmp_path / "reports"
    for day in (dt.date(2026, 11, 29), dt.date(2026, 11, 30), dt.date(2026, 11, 30)):  # the 30th twice
        report = build_reports(lake_inputs, options=ReportOptions(report_date=day))
        write_history(report.tables, str(root), day)
    folders = sorted(p.name for p in (root / "report_history" / "cost_per_million").iterdir())
    assert folders == ["report_date=2026-11-29", "report_date=2026-11-30"]  # rebuilt day replaced
    con = duckdb.connect()
    got = con.execute(
        "SELECT report_date, count(*) FROM read_parquet(?, hive_partitioning = true, "
        "hive_types = {'report_date': 'DATE'}) GROUP BY 1 ORDER BY 1",
        [str(root / "report_history" / "best_value" / "*" / "*.parquet")],
    ).fetchall()
    assert got == [(dt.date(2026, 11, 29), 3), (dt.date(2026, 11, 30), 3)]


def test_every_report_column_is_documented_with_its_unit_everywhere(lake_inputs, tmp_path):
    import pyarrow.parquet as pq

    report = build_reports(lake_inputs, str(tmp_path / "out"))
    # the reports' reference page, docs/reports.md, as a whole
    section = (REPO_ROOT / "docs" / "reports.md").read_text(encoding="utf-8")
    # the column lists are written as code: `provider, instance_type, ...`
    prose = re.sub(r"```.*?```", "", section, flags=re.S)
    in_code = set(re.findall(r"[a-z0-9_<>]+", " ".join(re.findall(r"`([^`]+)`", prose))))
    ddl = athena_ddl()["reports.sql"]
    for name, table in report.tables.items():
        written = pq.read_schema(tmp_path / "out" / name / f"{name}.parquet")
        for column in table.column_names:
            doc = column_doc(column)
            assert doc, f"{name}.{column} has no doc"
            assert written.field(column).metadata[b"doc"].decode() == doc
            if not column.startswith("batch_"):  # those are documented once, as batch_<n>_…
                assert column in in_code, f"docs/reports.md lacks {name}.{column}"
        for column in report_schemas()[name].names:
            assert f"`{column}` " in ddl and f"COMMENT '{column_doc(column)}'" in ddl
    assert {"batch_<n>_images_per_sec", "batch_<n>_status"} <= in_code
    for column in ("cv", "change", "efficiency"):  # the fractions say they are fractions
        assert "fraction" in COLUMN_DOCS[column]


def test_the_page_renderers_import_neither_the_builder_nor_anything_that_does_io():
    """page.py, its section modules and summary.py render strings from the built tables only."""
    folder = REPO_ROOT / "plugins" / "gpucompare" / "reports"
    renderers = [folder / "page.py", folder / "summary.py", *sorted(folder.glob("page_*.py"))]
    assert len(renderers) >= 6
    for path in renderers:
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                imported.add(node.module or "")
                imported.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        forbidden = {"gpucompare.reports.build", "gpucompare.reports.inputs", "gpucompare.reports.publish",
                     "gpucompare.reports.athena", "duckdb", "os", "pathlib", "pyarrow.fs", "pyarrow.parquet",
                     "gpucompare.lake.tables", "gpucompare.lake.reading"}
        assert not imported & forbidden, (path.name, imported & forbidden)


@pytest.mark.parametrize(
    ("variable", "value"),
    [("GPUCOMPARE_RANK_FLAGGED", "maybe"), ("GPUCOMPARE_PUBLISHED_MAX_AGE_YEARS", "3y; DROP TABLE x")],
)
def test_bad_ranking_settings_are_refused_with_the_variable_named(monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingError, match=variable):
        options_from_settings()


def test_ranking_settings_are_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("GPUCOMPARE_RANK_FLAGGED", "true")
    monkeypatch.setenv("GPUCOMPARE_PUBLISHED_MAX_AGE_YEARS", "5")
    assert options_from_settings() == ReportOptions(
        published_max_age_years=5, rank_flagged=True, rank_old_published=False
    )
