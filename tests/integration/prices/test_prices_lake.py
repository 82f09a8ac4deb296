"""Prices into a real lake and from moto's server on 127.0.0.1 as the AWS endpoint: the refresh
appends on-demand and spot prices and keeps the history, the shipped history loads into the
lake, and clients built from an Airflow connection reach the endpoint (split from
tests/unit/prices/test_prices.py: the tables, lookups and parsing).

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
from gpucompare.lake import tables as lake
from gpucompare.prices import refresh
from gpucompare.prices import tables as prices
from tests.support.prices_data import recorded

BASE_FILTERS = [
    {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-east-1"},
    {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
    {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
    {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
    {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
]


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
    rows = refresh.refresh_aws_to_lake(target, region="us-east-1", today=first_day, csv_path=price_csv,
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
    refresh.refresh_aws_to_lake(target, region="us-east-1", instance_types=["g5.xlarge"], today=later_day,
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


def test_load_prices_writes_the_shipped_history_into_the_lake(tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    assert cli.main(["load-prices", "--lake", uri]) == 0
    target = lake.open_lake(uri)
    assert target.loads("prices") == ["shipped"]
    shipped = prices.deduplicate_prices(prices.shipped_prices())
    assert prices.price_history(target, include_shipped=False).equals(shipped)
    assert prices.fx_history(target, include_shipped=False).num_rows == prices.shipped_fx().num_rows


def test_clients_from_an_airflow_connection_reach_the_endpoint(
    aws_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """Inside Airflow the refresh takes its clients from the amazon provider's hook."""
    pytest.importorskip("airflow.providers.amazon")
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.setenv("AIRFLOW_CONN_GPUCOMPARE_TEST_AWS", json.dumps({
        "conn_type": "aws", "login": "testing", "password": "testing",
        "extra": {"region_name": "us-east-1", "endpoint_url": aws_endpoint}}))
    pricing, ec2 = refresh.aws_clients("us-east-1", aws_conn_id="gpucompare_test_aws")
    assert pricing.meta.region_name == "us-east-1" and pricing.meta.service_model.service_name == "pricing"
    assert ec2.meta.endpoint_url == aws_endpoint
    history = ec2.describe_spot_price_history(InstanceTypes=["g5.xlarge"])["SpotPriceHistory"]
    assert {entry["InstanceType"] for entry in history} == {"g5.xlarge"}
