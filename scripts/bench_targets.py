"""What a target adds around the worker: the same tiny sweep through ``local`` and ``ssh``.

    .venv/bin/python scripts/bench_targets.py [--repeat 2] [--poll 0.5]

Starts a throwaway OpenSSH server on 127.0.0.1 (``tests/support/fixtures_sshd.py``; root or the
current user), then runs prepare → deploy → run_sweep → collect → teardown on each target
with AlexNet scoring at batch 1 (one warm-up and one timed batch), and prints each step's
wall-clock seconds. The ssh target reaches this same machine, using the repository's
``.venv-bench`` as its existing interpreter (option ``python``), so the difference between
the two columns is the target's own cost: connecting with host key verification, the
content-addressed upload (first deploy only), the detached launch and the polling of the
progress file (``--poll`` seconds apart). The worker's own time is in both. On a shared
machine these figures are noisy: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
for path in (REPO_ROOT, REPO_ROOT / "plugins"):
    sys.path.insert(0, str(path))

from gpucompare import settings  # noqa: E402
from gpucompare.targets import make_target  # noqa: E402
from gpucompare.targets.base import TargetSpec  # noqa: E402
from tests.support.fixtures_sshd import start_sshd  # noqa: E402

TINY_SWEEP = {
    "warmup": 1, "batches": 1, "repeats": 1,
    "matrix": [{"modes": ["score"], "networks": ["alexnet"], "batch_sizes": [1], "devices": ["cpu"]}],
}
STEPS = ("prepare", "deploy", "run_sweep", "collect", "teardown")


def time_run(spec: TargetSpec, run_id: str, out_dir: Path) -> dict[str, float]:
    target = make_target(spec, line_sink=lambda line: None)
    timings: dict[str, float] = {}

    def timed(step: str, call):
        started = time.perf_counter()
        result = call()
        timings[step] = time.perf_counter() - started
        return result

    state = timed("prepare", lambda: target.prepare(run_id))
    state = timed("deploy", lambda: target.deploy(state))
    state = timed("run_sweep", lambda: target.run_sweep(state, TINY_SWEEP, timeout_s=600))
    timed("collect", lambda: target.collect(state, str(out_dir / f"{spec.kind}-{run_id}.jsonl")))
    timed("teardown", lambda: target.teardown(state))
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description="time each target step around the same tiny sweep")
    parser.add_argument("--repeat", type=int, default=2, help="runs per target (the first deploys)")
    parser.add_argument("--poll", type=float, default=0.5, help="ssh target: seconds between polls")
    args = parser.parse_args()
    bench_python = str(settings.bench_python())  # run from the checkout: ./.venv-bench/bin/python
    work = Path(tempfile.mkdtemp(prefix="gpucompare-bench-targets-"))
    os.environ.setdefault("AIRFLOW_HOME", str(work / "airflow"))
    server = start_sshd(work / "sshd", conn_id="bench_targets_ssh")
    os.environ[server.conn_env_var] = server.connection_json()
    try:
        local = TargetSpec(name="local", kind="local", provider="local", instance_type="cpu",
                           options={"work_dir": str(work / "local"), "python": bench_python})
        ssh = TargetSpec(name="ssh", kind="ssh", provider="loopback", instance_type="cpu",
                         options={"ssh_conn_id": server.conn_id, "remote_dir": str(work / "remote"),
                                  "python": bench_python, "poll_interval_s": args.poll})
        print(f"load before: {os.getloadavg()}", file=sys.stderr)
        rows = []
        for index in range(args.repeat):
            for spec in (local, ssh):
                rows.append((spec.kind, index + 1, time_run(spec, f"bench-{index}", work)))
        print(f"load after: {os.getloadavg()}", file=sys.stderr)
        print(f"{'target':<7}{'run':>4}" + "".join(f"{step:>11}" for step in STEPS) + f"{'total':>9}")
        for kind, run, timings in rows:
            print(f"{kind:<7}{run:>4}" + "".join(f"{timings[step]:>11.2f}" for step in STEPS)
                  + f"{sum(timings.values()):>9.2f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
