"""gpucompare: the orchestration library behind the DAGs.

Targets (where the worker runs), the results lake, price tables, reports and the
validation of everything users type. Runs without Airflow where it can (the lake, prices
and reports have a command line of their own: ``python -m gpucompare``); the DAGs in
``dags/`` are thin layers over it. In a notebook, ``gpucompare.read("cost_per_million",
lake=...)`` returns a report as a pandas DataFrame (see :mod:`gpucompare.reports.read`).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

#: The notebook API (gpucompare.reports.read), loaded on first use so ``import gpucompare`` stays light.
_API = ("read", "read_history")


def __getattr__(name: str) -> Any:
    if name in _API:
        from gpucompare.reports import read as api

        return getattr(api, name)
    raise AttributeError(f"module 'gpucompare' has no attribute {name!r}")
