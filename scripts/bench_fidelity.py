"""Measurement fidelity: our ``score`` beside MXNet's benchmark_score.py methodology.

For each (network, batch size) the two are run in turn, each in its own fresh process, for
``--rounds`` rounds, alternating which goes first (A B, B A, ...) so drifting machine load
falls on both equally:

* reference: ``scripts/reference/benchmark_score_loop.py`` (benchmark_score.py's loop:
  5 warm-up batches, ``--batches`` timed ones, one figure);
* ours: ``python -m bench_tasks score --warmup 5 --batches N --repeats 1`` (one figure).

It prints, per pair, the median images/s of each side, the spread (min–max), the
difference of the medians and the median of the per-round ratios ours/reference (paired,
so robust to load that drifts between rounds) in percent; the goal is |difference| ≤ 2 %.

``--mode inprocess`` alternates the two loops inside one process instead (same module
code: ``bench_tasks.measure.score`` against the reference ``score``), which removes
process start-up and scheduling noise from the comparison on a busy host; the default
``--mode process`` is how users run them. CPU only (device ``cpu``), from the repository
root:

    .venv-bench/bin/python scripts/bench_fidelity.py                # resnet-50 and alexnet, b 1 and 8
    .venv-bench/bin/python scripts/bench_fidelity.py --mode inprocess --rounds 20
    .venv-bench/bin/python scripts/bench_fidelity.py --pairs alexnet:1 --rounds 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "scripts" / "reference" / "benchmark_score_loop.py"


def run_reference(network: str, batch: int, batches: int) -> float:
    out = subprocess.run([sys.executable, str(REFERENCE), "--network", network, "--batch-size",
                          str(batch), "--num-batches", str(batches)],
                         cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["images_per_sec"]


def run_ours(network: str, batch: int, batches: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "r.jsonl"
        subprocess.run([sys.executable, "-m", "bench_tasks", "score", "--networks", network,
                        "--batch-sizes", str(batch), "--devices", "cpu", "--warmup", "5",
                        "--batches", str(batches), "--repeats", "1", "--output", str(output)],
                       cwd=REPO, capture_output=True, text=True, check=True)
        record = json.loads(output.read_text().splitlines()[0])
    if record["status"] != "ok":
        raise RuntimeError(f"{network} b{batch}: {record['status']}: {record['error']}")
    return record["images_per_sec"]


def inprocess_runners() -> tuple:
    """The two loops as functions of this process (imports mxnet here)."""
    sys.path.insert(0, str(REFERENCE.parent))
    sys.path.insert(0, str(REPO))
    import mxnet as mx
    from benchmark_score_loop import score as reference_score

    from bench_tasks import measure, networks

    def reference(network: str, batch: int, batches: int) -> float:
        return reference_score(network, mx.cpu(), batch, batches)

    def ours(network: str, batch: int, batches: int) -> float:
        symbol = networks.get_symbol(network)
        result = measure.score(symbol, networks.image_shape(network), batch, ("cpu:0",),
                               warmup=5, batches=batches, repeats=1)
        return result.images_per_sec[0]

    return reference, ours


def compare(network: str, batch: int, batches: int, rounds: int, mode: str) -> dict:
    run_ref, run_our = inprocess_runners() if mode == "inprocess" else (run_reference, run_ours)
    reference, ours = [], []
    for round_index in range(rounds):
        order = (("ref", run_ref), ("ours", run_our))
        for side, run in (order if round_index % 2 == 0 else order[::-1]):
            (reference if side == "ref" else ours).append(run(network, batch, batches))
        print(f"  {network} b{batch} round {round_index + 1}/{rounds}: reference {reference[-1]:.2f}, "
              f"ours {ours[-1]:.2f} img/s", file=sys.stderr, flush=True)
    ref_median, our_median = statistics.median(reference), statistics.median(ours)
    return {"network": network, "batch_size": batch, "rounds": rounds,
            "reference_median": ref_median, "ours_median": our_median,
            "reference_range": [min(reference), max(reference)], "ours_range": [min(ours), max(ours)],
            "difference_pct": (our_median - ref_median) / ref_median * 100,
            "paired_ratio_pct": (statistics.median(o / r for o, r in zip(ours, reference, strict=True))
                                 - 1) * 100, "mode": mode}


def main() -> None:
    parser = argparse.ArgumentParser(description="our score vs benchmark_score.py's loop (CPU)")
    parser.add_argument("--pairs", default="resnet-50:1,resnet-50:8,alexnet:1,alexnet:8",
                        help="network:batch list")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batches", type=int, default=10, help="timed batches (benchmark_score: 10)")
    parser.add_argument("--mode", choices=("process", "inprocess"), default="process")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()}", file=sys.stderr)
    results = []
    for pair in args.pairs.split(","):
        network, batch = pair.rsplit(":", 1)
        results.append(compare(network, int(batch), args.batches, args.rounds, args.mode))
    print(f"load after: {os.getloadavg()}", file=sys.stderr)
    print(f"mode {args.mode}, {args.rounds} rounds, {args.batches} timed batches after 5 warm-up")
    print(f"{'network':<12}{'batch':>6}{'reference img/s':>17}{'ours img/s':>12}{'diff':>9}{'paired':>9}"
          f"   ranges (min-max) reference | ours")
    for r in results:
        print(f"{r['network']:<12}{r['batch_size']:>6}{r['reference_median']:>17.2f}"
              f"{r['ours_median']:>12.2f}{r['difference_pct']:>+8.2f}%{r['paired_ratio_pct']:>+8.2f}%   "
              f"{r['reference_range'][0]:.2f}-{r['reference_range'][1]:.2f} | "
              f"{r['ours_range'][0]:.2f}-{r['ours_range'][1]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
