"""The page section "Where else could this run?": the projections report as the reader sees it.

Data for the section template (from the built ``projections`` table, no I/O), like the rest of the page:
this module picks the rows, their cells are written by the view builder
(:func:`gpucompare.reports.page_rows.projection_cells`); it formats nothing.
Per network and mode, the cheapest providers for the GPUs measured: for each market (on-demand,
spot) the cheapest projection of each provider (any region, instance type and measured
configuration), the top :data:`TOP_PROVIDERS`, and always the measured machine's own catalog
rows, marked. A caveat says what a projection assumes. Its tables are the page's one table model
(page_parts.Table), so every table on the page is drawn one way.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpucompare.config import patterns
from gpucompare.reports.formatting import slug
from gpucompare.reports.page_parts import Section, data_table
from gpucompare.reports.page_rows import CELLS, gpus_only

#: Providers listed per network, mode and market.
TOP_PROVIDERS = 5
#: Section key (anchor), title and the caveat every reader must see.
KEY = "where-else"
TITLE = "Where else could this run?"
CAVEAT = (
    "Projected, not measured: each row prices a throughput measured by gpucompare on one machine at another "
    "machine's catalog price, for the same GPU model and the same number of GPUs per instance (an instance "
    "with a different GPU count is not projected). CPU, storage and interconnect differ between providers; "
    "projections assume the measured throughput. Prices are the latest in the lake on the report date; "
    "≥ marks a catalog price of the GPUs alone (the host VM is billed on top). "
    "Projections are never part of the cost ranking above."
)
#: The cells of a row (page_rows.projection_cells) the summary repeats.
_MARKET, _IMAGES_PER_SEC, _COST = 3, 4, 7


#: the columns the section shows (the others, e.g. the flags list, are not carried through the reduction)
SHOWN = ("mode", "network", "methodology", "market", "provider", "instance_type", "region", "gpu_model",
         "gpu_count",
         "num_nodes", "images_per_sec", "batch_size", "price_per_hour", "cost_per_million",
         "epochs90_seconds", "epochs90_cost", "measured_machine", "measured_provider",
         "measured_instance_type", "measured_gpu_model", "result_date", "price_effective_from",
         "price_covers")


def _cheapest_of_each(table: pa.Table, keys: list[str]) -> pa.Table:
    """The rows of ``table`` whose cost is the lowest of their group (ties kept)."""
    if table.num_rows == 0:
        return table
    lowest = table.group_by(keys).aggregate([("cost_per_million", "min")])
    joined = table.join(lowest, keys=keys)
    return joined.filter(pc.equal(joined["cost_per_million"], joined["cost_per_million_min"])).drop_columns(
        ["cost_per_million_min"])


def candidate_rows(table: pa.Table) -> list[dict[str, Any]]:
    """What the section can show, reduced in Arrow before any Python row is made (the table holds a
    row per measured result and catalog price series: tens of thousands on a big lake): per network,
    mode, market and provider its cheapest rows (whole machine and GPU-only prices apart), and per
    measured machine its cheapest rows."""
    if table.num_rows == 0:
        return []
    priced = table.filter(pc.is_valid(table["cost_per_million"])).select(list(SHOWN))
    per_provider = _cheapest_of_each(priced, ["mode", "network", "methodology", "market", "provider",
                                               "price_covers"])
    own = priced.filter(pc.fill_null(priced["measured_machine"], False))
    per_machine = _cheapest_of_each(own, ["mode", "network", "methodology", "market", "provider",
                                            "instance_type"])
    return pa.concat_tables([per_provider, per_machine]).to_pylist()


def measured_machines(table: pa.Table) -> dict[tuple[str, str, str], list[str]]:
    """Per (mode, network, methodology): the measured machines projected from, as
    'provider instance (GPU name)'."""
    if table.num_rows == 0:
        return {}
    keys = ["mode", "network", "methodology", "measured_provider", "measured_instance_type",
            "measured_gpu_model"]
    found: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for r in sorted(table.group_by(keys).aggregate([]).to_pylist(), key=lambda r: [str(r[k]) for k in keys]):
        found[(r["mode"], r["network"], r["methodology"])].append(
            f"{r['measured_provider']} {r['measured_instance_type']} ({r['measured_gpu_model']})")
    return found


def cheapest_providers(
    rows: list[dict[str, Any]], top: int = TOP_PROVIDERS
) -> dict[str, list[dict[str, Any]]]:
    """Per market: the cheapest row of each provider (a whole machine's price before a price of the GPUs
    alone), the ``top`` cheapest of them, plus the cheapest row of each measured machine
    (``measured_machine``) when it is not among them; by cost."""
    chosen: dict[str, list[dict[str, Any]]] = {}
    for market in patterns.MARKETS:
        in_market = sorted((r for r in rows if r["market"] == market), key=_whole_machine_first)
        per_provider: dict[str, dict[str, Any]] = {}
        measured: dict[tuple[str, str], dict[str, Any]] = {}
        for row in in_market:
            per_provider.setdefault(row["provider"], row)
            if row["measured_machine"]:
                measured.setdefault((row["provider"], row["instance_type"]), row)
        picked = list(per_provider.values())[:top]
        picked += [r for r in measured.values() if r not in picked]
        if picked:
            chosen[market] = sorted(picked, key=_order)
    return chosen


def _whole_machine_first(row: dict[str, Any]) -> tuple:
    return (gpus_only(row), *_order(row))


def _order(row: dict[str, Any]) -> tuple:
    return (row["cost_per_million"], row["provider"], row["instance_type"], row["region"] or "")


def _network_table(mode: str, network: str, methodology: str, rows: list[dict[str, Any]],
                   measured: list[str], currency: str) -> dict[str, Any]:
    by_market = cheapest_providers(rows)
    train = mode == "train"
    headers = ["provider · instance", "GPUs", "region", "market", "images/s (measured)", "batch",
               "per hour", "per million", *(["90 epochs"] if train else []), "figure", "price date"]
    numeric = [False, False, False, False, True, True, True, True, *([True] if train else []), False, False]
    body = [r[CELLS] for market in patterns.MARKETS for r in by_market.get(market, [])]
    providers = sorted({r["provider"] for r in rows})
    best = min(rows, key=_whole_machine_first)
    summary = (
        f"Cheapest projection: {best['provider']} {best['instance_type']}"
        f"{' (' + best['region'] + ')' if best['region'] else ''}, "
        f"{best[CELLS][_MARKET]}: {best[CELLS][_COST]} per million images at the "
        f"{best[CELLS][_IMAGES_PER_SEC]} images/s measured on "
        f"{best['measured_provider']} {best['measured_instance_type']}. {len(providers)} provider(s) priced "
        f"for the GPUs measured on {', '.join(measured)}; ★ = the measured machine at its catalog price."
    )
    # one table per methodology (how the figure was timed): projections of two are never ranked together
    chart_id = slug("where-else", mode, network, *([] if methodology == "official" else [methodology]))
    title = f"{network}, {mode}: cheapest providers for the GPUs measured ({methodology} methodology)"
    table = data_table(headers, body, numeric,
                       caption=f"{title}: top {TOP_PROVIDERS} providers per market ({currency})")
    return {"id": chart_id, "title": title, "summary": summary, "table": table}


def where_else_section(rows: list[dict[str, Any]], measured: dict[tuple[str, str, str], list[str]],
                       currency: str) -> Section:
    """The section: one table per network, mode and methodology, or why there is none. ``rows`` are
    :func:`candidate_rows` with their cells written (``page_rows.projection_cells``), ``measured``
    is :func:`measured_machines`."""
    section = Section(KEY, TITLE, CAVEAT, "where_else.html.j2", ("projections",), {"tables": [], "empty": ""})
    if not rows:
        section.data["empty"] = (
            "No projection yet: no measured GPU result shares its GPU model and GPU count with a priced "
            "catalog instance (python -m gpucompare import-catalog adds other providers' prices).")
        return section
    grouped: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[(row["mode"], row["network"], row["methodology"])].append(row)
    section.data["tables"] = [
        _network_table(mode, network, methodology, grouped[key], measured[key], currency)
        for key in sorted(grouped)
        for mode, network, methodology in [key]
    ]
    return section
