"""The benchmark worker: runs MXNet scoring and training benchmarks on the host it is on.

Runs with mxnet and numpy alone (the worker environment, `.venv-bench`). It never imports
Airflow, pandas, pyarrow or boto3; its only interface to the orchestrator is the command
``python -m bench_tasks …`` writing JSON Lines result records (see ``bench_tasks.record``).
Importing this package does not import mxnet, so the orchestrator can use its record
contract and constants.
"""

__version__ = "0.1.0"
