"""How long validation takes: the shipped fleet file (``fleet.parse_fleet``), a manual request
and the trigger form's generation (what the manual DAG file does at parse time).

Run from the checkout: ``.venv/bin/python scripts/bench_validation.py [--repeat N]``; to compare
with another checkout's code, put its ``plugins`` and root first on ``PYTHONPATH``. Prints the
median and the best of N runs of each, in milliseconds. A figure for the report, not a test.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
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

    import gpucompare
    from gpucompare.config import fleet

    root = Path(gpucompare.__file__).resolve().parents[2]
    document = yaml.safe_load((root / "dags" / "config" / "fleet.yaml").read_text())
    print(f"code: {root}")
    timed("parse_fleet(shipped fleet.yaml)", lambda: fleet.parse_fleet(document), args.repeat)
    # this code: the models; code from before them: the hand-written checks (looked up by name,
    # so this script runs against either)
    if importlib.util.find_spec("gpucompare.config.models") is not None:
        module, names = importlib.import_module("gpucompare.config.models"), ("check_request", "form_fields")
    else:
        module = importlib.import_module("gpucompare.config.validation")
        names = ("check_manual_request", "param_schemas")
    check_request, form_fields = (getattr(module, name) for name in names)
    timed("manual request check", lambda: check_request(REQUEST), args.repeat)
    timed("trigger form schema", form_fields, args.repeat)


if __name__ == "__main__":
    main()
