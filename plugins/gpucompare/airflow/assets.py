"""The Assets the gpucompare DAGs announce and schedule on, and how a task reaches its own.

Their URIs are fixed names in a private scheme (``x-``: Airflow stores it as written), never
derived from the lake setting: the DAG files, the scheduler and the task that announces one must
name one and the same asset whatever environment each of them was started in. An event's extra
says which run produced it.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset, get_current_context

#: The results table of the lake; updated once per DAG run that ingested anything.
RESULTS = Asset(name="gpucompare_results", uri="x-gpucompare://lake/results", group="gpucompare")
#: The published report set (``<reports>/latest``); BI refreshes can schedule on it.
REPORTS = Asset(name="gpucompare_reports", uri="x-gpucompare://reports/latest", group="gpucompare")


def declared_outlet_events() -> Any:
    """The outlet events of the running task's own declared asset (the one its DAG was built
    with), so an event always goes to the asset the scheduler knows, never one rebuilt from the
    settings as they are now."""
    context = get_current_context()
    (asset,) = context["task"].outlets
    return context["outlet_events"][asset]
