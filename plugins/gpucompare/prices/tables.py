"""Price and exchange-rate tables with history, and their refresh from AWS.

Prices are kept as versioned CSV files in the repository (``gpucompare/data/prices/*.csv``,
columns of ``schema.PRICES_SCHEMA``: ``provider, instance_type, region, market, gpu_model,
gpu_count, price, currency, unit, effective_from, source``) and can be loaded into the lake
(``LAKE/prices/``). A row is valid from ``effective_from`` until the next row of the same
provider, instance type, region and market; an empty region means "every region". Rows are
only ever added (``refresh-prices`` appends), so the history needed to cost an old result
stays.

Exchange rates (``gpucompare/data/fx/*.csv``, ``LAKE/fx/``; ``base, quote, rate,
effective_from, source`` with 1 base = rate quote) work the same way; a rate is used
for both directions.

``refresh_aws`` reads today's on-demand prices through the AWS Price List API
(``pricing.get_products``: the JSON price documents' OnDemand terms, USD per ``Hrs``) and
spot prices through EC2 ``describe_spot_price_history`` (per region, the lowest price over
the availability zones, per day), with plain boto3 so the command line runs without Airflow.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from gpucompare import resources
from gpucompare.errors import PermanentError
from gpucompare.lake import schema

if TYPE_CHECKING:
    from gpucompare.lake.tables import Lake

DATA_DIR = resources.data_dir()
PRICES_DIR = DATA_DIR / "prices"
FX_DIR = DATA_DIR / "fx"

#: GPU model of each AWS GPU family, for price documents whose attributes do not name it.
AWS_GPU_MODELS: dict[str, str] = {
    "p2": "Tesla K80",
    "p3": "Tesla V100",
    "p3dn": "V100-32GB",
    "g4dn": "Tesla T4",
    "g5": "A10G",
    "g6": "L4",
    "g6e": "L40S",
    "p4d": "A100",
    "p4de": "A100-80GB",
    "p5": "H100",
    "p5e": "H200",
}
#: The families ``refresh-prices`` asks for by default (those a user compares today).
AWS_DEFAULT_FAMILIES: tuple[str, ...] = ("p3", "g4dn", "g5", "g6", "p4d", "p5")
PRICE_LIST_REGION = "us-east-1"  # the Price List API answers from a few regions only
SPOT_PRODUCT = "Linux/UNIX"

_PRICE_KEY = ("provider", "instance_type", "region", "market", "effective_from", "price", "currency", "unit")
_FX_KEY = ("base", "quote", "effective_from", "rate")


class PriceError(PermanentError):
    """A price or exchange-rate row (or lookup) that cannot be used; says where and why."""


# ---- CSV tables --------------------------------------------------------------------------
def _parse_date(text: str, where: str, column: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text.strip())
    except ValueError:
        raise PriceError(f"{where}: {column} {text!r} is not a date YYYY-MM-DD") from None


def _parse_positive(text: str, where: str, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise PriceError(f"{where}: {column} {text!r} is not a number (use a decimal point)") from None
    if not math.isfinite(value) or value <= 0:
        raise PriceError(f"{where}: {column} must be > 0, got {text!r}")
    return value


def _require_choice(value: str, allowed: Iterable[str], where: str, column: str) -> str:
    allowed = tuple(allowed)
    if value not in allowed:
        raise PriceError(f"{where}: {column} {value!r} is not one of {', '.join(allowed)}")
    return value


def price_row(raw: Mapping[str, Any], where: str = "price row") -> dict[str, Any]:
    """One validated price row (typed) from strings or values; ``where`` prefixes errors."""
    missing = [c for c in schema.PRICES_SCHEMA.names if c not in raw]
    if missing:
        raise PriceError(f"{where}: missing column(s) {', '.join(missing)}")
    text = {k: ("" if raw[k] is None else str(raw[k]).strip()) for k in schema.PRICES_SCHEMA.names}
    for column in ("provider", "instance_type", "source"):
        if not text[column]:
            raise PriceError(f"{where}: {column} must not be empty")
    gpu_count = None
    if text["gpu_count"]:
        try:
            gpu_count = int(text["gpu_count"])
        except ValueError:
            raise PriceError(f"{where}: gpu_count {text['gpu_count']!r} is not an integer") from None
    return {
        "provider": text["provider"],
        "instance_type": text["instance_type"],
        "region": text["region"] or None,
        "market": _require_choice(text["market"], schema.MARKETS, where, "market"),
        "gpu_model": text["gpu_model"] or None,
        "gpu_count": gpu_count,
        "price": _parse_positive(text["price"], where, "price"),
        "currency": _require_choice(text["currency"], schema.CURRENCIES, where, "currency"),
        "unit": _require_choice(text["unit"], schema.PRICE_UNITS, where, "unit"),
        "effective_from": _parse_date(text["effective_from"], where, "effective_from"),
        "source": text["source"],
    }


def fx_row(raw: Mapping[str, Any], where: str = "fx row") -> dict[str, Any]:
    """One validated exchange-rate row."""
    missing = [c for c in schema.FX_SCHEMA.names if c not in raw]
    if missing:
        raise PriceError(f"{where}: missing column(s) {', '.join(missing)}")
    text = {k: str(raw[k]).strip() for k in schema.FX_SCHEMA.names}
    if not text["source"]:
        raise PriceError(f"{where}: source must not be empty")
    return {
        "base": _require_choice(text["base"], schema.CURRENCIES, where, "base"),
        "quote": _require_choice(text["quote"], schema.CURRENCIES, where, "quote"),
        "rate": _parse_positive(text["rate"], where, "rate"),
        "effective_from": _parse_date(text["effective_from"], where, "effective_from"),
        "source": text["source"],
    }


def _read_csv_rows(path: Path) -> Iterable[tuple[str, dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as handle:
        for line_no, row in enumerate(csv.DictReader(handle), start=2):
            yield f"{path.name} line {line_no}", row


def read_prices_csv(path: str | Path) -> pa.Table:
    """A price CSV as a validated table (errors name the file, line and column)."""
    path = Path(path)
    rows = [price_row(row, where) for where, row in _read_csv_rows(path)]
    return pa.Table.from_pylist(rows, schema=schema.PRICES_SCHEMA)


def read_fx_csv(path: str | Path) -> pa.Table:
    """An exchange-rate CSV as a validated table."""
    path = Path(path)
    rows = [fx_row(row, where) for where, row in _read_csv_rows(path)]
    return pa.Table.from_pylist(rows, schema=schema.FX_SCHEMA)


def shipped_prices() -> pa.Table:
    """Every price history file shipped with the package (``data/prices/*.csv``)."""
    tables = [read_prices_csv(p) for p in sorted(PRICES_DIR.glob("*.csv"))]
    return pa.concat_tables(tables) if tables else schema.PRICES_SCHEMA.empty_table()


def shipped_fx() -> pa.Table:
    """Every exchange-rate file shipped with the package (``data/fx/*.csv``)."""
    tables = [read_fx_csv(p) for p in sorted(FX_DIR.glob("*.csv"))]
    return pa.concat_tables(tables) if tables else schema.FX_SCHEMA.empty_table()


def _deduplicate(table: pa.Table, key: tuple[str, ...], sort: list[tuple[str, str]]) -> pa.Table:
    """One row per ``key`` (the first one met), sorted by ``sort``; vectorised, since the
    lake's price history grows by a few hundred spot rows a day."""
    numbered = table.select(list(key)).append_column("_row", pa.array(range(table.num_rows), pa.int64()))
    first = numbered.group_by(list(key)).aggregate([("_row", "min")])["_row_min"]
    return table.take(pc.take(first, pc.sort_indices(first))).sort_by(sort)


def deduplicate_prices(table: pa.Table) -> pa.Table:
    """Rows with the same provider, type, region, market, date and price kept once (first wins)."""
    return _deduplicate(
        table, _PRICE_KEY, [("provider", "ascending"), ("instance_type", "ascending"),
                            ("market", "ascending"), ("effective_from", "ascending")]
    )


def deduplicate_fx(table: pa.Table) -> pa.Table:
    """Rates with the same pair, date and value kept once."""
    return _deduplicate(table, _FX_KEY, [("base", "ascending"), ("quote", "ascending"),
                                         ("effective_from", "ascending")])


def write_prices_csv(table: pa.Table, path: str | Path) -> None:
    """Write a price table as CSV in the shipped format (dates ISO, empty cells for nulls)."""
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(schema.PRICES_SCHEMA.names)
        for row in table.to_pylist():
            writer.writerow(["" if row[c] is None else row[c] for c in schema.PRICES_SCHEMA.names])


# ---- lookups -----------------------------------------------------------------------------
def hourly(price: float, unit: str) -> float:
    """``price`` per ``unit`` expressed per hour."""
    if unit not in schema.SECONDS_PER_UNIT:
        raise PriceError(f"unit {unit!r} is not one of {', '.join(schema.PRICE_UNITS)}")
    return price * 3600 / schema.SECONDS_PER_UNIT[unit]


def price_at(
    prices: pa.Table, *, provider: str, instance_type: str, market: str, on: dt.date,
    region: str | None = None,
) -> dict[str, Any] | None:
    """The price row valid on ``on``: latest ``effective_from`` ≤ ``on``; a row for the exact
    region beats a region-less one. None when no price applies."""
    best: dict[str, Any] | None = None
    for row in prices.to_pylist():
        if (row["provider"], row["instance_type"], row["market"]) != (provider, instance_type, market):
            continue
        if row["region"] is not None and row["region"] != region:
            continue
        if row["effective_from"] > on:
            continue
        rank = (row["region"] is not None, row["effective_from"])
        if best is None or rank > (best["region"] is not None, best["effective_from"]):
            best = row
    return best


def fx_rate(fx: pa.Table, *, from_currency: str, to_currency: str, on: dt.date) -> float:
    """Units of ``to_currency`` per unit of ``from_currency`` on ``on`` (latest rate ≤ ``on``)."""
    for currency in (from_currency, to_currency):
        _require_choice(currency, schema.CURRENCIES, "fx lookup", "currency")
    if from_currency == to_currency:
        return 1.0
    best: tuple[dt.date, float] | None = None
    for row in fx.to_pylist():
        if row["effective_from"] > on:
            continue
        if (row["base"], row["quote"]) == (from_currency, to_currency):
            candidate = (row["effective_from"], row["rate"])
        elif (row["base"], row["quote"]) == (to_currency, from_currency):
            candidate = (row["effective_from"], 1.0 / row["rate"])
        else:
            continue
        if best is None or candidate[0] > best[0]:
            best = candidate
    if best is None:
        raise PriceError(f"no {from_currency}/{to_currency} exchange rate valid on {on.isoformat()}")
    return best[1]


def shipped_fx_rate(from_currency: str, to_currency: str, on_date: dt.date) -> float:
    """Units of ``to_currency`` per ``from_currency`` from the shipped exchange-rate table (the
    ``fx_rate`` the fleet file's budget ceiling and the cost guard use when given none)."""
    return fx_rate(shipped_fx(), from_currency=from_currency, to_currency=to_currency, on=on_date)


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
    ``gpu`` attribute, the model the ``gpuModel``-like attribute if present, else the family's.
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
        gpu_model = attributes.get("gpuModel") or AWS_GPU_MODELS.get(family_of(instance_type))
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
            "gpu_model": AWS_GPU_MODELS.get(family_of(instance_type)),
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


def append_prices_csv(new_rows: pa.Table, path: str | Path) -> int:
    """Add rows not already in the CSV at ``path`` (created if missing); returns how many."""
    path = Path(path)
    existing = read_prices_csv(path) if path.exists() else schema.PRICES_SCHEMA.empty_table()
    merged = deduplicate_prices(pa.concat_tables([existing, new_rows.cast(schema.PRICES_SCHEMA)]))
    added = merged.num_rows - existing.num_rows
    if added:
        write_prices_csv(merged, path)
    return added


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


def price_history(lake: Lake, include_shipped: bool = True,
                  as_of: int | str | dt.datetime | None = None) -> pa.Table:
    """Price history: the shipped CSVs (``gpucompare/data/prices``) and the lake's ``prices``."""
    parts = [lake.read_kind("prices", as_of)]
    if include_shipped:
        parts.append(shipped_prices())
    return deduplicate_prices(pa.concat_tables(parts))


def fx_history(lake: Lake, include_shipped: bool = True,
               as_of: int | str | dt.datetime | None = None) -> pa.Table:
    """Exchange rates: the shipped CSV (``gpucompare/data/fx``) and the lake's ``fx``."""
    parts = [lake.read_kind("fx", as_of)]
    if include_shipped:
        parts.append(shipped_fx())
    return deduplicate_fx(pa.concat_tables(parts))

