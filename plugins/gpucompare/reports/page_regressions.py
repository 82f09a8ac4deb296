"""The page's regressions section: the flagged results and the significant drops within the floor
against their history, as a table, and the series whose software stack changed (a new baseline),
as lines (data for the section template)."""

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
    flagged = rows[:limit]  # page_parts.reported_rows: flagged, then significant below floor
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
            "floor",
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
                num(r["floor"]),
                pct(r["change"]),
                _verdict(r),
                date_text(r["result_date"]),
            ]
            for r in flagged
        ),
        [False, False, False, False, True, False, False, True, True, True, True, True, False, False],
        caption="Flagged regressions and significant drops within the floor: tonight's result against the "
        "history of its own methodology and software stack",
    )


def _verdict(row: dict[str, Any]) -> str:
    if row["verdict"] == "significant_below_floor":
        return f"significant, below floor (p {row['p_value']:.3g})"
    return row["verdict"] if row["status"] == "ok" else f"{row['verdict']} ({row['status']})"


def stack_change_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per machine and change: what changed and how many configurations start a new
    baseline with it."""
    changes: dict[tuple[str, str], int] = {}
    for r in rows:
        if r["build_changed"]:
            what = f"framework build changed on {r['worker_runtime']}"
        else:
            what = f"worker runtime {r['previous_runtime']} → {r['worker_runtime']}"
        key = (machine_label(r), what)
        changes[key] = changes.get(key, 0) + 1
    return [f"{machine}: {what}; {count} configuration{'s' if count > 1 else ''} start a new baseline"
            for (machine, what), count in sorted(changes.items())]
