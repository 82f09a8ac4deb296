"""The projections report and best_value's optional view with projections, on small hand-checkable lakes.

Results go through the lake's real ingest path and the reports through the real DuckDB build
(``build_reports``); the other providers' catalog rows are price rows inserted here, shaped as the
catalog importers write them (canonical GPU model, GPU count per instance). GPU names are resolved
by the real GPU model table (``gpucompare.config.gpus``).
"""

from __future__ import annotations

import datetime as dt

import pytest

from gpucompare.config import gpus
from gpucompare.lake.tables import open_lake
from gpucompare.prices import published
from gpucompare.reports import build as reports
from gpucompare.reports import page as html
from gpucompare.reports.page_projections import CAVEAT, candidate_rows, cheapest_providers
from gpucompare.reports.page_rows import MEASURED_MARK
from gpucompare.reports.projections import BEST_VALUE_WITH_PROJECTIONS
from gpucompare.reports.report_set import ReportOptions
from gpucompare.settings import SettingError
from tests.support.page_site import GENERATED_AT
from tests.support.reports_data import fx, ingest, inputs, price, record, rows

TODAY = dt.date(2026, 11, 30)
RATES = [fx(1.10, dt.date(2025, 1, 1))]  # 1 EUR = 1.10 USD


def catalog(instance_type: str, value: float, gpu_model: str, gpu_count: int, **kw) -> dict:
    """A catalog price row as the importers write it (canonical GPU model, GPUs per instance)."""
    return {**price(instance_type, value, gpu_count=gpu_count, source=kw.pop("source", "test catalog"), **kw),
            "gpu_model": gpu_model}


#: AWS's own list rows for the measured machines, plus other providers' catalog rows.
PRICES = [
    catalog("g5.xlarge", 1.006, "A10G", 1),
    catalog("g5.12xlarge", 5.672, "A10G", 4),
    catalog("g4dn.12xlarge", 3.912, "T4", 4),
    catalog("a10g-1x", 3.20, "A10G", 1, provider="acme", region="eastus"),
    catalog("a10g-1x", 0.90, "A10G", 1, provider="acme", region="eastus", market="spot"),
    catalog("n1-standard-16-t4x4", 2.00, "T4", 4, provider="zeta", region="us-central1"),
    catalog("n1-standard-4-t4x1", 0.55, "T4", 1, provider="zeta", region="us-central1"),
    catalog("gpu.a10g.1", 0.75, "A10G", None, provider="zeta", region="us-east-1"),  # no GPU count
]


def _build(tmp_path, prices=PRICES, *, with_projections: bool = False, currency: str = "USD"):
    lake = open_lake(str(tmp_path / "lake"))
    ingest(lake, [record(images_per_sec=400.0), record(mode="train", batch_size=64, images_per_sec=150.0)])
    ingest(lake, [record(gpu_count=4, batch_size=128, images_per_sec=1500.0, gpu_model="Tesla T4")],
           instance_type="g4dn.12xlarge")
    options = ReportOptions(report_date=TODAY, with_projections=with_projections)
    return reports.build_reports(inputs(lake, prices, RATES), currency=currency, options=options)


def test_a_projection_worked_by_hand(tmp_path):
    """resnet-50 scored at 400.00 images/s on aws g5.xlarge (nvidia-smi: "NVIDIA A10G", 1 GPU),
    projected onto acme a10g-1x (A10G x 1, eastus, on-demand) at $3.20 an hour:
    10^6 images / 400 images/s = 2,500 s = 0.69444 h; 0.69444 h x $3.20 = $2.2222 → $2.22 per million.
    Training, 150.00 images/s: 90 epochs = 90 x 1,281,167 = 115,305,030 images / 150 = 768,700.2 s
    = 213.5278 h x $3.20 = $683.289 → $683.29; one epoch 8,541.11 s → $7.59.
    In EUR at 1 EUR = 1.10 USD: $3.20 → €2.9091 an hour, €2.0202 → €2.02 per million."""
    built = _build(tmp_path)
    [score] = rows(built.tables["projections"], provider="acme", market="on_demand", mode="score")
    assert score["images_per_sec"] == 400.0 and score["seconds_per_million"] == pytest.approx(2500.0)
    assert round(score["cost_per_million"], 2) == 2.22
    assert score["price_per_hour"] == pytest.approx(3.20)
    [train] = rows(built.tables["projections"], provider="acme", market="on_demand", mode="train")
    assert round(train["epochs90_cost"], 2) == 683.29
    assert round(train["epochs90_hours"], 2) == 213.53
    assert round(train["epoch_cost"], 2) == 7.59
    assert rows(built.tables["projections"], provider="acme", market="on_demand", mode="score")[0][
        "epochs90_cost"] is None  # scoring has no epochs
    in_eur = _build(tmp_path / "eur", currency="EUR")
    [eur] = rows(in_eur.tables["projections"], provider="acme", market="on_demand", mode="score")
    assert round(eur["cost_per_million"], 2) == 2.02 and round(eur["price_per_hour"], 4) == 2.9091
    assert eur["fx_rate"] == pytest.approx(1 / 1.10) and eur["price_currency"] == "USD"


def test_every_row_says_it_is_projected_and_from_which_result(tmp_path):
    table = _build(tmp_path).tables["projections"]
    assert table.num_rows > 0
    for row in table.to_pylist():
        assert row["basis"] == "projected"
        assert row["run_id"].startswith("nightly-2026-03-10.aws-") and row["config_id"]
        assert row["measured_provider"] == "aws" and row["result_date"] == dt.date(2026, 3, 10)
        assert row["price_source"] == "test catalog" and row["price_effective_from"] == dt.date(2025, 1, 1)
    [acme] = rows(table, provider="acme", market="spot", mode="score")
    assert (acme["measured_instance_type"], acme["measured_gpu_model"], acme["gpu_model"]) == (
        "g5.xlarge", "NVIDIA A10G", gpus.canonical("A10G"))  # nvidia-smi name -> canonical model
    assert acme["config_id"] == "score-resnet-50-float32-b32-g1"


def test_only_instances_with_the_measured_gpu_count_are_projected_and_never_scaled(tmp_path):
    table = _build(tmp_path).tables["projections"]
    one_gpu = [r for r in table.to_pylist() if r["measured_instance_type"] == "g5.xlarge"]
    four_gpus = [r for r in table.to_pylist() if r["measured_instance_type"] == "g4dn.12xlarge"]
    # 1 x A10G measured: g5.xlarge and acme's 1-GPU instance (both markets); not g5.12xlarge (4 GPUs),
    # not zeta's row without a GPU count
    assert {(r["provider"], r["instance_type"], r["market"]) for r in one_gpu} == {
        ("aws", "g5.xlarge", "on_demand"), ("acme", "a10g-1x", "on_demand"),
        ("acme", "a10g-1x", "spot")}
    # 4 x T4 measured: only the 4-GPU instances; the 1-GPU T4 is not given a quarter of the throughput
    assert {(r["provider"], r["instance_type"]) for r in four_gpus} == {
        ("aws", "g4dn.12xlarge"), ("zeta", "n1-standard-16-t4x4")}
    for row in table.to_pylist():
        assert row["images_per_sec"] in (400.0, 150.0, 1500.0)  # the measured figure, unscaled


def test_the_measured_machine_is_marked(tmp_path):
    table = _build(tmp_path).tables["projections"]
    marked = {(r["provider"], r["instance_type"]) for r in table.to_pylist() if r["measured_machine"]}
    assert marked == {("aws", "g5.xlarge"), ("aws", "g4dn.12xlarge")}


def test_unknown_gpus_published_figures_and_cpus_are_not_projected(tmp_path):
    lake = open_lake(str(tmp_path / "lake"))
    ingest(lake, [record(images_per_sec=100.0, gpu_model="Imaginary GPU 9000")], instance_type="x9.large")
    published.import_published(lake)  # the shipped article's figures: Tesla P100, GTX 1080, ...
    cpu = record(images_per_sec=30.0, gpu_model=None)
    cpu.update(device_kind="cpu", devices=["cpu:0"])
    ingest(lake, [cpu], provider="local", instance_type="this-host", region=None, target="local")
    p100 = catalog("p100-box", 1.0, "Tesla P100", 1, provider="zeta", region="us-central1")
    unknown = catalog("x9.large", 1.0, "Imaginary GPU 9000", 1)  # the same unknown name: still not projected
    built = reports.build_reports(inputs(lake, [*PRICES, p100, unknown], RATES),
                                  options=ReportOptions(report_date=TODAY))
    assert rows(built.tables["cost_per_million"], gpu_model="Tesla P100")  # the published figures are there
    assert built.tables["projections"].num_rows == 0


def test_the_latest_price_on_the_report_date_is_used(tmp_path):
    prices = [*PRICES,
              catalog("a10g-1x", 2.80, "A10G", 1, provider="acme", region="eastus",
                      effective_from=dt.date(2026, 6, 1), source="newer catalog"),
              catalog("a10g-1x", 0.10, "A10G", 1, provider="acme", region="eastus",
                      effective_from=dt.date(2027, 1, 1), source="not valid yet")]
    [row] = rows(_build(tmp_path, prices).tables["projections"], provider="acme", market="on_demand",
                 mode="score")
    assert (row["price_per_hour"], row["price_source"]) == (2.80, "newer catalog")
    assert row["price_effective_from"] == dt.date(2026, 6, 1)


def test_a_multi_node_run_is_priced_as_that_many_instances(tmp_path):
    lake = open_lake(str(tmp_path / "lake"))
    ingest(lake, [record(mode="train", gpu_count=2, num_nodes=2, batch_size=64, images_per_sec=280.0)])
    built = reports.build_reports(inputs(lake, PRICES, RATES), currency="USD",
                                  options=ReportOptions(report_date=TODAY))
    [row] = rows(built.tables["projections"], provider="acme", market="on_demand")
    assert row["price_per_hour"] == pytest.approx(2 * 3.20)  # two 1-GPU instances
    assert row["cost_per_million"] == pytest.approx(2 * 3.20 * 1e6 / 280.0 / 3600)


def test_projections_stay_out_of_best_value_unless_asked(tmp_path):
    plain = _build(tmp_path / "plain")
    assert BEST_VALUE_WITH_PROJECTIONS not in plain.tables
    assert set(plain.tables["best_value"]["origin"].to_pylist()) == {"measured"}
    assert set(plain.tables["best_value"]["provider"].to_pylist()) == {"aws"}
    assert set(plain.tables["cost_per_million"]["provider"].to_pylist()) == {"aws"}

    asked = _build(tmp_path / "asked", with_projections=True)
    assert asked.tables["best_value"].equals(plain.tables["best_value"])  # the measured ranking is untouched
    view = asked.tables[BEST_VALUE_WITH_PROJECTIONS]
    assert view.schema.names == plain.tables["best_value"].schema.names
    score = rows(view, mode="score", network="resnet-50")
    by_machine = {(r["provider"], r["instance_type"], r["market"]): r for r in score}
    assert by_machine[("aws", "g5.xlarge", "on_demand")]["origin"] == "measured"
    assert by_machine[("aws", "g4dn.12xlarge", "on_demand")]["origin"] == "measured"
    spot = by_machine[("acme", "a10g-1x", "spot")]
    assert spot["origin"] == "projected" and spot["rank"] == 2  # $0.90 an hour beats every measured row
    cheapest = min(score, key=lambda r: r["cost_per_million"])  # 4 x T4 on zeta: $2.00 an hour, 1500/s
    assert (cheapest["provider"], cheapest["origin"], cheapest["rank"]) == ("zeta", "projected", 1)
    assert "g5.xlarge" in spot["result_source"] and "score-resnet-50-float32-b32-g1" in spot["result_source"]
    # a measured machine keeps its measured row: no projected twin of it
    assert sum(1 for r in score if (r["provider"], r["instance_type"]) == ("aws", "g5.xlarge")) == 1
    assert [r["rank"] for r in sorted(score, key=lambda r: r["cost_per_million"])] == list(
        range(1, len(score) + 1))


def test_the_flag_comes_from_the_settings_and_is_checked(monkeypatch):
    monkeypatch.setenv("GPUCOMPARE_BEST_VALUE_WITH_PROJECTIONS", "true")
    assert reports.options_from_settings().with_projections is True
    monkeypatch.setenv("GPUCOMPARE_BEST_VALUE_WITH_PROJECTIONS", "perhaps")
    with pytest.raises(SettingError, match="GPUCOMPARE_BEST_VALUE_WITH_PROJECTIONS 'perhaps'.*true, false"):
        reports.options_from_settings()
    monkeypatch.delenv("GPUCOMPARE_BEST_VALUE_WITH_PROJECTIONS")
    assert reports.options_from_settings().with_projections is False


def test_the_page_section_lists_the_cheapest_providers_with_the_caveat(tmp_path):
    built = _build(tmp_path)
    page = html.render_page(built, GENERATED_AT)
    start = page.index('<section id="where-else"')
    section = page[start:page.index("</section>", start)]
    assert "Where else could this run?" in section and "CPU, storage and interconnect differ" in section
    assert CAVEAT.split(";")[0].replace("'", "&#39;") in section
    assert section.count("<table") == 2  # resnet-50 score and train
    assert "aws g5.xlarge ★" in section and MEASURED_MARK in section
    assert "a10g-1x" in section and "spot" in section
    assert page.index('id="where-else"') > page.index('<section id="cost"')  # after the measured costs


def test_the_page_keeps_one_row_per_provider_and_market_and_the_measured_machine(tmp_path):
    many = [catalog(f"cheap-{n}", 0.10 + n / 100 + k / 1000, "A10G", 1, provider=f"p{n}", region=f"r{k}")
            for n in range(8) for k in range(3)]
    table = _build(tmp_path, [*PRICES, *many]).tables["projections"]
    score = rows(table, mode="score", network="resnet-50")
    a10g = [r for r in score if r["gpu_model"] == gpus.canonical("A10G")]
    on_demand = cheapest_providers(a10g)["on_demand"]
    assert [r["provider"] for r in on_demand[:5]] == ["p0", "p1", "p2", "p3", "p4"]
    assert on_demand[-1]["instance_type"] == "g5.xlarge" and on_demand[-1]["measured_machine"]
    assert len(on_demand) == 6  # the top 5, then the measured machine though dearer
    # the page reduces the table in Arrow first: it must choose exactly what the full rows give
    reduced = [r for r in candidate_rows(table) if (r["mode"], r["network"]) == ("score", "resnet-50")]
    assert len(reduced) < len(score)

    def shown(chosen):
        return {m: [(r["provider"], r["instance_type"], r["region"], r["cost_per_million"]) for r in picked]
                for m, picked in chosen.items()}

    assert shown(cheapest_providers(reduced)) == shown(cheapest_providers(score))


def test_without_catalog_rows_the_section_says_so(tmp_path):
    built = _build(tmp_path, [catalog("g5.12xlarge", 5.672, "A10G", 4)])
    assert built.tables["projections"].num_rows == 0
    assert "No projection yet" in html.render_page(built, GENERATED_AT)


def test_hostile_catalog_names_are_escaped_on_the_page(tmp_path):
    hostile = catalog("<script>alert(1)</script>", 0.01, "A10G", 1, provider="evil'><img src=x>",
                      region="<b>r</b>")
    page = html.render_page(_build(tmp_path, [*PRICES, hostile]), GENERATED_AT)
    assert "<script>alert(1)" not in page and "<img src=x>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_only_the_fastest_configuration_of_each_measured_instance_type_is_projected(tmp_path):
    """Batch 8 at 300 images/s and batch 32 at 400 on g5.xlarge us-east-1, batch 32 at 380 on g5.xlarge
    in eu-west-1 (the same hardware): on any price, 400 images/s is the cheapest per million, so only that
    result is projected; the others would only multiply the rows."""
    lake = open_lake(str(tmp_path / "lake"))
    ingest(lake, [record(batch_size=8, images_per_sec=300.0),
                  record(batch_size=32, images_per_sec=400.0, minute=1)])
    ingest(lake, [record(batch_size=32, images_per_sec=380.0)], region="eu-west-1")
    built = reports.build_reports(inputs(lake, PRICES, RATES), options=ReportOptions(report_date=TODAY))
    table = built.tables["projections"]
    assert {(r["config_id"], r["measured_region"], r["images_per_sec"]) for r in table.to_pylist()} == {
        ("score-resnet-50-float32-b32-g1", "us-east-1", 400.0)}
    assert table.num_rows == 3  # g5.xlarge and acme's instance, on demand and spot


def test_hostile_gpu_names_reach_no_sql_and_project_nothing(tmp_path):
    """GPU names come from nvidia-smi on a rented host and from downloaded catalogs: they are data in a
    registered Arrow table and bound parameters, never SQL text."""
    lake = open_lake(str(tmp_path / "lake"))
    evil = "A10G'); DROP TABLE prices; --"
    ingest(lake, [record(gpu_model=evil, images_per_sec=400.0)])
    prices = [*PRICES, catalog("evil-1x", 0.01, evil, 1, provider="acme", region="eastus")]
    built = reports.build_reports(inputs(lake, prices, RATES), currency="USD",
                                  options=ReportOptions(report_date=TODAY))
    assert gpus.canonical(evil) is None  # not an A10G: nothing projected from or onto it
    assert built.tables["projections"].num_rows == 0
    assert rows(built.tables["cost_per_million"], instance_type="g5.xlarge")[0]["cost_per_million"] > 0


def test_without_an_exchange_rate_the_row_stays_unpriced_and_out_of_the_views(tmp_path):
    lake = open_lake(str(tmp_path / "lake"))
    ingest(lake, [record(images_per_sec=400.0)])
    built = reports.build_reports(inputs(lake, PRICES, []), currency="EUR",
                                  options=ReportOptions(report_date=TODAY, with_projections=True))
    table = built.tables["projections"]
    assert table.num_rows == 3
    assert {(r["price_source"], r["cost_per_million"], r["fx_rate"]) for r in table.to_pylist()} == {
        ("missing_fx", None, None)}
    assert "projected" not in built.tables[BEST_VALUE_WITH_PROJECTIONS]["origin"].to_pylist()
    assert "No projection yet" in html.render_page(built, GENERATED_AT)


def test_two_sources_pricing_one_series_on_one_day_are_chosen_the_same_way_every_time(tmp_path):
    same_day = [catalog("a10g-1x", value, "A10G", 1, provider="acme", region="eastus", source=source)
                for value, source in ((3.0, "b catalog"), (2.0, "a catalog"))]
    for attempt in range(2):
        [row] = rows(_build(tmp_path / str(attempt), [*PRICES[:1], *same_day]).tables["projections"],
                     provider="acme", mode="score")
        assert (row["price_source"], row["price_per_hour"]) == ("a catalog", 2.0)
