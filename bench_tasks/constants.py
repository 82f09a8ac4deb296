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

#: What happened to a configuration. Every configuration gets exactly one record.
STATUSES: tuple[str, ...] = (
    "ok",
    "oom",  # the device ran out of memory
    "batch_smaller_than_devices",  # MXNet: "Too many slices"; decided before running
    "unsupported",  # e.g. float16 on a device or build that cannot do it
    "timeout",  # the configuration's time limit ran out
    "error",  # anything else, with its message
)

#: ImageNet-1k training set size: one epoch, the unit of the epoch-cost columns.
IMAGENET_TRAIN_IMAGES = 1_281_167
NUM_CLASSES = 1000

#: Defaults of MXNet's benchmark_score.py / train_imagenet.py --benchmark 1.
DEFAULT_WARMUP_BATCHES = 5
DEFAULT_TIMED_BATCHES = 10
DEFAULT_REPEATS = 3
DEFAULT_CONFIG_TIMEOUT_S = 900
