"""Races of first-time takers of one deployment name, and what taking and renewing cost.

    .venv/bin/python scripts/bench_name_lease.py [--rounds 20] [--takers 6]

Starts moto's server on 127.0.0.1 (the stand-in for S3), then ``--rounds`` times starts
``--takers`` processes with other identities that all take one new name at once
(tests/support/lease_race.py) and counts the winners of each round (the lease is right when every
round has exactly one). Then times ``hold_name`` taking a free name and renewing a held one.
Moto's speed is not S3's, and moto checks ``If-None-Match`` without a lock: a round with two
winners would be moto's race, not S3's (S3 applies conditional writes atomically).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
for path in (REPO_ROOT, REPO_ROOT / "plugins"):
    sys.path.insert(0, str(path))

from gpucompare.targets import name_lease  # noqa: E402
from tests.support.fixtures_aws import FAKE_AWS_ENV, _start_server  # noqa: E402
from tests.support.lease_race import race  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description="races of first-time takers of a deployment name")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--takers", type=int, default=6)
    args = parser.parse_args()
    import boto3

    os.environ.update(FAKE_AWS_ENV)
    server, endpoint = _start_server()
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    try:
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="bench-lease")
        winners: collections.Counter[int] = collections.Counter()
        with tempfile.TemporaryDirectory() as folder:
            for round_ in range(args.rounds):
                identities = [f"bench{round_}-{n}-0000-4000-8000-000000000000" for n in range(args.takers)]
                answers = race("bench-lease", f"race-{round_}", identities, Path(folder))
                winners[sum(1 for a in answers if a["won"])] += 1
        take, renew = [], []
        for n in range(20):
            started = time.perf_counter()
            name_lease.hold_name(s3, "bench-lease", "gpucompare", f"time-{n}", "bench-timing-identity")
            take.append(time.perf_counter() - started)
            started = time.perf_counter()
            name_lease.hold_name(s3, "bench-lease", "gpucompare", f"time-{n}", "bench-timing-identity")
            renew.append(time.perf_counter() - started)
    finally:
        server.stop()
    print(f"{args.rounds} rounds of {args.takers} takers: winners per round "
          + ", ".join(f"{k}: {v} round(s)" for k, v in sorted(winners.items())))
    print(f"take a free name: median {statistics.median(take) * 1000:.1f} ms; renew a held one: median "
          f"{statistics.median(renew) * 1000:.1f} ms (20 each; 1 and 3 S3 calls)")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
