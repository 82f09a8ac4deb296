"""The ``campaign`` report: what each target's night cost, phase by phase (``sql/campaign.sql``).

It reads the lake's ``run_phases`` (the run-level phases the targets timed, ``lake.phases``)
and, through the view ``sql/run_phases_all.sql``, the per-configuration setup, warm-up and
timed seconds of the results of the same runs, then prices the billed seconds the way
``cost_per_million`` prices results. Built with the other reports (``reports.build``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpucompare.lake.phases import read_phases
from gpucompare.reports.inputs import load_sql


def phases_as_of(inputs: Any) -> pa.Table:
    """The run_phases rows as of the report's moment: a results version's commit time, or the
    timestamp asked for (``ReportInputs``), or now."""
    as_of: Any = None
    if inputs.as_of is not None:
        text = str(inputs.as_of).strip()
        as_of = inputs.results.timestamp if text.isdigit() and inputs.results is not None else text
    return read_phases(inputs.lake, as_of=as_of)


def register_phase_views(con: Any, phases: pa.Table, files: Any) -> None:
    """``run_phases`` (the stored rows), ``results`` (every results file from the first phase's
    day on: the runs the phases belong to) and the view ``run_phases_all`` on a connection."""
    con.register("run_phases", phases)
    first: dt.date | None = pc.min(phases["date"]).as_py() if phases.num_rows else None
    if first is None:
        files.register("results", dates=set())
    else:
        # a run's records may start the day before its first recorded phase ends; a day's margin
        files.register("results", since=first - dt.timedelta(days=1))
    con.execute(f"CREATE OR REPLACE TEMP VIEW run_phases_all AS {load_sql('run_phases_all')}")


def build_campaign(con: Any, inputs: Any, files: Any, currency: str) -> pa.Table:
    """The campaign table (see ``sql/campaign.sql`` for its columns)."""

    def run() -> pa.Table:
        register_phase_views(con, phases, files)
        return con.sql(load_sql("campaign"), params={"currency": currency}).to_arrow_table()

    phases = phases_as_of(inputs)
    return files.run(run)
