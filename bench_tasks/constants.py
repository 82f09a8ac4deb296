"""Names and numbers shared by the whole project, in one place.

Standard library only (the orchestrator imports this module too).
"""

from __future__ import annotations

#: The classic MXNet image-classification networks this project benchmarks.
NETWORKS: tuple[str, ...] = (
    "alexnet",
    "vgg-16",
    "googlenet",
    "inception-bn",
    "inception-v3",
    "resnet-50",
    "resnet-152",
)

MODES: tuple[str, ...] = ("score", "train")
DTYPES: tuple[str, ...] = ("float32", "float16")
DEVICE_KINDS: tuple[str, ...] = ("gpu", "cpu")
KVSTORES: tuple[str, ...] = ("device", "local", "nccl", "dist_sync", "dist_device_sync")
SCALING_KINDS: tuple[str, ...] = ("weak", "strong")

#: How a configuration decides when to stop timing (``bench_tasks.methodology``):
#: official = MXNet's harness (fixed warm-up and timed batch counts), robust = a minimum timed
#: duration per repeat and repeats until the spread is small, custom = other stopping values.
NAMED_METHODOLOGIES: tuple[str, ...] = ("official", "robust")  # fixed rules; custom takes values
METHODOLOGIES: tuple[str, ...] = (*NAMED_METHODOLOGIES, "custom")
#: How a sweep isolates configurations: one measuring process per mode (and dtype), per network
#: series, or per configuration (``bench_tasks.sweep``).
ISOLATION_POLICIES: tuple[str, ...] = ("mode", "network", "config")
#: What ended a measured configuration: fixed_batches (a fixed number of batches and repeats),
#: min_time (fixed repeats, each run until its minimum duration), target_cv_met (the
#: coefficient of variation fell under the target), max_repeats (the repeat limit came first).
STOP_RULES: tuple[str, ...] = ("fixed_batches", "min_time", "target_cv_met", "max_repeats")
#: The training step: official = Module.fit's (accuracy metric updated every batch, as
#: train_imagenet.py does), unsynchronised = no metric (only the step's outputs waited for).
TRAIN_LOOPS: tuple[str, ...] = ("official", "unsynchronised")

#: Why a configuration ran in a measuring process that had measured nothing before it
#: (``bench_tasks.sweep``; null in the record when it shared a process with earlier ones):
#: series_start = the isolation policy starts one here (first of its mode/network series, or
#: every configuration with ``--isolation config``), after_failure = the previous process was
#: replaced after a configuration that did not end ok (timeout, crash, oom, error),
#: oom_retry = an out-of-memory error in a shared process, run again in a fresh one,
#: low_gpu_memory / gpu_memory_dropped = the GPU free-memory check (``bench_tasks.gpumemory``).
FRESH_PROCESS_REASONS: tuple[str, ...] = ("series_start", "after_failure", "oom_retry",
                                          "low_gpu_memory", "gpu_memory_dropped")

#: What happened to a configuration. Every configuration gets exactly one record.
STATUSES: tuple[str, ...] = (
    "ok",
    "oom",  # the device ran out of memory
    "batch_smaller_than_devices",  # MXNet: "Too many slices"; decided before running
    "unsupported",  # e.g. float16 on a device or build that cannot do it
    "timeout",  # the configuration's time limit ran out
    "gpu_busy",  # another process computed on its GPUs (bench_tasks.exclusive); decided before running
    "error",  # anything else, with its message
)

#: ImageNet-1k training set size: one epoch, the unit of the epoch-cost columns.
IMAGENET_TRAIN_IMAGES = 1_281_167
NUM_CLASSES = 1000

#: Defaults of MXNet's benchmark_score.py / train_imagenet.py --benchmark 1.
#: The run-id rule, the one definition (the orchestrator's config/patterns.py compiles it): at most
#: Airflow's dag_run_id limit, in the alphabet of Airflow's run ids (``manual__2026-…+00:00``) and
#: of the ids the orchestrator derives from them; no space, quote, '/' or shell metacharacter.
RUN_ID_MAX = 250
RUN_ID_CHARS = "A-Za-z0-9._:+-"
RUN_ID_PATTERN = f"[A-Za-z0-9][{RUN_ID_CHARS}]{{0,{RUN_ID_MAX - 1}}}"
RUN_ID_ALLOWED = f"1-{RUN_ID_MAX} letters, digits and . _ : + -, starting with a letter or digit"

DEFAULT_WARMUP_BATCHES = 5
DEFAULT_TIMED_BATCHES = 10
DEFAULT_REPEATS = 3
DEFAULT_CONFIG_TIMEOUT_S = 900

#: Bounds of what a configuration may ask for, checked before anything runs. Beyond them a
#: value is a typo or an attack (a batch of 2**70 does not fit the lake's int64), not a plan.
#: The fleet file is checked against these same limits (gpucompare.config.validation imports them).
MAX_BATCH_SIZE = 4096  # per listed batch (per device with weak scaling)
MAX_WARMUP_BATCHES = 1000
MAX_TIMED_BATCHES = 100_000
MAX_REPEATS = 100
MAX_MIN_TIME_S = 3_600.0
MIN_TARGET_CV_PCT = 0.1
MAX_TARGET_CV_PCT = 100.0
MAX_CONFIG_TIMEOUT_S = 24 * 3600.0

#: How a record's energy_joules was measured (bench_tasks.energy); a record without a figure says
#: "unavailable: <reason>" in energy_method instead.
ENERGY_METHODS: tuple[str, ...] = ("nvml_energy_counter", "nvml_power_sampling", "rapl")
ENERGY_UNAVAILABLE_PREFIX = "unavailable: "

#: Environment variables through which a target tells the worker its runtime (a name of
#: gpucompare's data/runtimes.csv) and, in a container, the image reference it runs (with the
#: digest the pull got); the worker copies them into every record (``sysinfo``).
WORKER_RUNTIME_ENV = "GPUCOMPARE_WORKER_RUNTIME"
WORKER_IMAGE_ENV = "GPUCOMPARE_WORKER_IMAGE"
#: ``warn``: a runtime label the build contradicts is reported and recorded instead of refused
#: (bench_tasks.runtime_check; for stand-ins: a CPU build standing in for a GPU runtime)
RUNTIME_CHECK_ENV = "GPUCOMPARE_WORKER_RUNTIME_CHECK"
