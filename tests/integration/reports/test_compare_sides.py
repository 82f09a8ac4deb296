"""``compare`` on small lakes written through the real ingest path (stands in for two machines'
nightly results: the repeats are chosen here, so the expected rows are worked out here):
configurations on one side only, different batch sizes, zero variance, one sample, the
few-samples footnote and a CPU machine against a GPU machine."""

from __future__ import annotations

import datetime as dt
import math
import statistics

import numpy as np
import pytest

from bench_tasks.record import validate_record
from gpucompare.lake.tables import open_lake
from gpucompare.reports import compare
from tests.support.reports_data import fx, ingest, inputs, record

NIGHT = dt.date(2026, 3, 10)


def measured(samples: list[float], **overrides: object) -> dict:
    """A record whose repeats are ``samples``."""
    base = record(images_per_sec=statistics.median(samples), night=NIGHT, **overrides)
    base.update(images_per_sec_samples=list(samples), repeats=len(samples),
                cv=float(np.std(samples) / np.mean(samples)))
    return validate_record(base)


@pytest.fixture
def lake(tmp_path):
    return open_lake(str(tmp_path / "lake"))


def _compare(lake, a: str = "aws/g5.xlarge", b: str = "aws/g4dn.xlarge") -> tuple[list[dict], str]:
    table = compare.compare(inputs(lake, [], [fx(1.0, dt.date(2025, 1, 1))]), "machine", a, b)
    return table.to_pylist(), compare.render(table, "machine", a, b)


def test_one_sided_configurations_and_other_batch_sizes_show_with_the_other_side_empty(lake):
    rng = np.random.default_rng(5)
    a = {b: [float(v) for v in rng.normal(100.0 * b, 2.0 * b, 6)] for b in (1, 2, 4)}
    b = {b: [float(v) for v in rng.normal(120.0 * b, 2.0 * b, 6)] for b in (1, 2, 8)}
    ingest(lake, [measured(s, batch_size=size) for size, s in a.items()], instance_type="g5.xlarge")
    ingest(lake, [measured(s, batch_size=size) for size, s in b.items()], instance_type="g4dn.xlarge")
    rows, text = _compare(lake)
    print(text)
    by_batch = {r["batch_size"]: r for r in rows[:-1]}
    assert [r["batch_size"] for r in rows[:-1]] == [1, 2, 4, 8]
    assert [by_batch[s]["present"] for s in (1, 2, 4, 8)] == ["both", "both", "A only", "B only"]
    only_a = by_batch[4]
    assert only_a["a_images_per_sec"] == statistics.median(a[4]) and only_a["b_images_per_sec"] is None
    assert only_a["change"] is None and only_a["p_value"] is None and only_a["b_samples"] is None
    assert by_batch[8]["a_images_per_sec"] is None and by_batch[8]["b_samples"] == 6
    ratios = [statistics.median(b[s]) / statistics.median(a[s]) for s in (1, 2)]
    geomean = rows[-1]
    assert geomean["network"] == "geomean"
    assert geomean["change"] == pytest.approx(math.sqrt(ratios[0] * ratios[1]) - 1)
    assert geomean["note"] == "over 2 of 4 configurations (those measured on both sides)"
    line_4 = next(x for x in text.splitlines() if " b4 " in x)
    assert line_4.rstrip().endswith("A only") and "p=" not in line_4
    assert "configuration sets differ: 1 on A only, 1 on B only" in text
    assert "batch sizes differ: A ran 1, 2, 4; B ran 1, 2, 8" in text
    geomean_line = next(x for x in text.splitlines() if x.startswith("geomean"))
    assert f"{geomean['change'] * 100:+.1f}%" in geomean_line and "over 2 of 4 configurations" in geomean_line


def test_zero_variance_has_no_interval_and_says_so(lake):
    ingest(lake, [measured([100.0] * 6)], instance_type="g5.xlarge")
    ingest(lake, [measured([110.0] * 6)], instance_type="g4dn.xlarge")
    rows, text = _compare(lake)
    print(text)
    row = rows[0]
    assert row["a_low"] is None and row["b_low"] is None  # not a zero-width interval
    assert row["change_low"] is None and row["change"] == pytest.approx(0.1)
    # six above six, each side one value: the exact tied p is 2 / C(12, 6)
    assert row["p_value"] == pytest.approx(2 / math.comb(12, 6)) and row["significant"]
    assert row["note"] == ("A: 6 identical samples (zero variance), no interval; "
                           "B: 6 identical samples (zero variance), no interval")
    assert "A: 6 identical samples (zero variance), no interval" in text
    line = next(x for x in text.splitlines() if x.startswith("score "))
    assert "100.0 (all equal)" in line and "110.0 (all equal)" in line and "±" not in line
    assert "need >= 6 samples" not in text


def test_one_sample_each_has_no_interval_and_cannot_show_a_difference(lake):
    ingest(lake, [measured([100.0])], instance_type="g5.xlarge")
    ingest(lake, [measured([130.0])], instance_type="g4dn.xlarge")
    rows, text = _compare(lake)
    print(text)
    row = rows[0]
    assert (row["a_samples"], row["b_samples"], row["p_value"], row["significant"]) == (1, 1, 1.0, False)
    assert row["a_low"] is None and row["change_low"] is None
    assert "A: 1 sample, no interval" in row["note"] and "B: 1 sample, no interval" in row["note"]
    line = next(x for x in text.splitlines() if x.startswith("score "))
    assert " ~ " in line and "n=1+1" in line and "100.0 (1 run)" in line and "130.0 (1 run)" in line
    assert "~ with few samples: n=1+1 (smallest p 1.00)" in text


def test_three_against_three_prints_the_few_samples_footnote(lake):
    """The issue: the footnote never printed for 3 + 3 (the tied check it used reached 0.047)."""
    ingest(lake, [measured([100.0, 101.0, 102.0])], instance_type="g5.xlarge")
    ingest(lake, [measured([103.0, 104.0, 105.0])], instance_type="g4dn.xlarge")
    rows, text = _compare(lake)
    print(text)
    assert rows[0]["p_value"] == pytest.approx(0.1) and not rows[0]["significant"]
    assert "~ with few samples: n=3+3 (smallest p 0.10)" in text
    assert "± ∞: need >= 6 samples" in text
    assert "configuration sets differ" not in text and "batch sizes differ" not in text


def test_a_cpu_machine_against_a_gpu_machine_says_why_nothing_matches(lake):
    ingest(lake, [measured([100.0, 101.0, 102.0])], instance_type="g5.xlarge")
    cpu = measured([30.0, 31.0, 32.0], gpu_model=None)
    cpu.update(device_kind="cpu", devices=["cpu:0"])
    ingest(lake, [cpu], provider="local", instance_type="this-host", region=None, target="local")
    rows, text = _compare(lake, "aws/g5.xlarge", "local/this-host")
    print(text)
    assert sorted(r["present"] for r in rows[:-1]) == ["A only", "B only"]
    assert rows[-1]["change"] is None and rows[-1]["note"].startswith("over 0 of 2")
    assert "they never share device_kind (A: gpu; B: cpu)" in text
    assert "a CPU machine and a GPU machine never run the same configuration" in text
