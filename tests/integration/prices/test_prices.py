"""Price and exchange-rate tables: shipped history, lookups by date, AWS refresh.

The AWS Price List API is not offered by moto's server, so ``pricing.get_products`` is
answered from recorded responses (``tests/support/data/aws_pricing/``, built in the documented
format) through botocore's ``Stubber`` on a real boto3 client — it stands in for AWS's
pricing endpoint only. Spot history comes from moto's server for real.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest
from botocore.stub import Stubber

from gpucompare import cli
from gpucompare.lake import schema
from gpucompare.lake import tables as lake
from gpucompare.prices import tables as prices
from tests.conftest import DATA_DIR

RECORDED = DATA_DIR / "aws_pricing"
BASE_FILTERS = [
    {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-east-1"},
    {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
    {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
    {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
    {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
]


def recorded(name: str) -> dict:
    return json.loads((RECORDED / name).read_text(encoding="utf-8"))


def price_rows(*rows: tuple) -> pa.Table:
    names = schema.PRICES_SCHEMA.names
    return pa.Table.from_pylist([dict(zip(names, row, strict=True)) for row in rows],
                                schema=schema.PRICES_SCHEMA)


# ---- shipped tables ----------------------------------------------------------------------
def test_shipped_prices_cover_the_families_with_date_and_source() -> None:
    table = prices.shipped_prices()
    rows = table.to_pylist()
    aws_now = [r for r in rows if r["provider"] == "aws" and r["region"] == "us-east-1"]
    families = {prices.family_of(r["instance_type"]) for r in aws_now}
    assert {"p3", "g4dn", "g5", "g6", "p4d", "p5"} <= families
    for family in ("p3", "g4dn", "g5", "g6"):
        assert sum(prices.family_of(r["instance_type"]) == family for r in aws_now) >= 3
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
    table = prices.parse_price_list(documents, region="us-east-1", on=dt.date(2026, 11, 30))
    got = {r["instance_type"]: (r["price"], r["gpu_count"], r["gpu_model"]) for r in table.to_pylist()}
    assert got == {
        "p3.2xlarge": (3.06, 1, "Tesla V100"),  # not the Dedicated 3.366 nor a Reserved rate
        "g4dn.xlarge": (0.526, 1, "Tesla T4"),  # not Windows
        "g5.xlarge": (1.006, 1, "A10G"),  # not us-west-1's 1.224
        "g6.xlarge": (0.8048, 1, "L4"),
        "g6.12xlarge": (4.6016, 4, "L4"),
        "p4d.24xlarge": (32.7726, 8, "A100"),
        "p5.48xlarge": (98.32, 8, "H100"),
        "g5g.xlarge": (0.42, 1, None),
    }
    assert set(table["market"].to_pylist()) == {"on_demand"} and set(table["unit"].to_pylist()) == {"hour"}
    assert set(table["effective_from"].to_pylist()) == {dt.date(2026, 11, 30)}
    assert all("get_products" in s and "sku" in s for s in table["source"].to_pylist())


def stubbed_pricing(*pages: tuple[dict, dict]) -> tuple[object, Stubber]:
    """A real boto3 pricing client whose HTTP answers are the recorded pages (see module docstring)."""
    import boto3

    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")  # noqa: S106
    stubber = Stubber(client)
    for response, params in pages:
        stubber.add_response("get_products", response, params)
    stubber.activate()
    return client, stubber


def gpu_family_params(next_token: str | None = None) -> dict:
    params = {"ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1",
              "Filters": [*BASE_FILTERS,
                          {"Type": "TERM_MATCH", "Field": "instanceFamily", "Value": "GPU instance"}]}
    if next_token:
        params["NextToken"] = next_token
    return params


@pytest.mark.integration
def test_refresh_appends_on_demand_and_spot_prices_and_keeps_history(
    tmp_path: Path, aws_client, aws_endpoint: str,
) -> None:
    page1 = recorded("get_products_us-east-1_page1.json")
    pricing, stubber = stubbed_pricing((page1, gpu_family_params()),
                                       (recorded("get_products_us-east-1_page2.json"),
                                        gpu_family_params(page1["NextToken"])))
    ec2 = aws_client("ec2")
    target = lake.open_lake(str(tmp_path / "lake"))
    price_csv = tmp_path / "aws.csv"
    first_day = dt.date(2026, 11, 30)
    rows = prices.refresh_aws_to_lake(target, region="us-east-1", today=first_day, csv_path=price_csv,
                                      pricing_client=pricing, ec2_client=ec2)
    stubber.assert_no_pending_responses()

    on_demand = rows.filter(pa.compute.field("market") == "on_demand")
    assert sorted(on_demand["instance_type"].to_pylist()) == [
        "g4dn.xlarge", "g5.xlarge", "g6.12xlarge", "g6.xlarge", "p3.2xlarge", "p4d.24xlarge", "p5.48xlarge"]
    # spot: compare with what the endpoint itself reports (lowest zone per type and day)
    spot = {r["instance_type"]: r for r in rows.to_pylist() if r["market"] == "spot"}
    direct = ec2.describe_spot_price_history(InstanceTypes=sorted(on_demand["instance_type"].to_pylist()))
    expected: dict[str, tuple[float, dt.date]] = {}
    for entry in direct["SpotPriceHistory"]:
        price, day = float(entry["SpotPrice"]), entry["Timestamp"].date()
        if entry["InstanceType"] not in expected or price < expected[entry["InstanceType"]][0]:
            expected[entry["InstanceType"]] = (price, day)
    assert expected, "the endpoint offers spot history for these types"
    assert {t: (r["price"], r["effective_from"]) for t, r in spot.items()} == expected
    assert all(r["region"] == "us-east-1" and r["unit"] == "hour" and "spot" in r["source"]
               for r in spot.values())

    # a later refresh with a changed price is appended: history stays, lookups follow the date
    later_day = dt.date(2026, 12, 7)
    pricing, stubber = stubbed_pricing((recorded("get_products_us-east-1_g5.xlarge_later.json"), {
        "ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1",
        "Filters": [*BASE_FILTERS, {"Type": "TERM_MATCH", "Field": "instanceType", "Value": "g5.xlarge"}]}))
    prices.refresh_aws_to_lake(target, region="us-east-1", instance_types=["g5.xlarge"], today=later_day,
                               csv_path=price_csv, pricing_client=pricing, ec2_client=ec2)
    stubber.assert_no_pending_responses()
    assert target.loads("prices") == ["aws-us-east-1-2026-11-30", "aws-us-east-1-2026-12-07"]
    table = prices.price_history(target)

    def g5(on: dt.date) -> float:
        return prices.price_at(table, provider="aws", instance_type="g5.xlarge", market="on_demand",
                               region="us-east-1", on=on)["price"]

    assert (g5(dt.date(2026, 1, 1)), g5(first_day), g5(later_day)) == (1.006, 1.006, 0.9054)
    csv_rows = prices.read_prices_csv(price_csv)
    assert csv_rows.num_rows == rows.num_rows + 1  # the later refresh added g5.xlarge's new price
    assert prices.append_prices_csv(rows, price_csv) == 0  # nothing new: nothing appended


def test_refresh_prices_command_checks_its_input(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    code = cli.main(["refresh-prices", "--provider", "aws", "--region", "US East!", "--lake", str(tmp_path)])
    assert code == 2
    assert "--region 'US East!' is not a valid region name" in capsys.readouterr().err
    code = cli.main(["refresh-prices", "--provider", "aws", "--region", "us-east-1", "--lake", str(tmp_path),
                     "--instance-types", "g5.xlarge,$(reboot)"])
    assert code == 2 and "'$(reboot)' is not a valid instance type" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["refresh-prices", "--provider", "gcp", "--region", "us-east-1"])


def test_load_prices_writes_the_shipped_history_into_the_lake(tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    assert cli.main(["load-prices", "--lake", uri]) == 0
    target = lake.open_lake(uri)
    assert target.loads("prices") == ["shipped"]
    shipped = prices.deduplicate_prices(prices.shipped_prices())
    assert prices.price_history(target, include_shipped=False).equals(shipped)
    assert prices.fx_history(target, include_shipped=False).num_rows == prices.shipped_fx().num_rows


@pytest.mark.integration
def test_clients_from_an_airflow_connection_reach_the_endpoint(
    aws_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """Inside Airflow the refresh takes its clients from the amazon provider's hook."""
    pytest.importorskip("airflow.providers.amazon")
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.setenv("AIRFLOW_CONN_GPUCOMPARE_TEST_AWS", json.dumps({
        "conn_type": "aws", "login": "testing", "password": "testing",
        "extra": {"region_name": "us-east-1", "endpoint_url": aws_endpoint}}))
    pricing, ec2 = prices.aws_clients("us-east-1", aws_conn_id="gpucompare_test_aws")
    assert pricing.meta.region_name == "us-east-1" and pricing.meta.service_model.service_name == "pricing"
    assert ec2.meta.endpoint_url == aws_endpoint
    history = ec2.describe_spot_price_history(InstanceTypes=["g5.xlarge"])["SpotPriceHistory"]
    assert {entry["InstanceType"] for entry in history} == {"g5.xlarge"}


def test_duplicate_price_rows_are_kept_once_first_wins() -> None:
    first = ("leadergpu", "ltbv14", None, "on_demand", "GTX 1080", 1, 0.06, "EUR", "minute",
             dt.date(2017, 6, 1), "lake copy")
    same_again = (*first[:-1], "shipped copy")
    other_day = (*first[:9], dt.date(2018, 1, 1), "later")
    table = prices.deduplicate_prices(price_rows(other_day, first, same_again))
    assert table["source"].to_pylist() == ["lake copy", "later"]  # sorted by date, first copy kept
