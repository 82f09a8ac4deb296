"""The BI contract, read back by the readers BI tools use: DuckDB, pandas, pyarrow (and Polars
when it is installed; it is not a dependency). Types are those docs/reports.md documents.

The report set is written by the real code from a lake holding measured GPU and CPU results
and figures from the real published import; the notebook API (``gpucompare.read``) must
give the same types as the Parquet files BI reads.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import gpucompare
from bench_tasks.record import validate_record
from gpucompare.lake.storage import LakeError
from gpucompare.lake.tables import open_lake
from gpucompare.prices import published
from gpucompare.reports.build import run_reports
from gpucompare.reports.report_set import DERIVED, MATRIX_BATCHES, REPORTS, ReportError, ReportOptions
from tests.support.reports_data import ingest, record

NIGHT = dt.date(2026, 3, 10)
#: The documented types of the columns BI filters and charts on (docs/reports.md).
DOCUMENTED = {
    "result_date": pa.date32(),
    "price_effective_from": pa.date32(),
    "measured_at": pa.timestamp("us", tz="UTC"),
    "flags": pa.list_(pa.string()),
    "images_per_sec": pa.float64(),
    "cost_per_million": pa.float64(),
    "gpu_count": pa.int64(),
    "batch_size": pa.int64(),
    "rank": pa.int64(),
    "ranked": pa.bool_(),
    "origin": pa.string(),
    "device_kind": pa.string(),
    "cv": pa.float64(),
    "change": pa.float64(),
}
DUCKDB = {
    pa.date32(): "DATE",
    pa.timestamp("us", tz="UTC"): "TIMESTAMP WITH TIME ZONE",
    pa.list_(pa.string()): "VARCHAR[]",
    pa.float64(): "DOUBLE",
    pa.int64(): "BIGINT",
    pa.bool_(): "BOOLEAN",
    pa.string(): "VARCHAR",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("bi")
    lake_dir = root / "lake"
    lake = open_lake(str(lake_dir))
    ingest(
        lake, [record(batch_size=b, images_per_sec=10.0 * b, night=NIGHT, minute=b // 32) for b in (32, 64)]
    )
    cpu = record(gpu_model=None, images_per_sec=20.0, night=NIGHT)
    cpu.update(device_kind="cpu", devices=["cpu:0"])
    validate_record(cpu)
    ingest(lake, [cpu], provider="local", instance_type="laptop", region=None, target="local")
    published.import_published(lake)
    out = root / "out"
    run_reports(str(lake_dir), str(out), history=str(root), report_date=dt.date(2026, 11, 30))
    return {"lake": str(lake_dir), "out": out, "root": root}


def _parquet(site, name):
    return site["out"] / name / f"{name}.parquet"


def test_pyarrow_sees_the_documented_types(site):
    for name in (*REPORTS, *DERIVED):
        written = pq.read_schema(_parquet(site, name))
        for column, expected in DOCUMENTED.items():
            if column in written.names:
                assert written.field(column).type == expected, f"{name}.{column}"
    matrix = pq.read_schema(_parquet(site, "throughput_matrix"))
    for batch in MATRIX_BATCHES:
        assert matrix.field(f"batch_{batch}_images_per_sec").type == pa.float64()
        assert matrix.field(f"batch_{batch}_status").type == pa.string()


def test_duckdb_reads_the_same_types_and_can_query_flags_as_a_list(site):
    import duckdb

    con = duckdb.connect()
    for name in (*REPORTS, *DERIVED):
        described = dict(
            (row[0], row[1])
            for row in con.execute(
                "DESCRIBE SELECT * FROM read_parquet(?)", [str(_parquet(site, name))]
            ).fetchall()
        )
        for column, expected in DOCUMENTED.items():
            if column in described:
                assert described[column] == DUCKDB[expected], f"{name}.{column}"
    flagged = con.execute(
        "SELECT count(*) FROM read_parquet(?) WHERE list_contains(flags, 'batch_scaled_x8')",
        [str(_parquet(site, "throughput"))],
    ).fetchone()[0]
    assert flagged > 0
    # the numeric matrix sums and sorts without casts
    fastest = con.execute(
        "SELECT max(batch_32_images_per_sec) FROM read_parquet(?) WHERE origin = 'measured'",
        [str(_parquet(site, "throughput_matrix"))],
    ).fetchone()[0]
    assert fastest == 320.0


def test_pandas_and_the_notebook_api_agree_with_the_files(site):
    import pandas as pd

    for name in ("cost_per_million", "best_value", "throughput_matrix"):
        from_file = pd.read_parquet(_parquet(site, name), dtype_backend="pyarrow")
        from_api = gpucompare.read(name, lake=site["lake"], currency="EUR")
        assert list(from_api.columns) == list(from_file.columns), name
        for column in from_api.columns:
            assert from_api[column].dtype.pyarrow_dtype == from_file[column].dtype.pyarrow_dtype, (
                name,
                column,
            )
    cost = gpucompare.read("cost_per_million", lake=site["lake"])
    assert cost["flags"].dtype.pyarrow_dtype == pa.list_(pa.string())
    assert cost["result_date"].dtype.pyarrow_dtype == pa.date32()
    laptop = cost[cost["instance_type"] == "laptop"]
    assert list(laptop["device_kind"]) == ["cpu"]
    results = gpucompare.read("results", lake=site["lake"])
    assert {"mode", "date", "flags"} <= set(results.columns) and len(results) > 300
    with pytest.raises(ReportError, match="'nope' is not one of results, prices"):
        gpucompare.read("nope", lake=site["lake"])


def test_as_of_reads_the_lake_as_it_was(site):
    """The notebook API passes ``as_of`` to the lake: at results version 0 (the first GPU
    ingest) there is neither the CPU run nor a published figure, both of which are there now."""
    now = gpucompare.read("cost_per_million", lake=site["lake"])
    then = gpucompare.read("cost_per_million", lake=site["lake"], as_of=0)
    assert set(now["origin"]) == {"measured", "published"} and "laptop" in set(now["instance_type"])
    assert set(then["origin"]) == {"measured"} and "laptop" not in set(then["instance_type"])
    assert sorted(then["batch_size"]) == [32, 64]
    assert then["result_date"].dtype.pyarrow_dtype == pa.date32()  # same BI types back in time
    with pytest.raises(LakeError, match="neither a table version"):
        gpucompare.read("best_value", lake=site["lake"], as_of="not a version")


def test_report_history_reads_as_one_table_over_time(site):
    history = gpucompare.read_history("cost_per_million", reports=str(site["root"]))
    assert set(history["report_date"]) == {dt.date(2026, 11, 30)}
    assert history["report_date"].dtype.pyarrow_dtype == pa.date32()
    assert len(history) == pq.read_metadata(_parquet(site, "cost_per_million")).num_rows
    assert gpucompare.read_history("best_value", reports=str(site["root"] / "elsewhere")).empty


def test_csv_keeps_stable_column_types(site):
    matrix = pacsv.read_csv(site["out"] / "throughput_matrix.csv")
    for batch in MATRIX_BATCHES:
        # an all-empty column reads as null; otherwise numbers, never "oom" in a number column
        assert pa.types.is_floating(
            matrix.schema.field(f"batch_{batch}_images_per_sec").type
        ) or pa.types.is_null(matrix.schema.field(f"batch_{batch}_images_per_sec").type)
    throughput = pacsv.read_csv(site["out"] / "throughput.csv")
    joined = [f for f in throughput["flags"].to_pylist() if f]
    assert joined and all(";" in f or f in published_flags() for f in joined)


def published_flags() -> set[str]:
    from gpucompare.lake import schema

    return set(schema.FLAGS)


def test_polars_reads_the_same_types(site):
    """Polars is a test requirement (requirements.txt), so this always runs."""
    import polars

    frame = polars.read_parquet(_parquet(site, "best_value"))
    assert frame.schema["flags"] == polars.List(polars.String)
    assert frame.schema["result_date"] == polars.Date


def test_the_example_script_finds_the_cheapest_machine_and_its_cost_over_time(site, tmp_path):
    """scripts/cheapest_per_network.py in a real process, on the published 2017 figures (ranked
    here on purpose: the month asked for is theirs) and two days of report history."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    history_root = tmp_path / "reports"
    options = ReportOptions(rank_old_published=True)
    for day in (dt.date(2026, 11, 29), dt.date(2026, 11, 30)):
        run_reports(
            site["lake"],
            str(tmp_path / day.isoformat()),
            options=options,
            history=str(history_root),
            report_date=day,
        )
    env = dict(os.environ, GPUCOMPARE_RANK_OLD_PUBLISHED="true", GPUCOMPARE_CURRENCY="EUR")
    done = subprocess.run(
        [
            sys.executable,
            "scripts/cheapest_per_network.py",
            "--lake",
            site["lake"],
            "--reports",
            str(history_root),
        ]
        + ["--month", "2017-06", "--mode", "score"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    best = gpucompare.read("best_value", lake=site["lake"], options=options)
    june = best[(best["mode"] == "score") & best["ranked"] & (best["result_date"] == published.PUBLISHED_ON)]
    for network, rows in june.groupby("network"):
        cheapest = rows.sort_values("cost_per_million").iloc[0]
        line = next(line for line in done.stdout.splitlines() if line.strip().startswith(network + " "))
        assert f"{cheapest['provider']} {cheapest['instance_type']}" in line
        assert f"{cheapest['cost_per_million']:.4f} EUR" in line
    assert done.stdout.count("cost over 2 report days") == june["network"].nunique()
    assert "+0.0 %" in done.stdout  # same lake, same prices on both days: no move
