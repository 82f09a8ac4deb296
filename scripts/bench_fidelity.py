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
    .venv-bench/bin/python scripts/bench_fidelity.py --original-dir /tmp/mxnet-example

``--original-dir`` adds MXNet's own ``benchmark_score.py`` (unmodified, with the
``symbols/alexnet.py``, ``symbols/resnet.py`` and ``common/`` it imports, saved outside this
repository from apache/mxnet's ``example/image-classification``) as a third side: its
``score()`` in a fresh process over MXNet's own symbol definitions.
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
    from bench_tasks.methodology import StopPolicy

    def reference(network: str, batch: int, batches: int) -> float:
        return reference_score(network, mx.cpu(), batch, batches)

    def ours(network: str, batch: int, batches: int) -> float:
        symbol = networks.get_symbol(network)
        result = measure.score(symbol, networks.image_shape(network), batch, ("cpu:0",),
                               warmup=5, policy=StopPolicy(batches=batches, repeats=1))
        return result.images_per_sec[0]

    return reference, ours


def original_runner(directory: Path):
    """MXNet's own benchmark_score.py, unmodified, saved outside the repository with the
    symbols it imports (``symbols/alexnet.py``, ``symbols/resnet.py``, ``common/``): its
    ``score()`` is called in a fresh process, as its ``__main__`` would."""
    def run(network: str, batch: int, batches: int) -> float:
        driver = ("import json, sys; sys.path.insert(0, sys.argv[1]); import mxnet as mx; "
                  "import benchmark_score as b; print(json.dumps(b.score(network=sys.argv[2], "
                  "dev=mx.cpu(), batch_size=int(sys.argv[3]), num_batches=int(sys.argv[4]))))")
        command = [sys.executable, "-c", driver, str(directory), network, str(batch), str(batches)]
        out = subprocess.run(command, cwd=directory, capture_output=True, text=True, check=True)
        return float(json.loads(out.stdout.strip().splitlines()[-1]))
    return run


def original_inprocess(directory: Path):
    """MXNet's own benchmark_score.score(), imported into this process."""
    sys.path.insert(0, str(directory))
    import benchmark_score
    import mxnet as mx

    def run(network: str, batch: int, batches: int) -> float:
        return benchmark_score.score(network=network, dev=mx.cpu(), batch_size=batch, num_batches=batches)
    return run


def compare(network: str, batch: int, batches: int, rounds: int, mode: str,
            original: Path | None) -> dict:
    run_ref, run_our = inprocess_runners() if mode == "inprocess" else (run_reference, run_ours)
    sides = {"reference": run_ref, "ours": run_our}
    if original is not None:
        sides["original"] = (original_inprocess(original) if mode == "inprocess"
                             else original_runner(original))
    figures: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for round_index in range(rounds):
        shift = round_index % len(names)  # rotate who goes first, so drifting load is shared
        for name in names[shift:] + names[:shift]:
            figures[name].append(sides[name](network, batch, batches))
        print(f"  {network} b{batch} round {round_index + 1}/{rounds}: "
              + ", ".join(f"{n} {figures[n][-1]:.2f}" for n in names) + " img/s",
              file=sys.stderr, flush=True)
    result = {"network": network, "batch_size": batch, "rounds": rounds, "mode": mode}
    for name in names:
        result[f"{name}_median"] = statistics.median(figures[name])
        result[f"{name}_range"] = [min(figures[name]), max(figures[name])]
    for name in names[:1] + names[2:]:  # ours against each reference
        base = result[f"{name}_median"]
        result[f"vs_{name}_pct"] = (result["ours_median"] - base) / base * 100
        result[f"vs_{name}_paired_pct"] = (statistics.median(
            o / r for o, r in zip(figures["ours"], figures[name], strict=True)) - 1) * 100
    result["samples"] = figures
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description="our score vs benchmark_score.py's loop (CPU)")
    parser.add_argument("--pairs", default="resnet-50:1,resnet-50:8,alexnet:1,alexnet:8",
                        help="network:batch list")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batches", type=int, default=10, help="timed batches (benchmark_score: 10)")
    parser.add_argument("--mode", choices=("process", "inprocess"), default="process")
    parser.add_argument("--original-dir", type=Path,
                        help="directory holding MXNet's own benchmark_score.py with its symbols/ and "
                             "common/ (saved outside the repository); adds it as a third side")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()}", file=sys.stderr)
    results = []
    for pair in args.pairs.split(","):
        network, batch = pair.rsplit(":", 1)
        results.append(compare(network, int(batch), args.batches, args.rounds, args.mode,
                               args.original_dir))
    print(f"load after: {os.getloadavg()}", file=sys.stderr)
    print(f"mode {args.mode}, {args.rounds} rounds, {args.batches} timed batches after 5 warm-up; "
          "diff = ours vs reference medians, paired = median of per-round ratios")
    for r in results:
        refs = [k[3:-4] for k in r if k.startswith("vs_") and k.endswith("_pct") and "paired" not in k]
        line = f"{r['network']:<10} b{r['batch_size']:<3} ours {r['ours_median']:8.2f} img/s " \
               f"({r['ours_range'][0]:.2f}-{r['ours_range'][1]:.2f})"
        for ref in refs:
            line += (f" | {ref} {r[ref + '_median']:8.2f} ({r[ref + '_range'][0]:.2f}-"
                     f"{r[ref + '_range'][1]:.2f}) diff {r['vs_' + ref + '_pct']:+6.2f}% "
                     f"paired {r['vs_' + ref + '_paired_pct']:+6.2f}%")
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
