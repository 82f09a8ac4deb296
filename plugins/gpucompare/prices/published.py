"""Import of the published reference figures: kept as published, suspicious values flagged.

The project ships copies of the reference tables (``gpucompare/data/published/``, with their
source columns): the GPU-rental article's scoring and training tables together with the
MXNet figures it quotes (``published_results.csv``), its per-minute prices
(``published_prices.csv``) and a vendor white paper's multi-GPU speedups
(``published_scaling.csv``). ``import_published`` brings them into the lake so every report
can set today's machines beside the published ones:

* results → ``LAKE/results`` with ``target = published``, ``source`` = the publication,
  ``published_value`` = the cell exactly as printed (``"98,30"``, ``"-**"``), ``note`` and
  ``flags``; statuses follow the article's marks (``-**`` = ``oom``, ``-*`` =
  ``batch_smaller_than_devices``); the ``date`` partition is the publication date;
* prices → ``LAKE/prices/published.parquet``; speedups → ``LAKE/published_scaling/``.

Values are never rewritten. A row that looks wrong gets a flag instead (``schema.FLAGS``):
``decimal_comma`` (printed with a decimal comma), ``outlier_vs_neighbours`` (≥ 5× or ≤ 1/5
of both neighbouring batch sizes of its series; 10× at the ends of a series),
``batch_scaled_x8`` (the article's AlexNet training column, whose batch labels are × 8).
"""

from __future__ import annotations

import csv
import datetime as dt
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bench_tasks.constants import MODES, NETWORKS, STATUSES
from bench_tasks.record_fields import SCHEMA_VERSION
from gpucompare import resources
from gpucompare.errors import PermanentError
from gpucompare.lake import schema
from gpucompare.lake.rows import safe_name
from gpucompare.lake.tables import Lake
from gpucompare.prices import tables as prices

PUBLISHED_DIR = resources.data_dir("published")
SHIPPED_RESULTS = PUBLISHED_DIR / "published_results.csv"
SHIPPED_PRICES = PUBLISHED_DIR / "published_prices.csv"
SHIPPED_SCALING = PUBLISHED_DIR / "published_scaling.csv"

#: When the reference figures were published (the article, June 2017): their ``date``.
PUBLISHED_ON = dt.date(2017, 6, 1)

RESULT_COLUMNS = ("source", "provider", "instance_type", "gpu_model", "gpu_count", "mode", "network",
                  "batch_size", "images_per_sec", "status", "published_value", "note")
PRICE_COLUMNS = ("provider", "instance_type", "gpu_model", "gpu_count", "price", "currency", "unit",
                 "market", "effective_from", "source")
SCALING_COLUMNS = tuple(schema.PUBLISHED_SCALING_SCHEMA.names)

#: The article's marks for cells that did not run.
STATUS_MARKS: dict[str, str] = {"-**": "oom", "-*": "batch_smaller_than_devices"}
_MARK_MEANING = {"oom": "out of GPU memory", "batch_smaller_than_devices": "batch smaller than the GPU count"}

OUTLIER_FACTOR = 5.0  # inside a series: beyond both neighbours by this factor
OUTLIER_FACTOR_END = 10.0  # at either end of a series, against its one neighbour
# fullmatch only ("^…$" with match accepts a trailing newline); [0-9], not \d (other scripts' digits)
_DECIMAL_COMMA = re.compile(r"[0-9]+,[0-9]+")
_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")


class PublishedError(PermanentError):
    """A published table that cannot be imported; names file, line and column."""


@dataclass
class ImportSummary:
    results: int = 0
    prices: int = 0
    scaling: int = 0
    flags: Counter[str] = field(default_factory=Counter)
    files: list[str] = field(default_factory=list)

    def describe(self) -> str:
        flagged = ", ".join(f"{name}: {count}" for name, count in sorted(self.flags.items())) or "none"
        return (f"imported {self.results} published result(s), {self.prices} price(s), "
                f"{self.scaling} scaling point(s); flags: {flagged}")


# ---- reading -----------------------------------------------------------------------------
def _rows(path: Path, required: tuple[str, ...]) -> list[tuple[str, dict[str, str]]]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise PublishedError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise PublishedError(f"{path.name}: missing column(s) {', '.join(missing)}")
        return [(f"{path.name} line {n}", row) for n, row in enumerate(reader, start=2)]


def _int(text: str, where: str, column: str) -> int:
    if not text.strip().isdigit() or int(text) <= 0:
        raise PublishedError(f"{where}: {column} {text!r} is not a positive integer")
    return int(text)


def _choice(text: str, allowed: tuple[str, ...], where: str, column: str) -> str:
    if text not in allowed:
        raise PublishedError(f"{where}: {column} {text!r} is not one of {', '.join(allowed)}")
    return text


def _parse_published_number(cell: str) -> float | None:
    """The number a published cell shows, read the way a reader of the article would."""
    cell = cell.strip()
    if _DECIMAL_COMMA.fullmatch(cell):
        return float(cell.replace(",", "."))
    if _NUMBER.fullmatch(cell):
        return float(cell)
    return None


def _status_of(row: dict[str, str], where: str) -> str:
    status = _choice(row["status"], STATUSES, where, "status")
    mark = row["published_value"].strip()
    if mark in STATUS_MARKS and STATUS_MARKS[mark] != status:
        raise PublishedError(f"{where}: status {status!r} contradicts the published mark {mark!r} "
                             f"({STATUS_MARKS[mark]})")
    return status


def _image_shape(network: str) -> str:
    return "3,299,299" if network == "inception-v3" else "3,224,224"


def _published_measurement(row: dict[str, str], status: str, where: str) -> tuple[float | None, list[str]]:
    """images/s of an ``ok`` row, checked against the number its published cell shows (a
    decimal comma flagged), and the row's flags; ``None`` for a failed cell, which must have none."""
    cell = row["published_value"]
    flags: list[str] = []
    if status != "ok":
        if row["images_per_sec"].strip():
            raise PublishedError(f"{where}: a {status} cell has no images_per_sec, "
                                 f"got {row['images_per_sec']!r}")
        return None, flags
    try:
        images_per_sec = float(row["images_per_sec"])
    except ValueError:
        raise PublishedError(f"{where}: images_per_sec {row['images_per_sec']!r} is not a number") from None
    shown = _parse_published_number(cell)
    if shown is None or abs(shown - images_per_sec) > 1e-9 * max(1.0, shown):
        raise PublishedError(f"{where}: images_per_sec {images_per_sec} is not what the published "
                             f"cell {cell!r} shows")
    if _DECIMAL_COMMA.fullmatch(cell.strip()):
        flags.append("decimal_comma")
    return images_per_sec, flags


def published_result(row: dict[str, str], where: str, imported_at: dt.datetime,
                     published_on: dt.date = PUBLISHED_ON) -> dict[str, Any]:
    """One results row (``schema.RESULTS_SCHEMA``) from one line of the published results CSV."""
    mode = _choice(row["mode"], MODES, where, "mode")
    network = _choice(row["network"], NETWORKS, where, "network")
    gpu_count = _int(row["gpu_count"], where, "gpu_count")
    batch_size = _int(row["batch_size"], where, "batch_size")
    status = _status_of(row, where)
    cell = row["published_value"]
    images_per_sec, flags = _published_measurement(row, status, where)
    note = row.get("note") or None
    if note and "multiplied by 8" in note:
        flags.append("batch_scaled_x8")
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": f"published-{safe_name(row['source'])}",
        "config_id": f"{row['instance_type']}-{gpu_count}gpu-{mode}-{network}-b{batch_size}",
        "network": network,
        "image_shape": _image_shape(network),
        "dtype": "float32",
        "batch_size": batch_size,
        "per_device_batch": batch_size // gpu_count if batch_size % gpu_count == 0 else None,
        "devices": [f"gpu:{i}" for i in range(gpu_count)],
        "device_kind": "gpu",
        "gpu_count": gpu_count,
        "num_nodes": 1,
        "images_per_sec": images_per_sec,
        "images_per_sec_samples": [],
        "per_worker_images_per_sec": [],
        "status": status,
        "error": None if status == "ok" else f"published as {cell!r} ({_MARK_MEANING.get(status, status)})",
        "gpu_model": row["gpu_model"] or None,
        "provider": row["provider"],
        "instance_type": row["instance_type"],
        "region": None,
        "market": "on_demand",
        "target": "published",
        "source": row["source"],
        "dag_run_id": None,
        "ingested_at": imported_at,
        "published_value": cell,
        "note": note,
        "flags": flags,
        "mode": mode,
        "date": published_on,
    }


def flag_outliers(rows: list[dict[str, Any]]) -> None:
    """Add ``outlier_vs_neighbours`` to values far from the neighbouring batch sizes of their series
    (same source, machine, GPU count, mode and network). Values are left as they are."""
    series: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["images_per_sec"] is not None:
            key = (row["source"], row["provider"], row["instance_type"], row["gpu_count"], row["mode"],
                   row["network"])
            series[key].append(row)
    for members in series.values():
        members.sort(key=lambda r: r["batch_size"])
        values = [r["images_per_sec"] for r in members]
        for i, row in enumerate(members):
            neighbours = values[max(0, i - 1):i] + values[i + 1:i + 2]
            if not neighbours:
                continue
            factor = OUTLIER_FACTOR if len(neighbours) == 2 else OUTLIER_FACTOR_END
            value = values[i]
            if value >= factor * max(neighbours) or value * factor <= min(neighbours):
                row["flags"].append("outlier_vs_neighbours")


def read_published_results(path: str | Path, *, imported_at: dt.datetime | None = None,
                           published_on: dt.date = PUBLISHED_ON) -> pa.Table:
    """The published results CSV as a flagged results table (``schema.RESULTS_SCHEMA``)."""
    imported_at = imported_at or dt.datetime.now(dt.UTC)
    rows = [published_result(row, where, imported_at, published_on)
            for where, row in _rows(Path(path), RESULT_COLUMNS)]
    if not rows:
        raise PublishedError(f"{Path(path).name}: no rows")
    flag_outliers(rows)
    return pa.Table.from_pylist(rows, schema=schema.RESULTS_SCHEMA)


def read_published_prices(path: str | Path) -> pa.Table:
    """The published prices CSV (no region column: valid in every region) as a price table."""
    rows = [prices.price_row({**row, "region": row.get("region", "")}, where)
            for where, row in _rows(Path(path), PRICE_COLUMNS)]
    return pa.Table.from_pylist(rows, schema=schema.PRICES_SCHEMA)


def read_published_scaling(path: str | Path) -> pa.Table:
    """The published scaling CSV (speedup against one GPU) as a table."""
    rows = []
    for where, row in _rows(Path(path), SCALING_COLUMNS):
        try:
            speedup = float(row["speedup"])
        except ValueError:
            raise PublishedError(f"{where}: speedup {row['speedup']!r} is not a number") from None
        rows.append({
            "source": row["source"],
            "framework": row["framework"],
            "network": _choice(row["network"], NETWORKS, where, "network"),
            "gpu_model": row["gpu_model"],
            "gpu_count": _int(row["gpu_count"], where, "gpu_count"),
            "speedup": speedup,
        })
    return pa.Table.from_pylist(rows, schema=schema.PUBLISHED_SCALING_SCHEMA)


# ---- import ------------------------------------------------------------------------------
def import_published(lake: Lake, *, results_csv: str | Path = SHIPPED_RESULTS,
                     prices_csv: str | Path | None = SHIPPED_PRICES,
                     scaling_csv: str | Path | None = SHIPPED_SCALING) -> ImportSummary:
    """Read every table first (any error: nothing written), then write them; re-importing
    replaces the previous import."""
    results = read_published_results(results_csv)
    price_table = read_published_prices(prices_csv) if prices_csv else None
    scaling = read_published_scaling(scaling_csv) if scaling_csv else None

    summary = ImportSummary(results=results.num_rows)
    for flags in results["flags"].to_pylist():
        summary.flags.update(flags)
    if price_table is not None:
        from gpucompare.lake.rows import check_price_rows

        check_price_rows(price_table)  # before anything is written
    # one Delta transaction per published source (its run id) and per side table
    for run_id in sorted(set(results.column("run_id").to_pylist())):
        rows = results.filter(pc.equal(results["run_id"], run_id))
        summary.files.append(lake.write_results(rows, run_id=run_id).describe())
    if price_table is not None:
        summary.files.append(lake.write_table("prices", "published", price_table).describe())
        summary.prices = price_table.num_rows
    if scaling is not None:
        summary.files.append(lake.write_table("published_scaling", "published", scaling).describe())
        summary.scaling = scaling.num_rows
    return summary
