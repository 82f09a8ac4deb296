"""The score and train loops: MXNet's own benchmark methodology, measured the same way.

Scoring follows MXNet's ``example/image-classification/benchmark_score.py``: a ``Module``
bound for inference, parameters from ``Xavier(magnitude=2)``, one batch of random
uniform(-1, 1) input on the device, untimed warm-up batches, then timed batches each
followed by waiting for every output before the next one, and images/s = timed batches ×
batch / elapsed. The clock is read once around the timed batches, as there.

Training follows ``train_imagenet.py --benchmark 1`` (``common/fit.py`` and its
``SyntheticDataIter``): one synthetic batch (uniform(-1, 1) data, random labels) reused for
every step, fit.py's default initializer (:func:`train_initializer`), SGD with
learning rate 0.1, momentum 0.9, weight decay 1e-4 (multi-precision for float16), and a
kvstore object passed to the module, as ``fit`` does, so updates go through it even on one
device. A step is what ``Module.fit``'s loop does per batch (``train_loop="official"``, the
default): ``forward_backward``, ``update``, then ``update_metric`` with the accuracy metric
``fit`` creates (``eval_metric=['accuracy']``), which copies the outputs to the host every
batch and so synchronises with the device; and ``prepare`` of the next batch (the same batch
here). ``train_loop="unsynchronised"`` drops the metric and only waits for the step's outputs:
the update may still run while the next step is queued (a few percent faster on the CPU; not
what the published tables measured). ``fit``'s Speedometer callback (a log line every 20
batches) is left out. The last step of a repeat also waits for all pending work (the update)
before the clock is read. ``batch_size`` is the global batch; the module splits it over the
contexts (data parallel).

Beyond the originals: timed repeats after one warm-up, all on the same bound module (binding
is the expensive part, and the measurement does not change the module), ended by the
configuration's stopping rule (``bench_tasks.methodology``: fixed batch counts, a minimum
time per repeat, a target coefficient of variation); the caller takes the median and CV.

Multi-node training (``dist_sync``/``dist_device_sync``): the kvstore is created from the
``DMLC_*`` environment by ``mx.kv.create``; each worker measures its own throughput (its
batch × batches / its elapsed) and reports ``num_workers``. See ``bench_tasks.aggregate``
for how the workers' records combine into one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import mxnet as mx
import numpy as np

from bench_tasks.constants import NUM_CLASSES
from bench_tasks.energy import EnergyMeter, EnergyReading
from bench_tasks.methodology import StopPolicy

SCORE_INITIALIZER = {"magnitude": 2.0}
TRAIN_INITIALIZER = {"rnd_type": "gaussian", "factor_type": "in", "magnitude": 2.0}


def train_initializer(network: str) -> mx.init.Initializer:
    """fit.py's default initializer (``--initializer default``) for ``network``.

    ``Normal()`` for AlexNet ("will not converge using Xavier"), ``Xavier()`` for VGG, the
    gaussian Xavier otherwise: the values do not change the arithmetic, but the parity
    comparison (scripts/compare_training.py) should not have to argue that they do not.
    """
    if network == "alexnet":
        return mx.init.Normal()
    if "vgg" in network:
        return mx.init.Xavier()
    return mx.init.Xavier(**TRAIN_INITIALIZER)
SGD_PARAMS = {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.0001}


@dataclass
class Measurement:
    """Throughput of each repeat, what was timed, and where the time went (phase seconds)."""

    images_per_sec: list[float]
    setup_s: float
    warmup_s: float
    timed_s: float
    timed_batches: int = 0  # over all repeats
    stop_rule: str = "fixed_batches"
    num_workers: int = 1
    worker_batch: int = 0
    energy: EnergyReading | None = None  # of the timed repeats (bench_tasks.energy)


def contexts(devices: tuple[str, ...]) -> list[mx.Context]:
    """``('gpu:0', 'gpu:1')`` → ``[mx.gpu(0), mx.gpu(1)]``."""
    result = []
    for device in devices:
        kind, index = device.split(":")
        result.append(mx.gpu(int(index)) if kind == "gpu" else mx.cpu(int(index)))
    return result


def _host_context() -> mx.Context:
    # fit.py's SyntheticDataIter keeps its batch in pinned host memory; a CPU-only build has none.
    return mx.Context("cpu_pinned", 0) if mx.context.num_gpus() > 0 else mx.cpu()


class ParamCache:
    """Initial parameters per (mode, network, dtype), reused across batch sizes.

    Xavier initialisation of a large network costs seconds on the CPU; the values do not
    depend on the batch size, so one process measuring several batch sizes draws them once.
    Training copies them into each new module (training changes its weights). Scoring never
    changes them, so a scoring module binds with the first module of its network and devices
    as ``shared_module`` (as MXNet's BucketingModule binds one module per input shape): the
    parameter arrays are shared instead of allocated and copied again — for AlexNet 244 MB
    per configuration — and the arithmetic is the same.
    """

    def __init__(self) -> None:
        self._params: dict[tuple[str, ...], tuple[dict, dict]] = {}
        self._scoring: dict[tuple[str, ...], mx.mod.Module] = {}

    def clear(self) -> None:
        self._params.clear()
        self._scoring.clear()

    def scoring_module(self, key: tuple[str, ...]) -> mx.mod.Module | None:
        """The first scoring module bound for ``key`` (mode, network, dtype, devices), if any."""
        return self._scoring.get(key)

    def scoring_params(self, key: tuple[str, ...]) -> tuple[dict, dict] | None:
        """Parameters of a scoring module of the same network on other devices, if any."""
        other = next((m for k, m in self._scoring.items() if k[:3] == key[:3]), None)
        return None if other is None else other.get_params()

    def keep_scoring_module(self, key: tuple[str, ...], module: mx.mod.Module) -> None:
        if any(k[:3] != key[:3] for k in self._scoring):
            self._scoring.clear()  # one network at a time
        self._scoring[key] = module

    def init(self, module: mx.mod.Module, key: tuple[str, ...], initializer: mx.init.Initializer) -> None:
        cached = self._params.get(key)
        if cached is None:
            module.init_params(initializer=initializer)
            self._params.clear()  # one network at a time: do not hold two networks' weights
            self._params[key] = module.get_params()
        else:
            module.init_params(arg_params=cached[0], aux_params=cached[1], allow_missing=False)


@dataclass
class _Timing:
    samples: list[float]
    warmup_s: float
    timed_s: float
    timed_batches: int
    stop_rule: str
    energy: EnergyReading


def _timed_runs(step: Callable[[], None], finish: Callable[[], None], warmup: int,
                policy: StopPolicy, batch_images: int, devices: tuple[str, ...]) -> _Timing:
    warmup_start = time.perf_counter()
    for _ in range(warmup):
        step()
    finish()
    warmup_s = time.perf_counter() - warmup_start
    samples: list[float] = []
    timed_s = 0.0
    timed_batches = 0
    meter = EnergyMeter(devices)  # opened before the window: its set-up is not measured
    meter.start()
    while policy.more_repeats(samples):
        done = 0
        tic = time.perf_counter()
        # with a minimum time the clock is read after each step (which has waited for its
        # outputs); the repeat's own elapsed is still read once, after finish()
        while not policy.repeat_done(done, time.perf_counter() - tic):
            step()
            done += 1
        finish()
        elapsed = time.perf_counter() - tic
        timed_s += elapsed
        timed_batches += done
        samples.append(done * batch_images / elapsed)
    energy = meter.stop()
    return _Timing(samples, warmup_s, timed_s, timed_batches, policy.stop_rule(samples), energy)


def _wait_outputs(module: mx.mod.Module) -> None:
    for output in module.get_outputs():
        output.wait_to_read()


def score(symbol: mx.sym.Symbol, image_shape: tuple[int, int, int], batch_size: int,
          devices: tuple[str, ...], *, warmup: int, policy: StopPolicy,
          cache: ParamCache | None = None, cache_key: tuple[str, ...] = ()) -> Measurement:
    """Inference throughput (benchmark_score.py's loop) of ``symbol`` at ``batch_size``."""
    setup_start = time.perf_counter()
    ctxs = contexts(devices)
    cache = cache or ParamCache()
    key = ("score", *cache_key, *devices)
    shared = cache.scoring_module(key)
    module = mx.mod.Module(symbol=symbol, context=ctxs)
    data_shape = (batch_size, *image_shape)
    module.bind(for_training=False, inputs_need_grad=False, data_shapes=[("data", data_shape)],
                shared_module=shared)
    if shared is None:  # the first batch size on these devices (see ParamCache)
        drawn = cache.scoring_params(key)
        if drawn is None:
            module.init_params(initializer=mx.init.Xavier(**SCORE_INITIALIZER))
        else:
            module.init_params(arg_params=drawn[0], aux_params=drawn[1], allow_missing=False)
        cache.keep_scoring_module(key, module)
    data = [mx.random.uniform(-1.0, 1.0, shape=shape, ctx=ctxs[0]) for _, shape in module.data_shapes]
    batch = mx.io.DataBatch(data, [])
    mx.nd.waitall()
    setup_s = time.perf_counter() - setup_start

    def step() -> None:
        module.forward(batch, is_train=False)
        _wait_outputs(module)

    timing = _timed_runs(step, lambda: None, warmup, policy, batch_size, devices)
    return Measurement(timing.samples, setup_s, timing.warmup_s, timing.timed_s, timing.timed_batches,
                       timing.stop_rule, worker_batch=batch_size, energy=timing.energy)


def create_kvstore(kvstore: str) -> mx.kvstore.KVStore:
    """The kvstore as ``fit.py`` makes it; dist types connect to the DMLC_* scheduler here."""
    return mx.kv.create(kvstore)


def train(symbol: mx.sym.Symbol, image_shape: tuple[int, int, int], batch_size: int,
          devices: tuple[str, ...], *, kvstore: mx.kvstore.KVStore, dtype: str, warmup: int,
          policy: StopPolicy, train_loop: str = "official", cache: ParamCache | None = None,
          cache_key: tuple[str, ...] = (), initializer: mx.init.Initializer | None = None) -> Measurement:
    """Training throughput (train_imagenet.py --benchmark 1) of ``symbol``.

    ``batch_size`` is this process's batch over all of ``devices``; with a dist kvstore each
    worker runs this with its own batch and the global batch is that × ``num_workers``.
    """
    setup_start = time.perf_counter()
    ctxs = contexts(devices)
    module = mx.mod.Module(symbol=symbol, context=ctxs)
    data_shape = (batch_size, *image_shape)
    module.bind(data_shapes=[mx.io.DataDesc("data", data_shape, np.float32)],
                label_shapes=[mx.io.DataDesc("softmax_label", (batch_size,), np.float32)])
    (cache or ParamCache()).init(module, ("train", *cache_key),
                                 initializer or mx.init.Xavier(**TRAIN_INITIALIZER))
    optimizer_params = dict(SGD_PARAMS)
    if dtype == "float16":
        optimizer_params["multi_precision"] = True
    module.init_optimizer(kvstore=kvstore, optimizer="sgd", optimizer_params=optimizer_params)
    host = _host_context()
    data = mx.nd.array(np.random.uniform(-1, 1, data_shape), dtype=np.float32, ctx=host)
    label = mx.nd.array(np.random.randint(0, NUM_CLASSES, (batch_size,)), dtype=np.float32, ctx=host)
    batch = mx.io.DataBatch(data=[data], label=[label], pad=0)
    mx.nd.waitall()
    setup_s = time.perf_counter() - setup_start

    if train_loop == "official":
        metric = mx.metric.create(["accuracy"])  # as Module.fit turns fit.py's ['accuracy'] into one

        def step() -> None:
            module.forward_backward(batch)
            module.update()
            module.update_metric(metric, batch.label)
            module.prepare(batch)
    elif train_loop == "unsynchronised":
        def step() -> None:
            module.forward_backward(batch)
            module.update()
            _wait_outputs(module)
    else:
        raise ValueError(f"train_loop: {train_loop!r} is not one of official, unsynchronised")

    timing = _timed_runs(step, mx.nd.waitall, warmup, policy, batch_size, devices)
    return Measurement(timing.samples, setup_s, timing.warmup_s, timing.timed_s, timing.timed_batches,
                       timing.stop_rule, num_workers=kvstore.num_workers, worker_batch=batch_size,
                       energy=timing.energy)
