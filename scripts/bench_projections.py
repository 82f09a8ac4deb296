"""Benchmark of the projections report and its page section on a big lake and a big catalog.

The lake is bench_reports.py's synthetic one (48 AWS and LeaderGPU machines × ~250
configurations, one result a night); the prices are its own plus the shipped catalog samples
(gcp, azure, lambda, runpod, nebius) copied over ``--regions`` made-up regions each, the size
of a full SkyPilot catalog of a big cloud. Prints the rows projected and the time of each step
(projections query, best_value_with_projections, the page section) over ``--repeat`` runs.

    .venv/bin/python scripts/bench_projections.py [--rows 1000000] [--regions 40] [--lake DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_reports  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from gpucompare.lake import schema  # noqa: E402
from gpucompare.prices.catalogs import importer  # noqa: E402
from gpucompare.reports import build as reports  # noqa: E402
from gpucompare.reports import page, page_projections, page_view  # noqa: E402
from gpucompare.reports.report_set import ReportOptions  # noqa: E402


def big_catalog(regions: int) -> pa.Table:
    """The shipped samples, each row copied into ``regions`` made-up regions (<region>-<k>)."""
    samples = pa.concat_tables([c.rows.cast(schema.PRICES_SCHEMA) for c in importer.shipped_catalogs()])
    copies = []
    for k in range(regions):
        named = pc.fill_null(samples["region"], "global")
        region = pc.binary_join_element_wise(named, pa.scalar(f"-{k}"), "")
        copies.append(samples.set_column(samples.schema.get_field_index("region"), "region", region))
    return pa.concat_tables(copies)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--regions", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lake", type=Path, help="build (or reuse, if it has results) the lake here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as temp:
        lake = args.lake or Path(temp) / "lake"
        if not (lake / "results").exists():
            started = time.perf_counter()
            bench_reports.build_lake(lake, args.rows)
            print(f"built the lake ({args.rows:,} rows) in {time.perf_counter() - started:.1f} s")
        catalog = big_catalog(args.regions)
        print(f"catalog: {catalog.num_rows:,} price rows ({args.regions} regions per sample row)")
        timings: dict[str, list[float]] = {}
        for _ in range(args.repeat):
            inputs = bench_reports.bench_inputs(lake)
            inputs.prices = pa.concat_tables([inputs.prices, catalog])
            built = reports.build_reports(inputs, options=ReportOptions(with_projections=True))
            for name in ("projections", "best_value_with_projections", "best_value"):
                timings.setdefault(name, []).append(built.timings[name])
            started = time.perf_counter()
            projections = page_view.projection_rows(built)
            page_projections.where_else_section(projections["rows"], projections["measured"], built.currency)
            timings.setdefault("page section", []).append(time.perf_counter() - started)
            started = time.perf_counter()
            page.render_page(built, dt.datetime.now(dt.UTC))
            timings.setdefault("whole page", []).append(time.perf_counter() - started)
        print(f"projections: {built.tables['projections'].num_rows:,} rows from "
              f"{built.tables['cost_per_million'].num_rows:,} priced measured configurations; "
              f"best_value_with_projections {built.tables['best_value_with_projections'].num_rows:,} rows")
        for name, values in timings.items():
            print(f"  {name:<30} median {statistics.median(values):.3f} s (min {min(values):.3f}, "
                  f"max {max(values):.3f}, {len(values)} runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
