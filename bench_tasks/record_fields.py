"""The fields of the result record (the worker/orchestrator contract: names, JSON types, allowed
values), its schema version, the error that names a field, and a record with every field present.

``bench_tasks.record`` checks a record against these; ``gpucompare.lake.schema`` builds the lake's
Arrow schema from them. Standard library only (the worker imports it; Python 3.8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench_tasks.constants import (
    DEVICE_KINDS,
    DTYPES,
    FRESH_PROCESS_REASONS,
    KVSTORES,
    METHODOLOGIES,
    MODES,
    NETWORKS,
    SCALING_KINDS,
    STATUSES,
    STOP_RULES,
    TRAIN_LOOPS,
)

#: 2: timed_batches counts every timed batch of all repeats (1: per repeat); methodology,
#: stopping values and rule, training loop and phase times added.
#: 3: energy of the timed window (energy_joules, energy_method, avg_power_watts); worker_runtime
#:    and framework_build (which software stack produced the figure).
#: 4: gpu_exclusive and gpu_exclusive_note (was another process computing on the GPUs?), the
#:    status gpu_busy.
SCHEMA_VERSION = 4


@dataclass(frozen=True)
class Field:
    """One column of the record: its JSON type, whether it may be null, its allowed values."""

    name: str
    kind: str  # str | int | float | bool | str_list | float_list
    nullable: bool = False
    allowed: tuple[str, ...] | None = None
    doc: str = ""


FIELDS: tuple[Field, ...] = (
    Field("schema_version", "int", doc="version of this record format"),
    Field("run_id", "str", doc="one sweep invocation; every record of a sweep shares it"),
    Field("config_id", "str", doc="stable id of the configuration inside the run"),
    Field("mode", "str", allowed=MODES, doc="score = inference, train = forward+backward+update"),
    Field("network", "str", allowed=NETWORKS),
    Field("image_shape", "str", doc="C,H,W of one input image, e.g. 3,224,224"),
    Field("dtype", "str", allowed=DTYPES),
    Field("batch_size", "int", doc="global batch: images per step over all devices and nodes"),
    Field("per_device_batch", "int", nullable=True, doc="batch_size / (gpu or device count)"),
    Field("devices", "str_list", doc="device contexts of one node, e.g. ['gpu:0', 'gpu:1']"),
    Field("device_kind", "str", allowed=DEVICE_KINDS),
    Field("gpu_count", "int", doc="devices used over all nodes (GPUs, or CPU contexts on CPU)"),
    Field("num_nodes", "int", doc="hosts taking part (1 unless a parameter-server run)"),
    Field("kvstore", "str", nullable=True, allowed=KVSTORES, doc="null for scoring"),
    Field("scaling", "str", nullable=True, allowed=SCALING_KINDS,
          doc="weak = per-device batch held, strong = global batch held, null = not a series"),
    Field("parameters", "int", nullable=True, doc="trainable parameter count of the network"),
    Field("warmup_batches", "int", doc="untimed batches before the first repeat"),
    Field("timed_batches", "int", doc="batches actually timed, summed over the repeats"),
    Field("repeats", "int", doc="repeats actually timed (one images/s sample each)"),
    Field("methodology", "str", nullable=True, allowed=METHODOLOGIES,
          doc="official = fixed batch counts (MXNet's harness), robust = min time 2 s, CV under 3 %, "
              "at most 10 repeats, custom = the stopping values recorded"),
    Field("min_time_s", "float", nullable=True, doc="minimum seconds per repeat; null = fixed batches"),
    Field("target_cv", "float", nullable=True,
          doc="repeats were added until cv < this (a fraction, 0.03 = 3 %); null = fixed repeats"),
    Field("max_repeats", "int", nullable=True, doc="repeat limit with a target cv; null otherwise"),
    Field("stop_rule", "str", nullable=True, allowed=STOP_RULES,
          doc="what ended the timing: fixed_batches, min_time, target_cv_met or max_repeats; "
              "null unless ok"),
    Field("train_loop", "str", nullable=True, allowed=TRAIN_LOOPS,
          doc="training step: official = accuracy metric every batch (Module.fit), unsynchronised "
              "= no metric; null for scoring"),
    Field("setup_seconds", "float", nullable=True,
          doc="before the warm-up: the measuring process's start (for the first configuration it "
              "ran), symbol, bind, parameters, input; null unless ok"),
    Field("warmup_seconds", "float", nullable=True, doc="the warm-up batches; null unless ok"),
    Field("timed_seconds", "float", nullable=True,
          doc="inside timed batches, summed over the repeats; null unless ok"),
    Field("fresh_process_reason", "str", nullable=True, allowed=FRESH_PROCESS_REASONS,
          doc="why the configuration ran in a fresh measuring process (series_start, after_failure, "
              "oom_retry, low_gpu_memory, gpu_memory_dropped); null = it shared the process of "
              "earlier configurations, or ran in none (decided before measuring)"),
    Field("energy_joules", "float", nullable=True,
          doc="energy of the devices used over the timed batches of all repeats, joules; null when not "
              "measured (energy_method says why)"),
    Field("energy_method", "str", nullable=True,
          doc="how energy_joules was measured: nvml_energy_counter | nvml_power_sampling | rapl, or "
              "'unavailable: <reason>' when it was not"),
    Field("avg_power_watts", "float", nullable=True,
          doc="energy_joules / the seconds of the timed window, watts; null when not measured"),
    Field("images_per_sec", "float", nullable=True, doc="median of the repeats; null unless ok"),
    Field("images_per_sec_samples", "float_list", doc="one figure per repeat"),
    Field("per_worker_images_per_sec", "float_list",
          doc="multi-node runs: each worker's throughput; empty otherwise"),
    Field("cv", "float", nullable=True, doc="coefficient of variation of the samples"),
    Field("status", "str", allowed=STATUSES),
    Field("error", "str", nullable=True, doc="what went wrong, for every status but ok"),
    Field("started_at", "str", doc="ISO 8601 with time zone"),
    Field("finished_at", "str", doc="ISO 8601 with time zone"),
    Field("host", "str"),
    Field("cpu_model", "str", nullable=True),
    Field("gpu_model", "str", nullable=True),
    Field("gpu_memory_mib", "int", nullable=True),
    Field("driver_version", "str", nullable=True),
    Field("cuda_version", "str", nullable=True),
    Field("cudnn_version", "str", nullable=True),
    Field("mxnet_version", "str", nullable=True),
    Field("gpu_exclusive", "bool", nullable=True,
          doc="true: no other process computed on the configuration's GPUs before it was measured; "
              "false: one did (status gpu_busy, gpu_exclusive_note lists it); null: not known "
              "(gpu_exclusive_note says why: cpu device, NVML and nvidia-smi unavailable…)"),
    Field("gpu_exclusive_note", "str", nullable=True,
          doc="why gpu_exclusive is null, or the foreign processes (device, pid, name) when false"),
    Field("worker_runtime", "str", nullable=True,
          doc="the worker runtime of data/runtimes.csv that ran it (pip-cu112, ngc-24.06, cpu …); "
              "null for published figures"),
    Field("framework_build", "str", nullable=True,
          doc="JSON object: MXNet version and enabled build features (mx.runtime.Features), CUDA and "
              "cuDNN as MXNet loaded them, Python version, the container image and its digest when "
              "there is one"),
)

FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)
_BY_NAME = {f.name: f for f in FIELDS}


class RecordError(ValueError):
    """A record that breaks the contract; ``field`` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def empty_record(**values: Any) -> dict[str, Any]:
    """A record with every field present (lists empty, the rest null), updated with values."""
    record: dict[str, Any] = {
        f.name: ([] if f.kind.endswith("_list") else None) for f in FIELDS
    }
    record["schema_version"] = SCHEMA_VERSION
    unknown = set(values) - set(FIELD_NAMES)
    if unknown:
        raise RecordError(sorted(unknown)[0], "unknown field")
    record.update(values)
    return record


def field(name: str) -> Field:
    """The definition of one field (used by the orchestrator to build its Arrow schema)."""
    return _BY_NAME[name]
