"""Price and exchange-rate tables with history: the shipped CSVs, validation, lookups by date.

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

Refreshing them from AWS is ``gpucompare.prices.refresh``; other providers' catalogs are
imported by ``gpucompare.prices.catalogs``.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from gpucompare import resources
from gpucompare.config import patterns
from gpucompare.errors import PermanentError
from gpucompare.lake import schema

if TYPE_CHECKING:
    from gpucompare.lake.tables import Lake

DATA_DIR = resources.data_dir()
PRICES_DIR = DATA_DIR / "prices"
FX_DIR = DATA_DIR / "fx"

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
        "market": _require_choice(text["market"], patterns.MARKETS, where, "market"),
        "gpu_model": text["gpu_model"] or None,
        "gpu_count": gpu_count,
        "price": _parse_positive(text["price"], where, "price"),
        "currency": _require_choice(text["currency"], patterns.CURRENCIES, where, "currency"),
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
        "base": _require_choice(text["base"], patterns.CURRENCIES, where, "base"),
        "quote": _require_choice(text["quote"], patterns.CURRENCIES, where, "quote"),
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
        _require_choice(currency, patterns.CURRENCIES, "fx lookup", "currency")
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


def append_prices_csv(new_rows: pa.Table, path: str | Path) -> int:
    """Add rows not already in the CSV at ``path`` (created if missing); returns how many."""
    path = Path(path)
    existing = read_prices_csv(path) if path.exists() else schema.PRICES_SCHEMA.empty_table()
    merged = deduplicate_prices(pa.concat_tables([existing, new_rows.cast(schema.PRICES_SCHEMA)]))
    added = merged.num_rows - existing.num_rows
    if added:
        write_prices_csv(merged, path)
    return added


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

