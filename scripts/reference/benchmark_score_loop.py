"""The reference for the fidelity benchmark: MXNet's ``benchmark_score.py`` loop, restated.

This is a minimal, faithful re-statement (written for this project, not a copy) of the
``score()`` function of MXNet's ``example/image-classification/benchmark_score.py``
(1.x branch), so ``scripts/bench_fidelity.py`` can set our ``score`` beside it:

* ``mx.mod.Module(symbol, context=dev)`` bound with ``for_training=False``,
  ``inputs_need_grad=False`` and only the data shape;
* ``init_params(initializer=mx.init.Xavier(magnitude=2.))``;
* data ``mx.random.uniform(-1.0, 1.0, shape, ctx=dev)`` in a ``DataBatch`` with no label;
* 5 dry-run (warm-up) iterations and then ``num_batches`` timed ones in one loop; the clock
  (``time.time()``) starts when the loop reaches the first timed iteration and is read once
  after the last; every iteration runs ``forward(is_train=False)`` and then waits for each
  output (``wait_to_read``);
* images/s = num_batches × batch_size / elapsed.

The network symbol comes from ``bench_tasks.networks`` (the classic definitions), so the two
sides differ only in their measuring code. Runs in .venv-bench:

    .venv-bench/bin/python scripts/reference/benchmark_score_loop.py --network resnet-50 --batch-size 1

and prints one JSON line ``{"network", "batch_size", "num_batches", "images_per_sec"}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

import mxnet as mx  # noqa: E402

from bench_tasks import networks  # noqa: E402
from bench_tasks.constants import NETWORKS  # noqa: E402

DRY_RUN = 5  # benchmark_score.py: "use 5 iterations to warm up"


def score(network: str, dev: mx.Context, batch_size: int, num_batches: int) -> float:
    image_shape = networks.image_shape(network)
    sym = networks.get_symbol(network)
    mod = mx.mod.Module(symbol=sym, context=dev)
    mod.bind(for_training=False, inputs_need_grad=False,
             data_shapes=[("data", (batch_size, *image_shape))])
    mod.init_params(initializer=mx.init.Xavier(magnitude=2.0))
    data = [mx.random.uniform(-1.0, 1.0, shape=shape, ctx=dev) for _, shape in mod.data_shapes]
    batch = mx.io.DataBatch(data, [])
    tic = 0.0
    for i in range(DRY_RUN + num_batches):
        if i == DRY_RUN:
            tic = time.time()
        mod.forward(batch, is_train=False)
        for output in mod.get_outputs():
            output.wait_to_read()
    return num_batches * batch_size / (time.time() - tic)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", required=True, choices=NETWORKS)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--num-batches", type=int, default=10)
    args = parser.parse_args()
    speed = score(args.network, mx.cpu(), args.batch_size, args.num_batches)
    print(json.dumps({"network": args.network, "batch_size": args.batch_size,
                      "num_batches": args.num_batches, "images_per_sec": speed}))


if __name__ == "__main__":
    main()
