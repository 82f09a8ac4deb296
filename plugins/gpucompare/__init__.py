"""gpucompare: the orchestration library behind the DAGs.

Targets (where the worker runs), the results lake, price tables, reports and the
validation of everything users type. Runs without Airflow where it can (the lake, prices
and reports have a command line of their own: ``python -m gpucompare``); the DAGs in
``dags/`` are thin layers over it. In a notebook, ``gpucompare.read("cost_per_million",
lake=...)`` returns a report as a pandas DataFrame (see :mod:`gpucompare.reports.read`).
"""

from __future__ import annotations

import datetime
from typing import Any

# Python 3.10 (which Airflow 3.3 supports) has no ``datetime.UTC``, the 3.11 alias of
# ``datetime.timezone.utc`` the library writes throughout: give 3.10 the same object under that name
# before any gpucompare module runs ``from datetime import UTC`` (every one imports this package first).
if not hasattr(datetime, "UTC"):  # pragma: no cover - Python 3.10 only
    datetime.UTC = datetime.timezone.utc  # type: ignore[attr-defined]

__version__ = "0.1.0"

#: The notebook API (gpucompare.reports.read), loaded on first use so ``import gpucompare`` stays light.
_API = ("read", "read_history")


def __getattr__(name: str) -> Any:
    if name in _API:
        from gpucompare.reports import read as api

        return getattr(api, name)
    raise AttributeError(f"module 'gpucompare' has no attribute {name!r}")
