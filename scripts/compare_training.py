"""Training parity: our ``train`` beside MXNet's own ``Module.fit`` loop as train_imagenet.py drives it.

``train_imagenet.py --benchmark 1`` (apache/mxnet ``example/image-classification``) hands
``common/fit.py``'s ``fit()`` a ``SyntheticDataIter`` (one uniform(-1, 1) batch with random
labels, returned ``max_iter`` times) and ``fit()`` calls the installed mxnet's
``Module.fit`` with: a kvstore object (``--kv-store device``), ``optimizer='sgd'`` with
``learning_rate`` 0.1, ``momentum`` 0.9, ``wd`` 1e-4, ``multi_precision`` and no learning-rate
schedule, ``eval_metric=['accuracy']``, fit.py's default initializer (``Normal()`` for
AlexNet, ``Xavier(rnd_type='gaussian', factor_type='in', magnitude=2)`` otherwise), a
``Speedometer(batch, 20)`` batch-end callback and ``allow_missing=True``.

The MXNet side here does exactly that in a fresh process: the installed package's
``Module.fit`` over a synthetic iterator with those semantics (written here, not copied), on
the same symbol as ours (``bench_tasks.networks``), so the comparison is of the loops. It is
timed by one more batch-end callback that waits for all pending work and reads the clock at
the end of the last warm-up batch and of the last timed batch: the same window our repeat
times (``warmup`` batches, wait, ``batches`` timed batches, wait).

Our side: ``python -m bench_tasks train --warmup W --batches K --repeats 1`` in a fresh
process (``--train-loop official``, the default, and optionally ``unsynchronised`` as a third
side). ``--mode inprocess`` alternates ``Module.fit`` and ``bench_tasks.measure.train`` (each
on a fresh module) inside one process instead, which removes process start-up and
scheduling noise on a busy host. Pairs are interleaved, alternating which side goes first,
so load that drifts on this shared host falls on both; the figure that matters is the
median of the per-pair ratios.

From the repository root (CPU):

    .venv-bench/bin/python scripts/compare_training.py                       # alexnet b8, resnet-50 b2
    .venv-bench/bin/python scripts/compare_training.py --pairs alexnet:16 --rounds 10
    .venv-bench/bin/python scripts/compare_training.py --loops official,unsynchronised
    .venv-bench/bin/python scripts/compare_training.py --mode inprocess --rounds 12
    .venv-bench/bin/python scripts/compare_training.py --statistic median-batch --batches 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _synthetic_batches(shape: tuple[int, ...], count: int):  # noqa: ANN202 - an mx.io.DataIter
    """train_imagenet.py --benchmark 1's data: one uniform(-1, 1) batch with random labels,
    returned ``count`` times."""
    import mxnet as mx
    import numpy as np

    from bench_tasks.constants import NUM_CLASSES

    class SyntheticBatches(mx.io.DataIter):
        def __init__(self) -> None:
            super().__init__(shape[0])
            self.count, self.done = count, 0
            # fit.py keeps its batch in pinned host memory; a CPU-only build has none
            host = mx.Context("cpu_pinned", 0) if mx.context.num_gpus() > 0 else mx.cpu()
            self.data = mx.nd.array(np.random.uniform(-1, 1, shape), dtype=np.float32, ctx=host)
            self.label = mx.nd.array(np.random.randint(0, NUM_CLASSES, (shape[0],)), dtype=np.float32,
                                     ctx=host)

        @property
        def provide_data(self) -> list:
            return [mx.io.DataDesc("data", self.data.shape, np.float32)]

        @property
        def provide_label(self) -> list:
            return [mx.io.DataDesc("softmax_label", (self.batch_size,), np.float32)]

        def reset(self) -> None:
            self.done = 0

        def next(self) -> mx.io.DataBatch:
            if self.done >= self.count:
                raise StopIteration
            self.done += 1
            return mx.io.DataBatch(data=(self.data,), label=(self.label,), pad=0, index=None,
                                   provide_data=self.provide_data, provide_label=self.provide_label)

    return SyntheticBatches()


def _fit_like_train_imagenet(network: str, batch: int, train: object, window: object) -> None:
    """One epoch of Module.fit with the arguments common/fit.py passes (see the module doc)."""
    import mxnet as mx

    from bench_tasks import networks

    initializer = (mx.init.Normal() if network == "alexnet" else mx.init.Xavier() if "vgg" in network
                   else mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2))
    module = mx.mod.Module(symbol=networks.get_symbol(network), context=mx.cpu())
    module.fit(train, begin_epoch=0, num_epoch=1, eval_data=None, eval_metric=["accuracy"],
               kvstore=mx.kvstore.create("device"), optimizer="sgd",
               optimizer_params={"learning_rate": 0.1, "wd": 0.0001, "lr_scheduler": None,
                                 "multi_precision": True, "momentum": 0.9},
               initializer=initializer, arg_params=None, aux_params=None,
               batch_end_callback=[mx.callback.Speedometer(batch, 20), window],
               epoch_end_callback=None, allow_missing=True)


def fit_side(network: str, batch: int, warmup: int, batches: int, per_batch: bool = False) -> float:
    """Images/s of MXNet's Module.fit over the timed window (runs in this process); with
    ``per_batch`` the median over the timed batches, each ended by waiting for all work."""
    sys.path.insert(0, str(REPO))
    import mxnet as mx

    from bench_tasks import networks

    clock: dict[int, float] = {}

    def window(params: mx.model.BatchEndParam) -> None:
        if params.nbatch in (warmup - 1, warmup + batches - 1) or (per_batch and params.nbatch >= warmup):
            mx.nd.waitall()
            clock[params.nbatch] = time.perf_counter()

    shape = (batch, *networks.image_shape(network))
    _fit_like_train_imagenet(network, batch, _synthetic_batches(shape, warmup + batches), window)
    start = clock.get(warmup - 1)
    if warmup == 0 or start is None:
        raise SystemExit("--warmup must be >= 1 (the window starts at the end of the last warm-up batch)")
    if per_batch:
        ends = [clock[n] for n in range(warmup - 1, warmup + batches)]
        return statistics.median(batch / (b - a) for a, b in zip(ends[:-1], ends[1:], strict=True))
    return batches * batch / (clock[warmup + batches - 1] - start)


def run_fit(network: str, batch: int, warmup: int, batches: int, per_batch: bool) -> float:
    out = subprocess.run([sys.executable, __file__, "_fit", network, str(batch), str(warmup), str(batches),
                          str(int(per_batch))], cwd=REPO, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def run_ours(network: str, batch: int, warmup: int, batches: int, loop: str, per_batch: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "r.jsonl"
        subprocess.run([sys.executable, "-m", "bench_tasks", "train", "--networks", network,
                        "--batch-sizes", str(batch), "--devices", "cpu", "--kvstore", "device",
                        "--warmup", str(warmup),
                        # per batch: one-batch repeats, whose median is the record's images/s
                        *(["--batches", "1", "--repeats", str(batches)] if per_batch
                          else ["--batches", str(batches), "--repeats", "1"]),
                        "--train-loop", loop, "--output", str(output)],
                       cwd=REPO, capture_output=True, text=True, check=True)
        record = json.loads(output.read_text().splitlines()[0])
    if record["status"] != "ok":
        raise RuntimeError(f"{network} b{batch}: {record['status']}: {record['error']}")
    return record["images_per_sec"]


def ours_inprocess(network: str, batch: int, warmup: int, batches: int, loop: str, per_batch: bool) -> float:
    """Our training loop in this process, on a fresh module, as the runner calls it."""
    sys.path.insert(0, str(REPO))
    from bench_tasks import measure, networks
    from bench_tasks.methodology import StopPolicy

    result = measure.train(networks.get_symbol(network), networks.image_shape(network), batch, ("cpu:0",),
                           kvstore=measure.create_kvstore("device"), dtype="float32", warmup=warmup,
                           policy=StopPolicy(batches=1, repeats=batches) if per_batch
                           else StopPolicy(batches=batches, repeats=1), train_loop=loop,
                           initializer=measure.train_initializer(network))
    return statistics.median(result.images_per_sec)


def compare(network: str, batch: int, args: argparse.Namespace) -> dict:
    per_batch = args.statistic == "median-batch"
    if args.mode == "inprocess":
        sides = {"fit": lambda: fit_side(network, batch, args.warmup, args.batches, per_batch)}
        for loop in args.loops.split(","):
            sides[f"ours_{loop}"] = (lambda loop=loop: ours_inprocess(network, batch, args.warmup,
                                                                      args.batches, loop, per_batch))
    else:
        sides = {"fit": lambda: run_fit(network, batch, args.warmup, args.batches, per_batch)}
        for loop in args.loops.split(","):
            sides[f"ours_{loop}"] = (lambda loop=loop: run_ours(network, batch, args.warmup, args.batches,
                                                                loop, per_batch))
    names = list(sides)
    figures: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(args.rounds):
        shift = round_index % len(names)  # rotate who goes first
        for name in names[shift:] + names[:shift]:
            figures[name].append(sides[name]())
        print(f"  {network} b{batch} pair {round_index + 1}/{args.rounds}: "
              + ", ".join(f"{n} {figures[n][-1]:.3f}" for n in names)
              + f" img/s, load {os.getloadavg()[0]:.1f}",
              file=sys.stderr, flush=True)
    result: dict = {"network": network, "batch_size": batch, "pairs": args.rounds, "samples": figures}
    for name in names:
        result[f"{name}_median"] = statistics.median(figures[name])
    for name in names[1:]:
        ratios = sorted((o / f - 1) * 100 for o, f in zip(figures[name], figures["fit"], strict=True))
        result[f"{name}_vs_fit_pct"] = {
            "median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1],
            # the middle half of the pairs: how far one pair's verdict can be trusted here
            "q1": ratios[len(ratios) // 4], "q3": ratios[(3 * len(ratios)) // 4],
        }
    return result


def main() -> None:
    if len(sys.argv) == 7 and sys.argv[1] == "_fit":
        network, batch, warmup, batches, per_batch = sys.argv[2], *map(int, sys.argv[3:])
        print(fit_side(network, batch, warmup, batches, bool(per_batch)), flush=True)
        return
    parser = argparse.ArgumentParser(description="our train vs MXNet's Module.fit (train_imagenet.py "
                                                 "--benchmark 1) on the CPU, interleaved pairs")
    parser.add_argument("--pairs", default="alexnet:8,resnet-50:2", help="network:batch list")
    parser.add_argument("--rounds", type=int, default=8, help="pairs per network:batch")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batches", type=int, default=10, help="timed batches per side and pair")
    parser.add_argument("--loops", default="official", help="our training loops to compare: "
                        "official and/or unsynchronised")
    parser.add_argument("--mode", choices=("process", "inprocess"), default="process",
                        help="process: each side in a fresh process (as users run them); inprocess: "
                             "both loops alternating in this process, without process start-up noise")
    parser.add_argument("--statistic", choices=("window", "median-batch"), default="window",
                        help="window: images/s over the timed batches (what the worker records); "
                             "median-batch: each timed batch ended by waiting for all work, the median "
                             "of their images/s (robust to load spikes of a busy host)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()}", file=sys.stderr)
    results = [compare(network, int(batch), args)
               for network, batch in (pair.rsplit(":", 1) for pair in args.pairs.split(","))]
    print(f"load after: {os.getloadavg()}", file=sys.stderr)
    print(f"mode {args.mode}, statistic {args.statistic}, {args.rounds} interleaved pairs, "
          f"{args.warmup} warm-up + {args.batches} timed batches per side; "
          "ours vs fit: median of per-pair differences [middle half; min..max]")
    for r in results:
        line = f"{r['network']:<10} b{r['batch_size']:<3} fit {r['fit_median']:8.3f} img/s"
        for key, spread in ((k, v) for k, v in r.items() if k.endswith("_vs_fit_pct")):
            name = key.removesuffix("_vs_fit_pct")
            line += (f" | {name} {r[name + '_median']:8.3f} {spread['median']:+6.2f}% "
                     f"[{spread['q1']:+.1f}..{spread['q3']:+.1f}; "
                     f"{spread['min']:+.1f}..{spread['max']:+.1f}]")
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
