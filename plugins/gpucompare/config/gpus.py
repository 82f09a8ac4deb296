"""The GPU model table: which GPU a name means, and whether the worker's MXNet runs on it.

The table ships as ``gpucompare/data/gpus.csv`` (its header comment cites the compute
capabilities' source and states the MXNet rule). Providers, price catalogs and nvidia-smi all
name the same GPU differently (``NVIDIA A10G``, ``Tesla V100-SXM2-16GB``, ``H100 80GB HBM3``,
``RTX4090``); :func:`canonical` maps each of them to the table's one name, which is what the
lake's ``prices.gpu_model`` holds for catalog rows and what projections join on.

:func:`check_runnable` refuses a GPU that mxnet-cu112 1.9.1 has no kernels for (compute
capability 9.0 and later, or below 5.0) with a :class:`~gpucompare.config.validation.ValidationError`
naming the GPU and the reason; a GPU the table does not know is allowed with a warning (the
table cannot list every GPU, and refusing an unknown name would block a user with a new one).
:func:`check_target` is the hook the fleet file and the manual form call before anything is
provisioned: it finds the target's GPU in the shipped price tables' ``gpu_model`` column.

Standard library, ``gpucompare.resources`` and ``config.validation`` only: the DAG files import
the configuration at parse time.
"""

from __future__ import annotations

import csv
import functools
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucompare import resources
from gpucompare.config.validation import ValidationError

log = logging.getLogger(__name__)

#: the columns of data/gpus.csv, in order
COLUMNS = ("name", "aliases", "memory_gib", "architecture", "compute_capability", "mxnet_cu112", "reason")
#: the compute capabilities mxnet-cu112 1.9.1 ships kernels for (no PTX); 8.9 runs sm_86 kernels
MXNET_KERNELS = ((5, 0), (8, 6))
RUNNABLE = "GPUs of compute capability 5.0 to 8.9 (Maxwell to Ada), e.g. T4, V100, A10G, A100, L4"

# words a vendor puts before the model name (nvidia-smi: "NVIDIA GeForce RTX 4090", "Tesla T4")
_PREFIXES = ("nvidia", "tesla", "geforce", "quadro")
# form-factor and memory-type words after it ("A100-SXM4-40GB", "H100 80GB HBM3", "H100 PCIe")
_FORM_FACTOR = re.compile(r"sxm[0-9]?|pcie|hbm[0-9]?e?|nvlink")
_MEMORY = re.compile(r"([0-9]{1,4})gb")
_MAX_NAME = 200


@dataclass(frozen=True)
class GpuModel:
    """One row of data/gpus.csv. ``compute_capability`` is CUDA's ``major.minor`` as text ("8.6")."""

    name: str
    aliases: tuple[str, ...]
    memory_gib: float
    architecture: str
    compute_capability: str
    mxnet_cu112: bool
    reason: str

    @property
    def capability(self) -> tuple[int, int]:
        """The compute capability as numbers, for comparisons: ``(8, 6)``."""
        major, minor = self.compute_capability.split(".")
        return int(major), int(minor)


def mxnet_runs(capability: tuple[int, int]) -> bool:
    """Whether mxnet-cu112 1.9.1 has a kernel for a GPU of this compute capability: a cubin of
    sm_XY runs on the same major version X with minor >= Y (CUDA's binary compatibility); there
    is no PTX to compile a kernel for a newer major version."""
    low, high = MXNET_KERNELS
    return low <= capability and capability[0] <= high[0]


def gpus_file() -> Path:
    """The shipped table (``gpucompare/data/gpus.csv``)."""
    path = resources.data_dir() / "gpus.csv"
    if not path.exists():
        raise resources.ResourceError(f"the GPU model table is missing at {path}: "
                                      "the installation is incomplete")
    return path


def _data_lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8", newline="") as handle:
        for line in handle:
            if not line.startswith("#"):
                yield line


def _parse_row(row: Mapping[str, str], where: str) -> GpuModel:
    if None in row or any(row.get(c) is None for c in COLUMNS):
        raise ValidationError(where, f"expected the columns {', '.join(COLUMNS)}")
    if not re.fullmatch(r"[0-9]{1,2}\.[0-9]", row["compute_capability"]):
        raise ValidationError(f"{where}.compute_capability",
                              f"{row['compute_capability']!r} is not major.minor")
    if row["mxnet_cu112"] not in ("true", "false"):
        raise ValidationError(f"{where}.mxnet_cu112", f"{row['mxnet_cu112']!r} is not allowed", "true, false")
    aliases = tuple(a.strip() for a in row["aliases"].split("|") if a.strip())
    return GpuModel(name=row["name"], aliases=aliases, memory_gib=float(row["memory_gib"]),
                    architecture=row["architecture"], compute_capability=row["compute_capability"],
                    mxnet_cu112=row["mxnet_cu112"] == "true", reason=row["reason"])


def read_table(path: Path | None = None) -> tuple[GpuModel, ...]:
    """Every row of the table (the shipped one unless ``path`` is given), checked."""
    path = path or gpus_file()
    models = []
    for number, row in enumerate(csv.DictReader(_data_lines(path)), start=1):
        models.append(_parse_row(row, f"{path.name} row {number}"))
    return tuple(models)


def normalize(name: str) -> str:
    """The matching key of a name: lower case, letters and digits only (``RTX-4090`` → ``rtx4090``)."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _words(name: str) -> list[str]:
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    while words and words[0] in _PREFIXES:
        words.pop(0)
    return words


@functools.lru_cache(maxsize=1)
def _index() -> tuple[dict[str, GpuModel], dict[str, GpuModel]]:
    """(models by canonical name, models by the matching key of every name and alias)."""
    by_name: dict[str, GpuModel] = {}
    by_key: dict[str, GpuModel] = {}
    for model in read_table():
        by_name[model.name] = model
        for alias in (model.name, *model.aliases):
            for key in (normalize(alias), "".join(_words(alias))):
                other = by_key.setdefault(key, model)
                if other is not model:  # a table error: one name would mean two GPUs
                    raise ValidationError("gpus.csv",
                                          f"alias {alias!r} names both {other.name} and {model.name}")
    return by_name, by_key


def canonical(name: str) -> str | None:
    """The table's name of the GPU ``name`` means, or None when the table does not know it.

    Case, spaces and punctuation do not matter; an ``NVIDIA``/``Tesla``/``GeForce`` prefix is
    ignored, and so are form-factor and memory suffixes when the name without them is known
    (``A100-SXM4-40GB`` → ``A100``, ``Tesla V100-SXM2-32GB`` → ``V100-32GB``,
    ``H100 80GB HBM3`` → ``H100``). The memory suffix picks the variant when there are two.
    """
    model = lookup(name)
    return model.name if model else None


def lookup(name: str) -> GpuModel | None:
    """The table's row for the GPU ``name`` means (see :func:`canonical`), or None."""
    if not isinstance(name, str) or not name.strip() or len(name) > _MAX_NAME:
        return None
    _, by_key = _index()
    for key in (normalize(name), "".join(_words(name))):
        if key in by_key:
            return by_key[key]
    words = _words(name)
    memory = [m.group(1) for w in words if (m := _MEMORY.fullmatch(w))]
    base = "".join(w for w in words if not _MEMORY.fullmatch(w) and not _FORM_FACTOR.fullmatch(w))
    if not base:
        return None
    if memory:  # the memory names the variant: "V100 ... 32GB" is V100-32GB, "... 16GB" is V100
        for size in memory:
            for candidate in (f"{base}{size}gb", base):
                model = by_key.get(candidate)
                if model is not None and round(model.memory_gib) == int(size):
                    return model
        return None  # a known base with a memory no variant has is another GPU: do not guess
    return by_key.get(base)


def check_runnable(name: str, field: str = "gpu_model", *, machine: str | None = None) -> None:
    """Refuse a GPU the worker's MXNet cannot run; ``field`` is the value's name in the error and
    ``machine`` (an instance type) is named in it when the GPU came from one.

    Raises :class:`~gpucompare.config.validation.ValidationError` (a PermanentError) naming the
    GPU and the reason. A GPU the table does not know only logs a warning.
    """
    model = lookup(name)
    if model is None:
        log.warning("GPU %r is not in the GPU model table (gpucompare/data/gpus.csv): cannot check that "
                    "the worker's MXNet (mxnet-cu112 1.9.1) runs on it; add it to the table", name)
        return
    if not model.mxnet_cu112:
        shown = name if normalize(name) == normalize(model.name) else f"{name} ({model.name})"
        where = f"{machine!r} has the GPU {shown}, which" if machine else f"the GPU {shown}"
        raise ValidationError(field, f"{where} cannot run the worker's MXNet: {model.reason}", RUNNABLE)


# -- the target's GPU, from the shipped price tables ---------------------------------------
@functools.lru_cache(maxsize=1)
def _shipped_instance_gpus() -> dict[tuple[str, str], str]:
    """(provider, instance type) → gpu_model, from every shipped price table (data/prices/*.csv).

    Read with the csv module (not prices/, which sits above config): only the three columns
    used here, each table's header checked for them.
    """
    found: dict[tuple[str, str], str] = {}
    for path in sorted(resources.data_dir("prices").glob("*.csv")):
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            missing = {"provider", "instance_type", "gpu_model"} - set(reader.fieldnames or ())
            if missing:
                raise ValidationError(path.name, f"missing column(s) {', '.join(sorted(missing))}")
            for row in reader:
                if row["gpu_model"]:
                    found.setdefault((row["provider"], row["instance_type"]), row["gpu_model"])
    return found


def instance_gpu(provider: str, instance_type: str) -> str | None:
    """The GPU model the shipped price tables give for ``instance_type`` of ``provider`` (as
    written there, e.g. ``H100`` for aws ``p5.48xlarge``), or None when they do not list it."""
    return _shipped_instance_gpus().get((provider, instance_type))


def check_target(spec: Mapping[str, Any]) -> None:
    """The fleet/form hook: refuse a target whose GPU the worker cannot run, before provisioning.

    ``spec`` holds the checked target fields (``provider``, ``instance_type``, ``kind``); the error's
    field is ``instance_type``, the value a user chose.
    """
    if spec.get("kind") == "local":
        return
    instance_type = str(spec.get("instance_type"))
    gpu = instance_gpu(str(spec.get("provider")), instance_type)
    if gpu is not None:
        check_runnable(gpu, field="instance_type", machine=instance_type)
