"""Prices the user declares for machines of their own, into the lake's price history.

A declared price (``config.models.DeclaredPrice``: a fleet file's ``prices`` entry, a target's
``price``, ``gpucompare add-price``) becomes one row of ``LAKE/prices`` like any shipped or
refreshed price: its hourly price in its currency, valid from its date, and as its ``source``
the note ``declared: <label> (<basis>)``. The reports' SQL reads that prefix: such rows show
``price_source`` ``declared`` and the note in ``price_note``, wherever the price is used.

Each declared price is a load of its own (named by its machine and date), so declaring the
same machine and date again replaces that row and nothing else, and writing an unchanged
price commits nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from gpucompare.config.models import DeclaredPrice
from gpucompare.config.models.prices import DECLARED
from gpucompare.lake import schema

if TYPE_CHECKING:
    from gpucompare.lake.commits import WriteSummary
    from gpucompare.lake.tables import Lake

#: The start of a declared price's source (and of its ``price_note``): ``declared: ``.
NOTE_PREFIX = f"{DECLARED}: "


def price_row(price: DeclaredPrice) -> dict[str, Any]:
    """The price-history row of a declared price (``schema.PRICES_SCHEMA``), priced per hour."""
    import datetime as dt

    return {
        "provider": price.provider, "instance_type": price.instance_type, "region": price.region,
        "market": price.market, "gpu_model": price.gpu_model, "gpu_count": price.gpu_count,
        "price": round(price.hourly(), 10), "currency": price.currency, "unit": "hour",
        "effective_from": dt.date.fromisoformat(price.effective_from), "source": price.note(),
    }


def load_name(price: DeclaredPrice) -> str:
    """The load a declared price is stored as: one per machine, market and date."""
    return "-".join([DECLARED, price.provider, price.instance_type, price.region or "any", price.market,
                     price.effective_from])


def store(lake: Lake, prices: Iterable[DeclaredPrice]) -> list[WriteSummary]:
    """Write each declared price into ``LAKE/prices`` (one commit each; unchanged: none)."""
    written = []
    for price in prices:
        table = pa.Table.from_pylist([price_row(price)], schema=schema.PRICES_SCHEMA)
        written.append(lake.write_table("prices", load_name(price), table))
    return written


def is_declared(source: str | None) -> bool:
    """Whether a price row's source is a declared price's note."""
    return bool(source) and str(source).startswith(NOTE_PREFIX)


def unmatched_warning(lake: Lake, price: DeclaredPrice) -> str | None:
    """A warning when no result in the lake carries the declared machine (provider and instance type):
    such a price is in no report until a result does, and a typo would otherwise go unnoticed."""
    import pyarrow.compute as pc

    from gpucompare.lake.storage import LakeError

    wanted = (pc.field("provider") == price.provider) & (pc.field("instance_type") == price.instance_type)
    try:
        found = lake.results_table(filter=wanted, columns=["provider"]).num_rows
    except LakeError:  # no results table yet
        found = 0
    if found:
        return None
    return (f"warning: no result in the lake carries {price.provider} {price.instance_type} (yet): the price "
            "shows in the reports once one does; check the spelling against `gpucompare lake-info` or the "
            "fleet file's target (provider and instance type)")
