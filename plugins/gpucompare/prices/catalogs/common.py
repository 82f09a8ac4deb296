"""What every catalog format shares: reading a location, the field checks, and the price rows.

Every row becomes a row of ``schema.PRICES_SCHEMA`` with ``gpu_model`` the GPU model table's
canonical name (``gpucompare.config.gpus``), hourly USD prices, ``market`` on_demand or spot and
the catalog's date and source. A row without a GPU is skipped; a GPU the table does not know is
imported with ``gpu_model`` null and counted in the summary, so the user sees what to add to
``gpus.csv``. Zones of one region with the same instance type are one row (the lowest price).

Nothing reaches the lake before every row has been checked: prices finite and > 0, instance types
and regions by ``config.patterns``, GPU names without quotes or shell/CSV-formula characters, the
file no larger than :data:`MAX_BYTES`, locations ``https://`` or ``file://`` (or a path) only.
A bad row stops the import with an error naming the row and the field, and nothing is written.
"""

from __future__ import annotations

import collections
import datetime as dt
import math
import re
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpucompare import resources
from gpucompare.config import gpus, patterns
from gpucompare.lake import schema
from gpucompare.prices.tables import PriceError, price_row

#: the largest catalog read (SkyPilot's biggest, AWS, is about 20 MB)
MAX_BYTES = 64 * 1024 * 1024
MAX_ROWS = 500_000
#: a price above this per hour is a broken row, not a machine (8 x H200 is about 100 USD/h)
MAX_HOURLY_PRICE = 10_000.0
SAMPLES_DIR = resources.data_dir("catalogs")
TIMEOUT_S = 60

Opener = Callable[[str, int], bytes]


class CatalogError(PriceError):
    """A catalog that cannot be imported; the message names the file, row and field."""


@dataclass
class CatalogImport:
    """What one catalog gave: the price rows (checked, not yet stored) and what was left out."""

    fmt: str
    provider: str
    effective_from: dt.date
    source: str
    rows: pa.Table
    read: int = 0
    without_gpu: int = 0
    without_price: int = 0
    fractional_gpu: int = 0
    other_terms: int = 0
    unknown_gpus: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def load_name(self) -> str:
        """The lake load these rows replace (one per format, provider and date)."""
        return f"catalog-{self.fmt}-{self.provider}-{self.effective_from.isoformat()}"

    def instance_types(self) -> set[str]:
        return set(self.rows["instance_type"].to_pylist())

    def gpu_models(self) -> set[str]:
        return {m for m in self.rows["gpu_model"].to_pylist() if m}

    def describe(self) -> str:
        unknown_rows = sum(1 for m in self.rows["gpu_model"].to_pylist() if m is None)
        lines = [
            f"{self.provider} ({self.fmt}, {self.effective_from.isoformat()}): {self.rows.num_rows} price "
            f"row(s) of {len(self.instance_types())} instance type(s), {len(self.gpu_models())} GPU model(s) "
            f"from {self.read} catalog row(s); skipped: {self.without_gpu} without a GPU, "
            f"{self.without_price} without a price, {self.fractional_gpu} with a fraction of a GPU, "
            f"{self.other_terms} other terms (Windows, low priority, reservations …)",
        ]
        if self.unknown_gpus:
            names = ", ".join(f"{name!r} ({count} row(s))"
                              for name, count in sorted(self.unknown_gpus.items()))
            lines.append(f"  {unknown_rows} row(s) imported with an unknown GPU (gpu_model empty): {names}; "
                         "add them to gpucompare/data/gpus.csv to compare them")
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)


# ---- reading a location ----------------------------------------------------------------
def _default_opener(url: str, limit: int) -> bytes:
    """GET ``url`` (https only), at most ``limit`` bytes + 1."""
    if not url.startswith("https://"):
        raise CatalogError(f"location: {url[:120]!r} is not an https URL")
    request = urllib.request.Request(url, headers={"User-Agent": "gpucompare import-catalog"})  # noqa: S310
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310 (https checked above)
        return response.read(limit + 1)


def https_url(url: str) -> str:
    """``url`` with its query quoted (Azure filters contain spaces and quotes)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.quote(parts.query, safe="=&$'(),:/+-._~%")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))


def read_location(location: str, *, opener: Opener | None = None, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of a catalog at a path, a ``file://`` URL or an ``https://`` URL (no other scheme)."""
    if not isinstance(location, str) or not location.strip() or "\x00" in location:
        raise CatalogError(f"location: {location!r} is not a path or URL")
    scheme = urllib.parse.urlsplit(location).scheme.lower() if "://" in location else ""
    if scheme == "https":
        data = (opener or _default_opener)(https_url(location), max_bytes)
        if len(data) > max_bytes:
            raise CatalogError(f"{location}: larger than {max_bytes} bytes; refused")
        return data
    if scheme not in ("", "file"):
        raise CatalogError(f"location: scheme {scheme!r} of {location!r} is not allowed "
                           "(allowed: https, file, or a path)")
    path = Path(location)
    if scheme:
        path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(location).path))
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise CatalogError(f"{path}: not a file")
        if size > max_bytes:
            raise CatalogError(f"{path}: {size} bytes, larger than {max_bytes}; refused")
        return path.read_bytes()
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read: {exc.strerror or exc}") from None


def decode_text(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{name}: not UTF-8 text (byte {exc.start})") from None


# ---- field checks -----------------------------------------------------------------------
def check_price(text: Any, where: str, column: str) -> float | None:
    """A price per hour, or None when the catalog has none (an empty cell)."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    if isinstance(text, bool):
        raise CatalogError(f"{where}, {column}: {text!r} is not a number")
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise CatalogError(f"{where}, {column}: {str(text)[:40]!r} is not a number") from None
    if not math.isfinite(value) or value <= 0 or value > MAX_HOURLY_PRICE:
        raise CatalogError(f"{where}, {column}: {value!r} is not allowed (allowed: a finite price per hour "
                           f"> 0 and <= {MAX_HOURLY_PRICE:g})")
    return value


def check_matching(value: str, pattern: re.Pattern[str], where: str, column: str, what: str) -> str:
    if not pattern.fullmatch(value):
        raise CatalogError(f"{where}, {column}: {value[:80]!r} is not allowed (allowed: {what}, matching "
                           f"{patterns.anchored(pattern)})")
    return value


def check_region(text: str, where: str, column: str) -> str | None:
    region = text.strip().lower()  # RunPod writes countries ("US"); the lake's regions are lower case
    if not region:
        return None
    return check_matching(region, patterns.REGION, where, column, "a region label of letters, digits and '-'")


class PriceCollector:
    """Price rows of one catalog, one per instance type, region and market (lowest price wins)."""

    def __init__(self, provider: str, effective_from: dt.date, source: str) -> None:
        self.provider = provider
        self.effective_from = effective_from
        self.source = source
        self.best: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.unknown: collections.Counter[str] = collections.Counter()
        self.models: dict[str, str | None] = {}  # accelerator -> canonical name, looked up once

    def add(self, where: str, *, instance_type: str, region: str | None, accelerator: str | None,
            gpu_count: int | None, prices: Mapping[str, float | None], note: str = "") -> None:
        if accelerator and accelerator not in self.models:
            self.models[accelerator] = gpus.canonical(accelerator)
        gpu_model = self.models[accelerator] if accelerator else None
        if gpu_model is None:
            self.unknown[accelerator or instance_type] += 1
        for market, price in prices.items():
            if price is None:
                continue
            row = price_row({
                "provider": self.provider, "instance_type": instance_type, "region": region or "",
                "market": market, "gpu_model": gpu_model or "", "gpu_count": gpu_count,
                "price": price, "currency": "USD", "unit": "hour",
                "effective_from": self.effective_from.isoformat(), "source": self.source + note,
            }, where)
            key = (instance_type, region, market)
            if key not in self.best or row["price"] < self.best[key]["price"]:
                self.best[key] = row

    def table(self) -> pa.Table:
        rows = sorted(self.best.values(), key=lambda r: (r["instance_type"], r["region"] or "", r["market"]))
        return pa.Table.from_pylist(rows, schema=schema.PRICES_SCHEMA)


