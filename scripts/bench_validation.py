"""How long validation takes: the shipped fleet file (``fleet.parse_fleet``), a manual request
and the trigger form's generation (what the manual DAG file does at parse time).

Run from the checkout: ``.venv/bin/python scripts/bench_validation.py [--repeat N]``; to compare
with another checkout's code, put its ``plugins`` and root first on ``PYTHONPATH``. Prints the
median and the best of N runs of each, in milliseconds. A figure for the report, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import yaml

REQUEST = {"kind": "ec2", "provider": "aws", "instance_type": "g5.xlarge", "region": "us-east-1",
           "market": "spot", "gpu_count": 1, "networks": ["resnet-50", "alexnet"], "batch_sizes": [1, 8],
           "modes": ["score", "train"], "dtypes": ["float32"], "profile": "nightly", "ssh_conn_id": None,
           "budget_cap": 5, "budget_currency": "USD"}


def timed(what: str, run: Callable[[], object], repeat: int) -> None:
    run()  # first call: imports, caches, schema building
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    print(f"{what:<34} median {statistics.median(times):8.2f} ms   best {min(times):8.2f} ms   (n={repeat})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()

    from gpucompare.config import fleet

    import gpucompare

    root = Path(gpucompare.__file__).resolve().parents[2]
    document = yaml.safe_load((root / "dags" / "config" / "fleet.yaml").read_text())
    print(f"code: {root}")
    timed("parse_fleet(shipped fleet.yaml)", lambda: fleet.parse_fleet(document), args.repeat)
    try:  # this branch: the models
        from gpucompare.config.models import check_request, form_fields
    except ImportError:  # before: hand-written checks
        from gpucompare.config.validation import check_manual_request as check_request
        from gpucompare.config.validation import param_schemas as form_fields
    timed("manual request check", lambda: check_request(REQUEST), args.repeat)
    timed("trigger form schema", form_fields, args.repeat)


if __name__ == "__main__":
    main()
