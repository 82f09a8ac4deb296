"""Price and exchange-rate tables: shipped history, lookups by date, the AWS Price List parsing.

The Price List documents are recorded responses (``tests/support/data/aws_pricing/``, built in
the documented format). The refresh against moto's server and a real lake is
tests/integration/prices/test_prices_lake.py.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from gpucompare import cli
from gpucompare.lake import schema
from gpucompare.prices import refresh
from gpucompare.prices import tables as prices
from tests.support.prices_data import recorded


def price_rows(*rows: tuple) -> pa.Table:
    names = schema.PRICES_SCHEMA.names
    return pa.Table.from_pylist([dict(zip(names, row, strict=True)) for row in rows],
                                schema=schema.PRICES_SCHEMA)


# ---- shipped tables ----------------------------------------------------------------------
def test_shipped_prices_cover_the_families_with_date_and_source() -> None:
    table = prices.shipped_prices()
    rows = table.to_pylist()
    aws_now = [r for r in rows if r["provider"] == "aws" and r["region"] == "us-east-1"]
    families = {refresh.family_of(r["instance_type"]) for r in aws_now}
    assert {"p3", "g4dn", "g5", "g6", "p4d", "p5"} <= families
    for family in ("p3", "g4dn", "g5", "g6"):
        assert sum(refresh.family_of(r["instance_type"]) == family for r in aws_now) >= 3
    assert all(r["source"] and r["effective_from"] and r["gpu_model"] and r["gpu_count"] for r in rows)
    by_type = {r["instance_type"]: r for r in rows}
    assert (by_type["p3.2xlarge"]["price"], by_type["p3.2xlarge"]["unit"]) == (3.06, "hour")
    assert by_type["p5.48xlarge"]["gpu_count"] == 8 and by_type["g6.xlarge"]["price"] == 0.8048
    leader = {r["instance_type"]: (r["price"], r["currency"], r["unit"])
              for r in rows if r["provider"] == "leadergpu"}
    assert leader == {"ltbv14": (0.06, "EUR", "minute"), "ltbv19": (0.07, "EUR", "minute"),
                      "ltbv20": (0.08, "EUR", "minute")}
    assert ("aws", "p2.xlarge") in {(r["provider"], r["instance_type"]) for r in rows}


def test_shipped_exchange_rates_are_valid_for_2017_and_today() -> None:
    fx = prices.shipped_fx()
    assert prices.fx_rate(fx, from_currency="EUR", to_currency="USD", on=dt.date(2017, 6, 15)) == 1.1229
    today = prices.fx_rate(fx, from_currency="USD", to_currency="EUR", on=dt.date(2026, 11, 30))
    assert today == pytest.approx(1 / 1.0411)


def test_hourly_price() -> None:
    assert prices.hourly(0.06, "minute") == pytest.approx(3.6)
    assert prices.hourly(0.001, "second") == pytest.approx(3.6)
    assert prices.hourly(3.06, "hour") == 3.06
    with pytest.raises(prices.PriceError, match="unit 'day' is not one of hour, minute, second"):
        prices.hourly(1.0, "day")


# ---- lookups by date ---------------------------------------------------------------------
def test_price_lookup_by_date_keeps_history_and_prefers_the_exact_region() -> None:
    table = price_rows(
        ("aws", "g5.xlarge", None, "on_demand", "A10G", 1, 1.2, "USD", "hour", dt.date(2024, 1, 1), "a"),
        ("aws", "g5.xlarge", "us-east-1", "on_demand", "A10G", 1, 1.006, "USD", "hour", dt.date(2025, 1, 1),
         "b"),
        ("aws", "g5.xlarge", "us-east-1", "on_demand", "A10G", 1, 0.9, "USD", "hour", dt.date(2026, 6, 1),
         "c"),
        ("aws", "g5.xlarge", "us-east-1", "spot", "A10G", 1, 0.4, "USD", "hour", dt.date(2025, 1, 1), "d"),
    )

    def source(on: dt.date, region: str | None = "us-east-1", market: str = "on_demand") -> str | None:
        row = prices.price_at(table, provider="aws", instance_type="g5.xlarge", market=market,
                              region=region, on=on)
        return row and row["source"]

    assert source(dt.date(2023, 12, 31)) is None
    assert source(dt.date(2024, 6, 1)) == "a"
    assert source(dt.date(2025, 1, 1)) == "b"
    assert source(dt.date(2026, 5, 31)) == "b"
    assert source(dt.date(2026, 6, 1)) == "c"
    assert source(dt.date(2026, 6, 1), region="eu-west-1") == "a"  # region-less row applies anywhere
    assert source(dt.date(2026, 6, 1), market="spot") == "d"


def test_exchange_rate_lookup_by_date_both_directions() -> None:
    fx = pa.Table.from_pylist([
        {"base": "EUR", "quote": "USD", "rate": 1.25, "effective_from": dt.date(2017, 6, 1), "source": "x"},
        {"base": "EUR", "quote": "USD", "rate": 1.0, "effective_from": dt.date(2025, 1, 1), "source": "y"},
    ], schema=schema.FX_SCHEMA)
    assert prices.fx_rate(fx, from_currency="EUR", to_currency="USD", on=dt.date(2020, 1, 1)) == 1.25
    assert prices.fx_rate(fx, from_currency="USD", to_currency="EUR", on=dt.date(2020, 1, 1)) == 0.8
    assert prices.fx_rate(fx, from_currency="USD", to_currency="EUR", on=dt.date(2025, 1, 1)) == 1.0
    assert prices.fx_rate(fx, from_currency="EUR", to_currency="EUR", on=dt.date(1999, 1, 1)) == 1.0
    with pytest.raises(prices.PriceError, match="no EUR/USD exchange rate valid on 2016-01-01"):
        prices.fx_rate(fx, from_currency="EUR", to_currency="USD", on=dt.date(2016, 1, 1))
    with pytest.raises(prices.PriceError, match="currency 'GBP' is not one of EUR, USD"):
        prices.fx_rate(fx, from_currency="GBP", to_currency="USD", on=dt.date(2020, 1, 1))


@pytest.mark.parametrize(
    ("cell", "value", "message"),
    [
        ("price", "0,06", "line 2: price '0,06' is not a number"),
        ("unit", "month", "line 2: unit 'month' is not one of hour, minute, second"),
        ("market", "reserved", "line 2: market 'reserved' is not one of on_demand, spot"),
        ("effective_from", "06/2017", "line 2: effective_from '06/2017' is not a date"),
        ("price", "-1", "line 2: price must be > 0"),
    ],
)
def test_a_bad_price_row_is_refused_naming_line_and_column(tmp_path: Path, cell: str, value: str,
                                                           message: str) -> None:
    path = tmp_path / "p.csv"
    row = dict(provider="x", instance_type="y", region="", market="on_demand", gpu_model="", gpu_count="1",
               price="1.0", currency="EUR", unit="hour", effective_from="2020-01-01", source="s")
    row[cell] = value
    path.write_text(",".join(schema.PRICES_SCHEMA.names) + "\n"
                    + ",".join(f'"{row[c]}"' for c in schema.PRICES_SCHEMA.names) + "\n", encoding="utf-8")
    with pytest.raises(prices.PriceError, match=message):
        prices.read_prices_csv(path)


# ---- AWS Price List parsing --------------------------------------------------------------
def test_price_list_documents_are_parsed_and_filtered() -> None:
    documents = (recorded("get_products_us-east-1_page1.json")["PriceList"]
                 + recorded("get_products_us-east-1_page2.json")["PriceList"])
    table = refresh.parse_price_list(documents, region="us-east-1", on=dt.date(2026, 11, 30))
    got = {r["instance_type"]: (r["price"], r["gpu_count"], r["gpu_model"]) for r in table.to_pylist()}
    assert got == {
        # no gpuModel attribute: the instance type table's canonical name (data/instances.csv)
        "p3.2xlarge": (3.06, 1, "V100"),  # not the Dedicated 3.366 nor a Reserved rate
        "g4dn.xlarge": (0.526, 1, "T4"),  # not Windows
        "g5.xlarge": (1.006, 1, "A10G"),  # not us-west-1's 1.224
        "g6.xlarge": (0.8048, 1, "L4"),
        "g6.12xlarge": (4.6016, 4, "L4"),
        "p4d.24xlarge": (32.7726, 8, "A100"),
        "p5.48xlarge": (98.32, 8, "H100"),
        "g5g.xlarge": (0.42, 1, None),  # a family the table does not list: unknown, not guessed
    }
    assert set(table["market"].to_pylist()) == {"on_demand"} and set(table["unit"].to_pylist()) == {"hour"}
    assert set(table["effective_from"].to_pylist()) == {dt.date(2026, 11, 30)}
    assert all("get_products" in s and "sku" in s for s in table["source"].to_pylist())


def test_refresh_prices_command_checks_its_input(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    code = cli.main(["refresh-prices", "--provider", "aws", "--region", "US East!", "--lake", str(tmp_path)])
    assert code == 2
    assert "--region 'US East!' is not a valid region name" in capsys.readouterr().err
    code = cli.main(["refresh-prices", "--provider", "aws", "--region", "us-east-1", "--lake", str(tmp_path),
                     "--instance-types", "g5.xlarge,$(reboot)"])
    assert code == 2 and "'$(reboot)' is not a valid instance type" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["refresh-prices", "--provider", "gcp", "--region", "us-east-1"])


def test_duplicate_price_rows_are_kept_once_first_wins() -> None:
    first = ("leadergpu", "ltbv14", None, "on_demand", "GTX 1080", 1, 0.06, "EUR", "minute",
             dt.date(2017, 6, 1), "lake copy")
    same_again = (*first[:-1], "shipped copy")
    other_day = (*first[:9], dt.date(2018, 1, 1), "later")
    table = prices.deduplicate_prices(price_rows(other_day, first, same_again))
    assert table["source"].to_pylist() == ["lake copy", "later"]  # sorted by date, first copy kept
