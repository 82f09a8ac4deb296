"""best_value's verdicts on crafted lakes written through the real ingest path and read by the real
SQL (stands in for a lake of nightly GPU results: the samples are drawn here with a known truth).

The issue's acceptance cases at the default methodology (one night, 3 repeats): a machine twice
as dear per image at CV 1 % is ``dearer``; one within 1 % of the best is ``equivalent`` or
``undetermined``, never ``dearer``; every row has an interval or a reason; a single repeat says
"1 run: no interval"."""

from __future__ import annotations

import datetime as dt
import statistics

import numpy as np
import pytest

from bench_tasks.record import validate_record
from gpucompare.lake.tables import open_lake
from gpucompare.reports.build import build_reports
from gpucompare.reports.report_set import ReportError, ReportOptions
from tests.support.reports_data import fx, ingest, inputs, price, record

NIGHT = dt.date(2026, 3, 10)
RATES = [fx(1.0, dt.date(2025, 1, 1))]
#: the configurations of one nightly run (the noise is pooled over them)
SWEEP = [(network, batch) for network in ("resnet-50", "alexnet", "vgg-16", "googlenet")
         for batch in (16, 32, 64)]


@pytest.fixture
def lake(tmp_path):
    return open_lake(str(tmp_path / "lake"))


def _record(samples: list[float], network: str, batch: int) -> dict:
    base = record(images_per_sec=statistics.median(samples), night=NIGHT, network=network, batch_size=batch)
    base.update(images_per_sec_samples=list(samples), repeats=len(samples),
                cv=float(np.std(samples) / np.mean(samples)))
    return validate_record(base)


def _sweep(lake, rng: np.random.Generator, name: str, speed: float, repeats: int = 3,
           cv: float = 0.01) -> None:
    """One night of one machine: every configuration of SWEEP, ``repeats`` repeats at ``cv``."""
    ingest(lake, [_record([float(v) for v in rng.normal(speed, speed * cv, repeats)], network, batch)
                  for network, batch in SWEEP], instance_type=name)


def _three_machines(lake, seed: int) -> dict[str, list[dict]]:
    """a.x and c.x as fast (c.x 0.5 % slower), b.x half as fast: all at one price."""
    rng = np.random.default_rng(seed)
    for name, speed in (("a.x", 1000.0), ("b.x", 500.0), ("c.x", 995.0)):
        _sweep(lake, rng, name, speed)
    prices = [price(n, 1.0) for n in ("a.x", "b.x", "c.x")]
    best = build_reports(inputs(lake, prices, RATES)).tables["best_value"]
    by_network: dict[str, list[dict]] = {}
    for row in best.to_pylist():
        by_network.setdefault(row["network"], []).append(row)
    return by_network


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_twice_as_dear_is_dearer_and_within_one_percent_is_never_dearer(lake, seed):
    for network, ranked in _three_machines(lake, seed).items():
        by_machine = {r["instance_type"]: r for r in ranked}
        assert by_machine["b.x"]["verdict"] == "dearer", network
        assert by_machine["b.x"]["cost_ratio_low"] > 1.03 and by_machine["b.x"]["settle_with"] is None
        best = [r for r in ranked if r["rank"] == 1]
        assert len(best) == 1 and best[0]["verdict"] == "best" and best[0]["instance_type"] in ("a.x", "c.x")
        other = by_machine["c.x" if best[0]["instance_type"] == "a.x" else "a.x"]
        assert other["verdict"] in ("equivalent", "undetermined"), (network, other)
        if other["verdict"] == "undetermined":
            assert other["settle_with"].startswith(("about", "more than", "no amount"))
        for row in ranked:  # every row has an interval or a reason, and says what it covers
            assert row["interval_covers"] == "this night's instance" and row["interval_reason"] is None
            assert row["cost_per_million_low"] < row["cost_per_million"] < row["cost_per_million_high"]
            assert row["interval_parts"] == "throughput" and row["samples"] == 3 and row["nights"] == 1


def test_rank_follows_cost_and_the_verdict_columns_sit_after_rank(lake):
    ranked = _three_machines(lake, 4)["resnet-50"]
    assert [r["rank"] for r in ranked] == [1, 2, 3]
    costs = [r["cost_per_million"] for r in ranked]
    assert costs == sorted(costs)
    names = list(ranked[0])
    assert names[names.index("rank") + 1:names.index("rank") + 6] == [
        "verdict", "cost_ratio", "cost_ratio_low", "cost_ratio_high", "settle_with"]
    assert not {"rank_group", "tied_with_best", "tie_p_value", "sample_key"} & set(names)


def test_single_repeats_say_so_and_stay_undetermined(lake):
    """The demo's shape: 1 repeat a configuration. No interval, a reason, and no verdict other than
    undetermined, however different the machines look."""
    rng = np.random.default_rng(5)
    _sweep(lake, rng, "a.x", 1000.0, repeats=1)
    _sweep(lake, rng, "b.x", 100.0, repeats=1)
    built = build_reports(inputs(lake, [price("a.x", 1.0), price("b.x", 1.0)], RATES))
    for table in ("throughput", "cost_per_million", "best_value"):
        for row in built.tables[table].to_pylist():
            assert row["interval_reason"] == "1 run: no interval" and row["images_per_sec_low"] is None
            assert row["interval_covers"] is None
    for row in built.tables["best_value"].to_pylist():
        if row["instance_type"] == "b.x":
            assert row["verdict"] == "undetermined" and row["cost_ratio"] == pytest.approx(10.0, rel=0.1)
            assert row["settle_with"] == "an interval on both sides (1 run: no interval)"


def test_the_practical_margin_decides_equivalence(lake):
    """b.x 2 % dearer at CV 0.2 %: dearer at a 0.5 % margin, equivalent at 5 %."""
    rng = np.random.default_rng(6)
    _sweep(lake, rng, "a.x", 1000.0, cv=0.002)
    _sweep(lake, rng, "b.x", 1000.0 / 1.02, cv=0.002)
    prices = [price("a.x", 1.0), price("b.x", 1.0)]
    for margin, expected in ((0.005, "dearer"), (0.05, "equivalent")):
        best = build_reports(inputs(lake, prices, RATES), options=ReportOptions(practical_margin=margin))
        verdicts = {r["verdict"] for r in best.tables["best_value"].to_pylist()
                    if r["instance_type"] == "b.x"}
        assert verdicts == {expected}, margin
    with pytest.raises(ReportError, match="practical_margin must be a number from 0 to 0.5"):
        ReportOptions(practical_margin=0.9)
