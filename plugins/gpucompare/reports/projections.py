"""The projections report: what each measured result would cost on every other machine with its GPUs.

Benchmark suites measure throughput but know one price; provider catalogs know every price but no
throughput. This module joins the two, keeping them apart from the measured rankings:

* :func:`build_projections` runs ``sql/projections.sql`` in the report set's DuckDB connection: for
  every ok result measured on GPU model G with n GPUs per node, the cost per million images (and
  per 90 ImageNet epochs for training) on every price series of G with exactly n GPUs, per
  provider, region and market (rules in the SQL file's header). The GPU names are resolved to
  canonical models here, in Python, through the GPU model table (:mod:`gpucompare.config.gpus`):
  results carry what nvidia-smi reported (``NVIDIA A10G``), catalogs their own spellings.
* :func:`best_value_with_projections` is the optional view of ``best_value`` (off by default,
  ``ReportOptions.with_projections``): the measured ranking with projected machines added, each
  projected row labelled ``origin = 'projected'``; it runs ``sql/best_value.sql`` itself, so the
  ranking rules are the same ones.

Rendering of the page section is in :mod:`gpucompare.reports.page_projections`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

import duckdb
import pyarrow as pa

from gpucompare.config import gpus
from gpucompare.prices.catalogs.skypilot import GPU_ONLY_NOTE
from gpucompare.reports.inputs import connect, load_sql

#: The report's name (its SQL file, Parquet folder and CSV file).
PROJECTIONS = "projections"
#: The optional view of best_value that includes projected machines.
BEST_VALUE_WITH_PROJECTIONS = "best_value_with_projections"
#: ``origin`` of a projected row in best_value_with_projections.
PROJECTED = "projected"


def gpu_canonical_table(names: Iterable[str | None]) -> pa.Table:
    """``gpu_model`` → ``canonical`` for each name (canonical NULL: a GPU the table does not know)."""
    found = sorted({name for name in names if name})
    return pa.table(
        {"gpu_model": pa.array(found, pa.string()),
         "canonical": pa.array([gpus.canonical(name) for name in found], pa.string())}
    )


def build_projections(
    con: duckdb.DuckDBPyConnection, *, currency: str, epoch_images: int, report_date: dt.date
) -> pa.Table:
    """The projections table, from ``latest``, ``prices`` and ``fx`` already in ``con``; it is
    registered in ``con`` as ``projections`` too."""
    names = con.execute(
        "SELECT gpu_model FROM latest WHERE gpu_model IS NOT NULL "
        "UNION SELECT gpu_model FROM prices WHERE gpu_model IS NOT NULL"
    ).fetchall()
    con.register("gpu_canonical", gpu_canonical_table(row[0] for row in names))
    table = con.sql(
        load_sql(PROJECTIONS),
        params={"currency": currency, "epoch_images": epoch_images, "report_date": report_date,
                "gpu_only_note": GPU_ONLY_NOTE},
    ).to_arrow_table()
    con.register(PROJECTIONS, table)
    return table


#: How a projected row enters best_value's input (the columns cost_per_million gives it): the
#: throughput figure is the measured one, the machine and price the catalog's; origin says so and
#: result_source names the measured result. A machine measured for that network and mode keeps its
#: measured row (measured beats projected; a published figure does not: best_value.sql then shows the
#: machine's ranked row, usually the projection, as an old published figure is not ranked). Rows without
#: a usable price are left out, as in best_value, and so are prices of the GPUs alone (price_covers
#: gpus_only: not a machine's price, not comparable).
_PROJECTED_AS_COST = """
SELECT
    provider, instance_type, region, market, gpu_model, device_kind, gpu_count, num_nodes, mode, network,
    dtype, batch_size, methodology, images_per_sec, seconds_per_million, price_per_hour, cost_per_million,
    currency,
    price_source, price_note, price_effective_from, price_currency, fx_rate,
    'projected' AS origin, 'projected figure' AS interval_reason,
    'projected from run ' || coalesce(run_id, '?') || ' (' || coalesce(config_id, '?') || ') on '
        || measured_provider || ' ' || measured_instance_type
        || coalesce(' ' || measured_region, '') || ' ' || measured_market AS result_source,
    target, measured_at, result_date, flags, epoch_seconds, epoch_cost, epochs90_seconds, epochs90_hours,
    epochs90_cost
FROM projections AS p
WHERE cost_per_million IS NOT NULL AND price_covers = 'instance'
  AND NOT EXISTS (
    SELECT 1 FROM cost_per_million AS c
    WHERE c.origin = 'measured' AND c.cost_per_million IS NOT NULL
      AND c.network = p.network AND c.mode = p.mode AND c.methodology = p.methodology
      AND c.provider = p.provider AND c.instance_type = p.instance_type
      AND c.region IS NOT DISTINCT FROM p.region AND c.market = p.market
  )
"""


def best_value_with_projections(con: duckdb.DuckDBPyConnection, ranking: dict[str, Any]) -> pa.Table:
    """best_value over the measured and published rows of ``cost_per_million`` plus the projected
    machines (``origin = 'projected'``), ranked together by ``sql/best_value.sql`` with the same
    ``ranking`` parameters. Reads ``cost_per_million`` and ``projections`` from ``con``."""
    union = con.sql(
        f"SELECT * FROM cost_per_million UNION ALL BY NAME {_PROJECTED_AS_COST}"  # noqa: S608 (constant)
    ).to_arrow_table()
    # best_value.sql reads a table named cost_per_million: give it the union in a connection of its own
    # (the report set's connection keeps the measured table under that name)
    view = connect()
    try:
        view.register("cost_per_million", union)
        return view.sql(load_sql("best_value"), params=ranking).to_arrow_table()
    finally:
        view.close()
