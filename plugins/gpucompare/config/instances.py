"""The instance type table: which GPU (and how many) a provider's instance type has, no price needed.

The table ships as ``gpucompare/data/instances.csv`` (provider, instance_type, gpu_model,
gpu_count, source, as_of; its header comment cites where the facts come from). It is the one
definition of instance type → GPU: ``config.runtime_choice`` reads a target's GPU here (so a type
AWS sells only through Capacity Blocks, with no shipped price, such as p5e.48xlarge, still gets the
worker runtime that runs its H200), and ``prices.refresh`` names the GPU of a price row whose
document does not. The shipped price tables keep their own ``gpu_model``/``gpu_count`` columns
(the lake's price schema); ``tests/unit/config/test_instances.py`` checks that every priced type is
listed here with the same GPU and count.

Every ``gpu_model`` must be a GPU of the model table (``config.gpus``): it is stored as the table's
canonical name, so a row that names an unknown GPU is an error of the shipped table.

Standard library, ``gpucompare.resources`` and ``config`` only: the DAG files import the
configuration at parse time.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
from dataclasses import dataclass
from pathlib import Path

from gpucompare import resources
from gpucompare.config import gpus
from gpucompare.config.validation import ValidationError

COLUMNS = ("provider", "instance_type", "gpu_model", "gpu_count", "source", "as_of")


@dataclass(frozen=True)
class InstanceType:
    """One row of data/instances.csv; ``gpu_model`` is the GPU model table's canonical name."""

    provider: str
    instance_type: str
    gpu_model: str
    gpu_count: int
    source: str
    as_of: dt.date

    @property
    def family(self) -> str:
        """The part before the size: ``p5e`` of ``p5e.48xlarge`` (the whole name when it has no dot)."""
        return self.instance_type.split(".", 1)[0]


def instances_file() -> Path:
    """The shipped table (``gpucompare/data/instances.csv``)."""
    return resources.shipped_table("instances.csv", "the instance type table")


def _parse_row(row: dict[str, str], where: str) -> InstanceType:
    if None in row or any(row.get(c) is None for c in COLUMNS):
        raise ValidationError(where, f"expected the columns {', '.join(COLUMNS)}")
    for column in COLUMNS:
        if not row[column].strip():
            raise ValidationError(f"{where}.{column}", "must not be empty")
    model = gpus.canonical(row["gpu_model"])
    if model is None:
        raise ValidationError(f"{where}.gpu_model", f"{row['gpu_model']!r} is not in the GPU model table "
                              "(gpucompare/data/gpus.csv)")
    if not row["gpu_count"].isdigit() or int(row["gpu_count"]) < 1:
        raise ValidationError(f"{where}.gpu_count", f"{row['gpu_count']!r} is not a whole number >= 1")
    try:
        as_of = dt.date.fromisoformat(row["as_of"])
    except ValueError:
        raise ValidationError(f"{where}.as_of", f"{row['as_of']!r} is not a date YYYY-MM-DD") from None
    return InstanceType(provider=row["provider"], instance_type=row["instance_type"], gpu_model=model,
                        gpu_count=int(row["gpu_count"]), source=row["source"], as_of=as_of)


def read_table(path: Path | None = None) -> tuple[InstanceType, ...]:
    """Every row of the table (the shipped one unless ``path`` is given), checked: columns, a known
    GPU, a count >= 1, a date, and each (provider, instance type) once."""
    path = path or instances_file()
    rows: list[InstanceType] = []
    seen: set[tuple[str, str]] = set()
    for number, row in enumerate(csv.DictReader(resources.table_lines(path)), start=1):
        parsed = _parse_row(row, f"{path.name} row {number}")
        key = (parsed.provider, parsed.instance_type)
        if key in seen:
            raise ValidationError(f"{path.name} row {number}", f"{key[0]} {key[1]} is listed twice")
        seen.add(key)
        rows.append(parsed)
    return tuple(rows)


@functools.lru_cache(maxsize=1)
def shipped() -> dict[tuple[str, str], InstanceType]:
    """(provider, instance type) → row, of the shipped table (read once)."""
    return {(row.provider, row.instance_type): row for row in read_table()}


def lookup(provider: str, instance_type: str) -> InstanceType | None:
    """The row of ``instance_type`` of ``provider``, or None when the table does not list it."""
    return shipped().get((provider, instance_type))


def instance_gpu(provider: str, instance_type: str) -> str | None:
    """The GPU model (canonical name) of ``instance_type``, e.g. ``H200`` for aws ``p5e.48xlarge``,
    or None when the table does not list the type."""
    row = lookup(provider, instance_type)
    return row.gpu_model if row else None


def family_gpu(provider: str, instance_type: str) -> str | None:
    """The GPU of ``instance_type``, or, for a size the table does not list, the one GPU every listed
    size of its family has (``g5.16xlarge`` → ``A10G``); None when unlisted or the family is mixed."""
    found = instance_gpu(provider, instance_type)
    if found is not None:
        return found
    family = instance_type.split(".", 1)[0]
    models = {row.gpu_model for (p, _), row in shipped().items() if p == provider and row.family == family}
    return models.pop() if len(models) == 1 else None
