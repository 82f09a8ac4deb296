"""The page's regressions section: the flagged results against their history, as a table (data for
the section template)."""

from __future__ import annotations

from typing import Any

from gpucompare.reports.formatting import (
    date_text,
    devices,
    machine_label,
    methodology,
)
from gpucompare.reports.page_parts import (
    Table,
    data_table,
    num,
    pct,
)


def regressions_table(rows: list[dict[str, Any]], limit: int = 60) -> Table:
    flagged = [r for r in rows if r["regression"]][:limit]
    return data_table(
        [
            "machine",
            "mode",
            "network",
            "dtype",
            "batch",
            "devices",
            "methodology",
            "images/s",
            "history median",
            "noise",
            "change",
            "verdict",
            "night",
        ],
        (
            [
                machine_label(r),
                r["mode"],
                r["network"],
                r["dtype"],
                r["batch_size"],
                devices(r),
                methodology(r),
                num(r["images_per_sec"]),
                num(r["history_median"]),
                num(r["noise"]),
                pct(r["change"]),
                r["verdict"] if r["status"] == "ok" else f"{r['verdict']} ({r['status']})",
                date_text(r["result_date"]),
            ]
            for r in flagged
        ),
        [False, False, False, False, True, False, False, True, True, True, True, False, False],
        caption="Flagged regressions: tonight's result against the history of its own methodology",
    )
