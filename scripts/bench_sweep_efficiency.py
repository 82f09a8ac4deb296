"""Sweep efficiency: the share of a sweep's wall time spent inside timed batches.

Runs one CPU scoring sweep of 3 networks × 3 batch sizes (defaults: alexnet, googlenet,
resnet-50 at 1, 2, 4; 5 warm-up batches, 10 timed batches, 3 repeats) through the real
command line, once per isolation policy (``--isolation network``: one measuring process per
network, ``config``: one per configuration), and reports

* wall: from starting ``python -m bench_tasks sweep`` to its exit (everything: interpreter
  and MXNet start-up, sysinfo, runner processes, symbol construction, binding, parameter
  initialisation, warm-up, timed batches, writing records);
* timed: the seconds inside timed batches (the records' ``timed_seconds``);
* warm-up: the records' ``warmup_seconds``;
* setup: the records' ``setup_seconds`` (starting the measuring process, for the first
  configuration of each, then symbol, bind, parameters and input);
* between: the rest (sweep start, the sweep's environment capture, ending runner
  processes, writing records: wall minus the configurations' own seconds).

From the repository root:

    .venv-bench/bin/python scripts/bench_sweep_efficiency.py
    .venv-bench/bin/python scripts/bench_sweep_efficiency.py --isolation network --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_sweep(args: argparse.Namespace, isolation: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "results.jsonl"
        command = [sys.executable, "-m", "bench_tasks", "sweep", "--modes", "score",
                   "--networks", args.networks, "--batch-sizes", args.batch_sizes, "--devices", "cpu",
                   "--warmup", str(args.warmup), "--batches", str(args.batches),
                   "--repeats", str(args.repeats), "--isolation", isolation, "--output", str(output),
                   "--methodology", args.methodology]
        start = time.perf_counter()
        subprocess.run(command, cwd=REPO, check=True, stderr=sys.stderr)
        wall = time.perf_counter() - start
        records = [json.loads(line) for line in output.read_text().splitlines()]
    bad = [r for r in records if r["status"] != "ok"]
    if bad:
        raise RuntimeError(f"{len(bad)} configurations failed: {bad[0]['config_id']}: {bad[0]['error']}")
    timed = sum(r["timed_seconds"] for r in records)
    warm = sum(r["warmup_seconds"] for r in records)
    setup = sum(r["setup_seconds"] for r in records)
    inside = sum((datetime.fromisoformat(r["finished_at"]) - datetime.fromisoformat(r["started_at"]))
                 .total_seconds() for r in records)
    return {"isolation": isolation, "methodology": args.methodology, "configurations": len(records),
            "wall_s": wall, "timed_s": timed, "warmup_s": warm, "setup_s": setup,
            "other_in_configs_s": inside - timed - warm - setup, "between_s": wall - inside,
            "timed_share": timed / wall,
            "per_config": [{"config_id": r["config_id"], "images_per_sec": r["images_per_sec"],
                            "cv": r["cv"], "setup_s": r["setup_seconds"], "warmup_s": r["warmup_seconds"],
                            "timed_s": r["timed_seconds"]} for r in records]}


def main() -> None:
    parser = argparse.ArgumentParser(description="share of sweep wall time inside timed batches (CPU)")
    parser.add_argument("--networks", default="alexnet,googlenet,resnet-50")
    parser.add_argument("--batch-sizes", default="1,2,4")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--isolation", default="network,config", help="policies to measure")
    parser.add_argument("--methodology", default="official", choices=("official", "robust"))
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()}", file=sys.stderr)
    results = [run_sweep(args, policy) for policy in args.isolation.split(",")]
    print(f"load after: {os.getloadavg()}", file=sys.stderr)
    print(f"{'isolation':<10}{'configs':>8}{'wall s':>9}{'timed s':>9}{'warm-up s':>11}{'setup s':>9}"
          f"{'other s':>9}{'between s':>11}{'timed share':>13}")
    for r in results:
        print(f"{r['isolation']:<10}{r['configurations']:>8}{r['wall_s']:>9.1f}{r['timed_s']:>9.1f}"
              f"{r['warmup_s']:>11.1f}{r['setup_s']:>9.1f}{r['other_in_configs_s']:>9.1f}"
              f"{r['between_s']:>11.1f}{r['timed_share'] * 100:>12.1f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
