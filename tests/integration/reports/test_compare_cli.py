"""``python -m gpucompare compare`` as a process: on the shipped published figures (two machines)
and on two nights measured by the real worker (MXNet on the CPU, the demo's AlexNet scoring with
6 repeats) ingested with ``gpucompare ingest``; bad arguments exit 2 naming the allowed values."""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpucompare import resources
from gpucompare.reports import stats
from tests.conftest import REPO_ROOT
from tests.support.bench_helpers import run_bench_python
from tests.support.worker_support import read_records


def _gpucompare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpucompare", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ))


@pytest.fixture(scope="module")
def published_lake(tmp_path_factory: pytest.TempPathFactory) -> str:
    lake = str(tmp_path_factory.mktemp("published") / "lake")
    done = _gpucompare("import-published", "--lake", lake)
    assert done.returncode == 0, done.stderr
    return lake


def _published_ratios(a: str, b: str) -> dict[tuple, float]:
    """B / A of every configuration both machines published ok, from the shipped CSV itself."""
    figures: dict[str, dict[tuple, float]] = {a: {}, b: {}}
    with open(resources.data_dir("published") / "published_results.csv", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row["instance_type"] in figures and row["status"] == "ok" and row["images_per_sec"]:
                key = (row["mode"], row["network"], int(row["batch_size"]), int(row["gpu_count"]))
                figures[row["instance_type"]][key] = float(row["images_per_sec"])
    return {k: figures[b][k] / figures[a][k] for k in figures[a].keys() & figures[b].keys()}


def test_compare_two_published_machines(published_lake: str, tmp_path: Path) -> None:
    done = _gpucompare("compare", "--lake", published_lake, "--by", "machine", "leadergpu/ltbv14",
                       "leadergpu/ltbv19", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    ratios = _published_ratios("ltbv14", "ltbv19")
    geomean = math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios)) - 1
    table = pq.read_table(tmp_path / "compare.parquet").to_pylist()
    both = [row for row in table[:-1] if row["present"] == "both"]
    assert len(both) == len(ratios) and table[-1]["network"] == "geomean"
    assert table[-1]["change"] == pytest.approx(geomean)
    covers = f"over {len(ratios)} of {len(table) - 1} configurations (those measured on both sides)"
    assert table[-1]["note"] == covers
    assert "geomean" in done.stdout and f"{geomean * 100:+.1f}%" in done.stdout
    # one published figure against one: never significant, so every change prints as "~"
    assert all(not row["significant"] and row["p_value"] == 1.0 for row in both)
    lines = [line for line in done.stdout.splitlines() if line.startswith(("score ", "train "))]
    assert len(lines) == len(table) - 1
    assert sum(" ~ " in line and "n=1+1" in line for line in lines) == len(ratios)
    assert "~ with few samples: n=1+1" in done.stdout
    assert "gpucompare compare: lake " in done.stderr  # the lake line every command prints


@pytest.mark.parametrize(("args", "needles"), [
    (["--by", "gpu", "a/b", "c/d"], ["--by", "machine", "night", "runtime"]),
    (["--by", "machine", "leadergpu", "leadergpu/ltbv19"], ["provider/instance_type[/region[/market]]"]),
    (["--by", "machine", "leadergpu/none", "leadergpu/ltbv19"], ["'leadergpu/none'", "leadergpu/ltbv14"]),
    (["--by", "machine", "leadergpu/ltbv14/x/cheap", "leadergpu/ltbv19"],
     ["market 'cheap'", "on_demand, spot"]),
    (["--by", "night", "2031-01-01", "2017-06-01"], ["'2031-01-01'", "nights in the lake"]),
    (["--by", "runtime", "pip-cu112", "cpu"], ["--by runtime"]),
    (["--by", "machine", "a/b", "c/d", "--nights", "0"], ["--nights", "1 to 365"]),
])
def test_bad_arguments_exit_2_naming_the_allowed_values(published_lake: str, args: list[str],
                                                        needles: list[str]) -> None:
    done = _gpucompare("compare", "--lake", published_lake, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    for needle in needles:
        assert needle in done.stderr


def _night(tmp_path: Path, run_id: str, lake: str) -> list[dict]:
    output = tmp_path / f"{run_id}.jsonl"
    run_bench_python(["-m", "bench_tasks", "sweep", "--modes", "score", "--networks", "alexnet",
                      "--batch-sizes", "1,2", "--warmup", "1", "--batches", "3", "--repeats", "6",
                      "--run-id", run_id, "--output", str(output)], check=True, timeout=600)
    done = _gpucompare("ingest", "--results", str(output), "--lake", lake, "--provider", "local",
                       "--instance-type", "local-cpu", "--run-id", run_id)
    assert done.returncode == 0, done.stderr
    return read_records(output)


def test_compare_two_measured_nights_and_pool_them_in_the_report(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    first, second = _night(tmp_path, "night-1", lake), _night(tmp_path, "night-2", lake)
    done = _gpucompare("compare", "--lake", lake, "--by", "night", "night-1", "night-2", "--out",
                       str(tmp_path / "cmp"))
    assert done.returncode == 0, done.stderr
    print(done.stdout)
    rows = pq.read_table(tmp_path / "cmp" / "compare.parquet").to_pylist()
    assert [r["batch_size"] for r in rows[:-1]] == [1, 2] and rows[-1]["network"] == "geomean"
    for row, a, b in zip(rows[:-1], first, second, strict=True):
        a_samples, b_samples = a["images_per_sec_samples"], b["images_per_sec_samples"]
        assert row["a_samples"] == row["b_samples"] == 6
        assert row["p_value"] == pytest.approx(stats.mann_whitney(a_samples, b_samples).p_value)
        assert row["change"] == pytest.approx(b["images_per_sec"] / a["images_per_sec"] - 1)
        assert row["a_low"] == stats.median_interval(a_samples).low
        interval = stats.ratio_interval(a_samples, b_samples)
        assert row["change_low"] == pytest.approx(interval.low - 1)
        line = next(x for x in done.stdout.splitlines() if f"b{row['batch_size']} x1" in x)
        assert (" ~ " in line) is (not row["significant"]) and "n=6+6" in line
    report = _gpucompare("report", "--lake", lake, "--out", str(tmp_path / "out"), "--nights", "2")
    assert report.returncode == 0, report.stderr
    throughput = pq.read_table(tmp_path / "out" / "throughput" / "throughput.parquet").to_pylist()
    assert {(r["batch_size"], r["samples"], r["nights"]) for r in throughput} == {(1, 12, 2), (2, 12, 2)}
