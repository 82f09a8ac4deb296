"""summary.md and the command line's provenance lines: the headline figures as short text.

Renders strings from a built :class:`~gpucompare.reports.report_set.ReportSet`; no I/O.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from gpucompare.reports.formatting import (
    date_text,
    devices,
    duration,
    machine_label,
    methodology,
    money,
    provenance,
    time_per_million,
)
from gpucompare.reports.page_cost import best_per_network
from gpucompare.reports.page_parts import (
    flagged_rows,
    num,
    pct,
    rows_of,
)
from gpucompare.reports.report_set import ReportSet

#: The published cost table's cell: scoring at batch 32 on one GPU.
PUBLISHED_COST_BATCH = 32


def _published_cost_table(cost: pa.Table, currency: str) -> list[str]:
    """The article's cost table, recomputed from its own throughput and prices (Markdown lines)."""
    rows = (
        [
            r
            for r in cost.filter(pc.equal(cost["origin"], "published")).to_pylist()
            if r["mode"] == "score"
            and r["batch_size"] == PUBLISHED_COST_BATCH
            and r["gpu_count"] == 1
            and r["cost_per_million"] is not None
        ]
        if cost.num_rows
        else []
    )
    if not rows:
        return []
    dates = sorted({date_text(r["result_date"]) for r in rows})
    lines = [
        "",
        f"## Published machines, time and cost of 1,000,000 images (score, batch {PUBLISHED_COST_BATCH})",
        "",
        f"Published {', '.join(dates)}, at the publication's prices; not ranked when older than the age "
        "limit.",
        "",
        "| GPU | network | images/s | time | per hour | cost |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in sorted(rows, key=lambda r: (str(r["gpu_model"]), r["network"])):
        lines.append(
            f"| {r['gpu_model']} | {r['network']} | {num(r['images_per_sec'])} | "
            f"{duration(r['seconds_per_million'])} | {money(r['price_per_hour'], currency, 2)} | "
            f"{money(r['cost_per_million'], currency)} |"
        )
    return lines


def render_summary(report_set: ReportSet) -> str:
    """summary.md: the headline figures in a few lines of Markdown."""
    currency = report_set.currency
    tables = report_set.tables
    best = best_per_network(rows_of(tables["best_value"])) if "best_value" in tables else []
    regressions = flagged_rows(tables["regressions"]) if "regressions" in tables else []
    missing = report_set.missing_prices.num_rows
    provenance_lines = [
        f"- {name}: "
        + ", ".join(
            f"{origin} {count}" + (f" (newest {newest})" if newest else "")
            for origin, (count, newest) in per_origin.items()
        )
        for name, per_origin in report_set.provenance().items()
    ]
    lines = [
        "# gpucompare report",
        "",
        f"{report_set.rows_scanned:,} results; money in {currency}.",
        *_failure_lines(report_set),
        "",
        "Where each table came from (rows; newest result date):",
        "",
        *provenance_lines,
        "",
        "## Best buy per network (cost per million images, ranked figures only)",
        "",
        "Each methodology is ranked on its own: a figure is never ranked against one timed another way.",
        "",
        "| mode | network | methodology | machine | devices | batch | images/s | time per million "
        "| cost per million | figure | price date |",
        "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in best:
        lines.append(
            f"| {r['mode']} | {r['network']} | {methodology(r)} | {machine_label(r)} | {devices(r)} | "
            f"{r['batch_size']} | "
            f"{num(r['images_per_sec'])} | {time_per_million(r['images_per_sec'])} | "
            f"{money(r['cost_per_million'], currency)} | {provenance(r)} | "
            f"{date_text(r['price_effective_from'])} |"
        )
    if not best:
        lines += [
            "",
            f"No ranked figure yet: published figures dated before {report_set.options.published_cutoff} "
            "and flagged ones are not ranked (best_value.csv lists them with not_ranked_reason).",
        ]
    if "cost_per_million" in tables:
        lines += _published_cost_table(tables["cost_per_million"], currency)
    return "\n".join(lines + _tail(report_set, regressions, missing))


def _tail(report_set: ReportSet, regressions: list[dict], missing: int) -> list[str]:
    """The regressions, the count of unpriced results and what the set was built from."""
    lines = ["", f"## Regressions: {len(regressions)}", ""]
    for r in regressions[:20]:
        lines.append(
            f"- {machine_label(r)} {r['mode']} {r['network']} batch {r['batch_size']} "
            f"{devices(r)} ({methodology(r)}): {num(r['images_per_sec'])} images/s vs median "
            f"{num(r['history_median'])} ({pct(r['change'])}, {r['verdict']})"
        )
    lines += [
        "",
        f"## Results without a price: {missing}",
        "",
        "Details: index.html and the CSV/Parquet tables beside it.",
        "",
    ]
    manifest = report_set.manifest
    if manifest:
        versions = ", ".join(f"{table} {'absent' if version is None else f'v{version}'}"
                             for table, version in dict(manifest.get("table_versions") or {}).items())
        as_of = f" (as of {manifest['as_of']})" if manifest.get("as_of") else ""
        lines += [f"Built from the lake {manifest.get('lake')} at table versions: {versions}{as_of}.", ""]
    return lines


def _failure_lines(report_set: ReportSet) -> list[str]:
    """The failed parts of the set (a report, the page), one line each; nothing when none."""
    if not report_set.failures:
        return []
    lines = ["", f"## Failed: {len(report_set.failures)} part(s) of this report set", "",
             "Every other table was built and written; these were not:", ""]
    lines += [f"- {name}: {message}" for name, message in report_set.failures.items()]
    return lines


def render_failures_only(report_set: ReportSet) -> str:
    """A summary.md that only lists the failures (when the full summary cannot be rendered)."""
    return "\n".join(["# gpucompare report", *_failure_lines(report_set), ""])


def describe_provenance(report_set: ReportSet) -> str:
    """Where each section came from: measured and published rows and their newest dates
    (the ``report`` command prints it)."""
    lines = ["where each section came from (rows; newest result date):"]
    for name, per_origin in report_set.provenance().items():
        parts = []
        for origin, (count, newest) in per_origin.items():
            parts.append(f"{origin} {count}" + (f" (newest {newest})" if newest else ""))
        lines.append(f"  {name:<18} " + " · ".join(parts))
    options = report_set.options
    ranked = []
    if not options.rank_old_published:
        ranked.append(f"published figures before {options.published_cutoff} not ranked")
    if not options.rank_flagged:
        ranked.append("flagged figures not ranked")
    lines.append("  best_value ranking: " + ("; ".join(ranked) or "every priced figure ranked"))
    return "\n".join(lines)
