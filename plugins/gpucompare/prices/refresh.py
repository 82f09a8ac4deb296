"""Today's AWS prices, appended to the lake's price history (``refresh-prices``, the prices DAG).

``refresh_aws`` reads today's on-demand prices through the AWS Price List API
(``pricing.get_products``: the JSON price documents' OnDemand terms, USD per ``Hrs``) and
spot prices through EC2 ``describe_spot_price_history`` (per region, the lowest price over
the availability zones, per day), with plain boto3 so the command line runs without Airflow.
Each refresh is one load of the lake's ``prices`` table (``aws-<region>-<date>``), so a
refresh of the same day replaces itself and another day adds to the history.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpucompare.config import instances
from gpucompare.lake import schema
from gpucompare.prices.tables import append_prices_csv, deduplicate_prices

#: The families ``refresh-prices`` asks for by default (those a user compares today).
AWS_DEFAULT_FAMILIES: tuple[str, ...] = ("p3", "g4dn", "g5", "g6", "p4d", "p5")
PRICE_LIST_REGION = "us-east-1"  # the Price List API answers from a few regions only
SPOT_PRODUCT = "Linux/UNIX"

# ---- AWS Price List ----------------------------------------------------------------------
def family_of(instance_type: str) -> str:
    return instance_type.split(".", 1)[0]


def _ondemand_hourly_usd(terms: Mapping[str, Any]) -> tuple[float, str] | None:
    for term in (terms.get("OnDemand") or {}).values():
        for dimension in (term.get("priceDimensions") or {}).values():
            if dimension.get("unit") != "Hrs":
                continue
            usd = (dimension.get("pricePerUnit") or {}).get("USD")
            if usd is None:
                continue
            value = float(usd)
            if value > 0:
                return value, term.get("effectiveDate", "")
    return None


def parse_price_list(price_list: Iterable[str | Mapping[str, Any]], *, region: str, on: dt.date) -> pa.Table:
    """Price rows from AWS Price List documents (``get_products``' ``PriceList`` items).

    Keeps Linux, shared-tenancy, no-preinstalled-software, ``capacitystatus=Used`` compute
    instances of ``region`` with a positive OnDemand USD price per ``Hrs``; the GPU count is the
    ``gpu`` attribute, the model the ``gpuModel``-like attribute if present, else the instance type
    table's (``config.instances.family_gpu``: the type's GPU, or its family's).
    """
    rows = []
    for item in price_list:
        document = json.loads(item) if isinstance(item, str) else item
        attributes = (document.get("product") or {}).get("attributes") or {}
        if attributes.get("regionCode", region) != region:
            continue
        wanted = {"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA",
                  "capacitystatus": "Used"}
        if any(attributes.get(k, v) != v for k, v in wanted.items()):
            continue
        instance_type = attributes.get("instanceType")
        found = _ondemand_hourly_usd(document.get("terms") or {})
        if not instance_type or found is None:
            continue
        price, term_date = found
        gpu_text = str(attributes.get("gpu", "")).strip()
        gpu_model = attributes.get("gpuModel") or instances.family_gpu("aws", instance_type)
        rows.append({
            "provider": "aws",
            "instance_type": instance_type,
            "region": region,
            "market": "on_demand",
            "gpu_model": gpu_model,
            "gpu_count": int(gpu_text) if gpu_text.isdigit() else None,
            "price": price,
            "currency": "USD",
            "unit": "hour",
            "effective_from": on,
            "source": f"AWS Price List API get_products (sku {document.get('product', {}).get('sku', '?')}"
                      + (f", term effective {term_date[:10]})" if term_date else ")"),
        })
    return deduplicate_prices(pa.Table.from_pylist(rows, schema=schema.PRICES_SCHEMA))


def fetch_price_list(
    pricing_client: Any, *, region: str, instance_types: Iterable[str] | None = None,
) -> list[str]:
    """All Price List documents of GPU instances in ``region`` (follows pagination)."""
    filters = [
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
        {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
        {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
        {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
        {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
    ]
    queries: list[list[dict[str, str]]]
    if instance_types:
        queries = [filters + [{"Type": "TERM_MATCH", "Field": "instanceType", "Value": name}]
                   for name in instance_types]
    else:
        queries = [filters + [{"Type": "TERM_MATCH", "Field": "instanceFamily", "Value": "GPU instance"}]]
    documents: list[str] = []
    for query in queries:
        paginator = pricing_client.get_paginator("get_products")
        for page in paginator.paginate(ServiceCode="AmazonEC2", Filters=query, FormatVersion="aws_v1"):
            documents.extend(page.get("PriceList", []))
    return documents


# ---- EC2 spot history --------------------------------------------------------------------
def parse_spot_history(history: Iterable[Mapping[str, Any]], *, region: str) -> pa.Table:
    """Spot price rows: per instance type and day, the lowest price over the region's zones."""
    lowest: dict[tuple[str, dt.date], tuple[float, str]] = {}
    for entry in history:
        stamp = entry["Timestamp"]
        if isinstance(stamp, str):  # recorded JSON; boto3 itself hands out datetimes
            stamp = dt.datetime.fromisoformat(stamp[:19]).replace(tzinfo=dt.UTC)
        day = stamp.astimezone(dt.UTC).date() if stamp.tzinfo else stamp.date()
        price = float(entry["SpotPrice"])
        if price <= 0:
            continue
        key = (entry["InstanceType"], day)
        if key not in lowest or price < lowest[key][0]:
            lowest[key] = (price, entry.get("AvailabilityZone", "?"))
    rows = [
        {
            "provider": "aws",
            "instance_type": instance_type,
            "region": region,
            "market": "spot",
            "gpu_model": instances.family_gpu("aws", instance_type),
            "gpu_count": None,
            "price": price,
            "currency": "USD",
            "unit": "hour",
            "effective_from": day,
            "source": f"AWS EC2 describe_spot_price_history ({SPOT_PRODUCT}, lowest zone {zone})",
        }
        for (instance_type, day), (price, zone) in sorted(lowest.items())
    ]
    return pa.Table.from_pylist(rows, schema=schema.PRICES_SCHEMA)


def fetch_spot_history(
    ec2_client: Any, *, instance_types: list[str], since: dt.datetime,
) -> list[dict[str, Any]]:
    """Spot price history entries of ``instance_types`` since ``since`` (follows pagination)."""
    paginator = ec2_client.get_paginator("describe_spot_price_history")
    entries: list[dict[str, Any]] = []
    for page in paginator.paginate(InstanceTypes=instance_types, ProductDescriptions=[SPOT_PRODUCT],
                                   StartTime=since):
        entries.extend(page.get("SpotPriceHistory", []))
    return entries


def refresh_aws(
    *, region: str, pricing_client: Any, ec2_client: Any, instance_types: list[str] | None = None,
    today: dt.date | None = None, spot_days: int = 1,
) -> pa.Table:
    """Today's AWS on-demand and spot prices of ``region`` as price rows (not yet stored).

    ``instance_types`` defaults to every GPU instance the Price List returns for the default
    families; spot history covers the last ``spot_days`` days.
    """
    today = today or dt.datetime.now(dt.UTC).date()
    documents = fetch_price_list(pricing_client, region=region, instance_types=instance_types)
    on_demand = parse_price_list(documents, region=region, on=today)
    if not instance_types:
        families = set(AWS_DEFAULT_FAMILIES)
        on_demand = on_demand.filter(
            pa.array([family_of(t) in families for t in on_demand["instance_type"].to_pylist()], pa.bool_())
        )
        instance_types = sorted(set(on_demand["instance_type"].to_pylist()))
    spot = schema.PRICES_SCHEMA.empty_table()
    if instance_types:
        since = dt.datetime.combine(today, dt.time(), tzinfo=dt.UTC) - dt.timedelta(days=spot_days)
        spot = parse_spot_history(fetch_spot_history(ec2_client, instance_types=instance_types, since=since),
                                  region=region)
    return pa.concat_tables([on_demand, spot])


def aws_clients(region: str, aws_conn_id: str | None = None) -> tuple[Any, Any]:
    """(pricing, ec2) clients: through the amazon provider's hook of an Airflow connection when
    ``aws_conn_id`` is given (inside Airflow), else plain boto3 with the usual credential chain."""
    if aws_conn_id is not None:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

        pricing = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="pricing",
                              region_name=PRICE_LIST_REGION).get_conn()
        ec2 = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="ec2", region_name=region).get_conn()
        return pricing, ec2
    import boto3  # only the refresh needs it

    return boto3.client("pricing", region_name=PRICE_LIST_REGION), boto3.client("ec2", region_name=region)


def refresh_aws_to_lake(
    lake: Any, *, region: str, instance_types: list[str] | None = None, today: dt.date | None = None,
    csv_path: str | Path | None = None, aws_conn_id: str | None = None,
    pricing_client: Any = None, ec2_client: Any = None,
) -> pa.Table:
    """Fetch today's AWS prices and append them to the lake's ``prices/`` (one file per
    region and day, so history accumulates) and, if given, to a price CSV. Returns the rows.
    Clients default to :func:`aws_clients` (``aws_conn_id``: an Airflow connection)."""
    today = today or dt.datetime.now(dt.UTC).date()
    if pricing_client is None or ec2_client is None:
        default_pricing, default_ec2 = aws_clients(region, aws_conn_id=aws_conn_id)
        pricing_client = pricing_client or default_pricing
        ec2_client = ec2_client or default_ec2
    rows = refresh_aws(region=region, pricing_client=pricing_client, ec2_client=ec2_client,
                       instance_types=instance_types, today=today)
    lake.write_table("prices", f"aws-{region}-{today.isoformat()}", rows)
    if csv_path is not None:
        append_prices_csv(rows, csv_path)
    return rows


