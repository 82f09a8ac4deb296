"""Prices users declare for their own machines (``config.models.prices``, ``prices.declared``):
the three bases become the same hourly price the reports use, every field is checked in the
project's one error style, and a fleet file's ``prices`` entries and targets' ``price`` are the
declared prices the loader hands on.
"""

from __future__ import annotations

import copy
import datetime as dt

import pytest

from gpucompare.config import fleet, validation
from gpucompare.config.models import HOURS_PER_MONTH, DeclaredPrice
from gpucompare.config.validation import ValidationError
from gpucompare.lake import schema
from gpucompare.prices import declared
from gpucompare.prices.tables import price_row as checked_price_row
from gpucompare.prices.tables import shipped_fx_rate
from tests.conftest import REPO_ROOT

MACHINE = {"provider": "mylab", "instance_type": "rack-a100", "currency": "EUR",
           "effective_from": "2026-01-01", "label": "our rack"}


def _price(**basis: object) -> DeclaredPrice:
    return validation.validate(DeclaredPrice, {**MACHINE, **basis})


def test_hours_per_month_is_the_providers_convention() -> None:
    assert HOURS_PER_MONTH == 365 * 24 / 12 == 730


@pytest.mark.parametrize(("basis", "hourly", "note"), [
    ({"per_hour": 1.25}, 1.25, "declared: our rack (1.25 EUR per hour)"),
    ({"per_month": 730}, 1.0, "declared: our rack (730 EUR per month / 730 h)"),
    ({"purchase": {"price": 8760, "life_years": 1}}, 1.0,
     "declared: our rack (8760 EUR over 1 years of 730 h)"),
    ({"purchase": {"price": 17520, "life_months": 24, "power_per_hour": 0.25}}, 1.25,
     "declared: our rack (17520 EUR over 24 months of 730 h + 0.25 EUR/h power)"),
])
def test_each_basis_becomes_an_hourly_price(basis: dict, hourly: float, note: str) -> None:
    price = _price(**basis)
    assert price.hourly() == pytest.approx(hourly)
    assert price.note() == note
    row = declared.price_row(price)
    assert row["unit"] == "hour" and row["price"] == pytest.approx(hourly)
    assert row["effective_from"] == dt.date(2026, 1, 1)
    assert declared.is_declared(row["source"]) and not declared.is_declared("AWS price list")
    # the row is one the price tables accept as any other
    assert checked_price_row({**row, "gpu_model": None, "gpu_count": None})["price"] == pytest.approx(hourly)
    assert set(row) == set(schema.PRICES_SCHEMA.names)


@pytest.mark.parametrize(("change", "field", "says"), [
    ({"per_hour": 1, "per_month": 2}, "per_hour", "give exactly one"),
    ({}, "per_hour", "0 of the bases given"),
    ({"per_hour": 0}, "per_hour", "not allowed"),
    ({"per_hour": "cheap"}, "per_hour", "not allowed"),
    ({"purchase": {"price": 100}}, "purchase.life_months", "give the machine's life once"),
    ({"purchase": {"price": 100, "life_months": 12, "life_years": 1}}, "purchase.life_months", "once"),
    ({"purchase": {"price": 100, "life_years": 1, "colour": "red"}}, "purchase.colour", "unknown key"),
    ({"per_hour": 1, "currency": "GBP"}, "currency", "'GBP' is not allowed"),
    ({"per_hour": 1, "effective_from": "01/01/2026"}, "effective_from", "a date YYYY-MM-DD"),
    ({"per_hour": 1, "label": ""}, "label", "a label of 1 to 200"),
    ({"per_hour": 1, "provider": "My Lab"}, "provider", "not allowed"),
    ({"per_hour": 1, "market": "reserved"}, "market", "'reserved' is not allowed"),
])
def test_every_field_is_checked_naming_it(change: dict, field: str, says: str) -> None:
    with pytest.raises(ValidationError) as caught:
        validation.validate(DeclaredPrice, {**MACHINE, **change})
    assert caught.value.field == field
    assert says in str(caught.value)


@pytest.fixture
def document() -> dict:
    import yaml

    return yaml.safe_load((REPO_ROOT / "dags" / "config" / "fleet.yaml").read_text())


def test_a_fleet_declares_prices_in_entries_and_on_targets(document: dict) -> None:
    document = copy.deepcopy(document)
    document["prices"] = [{**MACHINE, "per_month": 73, "effective_from": dt.date(2026, 2, 1)}]
    local = next(t for t in document["targets"] if t["kind"] == "local")
    local["price"] = {"per_hour": 0.05, "currency": "EUR", "effective_from": "2026-01-01",
                      "label": "example price for this demo machine"}
    parsed = fleet.parse_fleet(document, fx_rate=shipped_fx_rate)
    entry, own = parsed.declared_prices
    assert (entry.provider, entry.instance_type, entry.hourly()) == ("mylab", "rack-a100", pytest.approx(0.1))
    assert entry.effective_from == "2026-02-01"  # a YAML date, as its text
    assert (own.provider, own.instance_type, own.market) == ("local", "local-cpu", "on_demand")
    assert own.hourly() == 0.05
    assert declared.load_name(own) == "declared-local-local-cpu-any-on_demand-2026-01-01"


def test_a_bad_target_price_names_its_place(document: dict) -> None:
    document = copy.deepcopy(document)
    document["targets"][0]["price"] = {"per_week": 3, "currency": "EUR", "effective_from": "2026-01-01",
                                       "label": "x"}
    with pytest.raises(ValidationError) as caught:
        fleet.parse_fleet(document, fx_rate=shipped_fx_rate)
    assert caught.value.field == "targets[0].price.per_week"
    assert "unknown key" in str(caught.value) and "per_month" in str(caught.value)
