"""gpucompare: the orchestration library behind the DAGs.

Targets (where the worker runs), the results lake, price tables, reports and the
validation of everything users type. Runs without Airflow where it can (the lake, prices
and reports have a command line of their own: ``python -m gpucompare``); the DAGs in
``dags/`` are thin layers over it.
"""

__version__ = "0.1.0"
