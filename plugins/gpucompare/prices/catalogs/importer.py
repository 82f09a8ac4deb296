"""Importing a catalog: the format picked, the rows stored as one load, the shipped samples.

One import is one load of the lake's ``prices`` table, named ``catalog-<format>-<provider>-<date>``:
importing the same catalog again replaces that load (no duplicate rows) and a catalog of a later
date is another load, so the history is kept, like the AWS refresh (``prices.refresh``).
"""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucompare.config import patterns
from gpucompare.prices.catalogs.azure import azure_pages, fetch_azure, parse_azure
from gpucompare.prices.catalogs.common import (
    MAX_BYTES,
    SAMPLES_DIR,
    CatalogError,
    CatalogImport,
    Opener,
    read_location,
)
from gpucompare.prices.catalogs.skypilot import parse_skypilot

if TYPE_CHECKING:
    from gpucompare.lake.tables import Lake

FORMATS: tuple[str, ...] = ("skypilot", "azure")
SAMPLES_FILE = SAMPLES_DIR / "samples.csv"


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
