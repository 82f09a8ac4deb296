"""A declared price shows the same way in every report that uses a price: ``price_source`` is
``declared`` and the label (with how the hourly price was made) is ``price_note``; a provider's price
keeps its source and no note. Real lake on disk (declared prices stored through
``prices.declared.store``, as ``gpucompare add-price`` does; run phases and results through the lake's
write paths) and the real DuckDB build: cost_per_million, best_value, campaign and projections."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from gpucompare.config.models import DeclaredPrice
from gpucompare.lake import schema
from gpucompare.lake.phases import write_phases
from gpucompare.lake.tables import Lake, open_lake
from gpucompare.prices import declared
from gpucompare.reports.build import build_reports
from gpucompare.reports.inputs import ReportInputs
from gpucompare.reports.report_set import ReportOptions
from tests.support.reports_data import ingest, record

NIGHT = dt.date(2026, 11, 30)
T0 = dt.datetime(2026, 11, 30, 2, 0, tzinfo=dt.UTC)
RUN_ID = "nightly-2026-11-30.rentco-box1-eu-nl-on_demand-ssh"  # as reports_data.ingest names the run
#: a rented box the user priced themselves (fictional: no shipped price row matches it)
BOX = {"kind": "ssh", "provider": "rentco", "instance_type": "box1", "region": "eu-nl", "market": "on_demand",
       "target": "rented-box"}
#: an on-premises machine with the same GPU, declared with its GPU: projections price the box's figure on it
RACK = DeclaredPrice(provider="onprem", instance_type="rack-a", gpu_model="GTX 1080", gpu_count=1,
                     per_month=73.0, currency="USD", effective_from="2026-01-01", label="our rack A")
BOX_PRICE = DeclaredPrice(provider="rentco", instance_type="box1", region="eu-nl", gpu_model="GTX 1080",
                          gpu_count=1, per_month=36.5,
                          currency="USD", effective_from="2026-01-01", label="rented box, monthly fee")
BOX_NOTE = "declared: rented box, monthly fee (36.5 USD per month / 730 h)"
RACK_NOTE = "declared: our rack A (73 USD per month / 730 h)"


def _phase(name: str, start: float, seconds: float, billed: bool) -> dict[str, Any]:
    return {**BOX, "run_id": RUN_ID, "dag_run_id": "scheduled__2026-11-30T02:00:00+00:00", "phase": name,
            "started_at": T0 + dt.timedelta(seconds=start),
            "finished_at": T0 + dt.timedelta(seconds=start + seconds), "seconds": float(seconds),
            "billed": billed, "status": "ok", "error": None, "code_hash": None}


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    lake = open_lake(str(tmp_path / "lake"))
    declared.store(lake, [BOX_PRICE, RACK])
    # a provider's catalog row with the same GPU: its source stays as it is, with no note
    lake.write_table("prices", "catalog", pa.Table.from_pylist([{
        "provider": "acme", "instance_type": "gtx1080-1x", "region": None, "market": "on_demand",
        "gpu_model": "GTX 1080", "gpu_count": 1, "price": 0.2, "currency": "USD", "unit": "hour",
        "effective_from": dt.date(2026, 1, 1), "source": "acme catalog 2026-01"}],
        schema=schema.PRICES_SCHEMA))
    write_phases(lake, [_phase("provision", 0, 2, False), _phase("deploy", 2, 30, False),
                        _phase("sweep", 40, 600, True), _phase("teardown", 650, 1, False)])
    measured = {**record(night=NIGHT, gpu_model="NVIDIA GeForce GTX 1080", images_per_sec=250.0),
                "setup_seconds": 30.0, "warmup_seconds": 30.0, "timed_seconds": 300.0}
    ingest(lake, [measured], provider=BOX["provider"], instance_type=BOX["instance_type"],
           region=BOX["region"], target=BOX["kind"])
    return lake


def test_every_report_shows_declared_with_the_label_in_price_note(lake: Lake) -> None:
    built = build_reports(ReportInputs.from_lake(lake.uri), currency="USD",
                          options=ReportOptions(report_date=dt.date(2026, 11, 30)))
    measured = built.tables["cost_per_million"].to_pylist()
    assert measured and {(r["price_source"], r["price_note"]) for r in measured} == {("declared", BOX_NOTE)}
    (night,) = built.tables["campaign"].to_pylist()
    assert night["price_per_hour"] == pytest.approx(36.5 / 730)
    assert (night["price_source"], night["price_note"]) == ("declared", BOX_NOTE)
    projected = {r["provider"]: r for r in built.tables["projections"].to_pylist()}
    # the measured machine's own series too, and the shipped LeaderGPU GTX 1080 row
    assert set(projected) == {"onprem", "acme", "rentco", "leadergpu"}
    assert (projected["onprem"]["price_source"], projected["onprem"]["price_note"]) == ("declared", RACK_NOTE)
    assert (projected["rentco"]["price_source"], projected["rentco"]["price_note"]) == ("declared", BOX_NOTE)
    acme = projected["acme"]
    assert (acme["price_source"], acme["price_note"]) == ("acme catalog 2026-01", None)
    assert projected["leadergpu"]["price_source"] == "LeaderGPU article 'MXNet GPU'"
    assert projected["leadergpu"]["price_note"] is None
    # no report carries the full label as its price_source
    for name in ("cost_per_million", "best_value", "campaign", "projections"):
        sources = set(built.tables[name]["price_source"].to_pylist())
        assert not {s for s in sources if s and s.startswith("declared: ")}, (name, sources)


def test_the_view_with_projections_keeps_the_note(lake: Lake) -> None:
    built = build_reports(ReportInputs.from_lake(lake.uri), currency="USD",
                          options=ReportOptions(report_date=dt.date(2026, 11, 30), with_projections=True))
    view = {r["provider"]: r for r in built.tables["best_value_with_projections"].to_pylist()}
    assert (view["onprem"]["origin"], view["onprem"]["price_source"]) == ("projected", "declared")
    assert view["onprem"]["price_note"] == RACK_NOTE
    assert (view["rentco"]["origin"], view["rentco"]["price_note"]) == ("measured", BOX_NOTE)
