"""``python -m gpucompare report`` end to end, on a local lake and on S3 (moto's server).

The S3 test stands in moto's ThreadedMotoServer on 127.0.0.1 for AWS itself; the lake is
read through pyarrow's S3 filesystem (wrapped for DuckDB's reader), with no DuckDB extension.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from gpucompare.lake.tables import open_lake
from gpucompare.reports.build import build_reports
from gpucompare.reports.inputs import ReportInputs
from gpucompare.reports.report_set import DERIVED, REPORTS
from tests.conftest import REPO_ROOT
from tests.support.reports_data import ingest, record

FILES = [f"{name}.csv" for name in (*REPORTS, *DERIVED)] + ["index.html", "summary.md"]


def _gpucompare(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpucompare", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env or dict(os.environ),
    )


def _small_lake(lake) -> None:
    # a machine the shipped price list knows (g5.xlarge, us-east-1) and one it does not
    for day in range(1, 6):
        night = dt.date(2026, 3, day)
        ingest(
            lake,
            [
                record(images_per_sec=1000.0 + day, night=night),
                record(images_per_sec=300.0, batch_size=8, night=night, minute=1),
            ],
        )
    ingest(
        lake,
        [record(images_per_sec=50.0)],
        provider="local",
        instance_type="this-host",
        region=None,
        target="local",
    )


def test_report_command_writes_every_file(tmp_path):
    lake_dir, out = tmp_path / "lake", tmp_path / "reports"
    _small_lake(open_lake(str(lake_dir)))

    done = _gpucompare("report", "--lake", str(lake_dir), "--out", str(out), "--currency", "usd")

    assert done.returncode == 0, done.stderr
    assert "1 result(s) without a price" in done.stdout
    # where each section came from: 2 configurations of g5 (5 nights, the latest kept) + the local run
    assert "cost_per_million   measured 3 (newest 2026-03-10) · published 0" in done.stdout
    assert "best_value ranking: published figures before" in done.stdout
    assert "report cache" not in done.stdout  # the first report reads every file
    again = _gpucompare("report", "--lake", str(lake_dir), "--out", str(out), "--currency", "usd")
    assert "newest results found reading 0 of 6 results file(s); the rest from the lake's report cache" \
        in again.stdout
    for name in FILES:
        assert (out / name).stat().st_size > 0, name
    for name in REPORTS:
        assert (
            pq.read_table(out / name / f"{name}.parquet").num_rows
            == pacsv.read_csv(out / f"{name}.csv").num_rows
        )
    cost = pacsv.read_csv(out / "cost_per_million.csv").to_pylist()
    assert {row["currency"] for row in cost} == {"USD"}
    priced = [row for row in cost if row["instance_type"] == "g5.xlarge"]
    assert priced and all(row["cost_per_million"] > 0 for row in priced)
    assert [row["price_source"] for row in cost if row["provider"] == "local"] == ["missing"]
    # the lake has no published curves imported: the shipped ones are drawn beside ours
    curves = [
        row for row in pacsv.read_csv(out / "scaling.csv").to_pylist() if row["origin"] == "published_curve"
    ]
    assert {row["network"] for row in curves} >= {"googlenet", "inception-bn"}


def test_report_command_keeps_history_and_takes_the_ranking_flags(tmp_path):
    lake_dir, out = tmp_path / "lake", tmp_path / "reports"
    _small_lake(open_lake(str(lake_dir)))
    done = _gpucompare(
        "report",
        "--lake",
        str(lake_dir),
        "--out",
        str(out / "today"),
        "--history",
        str(out),
        "--published-max-age-years",
        "10",
        "--rank-flagged",
    )
    assert done.returncode == 0, done.stderr
    assert "every priced figure ranked" not in done.stdout
    assert "flagged figures not ranked" not in done.stdout  # --rank-flagged
    history = list((out / "report_history" / "best_value").glob("report_date=*/best_value.parquet"))
    assert len(history) == 1

    refused = _gpucompare(
        "report", "--lake", str(lake_dir), "--out", str(tmp_path / "o"), "--published-max-age-years", "-3"
    )
    assert refused.returncode == 2 and "--published-max-age-years" in refused.stderr
    assert not (tmp_path / "o").exists()


def test_report_command_refuses_a_bad_currency(tmp_path):
    done = _gpucompare(
        "report", "--lake", str(tmp_path / "lake"), "--out", str(tmp_path / "o"), "--currency", "GBP"
    )
    assert done.returncode == 2
    assert "--currency" in done.stderr and "EUR" in done.stderr and "USD" in done.stderr
    assert not (tmp_path / "o").exists()


def test_reports_from_and_to_s3(aws_endpoint, s3_bucket, tmp_path):
    lake_uri, out_uri = f"s3://{s3_bucket}/lake", f"s3://{s3_bucket}/reports/2026-03-05"
    _small_lake(open_lake(lake_uri))

    done = _gpucompare("report", "--lake", lake_uri, "--out", out_uri)

    assert done.returncode == 0, done.stderr
    location = open_lake(out_uri)
    for name in FILES:
        assert location.fs.get_file_info(location.path(name)).size > 0, name
    with location.fs.open_input_file(location.path("cost_per_million/cost_per_million.parquet")) as stream:
        cost = pq.read_table(stream).to_pylist()
    assert {row["provider"] for row in cost} == {"aws", "local"}
    assert {row["currency"] for row in cost} == {"EUR"}
    # same answers as from a local copy of the same lake
    local = open_lake(str(tmp_path / "lake"))
    _small_lake(local)
    expected = build_reports(ReportInputs.from_lake(str(tmp_path / "lake"))).tables
    assert sorted(r["cost_per_million"] or 0 for r in cost) == pytest.approx(
        sorted(r["cost_per_million"] or 0 for r in expected["cost_per_million"].to_pylist())
    )
