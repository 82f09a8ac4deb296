"""Sweep efficiency: the share of a sweep's wall time spent inside timed batches.

Runs one CPU scoring sweep of 3 networks × 3 batch sizes (defaults: alexnet, googlenet,
resnet-50 at 1, 2, 4; 5 warm-up batches, 10 timed batches, 3 repeats) through the real
command line, once per isolation policy (``--isolation mode``, the default: one measuring
process per mode and dtype; ``network``: one per network; ``config``: one per configuration),
and reports

* wall: from starting ``python -m bench_tasks sweep`` to its exit (everything: interpreter
  and MXNet start-up, sysinfo, runner processes, symbol construction, binding, parameter
  initialisation, warm-up, timed batches, writing records);
* timed: the seconds inside timed batches (the records' ``timed_seconds``);
* warm-up: the records' ``warmup_seconds``;
* setup: the records' ``setup_seconds`` (starting the measuring process, for the first
  configuration of each, then symbol, bind, parameters and input);
* between: the rest (sweep start, the sweep's environment capture, ending runner
  processes, writing records: wall minus the configurations' own seconds);
* processes: measuring processes started (records with a ``fresh_process_reason``).

``--profile NAME`` measures a sweep profile of the fleet file instead (``dags/config/fleet.yaml``;
its score and train sweeps one after the other, as a target runs them), e.g. ``demo``.

From the repository root:

    .venv-bench/bin/python scripts/bench_sweep_efficiency.py
    .venv-bench/bin/python scripts/bench_sweep_efficiency.py --isolation network --repeats 1
    .venv-bench/bin/python scripts/bench_sweep_efficiency.py --profile demo --isolation mode
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


def profile_documents(name: str) -> list[dict]:
    """The worker's sweep documents of a fleet-file profile, one per mode, as the targets
    build them (``gpucompare.config.fleet.sweep_config``, restated here: this script runs in
    the worker's environment, which does not have the orchestrator's library)."""
    import yaml

    fleet = yaml.safe_load((REPO / "dags" / "config" / "fleet.yaml").read_text())
    profile = fleet["profiles"][name]
    documents = []
    for mode in profile.get("modes", ["score", "train"]):
        override = dict(profile.get(mode) or {})
        matrix = {"modes": [mode], "networks": override.pop("networks", profile["networks"]),
                  "batch_sizes": override.pop("batch_sizes", profile["batch_sizes"]),
                  "dtypes": override.pop("dtypes", profile.get("dtypes", ["float32"])),
                  "devices": ["cpu"], **override}
        document = {key: profile[key] for key in ("warmup", "batches", "repeats", "timeout_s", "methodology")
                    if key in profile}
        documents.append({**document, "matrix": [matrix]})
    return documents


def flag_documents(args: argparse.Namespace) -> list[dict]:
    matrix = {"modes": ["score"], "networks": args.networks.split(","), "devices": ["cpu"],
              "batch_sizes": [int(b) for b in args.batch_sizes.split(",")]}
    return [{"warmup": args.warmup, "batches": args.batches, "repeats": args.repeats,
             "methodology": args.methodology, "matrix": [matrix]}]


def run_sweep(args: argparse.Namespace, isolation: str) -> dict:
    documents = profile_documents(args.profile) if args.profile else flag_documents(args)
    records: list[dict] = []
    wall = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for index, document in enumerate(documents):
            config = Path(tmp) / f"sweep-{index}.json"
            config.write_text(json.dumps(document))
            output = Path(tmp) / f"results-{index}.jsonl"
            command = [sys.executable, "-m", "bench_tasks", "sweep", "--config", str(config),
                       "--isolation", isolation, "--output", str(output)]
            start = time.perf_counter()
            subprocess.run(command, cwd=REPO, check=True, stderr=sys.stderr)
            wall += time.perf_counter() - start
            records += [json.loads(line) for line in output.read_text().splitlines()]
    bad = [r for r in records if r["status"] != "ok"]
    if bad:
        raise RuntimeError(f"{len(bad)} configurations failed: {bad[0]['config_id']}: {bad[0]['error']}")
    timed = sum(r["timed_seconds"] for r in records)
    warm = sum(r["warmup_seconds"] for r in records)
    setup = sum(r["setup_seconds"] for r in records)
    inside = sum((datetime.fromisoformat(r["finished_at"]) - datetime.fromisoformat(r["started_at"]))
                 .total_seconds() for r in records)
    fresh = [r["config_id"] for r in records if r.get("fresh_process_reason")]
    return {"isolation": isolation, "profile": args.profile, "methodology": records[0]["methodology"],
            "configurations": len(records), "fresh_process": fresh,
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
    parser.add_argument("--isolation", default="mode,network,config", help="policies to measure")
    parser.add_argument("--profile", help="measure this profile of dags/config/fleet.yaml instead "
                        "(its score and train sweeps), e.g. demo")
    parser.add_argument("--methodology", default="official", choices=("official", "robust"))
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()}", file=sys.stderr)
    results = [run_sweep(args, policy) for policy in args.isolation.split(",")]
    print(f"load after: {os.getloadavg()}", file=sys.stderr)
    print(f"{'isolation':<10}{'configs':>8}{'wall s':>9}{'timed s':>9}{'warm-up s':>11}{'setup s':>9}"
          f"{'other s':>9}{'between s':>11}{'timed share':>13}{'processes':>11}")
    for r in results:
        print(f"{r['isolation']:<10}{r['configurations']:>8}{r['wall_s']:>9.1f}{r['timed_s']:>9.1f}"
              f"{r['warmup_s']:>11.1f}{r['setup_s']:>9.1f}{r['other_in_configs_s']:>9.1f}"
              f"{r['between_s']:>11.1f}{r['timed_share'] * 100:>12.1f}%{len(r['fresh_process']):>11}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
