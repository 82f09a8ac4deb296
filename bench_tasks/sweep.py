"""Run a list of configurations, isolated, with time limits, writing one record per cell.

Isolation. Measuring happens in separate runner processes (``bench_tasks.runner``), never
in this one, so a crash, a hang or an out-of-memory error cannot spoil what follows: MXNet
keeps GPU memory in its pool after an out-of-memory error (apache/mxnet#17126), and a
process that hit one is not trusted again. Three policies (``--isolation``):

* ``mode`` (default): one runner per (mode, dtype), reused across networks too (the import
  is paid once per mode); when the network changes the runner drops the previous network's
  symbol and parameters and empties MXNet's GPU memory pool (``Context.empty_cache``).
  Replaced after any failure. Measured here it raises the timed share of a 3 × 3 scoring
  sweep from about 70 % (``network``) to 75 % or more.
* ``network``: one runner per (mode, network, dtype) series, reused across its
  batch sizes and device lists, and replaced after *any* configuration that did not end
  ``ok``. The series shares the MXNet import (~1-2 s), the symbol and the initial parameter
  values (Xavier initialisation of VGG-16 alone takes seconds on a CPU); each configuration
  still binds its own module, so its memory and cuDNN autotuning are its own.
* ``config``: a fresh runner per configuration (strictest, slower: the import and the
  parameter initialisation are paid every time).

An out-of-memory error in a runner that had already measured something is not believed: the
configuration runs again, once, in a fresh runner (with its full time limit), and that
attempt decides the record, so memory left over by earlier configurations cannot turn a cell
into a false ``oom``. Before that can happen on a GPU, the free-memory check
(``bench_tasks.gpumemory``) replaces a runner whose device has too little free memory left
for the next configuration, or lost more than half of it since the runner started. Each
record says why its configuration ran in a fresh process (``fresh_process_reason``), or null
when it shared one with earlier configurations.

The sweep-efficiency benchmark (``scripts/bench_sweep_efficiency.py``) measures the policies.

Time limits. Each configuration has ``timeout_s`` from the moment it is handed to a runner
(for a new runner: from its start, so a hung import counts too). At the limit the runner's
process group is killed and the cell gets a ``timeout`` record; the next configuration
starts a new runner. Starting, talking to and killing one runner is
``bench_tasks.runner_process``; which runner a configuration gets is decided here.

Statuses decided before measuring. Without any process: batch smaller than the number of
devices (MXNet's "Too many slices"), float16 on CPU devices (MXNet 1.x has no float16 GEMM
on the CPU: "FP16 gemm on cpu not implemented!"). From the build details the runner reports
when it is ready (this process never imports mxnet, so it starts fast): GPU devices on a
build without CUDA or beyond the GPUs MXNet sees, ``nccl`` without NCCL or on CPU devices,
dist kvstores without distributed-kvstore support; the runner is kept for the next
configuration. Everything else is decided by running, and classified from MXNet's message
by ``bench_tasks.errors``.

GPUs ours alone. Before the first configuration (for every GPU device of the sweep), and again
before each configuration on GPUs while none of its measuring processes lives, the compute
processes on its devices are listed (``bench_tasks.exclusive``): one not the worker's own ends
the configuration ``gpu_busy`` without running; every record says ``gpu_exclusive``.

Output. One JSON Lines record per configuration, validated by ``bench_tasks.record``,
appended and flushed (and fsync'ed) as soon as the configuration finishes, so a sweep
killed halfway keeps what it did. Progress goes to standard error, one line per
configuration with the elapsed time and an estimate of the time left.

Multi-node runs (``dist_sync``, ``dist_device_sync``). The orchestrator starts one worker
process per host with the ``DMLC_*`` environment; each runs exactly one configuration here
(a dist kvstore joins its cluster once per process). Each worker writes a record whose
``batch_size``/``gpu_count``/``num_nodes`` describe the whole run and whose
``images_per_sec`` and ``per_worker_images_per_sec`` hold its own throughput;
``bench_tasks.aggregate.merge_worker_records`` combines the workers' records into the run's.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from bench_tasks import runtime_check
from bench_tasks.configs import Config, ConfigError
from bench_tasks.constants import ISOLATION_POLICIES, WORKER_RUNTIME_ENV
from bench_tasks.errors import classify_failure, summarize_error
from bench_tasks.exclusive import GpuCheck, GpuExclusivity, Lister, list_compute_processes
from bench_tasks.gpumemory import GpuMemoryGuard, MemoryProbe, nvidia_smi_probe
from bench_tasks.methodology import coefficient_of_variation
from bench_tasks.record import validate_record
from bench_tasks.record_fields import RecordError, empty_record
from bench_tasks.runner_process import RunnerGone, RunnerProcess, RunnerTimeout
from bench_tasks.sysinfo import SystemInfo


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def new_run_id() -> str:
    return f"run-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


# --------------------------------------------------------------------------- decided before running

def precheck_static(config: Config) -> tuple[str, str] | None:
    """(status, message) for a configuration that cannot run on any MXNet 1.x host, or None."""
    if config.worker_batch < len(config.devices):
        return ("batch_smaller_than_devices",
                f"batch {config.worker_batch} is smaller than the {len(config.devices)} devices "
                f"{','.join(config.devices)} (MXNet: Too many slices)")
    if config.device_kind == "cpu" and config.dtype == "float16":
        return ("unsupported", "float16 on CPU devices: MXNet 1.x has no float16 GEMM on the CPU "
                "(FP16 gemm on cpu not implemented!)")
    return None


def precheck_build(config: Config, info: SystemInfo) -> tuple[str, str] | None:
    """(status, message) for a configuration this MXNet build or host cannot run, or None.

    Needs MXNet's details (``info.mxnet_details_known``), which the first runner reports.
    """
    features = set(info.mxnet_features)
    if config.device_kind == "gpu":
        if "CUDA" not in features:
            return ("unsupported", f"devices {','.join(config.devices)}: this MXNet build has no "
                    "CUDA (install mxnet-cu112 from bench_tasks/requirements-gpu.txt)")
        visible = info.mxnet_num_gpus or 0
        missing = [d for d in config.devices if int(d.split(":")[1]) >= visible]
        if missing:
            return ("unsupported", f"device {missing[0]} is not available: {visible} GPU(s) visible")
    if config.kvstore == "nccl" and (config.device_kind != "gpu" or "NCCL" not in features):
        return ("unsupported", "kvstore nccl needs GPU devices and an MXNet build with NCCL")
    if config.distributed and "DIST_KVSTORE" not in features:
        return ("unsupported", f"kvstore {config.kvstore}: this MXNet build has no distributed kvstore")
    return None


# --------------------------------------------------------------------------- records

@dataclass
class Outcome:
    """How one configuration ended: a status and either the runner's result or an error."""

    status: str
    error: str | None = None
    result: dict[str, Any] | None = None
    started_at: str = ""
    finished_at: str = ""
    wall_s: float = 0.0
    process_start_s: float = 0.0  # starting the measuring process, when this configuration did
    fresh_process_reason: str | None = None  # why it ran in a new process (record field)
    gpu: GpuCheck = field(default_factory=lambda: GpuCheck(None, "not checked"))  # gpu_exclusive


def _dmlc_num_workers() -> int:
    try:
        return max(1, int(os.environ.get("DMLC_NUM_WORKER", "1")))
    except ValueError:
        return 1


def _seconds(value: Any, extra: float = 0.0) -> float | None:
    # not rounded: timed_seconds is checked against repeats × min_time_s
    return None if value is None else float(value) + extra


def build_record(config: Config, outcome: Outcome, info: SystemInfo, run_id: str,
                 image_shape: str) -> dict[str, Any]:
    """The validated record of one configuration."""
    result = outcome.result or {}
    workers = int(result.get("num_workers") or (_dmlc_num_workers() if config.distributed else 1))
    worker_batch = config.worker_batch
    ok = outcome.status == "ok"
    samples = [float(s) for s in result.get("samples", [])] if ok else []
    median = statistics.median(samples) if samples else None
    cv = coefficient_of_variation(samples)
    per_device = worker_batch // len(config.devices) if worker_batch % len(config.devices) == 0 else None
    record = empty_record(
        run_id=run_id,
        config_id=config.config_id,
        mode=config.mode,
        network=config.network,
        image_shape=image_shape,
        dtype=config.dtype,
        batch_size=worker_batch * workers,
        per_device_batch=per_device,
        devices=list(config.devices),
        device_kind=config.device_kind,
        gpu_count=len(config.devices) * workers,
        num_nodes=workers,
        kvstore=config.kvstore,
        scaling=config.scaling,
        parameters=result.get("parameters"),
        warmup_batches=config.warmup,
        # what was actually timed; a configuration that did not run timed nothing
        timed_batches=int(result.get("timed_batches", 0)) if ok else 0,
        repeats=len(samples) if ok else config.repeats,
        methodology=config.methodology,
        min_time_s=config.min_time_s,
        target_cv=config.target_cv,
        max_repeats=config.max_repeats,
        stop_rule=result.get("stop_rule") if ok else None,
        train_loop=config.train_loop,
        fresh_process_reason=outcome.fresh_process_reason,
        setup_seconds=_seconds(result.get("setup_s"), outcome.process_start_s) if ok else None,
        warmup_seconds=_seconds(result.get("warmup_s")) if ok else None,
        timed_seconds=_seconds(result.get("timed_s")) if ok else None,
        energy_joules=result.get("energy_joules") if ok else None,
        energy_method=result.get("energy_method") if ok else None,
        avg_power_watts=result.get("avg_power_watts") if ok else None,
        images_per_sec=median,
        images_per_sec_samples=samples,
        per_worker_images_per_sec=[median] if (config.distributed and median is not None) else [],
        cv=cv,
        status=outcome.status,
        error=outcome.error,
        started_at=outcome.started_at,
        finished_at=outcome.finished_at,
        **outcome.gpu.record_fields(),
        **info.record_fields(config.devices),
    )
    return validate_record(record)


class RecordWriter:
    """Appends validated records to a JSON Lines file (or stdout), durable line by line."""

    def __init__(self, output: str) -> None:
        self._to_stdout = output == "-"
        if self._to_stdout:
            self._stream: IO[str] = sys.stdout
        else:
            try:
                Path(output).parent.mkdir(parents=True, exist_ok=True)
                self._stream = open(output, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
            except OSError as exc:
                raise ConfigError("--output", f"cannot append to {output}: {exc.strerror}") from exc

    def write(self, record: dict[str, Any]) -> None:
        self._stream.write(json.dumps(validate_record(record), sort_keys=True) + "\n")
        self._stream.flush()
        if not self._to_stdout:
            try:
                os.fsync(self._stream.fileno())
            except OSError:  # not a regular file (a pipe, /dev/null): flushing is all there is
                pass

    def close(self) -> None:
        if not self._to_stdout:
            self._stream.close()


# --------------------------------------------------------------------------- the sweep

def _format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _describe(config: Config) -> str:
    kv = f" kv={config.kvstore}" if config.kvstore else ""
    return (f"{config.mode} {config.network} {config.dtype} b={config.batch_size} "
            f"{','.join(config.devices)}{kv}")


class Sweep:
    """Runs configurations one after another and writes a record for each."""

    def __init__(self, configs: Sequence[Config], *, info: SystemInfo, run_id: str,
                 writer: RecordWriter, isolation: str = "mode",
                 image_shape_of: Callable[[str], str],
                 progress: Callable[[str], None] | None = None,
                 memory_probe: MemoryProbe = nvidia_smi_probe,
                 gpu_lister: Lister = list_compute_processes) -> None:
        if isolation not in ISOLATION_POLICIES:
            raise ConfigError("--isolation", f"{isolation!r} is not one of {', '.join(ISOLATION_POLICIES)}")
        self.isolation = isolation
        # configurations that can share a runner run one after another (stable otherwise)
        first: dict[tuple[str, ...], int] = {}
        for config in configs:
            first.setdefault(self._process_key(config), len(first))
        self.configs = sorted(configs, key=lambda c: first[self._process_key(c)])
        self.info = info
        self.run_id = run_id
        self.writer = writer
        self.image_shape_of = image_shape_of
        self.progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
        self._runner: RunnerProcess | None = None
        self._runner_key: tuple[str, ...] | None = None
        self._memory = GpuMemoryGuard(memory_probe)
        self._gpus = GpuExclusivity(gpu_lister)
        # why the next runner for this process key starts, when not because a series starts
        self._pending_reason: tuple[tuple[str, ...], str] | None = None

    def _process_key(self, config: Config) -> tuple[str, ...]:
        """Configurations with equal keys may share a runner under this isolation policy."""
        return (config.mode, config.dtype) if self.isolation == "mode" else config.group_key

    def _runner_for(self, config: Config, fresh: bool = False) -> RunnerProcess:
        key = self._process_key(config)
        reusable = (not fresh and self.isolation != "config" and self._runner is not None
                    and self._runner_key == key and self._runner.process.poll() is None)
        if not reusable:
            pending = self._pending_reason
            reason = pending[1] if pending and pending[0] == key and self.isolation != "config" \
                else "series_start"
            self._drop_runner(graceful=True)
            self._runner = RunnerProcess()
            self._runner.fresh_reason = reason
            self._runner_key = key
            self._pending_reason = None
        assert self._runner is not None
        return self._runner

    def _drop_runner(self, graceful: bool) -> None:
        if self._runner is not None:
            if graceful:
                self._runner.stop()
            else:
                self._runner.kill()
        self._runner = None
        self._runner_key = None

    def _execute(self, config: Config) -> Outcome:
        started_at = now_iso()
        start = time.monotonic()
        outcome, reused = self._attempt(config, fresh=False)
        if outcome.status == "oom" and reused:
            # maybe memory left by earlier configurations: a fresh process decides
            self._pending_reason = (self._process_key(config), "oom_retry")
            outcome, _ = self._attempt(config, fresh=True)
        outcome.started_at, outcome.finished_at = started_at, now_iso()
        outcome.wall_s = time.monotonic() - start
        return outcome

    def _attempt(self, config: Config, fresh: bool) -> tuple[Outcome, bool]:
        """One try at ``config``; also whether the runner had measured something before."""
        deadline = time.monotonic() + config.timeout_s
        decided = None
        process_start_s = 0.0
        reused = False
        fresh_reason = None
        try:
            runner = self._runner_for(config, fresh)
            if runner.hello is None:  # this configuration waits for the process to start
                process_start_s = self._start(runner, config, deadline)
            hello = runner.wait_ready(deadline)
            if not self.info.mxnet_details_known:
                self.info.add_mxnet_details(hello["mxnet"])
                # the label against the build the measuring process imported: a mismatch ends the sweep
                label = os.environ.get(WORKER_RUNTIME_ENV, "").strip()
                self.info.runtime_check = runtime_check.check(label, self.info.framework_build())
            decided = precheck_build(config, self.info)
            if not decided and runner.measured > 0 and runner.memory is not None:
                why = self._memory.before_run(runner.memory, config)
                if why is not None:  # replace the process before it binds, not after an oom
                    self.progress(f"[{config.config_id}] {why[1]}: starting a fresh measuring process")
                    self._pending_reason = (self._process_key(config), why[0])
                    runner = self._runner_for(config, fresh=True)
                    process_start_s = self._start(runner, config, deadline)
            if not decided and runner.measured == 0:
                fresh_reason = runner.fresh_reason
            reused = runner.measured > 0
            # a healthy runner is kept for the next configuration when this one cannot run
            result = {"status": decided[0], "error": decided[1]} if decided else runner.run(config, deadline)
        except RunnerTimeout:
            self._drop_runner(graceful=False)
            self._pending_reason = (self._process_key(config), "after_failure")
            outcome = Outcome("timeout", f"no result within the time limit of {config.timeout_s:g} s; "
                              "the measuring process was killed")
        except RunnerGone as gone:
            self._drop_runner(graceful=False)
            self._pending_reason = (self._process_key(config), "after_failure")
            outcome = Outcome(classify_failure(gone.text), summarize_error(gone.text))
        except OSError as exc:  # the runner process could not be started
            self._drop_runner(graceful=False)
            outcome = Outcome("error", f"cannot start the measuring process: {exc}")
        else:
            status = result.get("status", "error")
            outcome = Outcome(status, result.get("error"), result)
            if status != "ok" and not decided:
                # Restart after any failure: MXNet does not give back memory after an OOM.
                self._drop_runner(graceful=False)
                self._pending_reason = (self._process_key(config), "after_failure")
            elif self.isolation == "config":
                self._drop_runner(graceful=True)
        outcome.process_start_s = process_start_s
        outcome.fresh_process_reason = fresh_reason
        return outcome, reused

    def _start(self, runner: RunnerProcess, config: Config, deadline: float) -> float:
        """Wait for a new runner; note its devices' free memory (GPU checks); its start seconds."""
        runner.wait_ready(deadline)
        if self.isolation != "config":
            runner.memory = self._memory.process_ready(config)
        return runner.start_s or 0.0

    def run(self) -> list[dict[str, Any]]:
        """Run every configuration; return the records written (in order)."""
        decided = {i: precheck_static(c) for i, c in enumerate(self.configs)}
        to_run = sum(1 for v in decided.values() if v is None)
        sweep_start = time.monotonic()
        ran = 0
        ran_s = 0.0
        records = []
        # every GPU of the sweep, before any measuring process of ours is on one
        self._gpus.check(sorted({d for c in self.configs for d in c.devices}), look=True)
        try:
            for index, config in enumerate(self.configs):
                gpu = self._gpus.check(config.devices, look=not self._runner_alive())
                if decided[index] is None and gpu.exclusive is False:
                    decided[index] = ("gpu_busy", str(gpu.note))
                if decided[index] is not None:
                    status, message = decided[index]
                    stamp = now_iso()
                    outcome = Outcome(status, message, started_at=stamp, finished_at=stamp)
                else:
                    outcome = self._execute(config)
                    ran += 1
                    ran_s += outcome.wall_s
                outcome.gpu = gpu
                record = self._record(config, outcome)
                self.writer.write(record)
                records.append(record)
                self.progress(self._progress_line(index, config, record, outcome,
                                                  sweep_start, ran, ran_s, to_run))
        finally:
            self._drop_runner(graceful=True)
        return records

    def _runner_alive(self) -> bool:
        return self._runner is not None and self._runner.process.poll() is None

    def _record(self, config: Config, outcome: Outcome) -> dict[str, Any]:
        shape = self.image_shape_of(config.network)
        try:
            return build_record(config, outcome, self.info, self.run_id, shape)
        except RecordError as exc:  # a bad result must not end the sweep: record why instead
            broken = Outcome("error", f"the measurement gave an invalid record ({exc})",
                             started_at=outcome.started_at, finished_at=outcome.finished_at, gpu=outcome.gpu)
            return build_record(config, broken, self.info, self.run_id, shape)

    def _progress_line(self, index: int, config: Config, record: dict[str, Any], outcome: Outcome,
                       sweep_start: float, ran: int, ran_s: float, to_run: int) -> str:
        total = len(self.configs)
        if record["status"] == "ok":
            cv = f", cv {record['cv'] * 100:.1f}%" if record["cv"] is not None else ""
            result = outcome.result or {}
            split = ", ".join(f"{name} {result[key]:.1f} s" for name, key in
                              (("setup", "setup_s"), ("warm-up", "warmup_s"), ("timed", "timed_s"))
                              if key in result)
            what = f"ok {record['images_per_sec']:.2f} img/s{cv} [{split}]"
            if record["stop_rule"] != "fixed_batches":
                what += (f" {record['repeats']} repeats, {record['timed_batches']} batches: "
                         f"{record['stop_rule']}")
        else:
            first_line = (record["error"] or "").splitlines()[0][:120]
            what = f"{record['status']}: {first_line}"
        left = max(0, to_run - ran)
        eta = _format_duration(ran_s / ran * left) if ran else "?"
        started = f", new process {outcome.process_start_s:.1f} s" if outcome.process_start_s else ""
        if outcome.fresh_process_reason not in (None, "series_start"):
            started += f" ({outcome.fresh_process_reason})"
        return (f"[{index + 1}/{total}] {_describe(config)}: {what} ({outcome.wall_s:.1f} s{started}) | "
                f"elapsed {_format_duration(time.monotonic() - sweep_start)}, ETA {eta}")


def image_shape_text(network: str) -> str:
    """'3,224,224' for the network (inception-v3: 3,299,299)."""
    from bench_tasks import networks

    return ",".join(str(v) for v in networks.image_shape(network))
