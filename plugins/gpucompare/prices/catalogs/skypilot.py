"""SkyPilot catalogs: a ``vms.csv`` of one cloud read into checked price rows.

The public SkyPilot catalog has one ``vms.csv`` per cloud (``catalogs/v7/<cloud>/vms.csv`` in
github.com/skypilot-org/skypilot-catalog: ``InstanceType, AcceleratorName, AcceleratorCount, …,
Price, SpotPrice, Region, …``; the column order differs between clouds, so columns are found by
name). GCP's GPU rows have no instance type: they price attachable GPUs alone, so they are stored
as ``<GPU>-x<count>`` (``T4-x1``) and their source says that the host VM is billed on top.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math

from gpucompare.config import patterns
from gpucompare.lake import schema
from gpucompare.prices.catalogs.common import (
    MAX_ROWS,
    CatalogError,
    CatalogImport,
    PriceCollector,
    check_matching,
    check_price,
    check_region,
    decode_text,
)

SKYPILOT_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "Region")
GPU_ONLY_NOTE = "; the price covers the GPUs only (a host VM is billed on top)"


def _gpu_count(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CatalogError(f"{where}, AcceleratorCount: {text[:40]!r} is not a number") from None
    if not math.isfinite(value) or value <= 0 or value > 1024:
        raise CatalogError(f"{where}, AcceleratorCount: {value!r} is not allowed (allowed: a count > 0)")
    return value

def parse_skypilot(data: bytes, *, provider: str, effective_from: dt.date, source: str,
                   name: str = "catalog", max_rows: int = MAX_ROWS) -> CatalogImport:
    """Price rows from a SkyPilot ``vms.csv`` (bytes); errors name ``name``, the row and the field."""
    reader = csv.DictReader(io.StringIO(decode_text(data, name), newline=""))
    header = reader.fieldnames or []
    missing = [c for c in SKYPILOT_COLUMNS if c not in header]
    if missing:
        raise CatalogError(f"{name}: not a SkyPilot vms.csv: missing column(s) {', '.join(missing)} "
                           f"(found: {', '.join(h[:30] for h in header[:12]) or 'nothing'})")
    if len(set(header)) != len(header):
        raise CatalogError(f"{name}: a column is named twice in the header")
    spot_column = "SpotPrice" in header
    collector = PriceCollector(provider, effective_from, source)
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
        accelerator = check_matching(accelerator, patterns.ACCELERATOR, where, "AcceleratorName",
                                "a GPU name of letters, digits, spaces and . _ + ( ) -")
        count = _gpu_count(row["AcceleratorCount"].strip(), where)
        if not count.is_integer():
            result.fractional_gpu += 1  # Azure's partial GPUs (NVadsA10 v5 1/6 …): not comparable
            continue
        instance_type = row["InstanceType"].strip()
        note = ""
        if not instance_type:  # GCP: the GPUs alone, attached to a VM priced separately
            instance_type, note = f"{accelerator.replace(' ', '')}-x{int(count)}", GPU_ONLY_NOTE
        check_matching(instance_type, patterns.INSTANCE_TYPE, where, "InstanceType",
                  "an instance type of letters, digits, '.', '_' and '-'")
        region = check_region(row["Region"], where, "Region")
        prices = {"on_demand": check_price(row["Price"], where, "Price"),
                  "spot": check_price(row["SpotPrice"], where, "SpotPrice") if spot_column else None}
        if prices["on_demand"] is None and prices["spot"] is None:
            result.without_price += 1
            continue
        collector.add(where, instance_type=instance_type, region=region, accelerator=accelerator,
                      gpu_count=int(count), prices=prices, note=note)
    result.rows = collector.table()
    result.unknown_gpus = dict(collector.unknown)
    return result

