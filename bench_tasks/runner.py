"""The measuring process: runs configurations sent by the sweep, one at a time.

``python -m bench_tasks _runner`` reads one configuration (JSON) per line on standard input
and answers each with one result line (JSON) on the original standard output; everything
else that would reach standard output (MXNet, numpy) is redirected to standard error so it
cannot corrupt the protocol. It exits at end of input. The sweep (``bench_tasks.sweep``)
decides how many configurations one runner process gets and kills it at a time limit.

Fault injection (tests only): with ``BENCH_TASKS_FAULT_OOM_AFTER=N`` in its environment, a
runner that has already run N configurations answers the next one with MXNet's CPU
out-of-memory text, standing in for memory left behind by earlier configurations (which
the sweep must not believe; see ``bench_tasks.sweep``).

A result is ``{"status": "ok", "samples": [...], "timed_batches": N, "stop_rule": ...,
...phase seconds}`` or
``{"status": <oom|unsupported|batch_smaller_than_devices|error>, "error": "..."}``.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
import traceback
from typing import IO, Any

from bench_tasks.configs import Config
from bench_tasks.errors import classify_failure, summarize_error

_PR_SET_PDEATHSIG = 1


class _Session:
    """What one runner keeps between configurations: the symbol, the parameters, the kvstore."""

    def __init__(self) -> None:
        from bench_tasks.measure import ParamCache

        self.cache = ParamCache()
        self.symbols: dict[tuple[str, str], Any] = {}
        self.kvstores: dict[str, Any] = {}
        self.parameter_counts: dict[str, int | None] = {}
        self.network: tuple[str, str] | None = None
        self.configurations = 0

    def switch_to(self, network: str, dtype: str, devices: tuple[str, ...]) -> None:
        """Before a configuration: when the network changes (``--isolation mode``), drop the
        previous network's symbol and initial parameters and give GPU memory back, so the
        next network binds in a process as clean as a fresh one (short of the import)."""
        key = (network, dtype)
        if self.network is not None and self.network != key:
            import gc

            import mxnet as mx

            self.symbols.clear()
            self.cache.clear()
            gc.collect()
            mx.nd.waitall()
            for device in devices:
                if device.startswith("gpu:"):
                    # MXNet's pool keeps freed blocks; empty_cache returns them to the driver
                    mx.gpu(int(device.split(":")[1])).empty_cache()
        self.network = key

    def symbol(self, network: str, dtype: str) -> Any:
        from bench_tasks import networks

        key = (network, dtype)
        if key not in self.symbols:
            self.symbols.clear()
            self.symbols[key] = networks.get_symbol(network, dtype=dtype)
        return self.symbols[key]

    def parameter_count(self, network: str) -> int | None:
        from bench_tasks import networks

        if network not in self.parameter_counts:
            try:
                self.parameter_counts[network] = int(networks.parameter_count(network))
            except Exception:  # the count is descriptive; never fail a measurement on it
                self.parameter_counts[network] = None
        return self.parameter_counts[network]

    def kvstore(self, kind: str) -> Any:
        # A dist kvstore joins the DMLC_* cluster once per process, so it is created once.
        from bench_tasks.measure import create_kvstore

        if kind.startswith("dist"):
            if kind not in self.kvstores:
                self.kvstores[kind] = create_kvstore(kind)
            return self.kvstores[kind]
        return create_kvstore(kind)


def unsupported_here(config: Config) -> str | None:
    """Why this process cannot run ``config`` (GPU missing from MXNet's view), or None."""
    import mxnet as mx

    gpus = [int(d.split(":")[1]) for d in config.devices if d.startswith("gpu:")]
    if gpus:
        available = mx.context.num_gpus()
        missing = [i for i in gpus if i >= available]
        if missing:
            return (f"device gpu:{missing[0]} is not available: MXNet sees {available} GPU(s) "
                    "on this host")
    return None


def run_one(config: Config, session: _Session) -> dict[str, Any]:
    """Measure one configuration; a failure becomes a status, never an exception."""
    from bench_tasks import measure, networks

    started = time.perf_counter()
    session.configurations += 1
    try:
        fault_after = os.environ.get("BENCH_TASKS_FAULT_OOM_AFTER")
        if fault_after and session.configurations > int(fault_after):
            raise RuntimeError("MXNetError: Failed to allocate CPU Memory (injected fault)")
        reason = unsupported_here(config)
        if reason:
            return {"status": "unsupported", "error": reason}
        session.switch_to(config.network, config.dtype, config.devices)
        symbol = session.symbol(config.network, config.dtype)
        shape = tuple(networks.image_shape(config.network))
        common = {"warmup": config.warmup, "policy": config.stop_policy,
                  "cache": session.cache, "cache_key": (config.network, config.dtype)}
        if config.mode == "score":
            prepared_s = time.perf_counter() - started
            result = measure.score(symbol, shape, config.worker_batch, config.devices, **common)
        else:
            kvstore = session.kvstore(config.kvstore or "device")
            prepared_s = time.perf_counter() - started
            result = measure.train(symbol, shape, config.worker_batch, config.devices,
                                   kvstore=kvstore, dtype=config.dtype,
                                   train_loop=config.train_loop or "official",
                                   initializer=measure.train_initializer(config.network), **common)
    except Exception as exc:  # every failure must become a record
        text = f"{type(exc).__name__}: {exc}"
        status = classify_failure(text)
        if status == "error" and not str(exc).strip():
            text = traceback.format_exc()
        return {"status": status, "error": summarize_error(text)}
    return {
        "status": "ok",
        "samples": result.images_per_sec,
        "num_workers": result.num_workers,
        "worker_batch": result.worker_batch,
        # the symbol (built once per process) and the kvstore count as setup too
        "setup_s": prepared_s + result.setup_s,
        "warmup_s": result.warmup_s,
        "timed_s": result.timed_s,
        "timed_batches": result.timed_batches,
        "stop_rule": result.stop_rule,
        "total_s": time.perf_counter() - started,
        "parameters": session.parameter_count(config.network),
        **(result.energy.record_fields() if result.energy is not None else {}),
    }


def _protocol_stream() -> IO[str]:
    """Keep the real stdout for results and point fd 1 at stderr for everything else."""
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return protocol


def _die_with_parent() -> None:
    """Linux: be killed when the sweep process dies, so a killed sweep leaves no runner behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent died before prctl took effect
        sys.exit(1)


def main() -> int:
    _die_with_parent()
    protocol = _protocol_stream()
    session = _Session()
    from bench_tasks.sysinfo import mxnet_details

    # MXNet is imported (by mxnet_details) before "ready": the sweep learns the build's
    # features from here, so it never has to import mxnet itself.
    hello = {"event": "ready", "pid": os.getpid(), "mxnet": mxnet_details(count_gpus=True)}
    protocol.write(json.dumps(hello) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        config = Config.from_json(json.loads(line))
        result = run_one(config, session)
        protocol.write(json.dumps(result) + "\n")
        protocol.flush()
    protocol.flush()
    sys.stderr.flush()
    if session.kvstores:
        return 0  # a dist kvstore must leave its cluster properly (at interpreter exit)
    # Skip MXNet's engine teardown at interpreter exit (slow, and nothing is left to save):
    # the sweep waits for this process to end before it starts the next one.
    os._exit(0)
