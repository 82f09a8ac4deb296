"""The page section "What the benchmark itself cost": the ``campaign`` report, night by night.

Data for the section template (from the built ``campaign`` table, no I/O), like the rest of the page.
One row per target run of the last nights: how long the machine was paid for, how much of that
was timed batches (the figures the reports are made of), billed ÷ timed, and the money each
phase took. An unpriced run (the local machine, a host without a price) shows its seconds and
no money: never a cost of 0.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from gpucompare.reports.formatting import date_text, duration, money
from gpucompare.reports.page_parts import Section, data_table
from gpucompare.reports.report_set import ReportSet

KEY = "campaign"
TITLE = "What the benchmark itself cost"
NOTE = (
    "Per target and night: billed time (ec2: launch to termination; ssh and local: the sweeps' wall "
    "time), the share of the sweeps spent in timed batches, billed ÷ timed seconds, and what each phase "
    "cost at the machine's price on that night. Unpriced runs show time only."
)
#: Nights shown on the page (the CSV and Parquet files hold every night).
NIGHTS_SHOWN = 7
#: (column suffix, label) of the phases whose money the table splits, in the order they happen.
PHASES = (
    ("provision", "provision"), ("deploy", "deploy"), ("setup", "setup"), ("warmup", "warm-up"),
    ("timed", "timed"), ("sweep_other", "other sweep"), ("teardown", "teardown"), ("idle", "idle"),
)


def recent_runs(table: pa.Table, nights: int = NIGHTS_SHOWN) -> list[dict[str, Any]]:
    """The runs of the newest ``nights`` nights, newest night first, then by target."""
    rows = table.to_pylist()
    kept = sorted({r["night"] for r in rows if r["night"] is not None}, reverse=True)[:nights]
    return sorted((r for r in rows if r["night"] in kept),
                  key=lambda r: (-r["night"].toordinal(), r["target"] or "", str(r["started_at"])))


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f} %"


def _where_the_money_went(row: dict[str, Any]) -> str:
    """The phases that cost something, largest first: 'setup €1.20 · timed €0.30 · …'."""
    if row["price_per_hour"] is None:
        return f"no price ({row['price_source']})"
    parts = [(row[f"{key}_cost"] or 0.0, label) for key, label in PHASES]
    return " · ".join(f"{label} {money(cost, row['currency'], 2)}"
                      for cost, label in sorted(parts, reverse=True) if cost > 0.005) or "–"


def campaign_section(report_set: ReportSet) -> Section:
    """The section: the recent runs as a table, or why there is none."""
    table = report_set.tables.get("campaign")
    rows = recent_runs(table) if table is not None else []
    section = Section(KEY, TITLE, NOTE, "campaign.html.j2", ("campaign",), {"table": None, "empty": ""})
    if not rows:
        section.data["empty"] = "No run recorded its phases yet (the nightly DAG records them)."
        return section
    headers = ["target", "night", "machine", "configurations", "billed", "timed", "timed share",
               "billed ÷ timed", "cost", "where the money went"]
    numeric = [False, False, False, True, True, True, True, True, True, False]
    body = [
        [
            r["target"] + ("" if r["torn_down"] else " (not torn down)"),
            date_text(r["night"]),
            f"{r['kind']}: {r['provider']} {r['instance_type']}",
            r["configurations"],
            duration(r["billed_seconds"]),
            duration(r["timed_seconds"]),
            _share(r["timed_share"]),
            "–" if r["overhead_ratio"] is None else f"{r['overhead_ratio']:,.1f}",
            money(r["billed_cost"], r["currency"] or "", 2) if r["currency"] else "–",
            _where_the_money_went(r),
        ]
        for r in rows
    ]
    caption = f"Target runs of the last {NIGHTS_SHOWN} nights with phases recorded"
    section.data["table"] = data_table(headers, body, numeric, caption=caption)
    return section
