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

from gpucompare.reports.page_parts import Section, data_table
from gpucompare.reports.page_rows import CELLS

KEY = "campaign"
TITLE = "What the benchmark itself cost"
NOTE = (
    "Per target and night: billed time (ec2: launch to termination; ssh and local: the sweeps' wall "
    "time), the share of the sweeps spent in timed batches, billed ÷ timed seconds, and what each phase "
    "cost at the machine's price on that night; reclaims: spot machines lost mid-sweep and what they "
    "cost (the lost sweep's time, less the configurations it finished, and the replacement's launch and "
    "deploy). Unpriced runs show time only."
)
#: Nights shown on the page (the CSV and Parquet files hold every night).
NIGHTS_SHOWN = 7
#: The table's columns (page_rows.campaign_cells writes a row's cells in this order).
HEADERS = ("target", "night", "machine", "configurations", "reclaims", "billed", "timed", "timed share",
           "billed ÷ timed", "cost", "where the money went")
_NUMERIC = (False, False, False, True, True, True, True, True, True, True, False)


def recent_runs(table: pa.Table, nights: int = NIGHTS_SHOWN) -> list[dict[str, Any]]:
    """The runs of the newest ``nights`` nights, newest night first, then by target."""
    rows = table.to_pylist()
    kept = sorted({r["night"] for r in rows if r["night"] is not None}, reverse=True)[:nights]
    return sorted((r for r in rows if r["night"] in kept),
                  key=lambda r: (-r["night"].toordinal(), r["target"] or "", str(r["started_at"])))


def campaign_section(rows: list[dict[str, Any]], reclaims: str = "") -> Section:
    """The section: the recent runs (from :func:`recent_runs`, their cells written by
    ``page_rows.campaign_cells``) as a table, or why there is none; ``reclaims``: the line above
    the table saying what spot reclaims cost those runs (``page_rows.campaign_reclaims_line``)."""
    section = Section(KEY, TITLE, NOTE, "campaign.html.j2", ("campaign",),
                      {"table": None, "empty": "", "reclaims": reclaims})
    if not rows:
        section.data["empty"] = "No run recorded its phases yet (the nightly DAG records them)."
        return section
    caption = f"Target runs of the last {NIGHTS_SHOWN} nights with phases recorded"
    section.data["table"] = data_table(HEADERS, (r[CELLS] for r in rows), _NUMERIC, caption=caption)
    return section
