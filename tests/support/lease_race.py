"""A race of first-time takers of one deployment name (``targets.name_lease``), in real processes.

Each taker is a process of its own with another identity: it connects to S3 (the environment's
``AWS_ENDPOINT_URL``: moto's server in the tests), says it is ready, waits for the start file, then
calls ``hold_name``. Used by tests/integration/targets/test_name_lease.py and
scripts/bench_name_lease.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent.parent

TAKER = """
import json, sys, time
from pathlib import Path
import boto3
from gpucompare.targets import name_lease
bucket, deployment, identity, go = sys.argv[1:5]
s3 = boto3.client("s3")
s3.list_buckets()  # connected and signed once before the start
Path(go + "." + identity).touch()
while not Path(go).exists():
    time.sleep(0.001)
try:
    lease = name_lease.hold_name(s3, bucket, "gpucompare", deployment, identity)
    print(json.dumps({"won": True, "identity": lease.identity}))
except name_lease.NameHeld as exc:
    print(json.dumps({"won": False, "holder": exc.holder.identity}))
"""


def race(bucket: str, deployment: str, identities: list[str], folder: Path,
         timeout_s: float = 120) -> list[dict[str, Any]]:
    """Start one taker per identity, release them at once, return each one's answer."""
    go = folder / f"go-{deployment}"
    processes = [subprocess.Popen([sys.executable, "-c", TAKER, bucket, deployment, identity, str(go)],
                                  stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
                 for identity in identities]
    try:
        deadline = time.monotonic() + timeout_s
        while not all(Path(f"{go}.{identity}").exists() for identity in identities):  # all waiting
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                raise RuntimeError(f"a taker did not get ready: {[p.poll() for p in processes]}")
            time.sleep(0.05)
        go.touch()
        return [json.loads(p.communicate(timeout=timeout_s)[0]) for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
