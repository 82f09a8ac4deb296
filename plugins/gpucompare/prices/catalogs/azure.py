"""Azure Retail Prices API: its pages, fetched or recorded, read into checked price rows.

The API (``https://prices.azure.com/api/retail/prices``) is public, needs no credentials and
answers JSON pages ``{"Items": [...], "NextPageLink": ...}``, followed page by page (on
prices.azure.com only). It does not say which GPU a VM size has; :data:`AZURE_SKU_FILE`
(``data/catalogs/azure_gpus.csv``, from SkyPilot's Azure catalog) does, and an N-series size it
does not list is imported with an unknown GPU.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpucompare.config import patterns
from gpucompare.lake import schema
from gpucompare.prices.catalogs.common import (
    MAX_BYTES,
    MAX_ROWS,
    SAMPLES_DIR,
    CatalogError,
    CatalogImport,
    Opener,
    PriceCollector,
    check_matching,
    check_price,
    check_region,
    decode_text,
    read_location,
)

#: Azure answers 100 items a page (1000 with the preview API); a region's VMs take ~60 pages
MAX_PAGES = 2000
AZURE_HOST = "prices.azure.com"
AZURE_URL = "https://prices.azure.com/api/retail/prices"
#: Azure VM size -> GPU and count: the whole-GPU rows of SkyPilot's Azure catalog (coopslarhette/
#: skypilot-catalog dd2604fa, catalogs/v7/azure/vms.csv), ND96isr_H100_v5 corrected to its 8 GPUs
#: (SkyPilot says 12); AMD (NVv4) and partial-GPU sizes are left out
AZURE_SKU_FILE = SAMPLES_DIR / "azure_gpus.csv"


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
        page = json.loads(decode_text(data, name), parse_constant=lambda c: float("nan"))
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{name}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
        raise CatalogError(f"{name}: not an Azure Retail Prices page (expected an object with Items)")
    return page


def azure_pages(data: bytes, name: str) -> list[dict[str, Any]]:
    """Recorded Azure pages from a file: one page object or a list of pages."""
    try:
        value = json.loads(decode_text(data, name), parse_constant=lambda c: float("nan"))
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
    collector = PriceCollector(provider, effective_from, source)
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
            check_matching(sku, patterns.INSTANCE_TYPE, where, "armSkuName",
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
            region = check_region(str(item.get("armRegionName") or ""), where, "armRegionName")
            price = check_price(item.get("retailPrice", item.get("unitPrice")), where, "retailPrice")
            if price is None:
                result.without_price += 1
                continue
            market = "spot" if "Spot" in texts else "on_demand"
            collector.add(where, instance_type=sku, region=region, accelerator=accelerator,
                          gpu_count=count, prices={market: price})
    result.rows = collector.table()
    result.unknown_gpus = dict(collector.unknown)
    return result

