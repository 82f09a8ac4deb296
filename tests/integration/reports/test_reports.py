"""The report set on small lakes whose right answers are worked out here, by hand.

Every lake is written through the real ingest path and read back by the real SQL in DuckDB;
the expected figures are computed in each test from the inputs it wrote, never copied from
the output.
"""

from __future__ import annotations

import datetime as dt
import statistics

import pyarrow as pa
import pytest

from bench_tasks.constants import IMAGENET_TRAIN_IMAGES
from gpucompare.lake.tables import open_lake
from gpucompare.reports.build import build_reports
from gpucompare.reports.page import render_page
from gpucompare.reports.report_set import DERIVED, MATRIX_BATCHES, REPORTS, RegressionRule, ReportError
from tests.support.page_site import GENERATED_AT
from tests.support.reports_data import fx, ingest, inputs, price, record, rows

NIGHT = dt.date(2026, 3, 10)


@pytest.fixture
def lake(tmp_path):
    return open_lake(str(tmp_path / "lake"))


# ---- cost_per_million ------------------------------------------------------------------------
def test_cost_uses_the_price_and_rate_valid_on_the_result_date(lake):
    ingest(lake, [record(network="resnet-50", batch_size=32, images_per_sec=1000.0, night=NIGHT)])
    prices = [
        price("g5.xlarge", 1.00, effective_from=dt.date(2025, 1, 1)),
        price("g5.xlarge", 2.00, effective_from=NIGHT + dt.timedelta(days=1)),  # not yet valid
        price("g5.xlarge", 5.00, region="eu-west-1"),  # another region
        price("g5.xlarge", 0.40, market="spot"),  # another market
    ]
    rates = [
        fx(1.10, dt.date(2025, 1, 1)),
        fx(1.25, dt.date(2026, 1, 1)),
        fx(2.0, NIGHT + dt.timedelta(days=1)),
    ]

    in_usd = build_reports(inputs(lake, prices, rates), currency="USD").tables["cost_per_million"]
    in_eur = build_reports(inputs(lake, prices, rates), currency="EUR").tables["cost_per_million"]

    [usd] = in_usd.to_pylist()
    [eur] = in_eur.to_pylist()
    seconds = 1_000_000 / 1000.0
    assert usd["seconds_per_million"] == pytest.approx(seconds)
    assert usd["price_per_hour"] == pytest.approx(1.00)
    assert usd["cost_per_million"] == pytest.approx(1.00 * seconds / 3600)
    assert usd["currency"] == "USD" and usd["price_source"] == "test price list"
    # 1 EUR = 1.25 USD on the result's date (the 2.0 rate starts the day after)
    assert eur["price_per_hour"] == pytest.approx(1.00 / 1.25)
    assert eur["cost_per_million"] == pytest.approx(1.00 / 1.25 * seconds / 3600)
    assert eur["currency"] == "EUR" and eur["fx_rate"] == pytest.approx(1 / 1.25)
    assert usd["epoch_cost"] is None  # scoring rows have no epoch columns


def test_units_nodes_and_training_epochs(lake):
    ingest(
        lake,
        [record(mode="train", network="alexnet", batch_size=256, images_per_sec=1500.0)],
        provider="leadergpu",
        instance_type="ltbv14",
        region=None,
        target="ssh",
    )
    ingest(
        lake,
        [
            record(
                mode="train",
                network="resnet-50",
                batch_size=64,
                gpu_count=2,
                num_nodes=2,
                images_per_sec=400.0,
            )
        ],
        instance_type="g5.xlarge",
    )
    prices = [
        price("ltbv14", 0.06, provider="leadergpu", region=None, currency="EUR", unit="minute"),
        price("g5.xlarge", 0.0005, unit="second"),
    ]
    table = build_reports(
        inputs(lake, prices, [fx(1.0, dt.date(2020, 1, 1))]), currency="EUR"
    ).tables["cost_per_million"]

    [leader] = rows(table, instance_type="ltbv14")
    per_hour = 0.06 * 60
    epoch_seconds = IMAGENET_TRAIN_IMAGES / 1500.0
    assert leader["price_per_hour"] == pytest.approx(per_hour)
    assert leader["epoch_seconds"] == pytest.approx(epoch_seconds)
    assert leader["epoch_cost"] == pytest.approx(per_hour * epoch_seconds / 3600)
    assert leader["epochs90_seconds"] == pytest.approx(90 * epoch_seconds)
    assert leader["epochs90_hours"] == pytest.approx(90 * epoch_seconds / 3600)
    assert leader["epochs90_cost"] == pytest.approx(90 * per_hour * epoch_seconds / 3600)

    [two_nodes] = rows(table, instance_type="g5.xlarge")
    # two hosts rented at 0.0005 USD/s each = 3.6 USD/h, at 1 EUR = 1 USD
    assert two_nodes["price_per_hour"] == pytest.approx(2 * 0.0005 * 3600)
    assert two_nodes["cost_per_million"] == pytest.approx(2 * 1.8 * (1e6 / 400.0) / 3600)


def test_missing_price_keeps_the_row_and_is_listed(lake):
    ingest(lake, [record(images_per_sec=500.0)], instance_type="g6.xlarge")  # no price at all
    ingest(
        lake, [record(images_per_sec=800.0, night=dt.date(2024, 6, 1))], instance_type="g5.xlarge"
    )  # too early
    ingest(
        lake, [record(images_per_sec=900.0)], instance_type="p3.2xlarge"
    )  # price in GBP-less table: no rate
    ingest(lake, [record(images_per_sec=50.0, status="oom", batch_size=512)], instance_type="g5.xlarge")
    prices = [
        price("g5.xlarge", 1.0, effective_from=dt.date(2025, 1, 1)),
        price("p3.2xlarge", 3.0, currency="EUR"),
    ]
    report = build_reports(inputs(lake, prices, []), currency="USD")
    table = report.tables["cost_per_million"]

    by_type = {row["instance_type"]: row for row in table.to_pylist()}
    assert set(by_type) == {"g6.xlarge", "g5.xlarge", "p3.2xlarge"}  # the oom cell has no throughput
    assert by_type["g6.xlarge"]["price_source"] == "missing"
    assert by_type["g6.xlarge"]["cost_per_million"] is None
    assert by_type["g6.xlarge"]["images_per_sec"] == 500.0  # the result itself is kept
    assert by_type["g5.xlarge"]["price_source"] == "missing"  # only a price from after the result
    assert by_type["p3.2xlarge"]["price_source"] == "missing_fx"
    assert by_type["p3.2xlarge"]["cost_per_million"] is None
    assert sorted(report.missing_prices["instance_type"].to_pylist()) == [
        "g5.xlarge",
        "g6.xlarge",
        "p3.2xlarge",
    ]
    assert report.tables["best_value"].num_rows == 0  # nothing priced, nothing ranked


def test_latest_result_of_a_configuration_wins(lake):
    for day, value in ((1, 100.0), (2, 120.0), (3, 90.0)):
        ingest(lake, [record(images_per_sec=value, night=dt.date(2026, 3, day))])
    table = build_reports(inputs(lake, [price("g5.xlarge", 1.0)], []), currency="USD").tables
    [row] = table["cost_per_million"].to_pylist()
    assert row["images_per_sec"] == 90.0
    assert row["result_date"] == dt.date(2026, 3, 3)
    assert table["throughput"].num_rows == 1


@pytest.mark.parametrize("with_config_id", [True, False])
def test_a_configuration_missing_from_the_newest_night_keeps_its_latest_result(lake, with_config_id):
    """Step 1 finds each configuration's own newest night (by config_id, or by the full key
    when results carry none), so a cell dropped from the sweep still shows its last result."""
    first, second = dt.date(2026, 3, 1), dt.date(2026, 3, 2)
    nights = {
        first: [
            record(batch_size=16, images_per_sec=160.0, night=first),
            record(batch_size=32, images_per_sec=320.0, night=first, minute=1),
        ],
        second: [record(batch_size=16, images_per_sec=150.0, night=second)],  # batch 32 dropped
    }
    for records in nights.values():
        for r in records:
            if not with_config_id:
                r["config_id"] = None  # as a producer that sets none would leave it
        ingest(lake, records)
    report = build_reports(inputs(lake, [], []))
    got = {
        r["batch_size"]: (r["images_per_sec"], r["result_date"])
        for r in report.tables["cost_per_million"].to_pylist()
    }
    assert got == {16: (150.0, second), 32: (320.0, first)}
    assert report.rows_scanned == 3


def test_files_of_different_schemas_are_read_by_column_name(lake):
    """The fast path reads files against the oldest one's columns; an old file without a
    column the reports read (one added since, through Delta schema evolution) makes the reader
    match every file by name."""
    import pyarrow as pa

    from gpucompare.lake.ingest import RunContext, results_rows

    old = results_rows([record(batch_size=64, images_per_sec=300.0, night=dt.date(2026, 2, 1))],
                       RunContext(provider="aws", instance_type="g5.xlarge", region="us-east-1",
                                  target="ec2"))
    old = old.drop_columns(["cv"])  # written before the column existed
    lake.commit("results", lambda: old, predicate=None, partition_by=["mode", "date"])
    assert "cv" not in lake.snapshot("results").arrow_schema.names
    ingest(lake, [record(batch_size=16, images_per_sec=150.0, night=NIGHT)])
    assert "cv" in lake.snapshot("results").arrow_schema.names  # merged into the table's schema
    assert isinstance(old, pa.Table)

    report = build_reports(inputs(lake, [], []))
    got = {(r["batch_size"], r["result_date"]) for r in report.tables["cost_per_million"].to_pylist()}
    assert got == {(16, NIGHT), (64, dt.date(2026, 2, 1))}
    assert report.rows_scanned == 2


def test_a_results_file_in_an_unexpected_partition_is_refused_not_dropped(lake):
    """A file whose mode partition is not one of the worker's modes (another tool wrote into the
    table) fails the report, naming the file, rather than quietly leaving its rows out."""
    from gpucompare.lake.ingest import RunContext, results_rows

    ingest(lake, [record(batch_size=16, images_per_sec=150.0, night=NIGHT)])
    stray = results_rows([record(batch_size=64, images_per_sec=300.0, night=NIGHT)],
                         RunContext(provider="aws", instance_type="g5.xlarge", region="us-east-1",
                                    target="ec2"))
    stray = stray.set_column(stray.schema.get_field_index("mode"), "mode",
                             pa.array(["infer"] * stray.num_rows))
    lake.commit("results", lambda: stray, predicate=None, partition_by=["mode", "date"])
    with pytest.raises(ReportError, match=r"mode=infer/.*partition mode='infer'.*score, train"):
        build_reports(inputs(lake, [], []))


# ---- scaling ----------------------------------------------------------------------------------
def test_scaling_speedup_efficiency_weak_and_strong(lake):
    base = dict(mode="train", network="resnet-50", night=NIGHT)
    ingest(
        lake,
        [
            record(batch_size=32, gpu_count=1, images_per_sec=100.0, **base),
            record(batch_size=64, gpu_count=1, images_per_sec=110.0, minute=1, **base),
            record(batch_size=64, gpu_count=2, images_per_sec=180.0, minute=2, **base),
            record(batch_size=128, gpu_count=4, images_per_sec=340.0, minute=3, **base),
        ],
        instance_type="g5.12xlarge",
    )
    curve = [
        {
            "source": "white paper",
            "framework": "MXNet",
            "network": "googlenet",
            "gpu_model": "Tesla P100",
            "gpu_count": n,
            "speedup": s,
        }
        for n, s in ((1, 1.0), (2, 1.9), (16, 13.5))
    ]
    table = build_reports(inputs(lake, [], [], curve)).tables["scaling"]

    # strong (global batch held): 2 GPUs at batch 64 against 1 GPU at batch 64
    strong = rows(table, origin="measured", scaling="strong", gpu_count=2)
    assert len(strong) == 1
    assert strong[0]["speedup"] == pytest.approx(180.0 / 110.0)
    assert strong[0]["efficiency"] == pytest.approx(180.0 / 110.0 / 2)
    # weak (per-device batch held): 2 × 32 and 4 × 32 against 1 GPU at batch 32
    weak = {r["gpu_count"]: r for r in rows(table, origin="measured", scaling="weak")}
    assert weak[2]["speedup"] == pytest.approx(180.0 / 100.0)
    assert weak[4]["speedup"] == pytest.approx(340.0 / 100.0)
    assert weak[4]["efficiency"] == pytest.approx(340.0 / 100.0 / 4)
    assert weak[1]["speedup"] == 1.0 and weak[1]["batch_size"] == 32  # the series starts at its baseline
    # no 1-GPU run at batch 128, so the 4-GPU run has no strong point
    assert not rows(table, origin="measured", scaling="strong", gpu_count=4)
    # the published curve comes along, with its efficiency
    published = {r["gpu_count"]: r for r in rows(table, origin="published_curve")}
    assert published[16]["speedup"] == 13.5
    assert published[16]["efficiency"] == pytest.approx(13.5 / 16)


def test_scaling_baseline_is_same_gpu_model_and_provider(lake):
    ingest(
        lake,
        [record(mode="train", batch_size=32, gpu_count=1, images_per_sec=100.0, gpu_model="Tesla T4")],
        instance_type="g4dn.xlarge",
    )
    ingest(
        lake,
        [record(mode="train", batch_size=32, gpu_count=1, images_per_sec=150.0)],
        instance_type="g5.xlarge",
    )
    ingest(
        lake,
        [record(mode="train", batch_size=128, gpu_count=4, images_per_sec=520.0)],
        instance_type="g5.12xlarge",
    )
    table = build_reports(inputs(lake, [], [])).tables["scaling"]
    [row] = rows(table, origin="measured", gpu_count=4)
    # the A10G 1-GPU result of the g5 family, not the T4 one
    assert row["baseline_instance_type"] == "g5.xlarge"
    assert row["speedup"] == pytest.approx(520.0 / 150.0)
    assert row["scaling"] == "weak"


# ---- best_value and the Pareto front ------------------------------------------------------------
def _pareto(points: dict[str, tuple[float, float]]) -> set[str]:
    """Brute force: a machine is on the front unless another is no dearer, no slower, and better in one."""
    front = set()
    for name, (cost, speed) in points.items():
        dominated = any(
            other_cost <= cost and other_speed >= speed and (other_cost < cost or other_speed > speed)
            for other, (other_cost, other_speed) in points.items()
            if other != name
        )
        if not dominated:
            front.add(name)
    return front


def test_best_value_ranks_by_cost_and_marks_the_pareto_front(lake):
    machines = {  # instance type: (USD per hour, images/s of its best batch)
        "g5.xlarge": (1.0, 100.0),
        "g5.2xlarge": (2.0, 300.0),
        "g5.4xlarge": (3.0, 250.0),  # dearer and slower than g5.2xlarge
        "g4dn.xlarge": (0.5, 40.0),
        "g6.xlarge": (2.0, 300.0),  # ties g5.2xlarge: neither dominates the other
    }
    for instance_type, (_per_hour, speed) in machines.items():
        ingest(
            lake,
            [
                record(batch_size=32, images_per_sec=speed),
                record(batch_size=16, images_per_sec=speed / 2, minute=1),
            ],
            instance_type=instance_type,
        )
    prices = [price(t, per_hour) for t, (per_hour, _speed) in machines.items()]
    table = build_reports(inputs(lake, prices, []), currency="USD").tables["best_value"]

    got = {row["instance_type"]: row for row in rows(table, network="resnet-50", mode="score")}
    assert set(got) == set(machines)
    assert all(row["batch_size"] == 32 for row in got.values())  # each machine's cheapest configuration
    cost = {t: per_hour * (1e6 / speed) / 3600 for t, (per_hour, speed) in machines.items()}
    for instance_type, row in got.items():
        assert row["cost_per_million"] == pytest.approx(cost[instance_type])
        assert row["rank"] == 1 + sum(1 for other in cost.values() if other < cost[instance_type] - 1e-12)
    assert {t for t, row in got.items() if row["on_pareto_front"]} == _pareto(machines)
    assert not got["g5.4xlarge"]["on_pareto_front"]


# ---- regressions --------------------------------------------------------------------------------
def _nights(count: int, last: dt.date = NIGHT) -> list[dt.date]:
    return [last - dt.timedelta(days=count - 1 - i) for i in range(count)]


def test_regressions_flag_drops_beyond_the_noise(lake):
    rule = RegressionRule(
        history_runs=7, min_history=3, mad_factor=3.0, min_drop=0.05, lookback_days=28
    )
    steady_history = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 101.0, 99.0]
    noisy_history = [100.0, 88.0, 112.0, 95.0, 105.0, 90.0, 110.0, 100.0]
    quiet_history = [100.0, 100.1, 99.9, 100.0, 100.05, 99.95, 100.0, 100.1]
    cases = {  # batch size: (history, tonight)
        4: (quiet_history, 98.0),  # a clear 2 % drop on a very quiet series: below the floor, reported
        8: (steady_history, 90.0),  # a 10 % drop on a quiet series: regression
        16: (steady_history, 99.0),  # inside the noise: steady
        32: (noisy_history, 90.0),  # same drop, but the history swings that much: not flagged
        64: (steady_history, 120.0),  # faster: improvement
        128: (steady_history[:2], 50.0),  # too little history to judge
    }
    records = []
    for batch, (history, tonight) in cases.items():
        nights = _nights(len(history) + 1)
        records += [
            record(batch_size=batch, images_per_sec=value, night=night)
            for value, night in zip([*history, tonight], nights, strict=True)
        ]
    records += [record(batch_size=256, images_per_sec=100.0, night=night) for night in _nights(5)[:-1]]
    records.append(record(batch_size=256, status="oom", images_per_sec=None, night=NIGHT))
    records += [
        record(batch_size=512, status="oom", images_per_sec=None, night=night) for night in _nights(5)
    ]
    for night in sorted({r["started_at"][:10] for r in records}):
        ingest(lake, [r for r in records if r["started_at"][:10] == night])

    table = build_reports(inputs(lake, [], []), rule=rule).tables["regressions"]
    got = {row["batch_size"]: row for row in table.to_pylist()}

    for batch, (history, tonight) in cases.items():
        window = history[-rule.history_runs :]
        median = statistics.median(window)
        mad = statistics.median(abs(v - median) for v in window)
        noise, floor = rule.mad_factor * 1.4826 * mad, rule.min_drop * median
        row = got[batch]
        assert row["images_per_sec"] == tonight
        assert row["history_runs"] == len(window)
        if len(window) < rule.min_history:
            expected = "insufficient_history"
        else:
            assert row["history_median"] == pytest.approx(median)
            assert row["history_mad"] == pytest.approx(mad)
            assert row["noise"] == pytest.approx(noise) and row["floor"] == pytest.approx(floor)
            expected = (
                "regression"
                if tonight < median - max(noise, floor)
                else "significant_below_floor"
                if tonight < median - noise  # 3 repeats below 21 of the history: p < 0.001
                else "improvement"
                if tonight > median + max(noise, floor)
                else "steady"
            )
        assert row["verdict"] == expected, batch
        assert row["regression"] is (expected == "regression")
    assert [got[b]["verdict"] for b in (4, 8, 16, 32, 64, 128)] == [
        "significant_below_floor",
        "regression",
        "steady",
        "steady",
        "improvement",
        "insufficient_history",
    ]
    assert got[256]["verdict"] == "failed" and got[256]["regression"] is True  # ran before, fails tonight
    assert got[512]["verdict"] == "not_run" and got[512]["regression"] is False  # never fitted: no news


def test_regressions_read_only_the_lookback_window(lake):
    old = dt.date(2026, 1, 1)
    ingest(lake, [record(images_per_sec=200.0, night=old + dt.timedelta(days=i)) for i in range(5)])
    for night in _nights(3):
        ingest(lake, [record(images_per_sec=100.0, night=night)])
    rule = RegressionRule(lookback_days=10, min_history=2)
    [row] = build_reports(inputs(lake, [], []), rule=rule).tables["regressions"].to_pylist()
    # the January nights (twice as fast) are outside the window: two nights of history at 100
    assert row["history_runs"] == 2
    assert row["history_median"] == 100.0
    assert row["verdict"] == "steady"


def test_regressions_keep_two_series_of_one_cell_apart(lake):
    """The same cell run by a weak and by a strong series each night: two histories, not one."""
    for index, night in enumerate(_nights(6)):
        last = index == 5
        weak = record(
            mode="train",
            batch_size=64,
            gpu_count=2,
            scaling="weak",
            night=night,
            images_per_sec=70.0 if last else 100.0,
        )
        strong = record(
            mode="train",
            batch_size=64,
            gpu_count=2,
            scaling="strong",
            night=night,
            minute=5,
            images_per_sec=200.0,
        )
        weak["config_id"], strong["config_id"] = "train-b64-gpu0+gpu1-weak", "train-b64-gpu0+gpu1-strong"
        ingest(lake, [weak, strong])
    table = build_reports(inputs(lake, [], [])).tables["regressions"]
    got = {r["config_id"]: (r["verdict"], r["history_median"]) for r in table.to_pylist()}
    assert got == {
        "train-b64-gpu0+gpu1-weak": ("regression", 100.0),
        "train-b64-gpu0+gpu1-strong": ("steady", 200.0),
    }


# ---- throughput ---------------------------------------------------------------------------------
def test_throughput_matrix_is_numeric_with_the_statuses_in_their_own_columns(lake):
    ingest(
        lake,
        [
            record(network="alexnet", batch_size=b, images_per_sec=100.0 * b, minute=i)
            for i, b in enumerate((1, 2, 4))
        ]
        + [record(network="alexnet", batch_size=8, status="oom", images_per_sec=None, minute=5)]
        + [record(network="alexnet", batch_size=24, images_per_sec=2000.0, minute=6)],  # not a power of 2
    )
    tables = build_reports(inputs(lake, [], [])).tables
    matrix = tables["throughput_matrix"]
    expected_batches = sorted(MATRIX_BATCHES)  # a fixed width: 24 is a row of throughput_by_batch only
    assert [c for c in matrix.column_names if c.startswith("batch_")] == [
        f"batch_{b}_{kind}" for b in expected_batches for kind in ("images_per_sec", "status")
    ]
    for b in expected_batches:  # the same types whatever the data: BI sees stable columns
        assert matrix.schema.field(f"batch_{b}_images_per_sec").type == pa.float64()
        assert matrix.schema.field(f"batch_{b}_status").type == pa.string()
    [row] = matrix.to_pylist()
    assert [row[f"batch_{b}_images_per_sec"] for b in (1, 2, 4, 8, 16)] == [100.0, 200.0, 400.0, None, None]
    assert "batch_24_images_per_sec" not in matrix.column_names
    by_batch = {r["batch_size"]: r["images_per_sec"] for r in tables["throughput_by_batch"].to_pylist()}
    assert by_batch[24] == 2000.0
    assert [row[f"batch_{b}_status"] for b in (1, 8, 16)] == ["ok", "oom", None]  # 16: never measured
    assert row["device_kind"] == "gpu" and row["origin"] == "measured" and row["result_date"] == NIGHT
    tidy = {r["batch_size"]: r for r in tables["throughput"].to_pylist()}
    assert tidy[8]["status"] == "oom" and tidy[8]["images_per_sec"] is None


# ---- output files and settings ------------------------------------------------------------------
def test_every_report_is_written_as_parquet_and_csv_with_documented_columns(lake, tmp_path):
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    ingest(lake, [record(images_per_sec=100.0)])
    out = tmp_path / "reports"
    report = build_reports(inputs(lake, [price("g5.xlarge", 1.0)], []), str(out), currency="USD")
    for name in (*REPORTS, *DERIVED):
        parquet = pq.read_table(out / name / f"{name}.parquet")
        csv = pacsv.read_csv(out / f"{name}.csv")
        assert parquet.column_names == report.tables[name].column_names == csv.column_names
        assert parquet.num_rows == csv.num_rows == report.tables[name].num_rows
    documented = {
        "provider",
        "instance_type",
        "gpu_model",
        "gpu_count",
        "mode",
        "network",
        "batch_size",
        "images_per_sec",
        "seconds_per_million",
        "price_per_hour",
        "cost_per_million",
        "currency",
        "price_source",
        "result_source",
        "measured_at",
        "epoch_seconds",
        "epoch_cost",
        "epochs90_seconds",
        "epochs90_hours",
        "epochs90_cost",
    }
    assert documented <= set(report.tables["cost_per_million"].column_names)
    assert not list(out.rglob(".*.tmp"))  # no temporary file left behind


def test_bad_settings_are_refused_with_the_setting_named(lake):
    with pytest.raises(ReportError, match="--currency 'GBP' is not one of EUR, USD"):
        build_reports(inputs(lake, [], []), currency="GBP")
    with pytest.raises(ReportError, match="min_history"):
        build_reports(
            inputs(lake, [], []), rule=RegressionRule(history_runs=2, min_history=3)
        )


def test_an_empty_lake_gives_empty_reports(lake, tmp_path):

    report = build_reports(inputs(lake, [], []), str(tmp_path / "out"))
    assert report.rows_scanned == 0
    # cost, throughput, scaling
    assert render_page(report, GENERATED_AT).count("No data for this chart yet") == 3
    assert all(table.num_rows == 0 for name, table in report.tables.items() if name != "scaling")
