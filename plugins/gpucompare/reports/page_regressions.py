"""The page's regressions section: the flagged results and the significant drops within the floor
against their history, as a table, and the series whose software stack changed (a new baseline),
as lines (data for the section template). The rows come with their cells written
(:func:`gpucompare.reports.page_rows.regression_cells` / ``stack_change_cells``): this module picks
and counts them, it formats nothing.
"""

from __future__ import annotations

from typing import Any

from gpucompare.reports.page_parts import Table, data_table
from gpucompare.reports.page_rows import CELLS

#: The regressions table's columns (page_rows.regression_cells writes a row's cells in this order).
REGRESSION_COLUMNS = ("machine", "mode", "network", "dtype", "batch", "devices", "methodology", "images/s",
                      "history median", "noise", "floor", "change", "verdict", "night")
_NUMERIC = (False, False, False, False, True, False, False, True, True, True, True, True, False, False)


def regressions_table(rows: list[dict[str, Any]], limit: int = 60) -> Table:
    flagged = rows[:limit]  # page_parts.reported_rows: flagged, then significant below floor
    return data_table(
        REGRESSION_COLUMNS,
        (r[CELLS] for r in flagged),
        _NUMERIC,
        caption="Flagged regressions and significant drops within the floor: tonight's result against the "
        "history of its own methodology and software stack",
    )


def stack_change_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per machine and change: what changed and how many configurations start a new
    baseline with it."""
    changes: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (r[CELLS][0], r[CELLS][1])
        changes[key] = changes.get(key, 0) + 1
    return [f"{machine}: {what}; {count} configuration{'s' if count > 1 else ''} start a new baseline"
            for (machine, what), count in sorted(changes.items())]
