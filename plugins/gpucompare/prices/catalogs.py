"""Other providers' price catalogs, imported into the lake's price history.

Two formats are read:

* ``skypilot``: the public SkyPilot catalog, one ``vms.csv`` per cloud
  (``catalogs/v7/<cloud>/vms.csv`` in github.com/skypilot-org/skypilot-catalog: ``InstanceType,
  AcceleratorName, AcceleratorCount, …, Price, SpotPrice, Region, …``; the column order differs
  between clouds, so columns are found by name). GCP's GPU rows have no instance type: they price
  attachable GPUs alone, so they are stored as ``<GPU>-x<count>`` (``T4-x1``) and their source
  says that the host VM is billed on top.
* ``azure``: pages of the Azure Retail Prices API (``https://prices.azure.com/api/retail/prices``,
  public, no credentials; JSON ``{"Items": [...], "NextPageLink": ...}``), followed page by page.
  The API does not say which GPU a VM size has; :data:`AZURE_SKU_FILE` (``data/catalogs/
  azure_gpus.csv``, from SkyPilot's Azure catalog) does, and an N-series size it does not list is
  imported with an unknown GPU.

Every row becomes a row of ``schema.PRICES_SCHEMA`` with ``gpu_model`` the GPU model table's
canonical name (``gpucompare.config.gpus``), hourly USD prices, ``market`` on_demand or spot and
the catalog's date and source. A row without a GPU is skipped; a GPU the table does not know is
imported with ``gpu_model`` null and counted in the summary, so the user sees what to add to
``gpus.csv``. Zones of one region with the same instance type are one row (the lowest price).

Nothing reaches the lake before every row has been checked: prices finite and > 0, instance types
and regions by ``config.patterns``, GPU names without quotes or shell/CSV-formula characters, the
file no larger than :data:`MAX_BYTES`, locations ``https://`` or ``file://`` (or a path) only.
A bad row stops the import with an error naming the row and the field, and nothing is written.

One import is one load of the lake's ``prices`` table, named ``catalog-<format>-<provider>-<date>``:
importing the same catalog again replaces that load (no duplicate rows) and a catalog of a later
date is another load, so the history is kept, like the AWS refresh (``prices.refresh``).
"""

from __future__ import annotations

import collections
import csv
import datetime as dt
import io
import json
import math
import re
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from gpucompare import resources
from gpucompare.config import gpus, patterns
from gpucompare.lake import schema
from gpucompare.prices.tables import PriceError, price_row

if TYPE_CHECKING:
    from gpucompare.lake.tables import Lake

FORMATS: tuple[str, ...] = ("skypilot", "azure")
#: the largest catalog read (SkyPilot's biggest, AWS, is about 20 MB)
MAX_BYTES = 64 * 1024 * 1024
MAX_ROWS = 500_000
#: Azure answers 100 items a page (1000 with the preview API); a region's VMs take ~60 pages
MAX_PAGES = 2000
#: a price above this per hour is a broken row, not a machine (8 x H200 is about 100 USD/h)
MAX_HOURLY_PRICE = 10_000.0
AZURE_HOST = "prices.azure.com"
AZURE_URL = "https://prices.azure.com/api/retail/prices"
SAMPLES_DIR = resources.data_dir("catalogs")
SAMPLES_FILE = SAMPLES_DIR / "samples.csv"
#: Azure VM size -> GPU and count: the whole-GPU rows of SkyPilot's Azure catalog (coopslarhette/
#: skypilot-catalog dd2604fa, catalogs/v7/azure/vms.csv), ND96isr_H100_v5 corrected to its 8 GPUs
#: (SkyPilot says 12); AMD (NVv4) and partial-GPU sizes are left out
AZURE_SKU_FILE = SAMPLES_DIR / "azure_gpus.csv"
SKYPILOT_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "Region")
#: a GPU name as catalogs write it; no quotes, ';', '=', '$', '<'… and not a CSV formula
ACCELERATOR = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._+()-]{0,63}")
GPU_ONLY_NOTE = "; the price covers the GPUs only (a host VM is billed on top)"
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


def _https_url(url: str) -> str:
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
        data = (opener or _default_opener)(_https_url(location), max_bytes)
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


def _text(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{name}: not UTF-8 text (byte {exc.start})") from None


# ---- field checks -----------------------------------------------------------------------
def _price(text: Any, where: str, column: str) -> float | None:
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


def _gpu_count(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CatalogError(f"{where}, AcceleratorCount: {text[:40]!r} is not a number") from None
    if not math.isfinite(value) or value <= 0 or value > 1024:
        raise CatalogError(f"{where}, AcceleratorCount: {value!r} is not allowed (allowed: a count > 0)")
    return value


def _matching(value: str, pattern: re.Pattern[str], where: str, column: str, what: str) -> str:
    if not pattern.fullmatch(value):
        raise CatalogError(f"{where}, {column}: {value[:80]!r} is not allowed (allowed: {what}, matching "
                           f"{patterns.anchored(pattern)})")
    return value


def _region(text: str, where: str, column: str) -> str | None:
    region = text.strip().lower()  # RunPod writes countries ("US"); the lake's regions are lower case
    if not region:
        return None
    return _matching(region, patterns.REGION, where, column, "a region label of letters, digits and '-'")


class _Collector:
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


# ---- SkyPilot ------------------------------------------------------------------------------
def parse_skypilot(data: bytes, *, provider: str, effective_from: dt.date, source: str,
                   name: str = "catalog", max_rows: int = MAX_ROWS) -> CatalogImport:
    """Price rows from a SkyPilot ``vms.csv`` (bytes); errors name ``name``, the row and the field."""
    reader = csv.DictReader(io.StringIO(_text(data, name), newline=""))
    header = reader.fieldnames or []
    missing = [c for c in SKYPILOT_COLUMNS if c not in header]
    if missing:
        raise CatalogError(f"{name}: not a SkyPilot vms.csv: missing column(s) {', '.join(missing)} "
                           f"(found: {', '.join(h[:30] for h in header[:12]) or 'nothing'})")
    if len(set(header)) != len(header):
        raise CatalogError(f"{name}: a column is named twice in the header")
    spot_column = "SpotPrice" in header
    collector = _Collector(provider, effective_from, source)
    result = CatalogImport("skypilot", provider, effective_from, source, schema.PRICES_SCHEMA.empty_table())
    for number, row in enumerate(reader, start=2):
        where = f"{name} row {number}"
        if number - 1 > max_rows:
            raise CatalogError(f"{name}: more than {max_rows} rows; refused")
        if None in row or any(value is None for value in row.values()):
            raise CatalogError(f"{where}: {len(header)} fields expected (the header's), got another number")
        result.read += 1
        accelerator = row["AcceleratorName"].strip()
        if not accelerator:
            result.without_gpu += 1
            continue
        accelerator = _matching(accelerator, ACCELERATOR, where, "AcceleratorName",
                                "a GPU name of letters, digits, spaces and . _ + ( ) -")
        count = _gpu_count(row["AcceleratorCount"].strip(), where)
        if not count.is_integer():
            result.fractional_gpu += 1  # Azure's partial GPUs (NVadsA10 v5 1/6 …): not comparable
            continue
        instance_type = row["InstanceType"].strip()
        note = ""
        if not instance_type:  # GCP: the GPUs alone, attached to a VM priced separately
            instance_type, note = f"{accelerator.replace(' ', '')}-x{int(count)}", GPU_ONLY_NOTE
        _matching(instance_type, patterns.INSTANCE_TYPE, where, "InstanceType",
                  "an instance type of letters, digits, '.', '_' and '-'")
        region = _region(row["Region"], where, "Region")
        prices = {"on_demand": _price(row["Price"], where, "Price"),
                  "spot": _price(row["SpotPrice"], where, "SpotPrice") if spot_column else None}
        if prices["on_demand"] is None and prices["spot"] is None:
            result.without_price += 1
            continue
        collector.add(where, instance_type=instance_type, region=region, accelerator=accelerator,
                      gpu_count=int(count), prices=prices, note=note)
    result.rows = collector.table()
    result.unknown_gpus = dict(collector.unknown)
    return result


# ---- Azure Retail Prices API ---------------------------------------------------------------
def azure_skus(path: Path = AZURE_SKU_FILE) -> dict[str, tuple[str, int]]:
    """Azure VM size -> (GPU name, GPU count), from :data:`AZURE_SKU_FILE`."""
    found: dict[str, tuple[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["AcceleratorName"] and float(row["AcceleratorCount"]).is_integer():
                found[row["InstanceType"]] = (row["AcceleratorName"], int(float(row["AcceleratorCount"])))
    return found


def _azure_next(link: Any, where: str) -> str | None:
    if link in (None, ""):
        return None
    if not isinstance(link, str):
        raise CatalogError(f"{where}, NextPageLink: {link!r} is not a URL")
    parts = urllib.parse.urlsplit(link)
    if parts.scheme != "https" or (parts.hostname or "").lower() != AZURE_HOST:
        raise CatalogError(f"{where}, NextPageLink: {link[:120]!r} is not allowed (allowed: https://{AZURE_HOST}/…)")
    return link


def fetch_azure(url: str, *, opener: Opener | None = None, max_pages: int = MAX_PAGES,
                max_bytes: int = MAX_BYTES) -> list[dict[str, Any]]:
    """Every page of an Azure Retail Prices query, following ``NextPageLink`` (on prices.azure.com only)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "https" or (parts.hostname or "").lower() != AZURE_HOST:
        raise CatalogError(f"location: {url[:120]!r} is not an Azure Retail Prices URL "
                           f"(allowed: {AZURE_URL}?$filter=…)")
    pages: list[dict[str, Any]] = []
    seen: set[str] = set()
    total = 0
    link: str | None = url
    while link is not None:
        if link in seen:
            raise CatalogError(f"page {len(pages) + 1}, NextPageLink: {link[:120]!r} was already read "
                               "(a loop)")
        if len(pages) >= max_pages:
            raise CatalogError(f"{url[:120]}: more than {max_pages} pages; narrow the $filter")
        seen.add(link)
        if total >= max_bytes:
            raise CatalogError(f"{url[:120]}: the pages add up to more than {max_bytes} bytes; "
                               "narrow the $filter")
        data = read_location(link, opener=opener, max_bytes=max_bytes - total)
        total += len(data)
        page = _json_page(data, f"page {len(pages) + 1}")
        pages.append(page)
        link = _azure_next(page.get("NextPageLink"), f"page {len(pages)}")
    return pages


def _json_page(data: bytes, name: str) -> dict[str, Any]:
    try:
        page = json.loads(_text(data, name), parse_constant=lambda c: float("nan"))
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{name}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
        raise CatalogError(f"{name}: not an Azure Retail Prices page (expected an object with Items)")
    return page


def azure_pages(data: bytes, name: str) -> list[dict[str, Any]]:
    """Recorded Azure pages from a file: one page object or a list of pages."""
    try:
        value = json.loads(_text(data, name), parse_constant=lambda c: float("nan"))
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{name}: not JSON ({exc.msg} at line {exc.lineno})") from None
    pages = value if isinstance(value, list) else [value]
    for number, page in enumerate(pages, start=1):
        if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
            raise CatalogError(f"{name} page {number}: not an Azure Retail Prices page (expected Items)")
    return pages


def parse_azure(pages: Iterable[Mapping[str, Any]], *, effective_from: dt.date, source: str,
                provider: str = "azure", name: str = "azure", max_rows: int = MAX_ROWS) -> CatalogImport:
    """Price rows from Azure Retail Prices pages: Linux pay-as-you-go (``Consumption``, ``1 Hour``) and
    Spot prices of GPU VM sizes; Windows, Low Priority, reservations and DevTest are left out."""
    skus = azure_skus()
    collector = _Collector(provider, effective_from, source)
    result = CatalogImport("azure", provider, effective_from, source, schema.PRICES_SCHEMA.empty_table())
    for page_number, page in enumerate(pages, start=1):
        for item_number, item in enumerate(page["Items"], start=1):
            where = f"{name} page {page_number} item {item_number}"
            result.read += 1
            if result.read > max_rows:
                raise CatalogError(f"{name}: more than {max_rows} items; refused")
            if not isinstance(item, Mapping):
                raise CatalogError(f"{where}: expected an object, got {type(item).__name__}")
            sku = item.get("armSkuName")
            if not isinstance(sku, str) or not sku:
                result.other_terms += 1  # storage, licences … : no VM size
                continue
            _matching(sku, patterns.INSTANCE_TYPE, where, "armSkuName",
                      "an Azure VM size such as Standard_NC4as_T4_v3")
            accelerator, count = skus.get(sku, (None, None))
            if accelerator is None and not sku.startswith("Standard_N"):
                result.without_gpu += 1  # only the N-series carries GPUs
                continue
            texts = " ".join(str(item.get(k) or "") for k in ("productName", "skuName", "meterName"))
            if (item.get("serviceName", "Virtual Machines") != "Virtual Machines"
                    or item.get("type", "Consumption") != "Consumption"
                    or item.get("unitOfMeasure", "1 Hour") != "1 Hour"
                    or "Windows" in texts or "Low Priority" in texts):
                result.other_terms += 1
                continue
            currency = item.get("currencyCode", "USD")
            if currency != "USD":
                raise CatalogError(f"{where}, currencyCode: {currency!r} is not allowed (allowed: USD)")
            region = _region(str(item.get("armRegionName") or ""), where, "armRegionName")
            price = _price(item.get("retailPrice", item.get("unitPrice")), where, "retailPrice")
            if price is None:
                result.without_price += 1
                continue
            market = "spot" if "Spot" in texts else "on_demand"
            collector.add(where, instance_type=sku, region=region, accelerator=accelerator,
                          gpu_count=count, prices={market: price})
    result.rows = collector.table()
    result.unknown_gpus = dict(collector.unknown)
    return result


# ---- import ------------------------------------------------------------------------------
def read_catalog(location: str, *, fmt: str, provider: str | None = None,
                 effective_from: dt.date | None = None, opener: Opener | None = None,
                 max_bytes: int = MAX_BYTES) -> CatalogImport:
    """A catalog at ``location`` parsed and checked (nothing stored)."""
    if fmt not in FORMATS:
        raise CatalogError(f"format: {fmt!r} is not allowed (allowed: {', '.join(FORMATS)})")
    if fmt == "azure":
        provider = provider or "azure"
    if not isinstance(provider, str) or not patterns.PROVIDER.fullmatch(provider):
        raise CatalogError(f"provider: {provider!r} is not allowed (allowed: a lower-case name such as gcp, "
                           f"matching {patterns.anchored(patterns.PROVIDER)})")
    effective_from = effective_from or dt.datetime.now(dt.UTC).date()
    shown = location if len(location) <= 200 else location[:200] + "…"
    if fmt == "skypilot":
        data = read_location(location, opener=opener, max_bytes=max_bytes)
        return parse_skypilot(data, provider=provider, effective_from=effective_from,
                              source=f"SkyPilot catalog {shown}", name=Path(location).name or location)
    source = f"Azure Retail Prices API {shown}"
    if location.lower().startswith("https://"):
        pages = fetch_azure(location, opener=opener, max_bytes=max_bytes)
        result = parse_azure(pages, effective_from=effective_from, source=source, provider=provider)
    else:
        pages = azure_pages(read_location(location, max_bytes=max_bytes), Path(location).name)
        result = parse_azure(pages, effective_from=effective_from, source=source, provider=provider,
                             name=Path(location).name)
        if pages and pages[-1].get("NextPageLink"):
            result.notes.append("the file's last page has a NextPageLink: it was not followed (import the "
                                "https URL to read every page)")
    return result


def store(lake: Lake, result: CatalogImport) -> Any:
    """Write ``result`` as its load of the lake's ``prices`` (replacing that load; nothing if empty)."""
    if result.rows.num_rows == 0:
        raise CatalogError(f"{result.provider}: the catalog has no price row with a GPU; nothing written")
    return lake.write_table("prices", result.load_name, result.rows)


def import_catalog(lake: Lake, location: str, **kwargs: Any) -> CatalogImport:
    """Read, check and store one catalog (keyword arguments: those of :func:`read_catalog`)."""
    result = read_catalog(location, **kwargs)
    store(lake, result)
    return result


# ---- the shipped samples ---------------------------------------------------------------------
@dataclass(frozen=True)
class Sample:
    provider: str
    fmt: str
    path: Path
    effective_from: dt.date
    source: str


def samples() -> list[Sample]:
    """The samples shipped in ``gpucompare/data/catalogs`` (``samples.csv`` lists them)."""
    with SAMPLES_FILE.open(encoding="utf-8", newline="") as handle:
        return [Sample(row["provider"], row["format"], SAMPLES_DIR / row["file"],
                       dt.date.fromisoformat(row["effective_from"]), row["source"])
                for row in csv.DictReader(handle)]


def read_sample(sample: Sample) -> CatalogImport:
    """One shipped sample parsed, with the sample's own date and source."""
    data = read_location(str(sample.path))
    if sample.fmt == "skypilot":
        return parse_skypilot(data, provider=sample.provider, effective_from=sample.effective_from,
                              source=sample.source, name=f"{sample.provider}/{sample.path.name}")
    return parse_azure(azure_pages(data, sample.path.name), effective_from=sample.effective_from,
                       source=sample.source, provider=sample.provider)


def shipped_catalogs() -> list[CatalogImport]:
    """Every shipped sample, parsed (what ``import-catalog --shipped`` stores)."""
    return [read_sample(s) for s in samples()]


def import_shipped(lake: Lake) -> list[CatalogImport]:
    """Store every shipped sample (idempotent: each sample is its own load)."""
    results = shipped_catalogs()
    for result in results:
        store(lake, result)
    return results


def coverage(results: Iterable[CatalogImport]) -> dict[str, int]:
    """Providers, instance types (per provider) and GPU models ``results`` cover."""
    results = list(results)
    return {
        "providers": len({r.provider for r in results}),
        "instance_types": sum(len(r.instance_types()) for r in results),
        "gpu_models": len(set().union(*(r.gpu_models() for r in results))) if results else 0,
        "rows": sum(r.rows.num_rows for r in results),
    }
