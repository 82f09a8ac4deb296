"""One failing report never stops the others; throughput_matrix has a fixed width and
throughput_by_batch holds every batch size (issue 23).

Real lake (deltalake), real DuckDB, the ``report`` command's own ``main``. A failing report is
stood in for by a builder that raises (any exception a report may meet on a row it cannot
handle: before, the 1e13 images/s row raised ZeroDivisionError in the page and ``report``
exited 1 with nothing but the tables written, no summary.md and no manifest.json).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucompare import cli
from gpucompare.lake import ingest as lake_ingest
from gpucompare.lake import tables as lake
from gpucompare.reports import build, publish
from gpucompare.reports.inputs import ReportInputs
from gpucompare.reports.report_set import MATRIX_BATCHES
from gpucompare.resources import sql_dir
from tests.support.lake_support import run_records, write_records


@pytest.fixture
def small_lake(tmp_path: Path) -> str:
    """Twelve results of one run, batch sizes 1 to 12 (3, 5, 6, 7, 9, 10, 11, 12 are outside
    MATRIX_BATCHES)."""
    uri = str(tmp_path / "lake")
    results = write_records(tmp_path / "r.jsonl", run_records("r1", 12))
    context = lake_ingest.RunContext("local", "cpu")
    lake_ingest.ingest_results(lake.open_lake(uri), results, context, run_id="r1")
    return uri


def test_a_failing_report_and_page_are_recorded_and_the_rest_is_written(
    small_lake: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    def broken(_build: object) -> None:
        raise ZeroDivisionError("float division by zero")

    def broken_page(_report_set: object, _generated_at: object) -> str:
        raise OverflowError("cannot draw 1e13")

    monkeypatch.setitem(build.BUILDERS, "scaling", broken)
    monkeypatch.setattr(publish, "render_page", broken_page)
    out = tmp_path / "out"
    code = cli.main(["report", "--lake", small_lake, "--out", str(out), "--history", str(tmp_path / "hist")])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "scaling failed: ZeroDivisionError: float division by zero" in err
    assert "index.html failed: OverflowError: cannot draw 1e13" in err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["failures"] == {"scaling": "ZeroDivisionError: float division by zero",
                                    "index.html": "OverflowError: cannot draw 1e13"}
    assert manifest["table_versions"]["results"] == 0
    summary = (out / "summary.md").read_text()
    assert "## Failed: 2 part(s) of this report set" in summary
    assert "- scaling: ZeroDivisionError: float division by zero" in summary
    for name in ("cost_per_million", "throughput", "best_value", "regressions", "throughput_by_batch"):
        assert (out / f"{name}.csv").is_file() and (out / name / f"{name}.parquet").is_file(), name
        assert (tmp_path / "hist" / "report_history" / name).is_dir(), name
    assert not (out / "scaling.csv").exists() and not (out / "index.html").exists()


def test_without_failures_the_manifest_says_so_and_the_command_exits_0(
    small_lake: str, tmp_path: Path
) -> None:
    assert cli.main(["report", "--lake", small_lake, "--out", str(tmp_path / "out")]) == 0
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["failures"] == {}
    assert "Failed" not in (tmp_path / "out" / "summary.md").read_text()


def test_throughput_matrix_has_fixed_columns_and_throughput_by_batch_every_size(small_lake: str) -> None:
    """Before: each batch size outside MATRIX_BATCHES added two columns (10,000 sizes: SIGFPE in
    DuckDB), and BI on Athena could not see them; there was no throughput_by_batch."""
    tables = build.build_reports(ReportInputs.from_lake(small_lake)).tables
    batch_columns = [c for c in tables["throughput_matrix"].column_names if c.startswith("batch_")]
    pairs = ("images_per_sec", "status")
    assert batch_columns == [f"batch_{b}_{what}" for b in MATRIX_BATCHES for what in pairs]
    long = tables["throughput_by_batch"]
    assert sorted(long.column("batch_size").to_pylist()) == list(range(1, 13))
    row = next(r for r in long.to_pylist() if r["batch_size"] == 7)
    assert row["images_per_sec"] == 10.0 + 6 and row["status"] == "ok" and row["mode"] == "score"
    ddl = (sql_dir() / "athena" / "reports.sql").read_text()
    history = (sql_dir() / "athena" / "report_history.sql").read_text()
    for text, table in ((ddl, "throughput_by_batch ("), (history, "throughput_by_batch_history (")):
        statement = text.split(table, 1)[1].split("\n)", 1)[0]
        assert "`batch_size` bigint" in statement and "`images_per_sec` double" in statement
