"""The GPU model table: which GPU a name means, and which worker runtime runs it.

The table ships as ``gpucompare/data/gpus.csv`` (its header comment cites the compute
capabilities' source and states each runtime's rule); it has a ``<runtime>``/``<runtime>_reason``
column pair per GPU runtime of ``runtimes.csv`` (``config.runtimes``). Providers, price
catalogs and nvidia-smi all name the same GPU differently (``NVIDIA A10G``,
``Tesla V100-SXM2-16GB``, ``H100 80GB HBM3``, ``RTX4090``); :func:`canonical` maps each of
them to the table's one name, which is what the lake's ``prices.gpu_model`` holds for catalog
rows and what projections join on.

:func:`check_runnable` refuses a GPU that a runtime has no kernels for (pip-cu112: compute
capability 9.0 and later, or below 5.0) with a :class:`~gpucompare.config.validation.ValidationError`
naming the GPU and the reason; a GPU the table does not know is allowed with a warning (the
table cannot list every GPU, and refusing an unknown name would block a user with a new one).
An instance type's GPU is in ``config.instances`` (data/instances.csv); ``config.runtime_choice``
decides a target's runtime from both before anything is provisioned.

Standard library, ``gpucompare.resources`` and ``config.validation`` only: the DAG files import
the configuration at parse time.
"""

from __future__ import annotations

import csv
import functools
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpucompare import resources
from gpucompare.config import patterns, runtimes
from gpucompare.config.validation import ValidationError

log = logging.getLogger(__name__)

#: the columns of data/gpus.csv before the per-runtime pairs (``<runtime>``, ``<runtime>_reason``)
COLUMNS = ("name", "aliases", "memory_gib", "architecture", "compute_capability")

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
    #: runtime name → (runs this GPU, why), one entry per GPU runtime of runtimes.csv
    runtimes: tuple[tuple[str, bool, str], ...]

    @property
    def capability(self) -> tuple[int, int]:
        """The compute capability as numbers, for comparisons: ``(8, 6)``."""
        return patterns.capability(self.compute_capability)

    def runs_on(self, runtime: str) -> tuple[bool, str]:
        """(whether ``runtime`` runs this GPU, the reason); a CPU runtime runs no GPU."""
        for name, runs, reason in self.runtimes:
            if name == runtime:
                return runs, reason
        return False, f"the {runtime} runtime runs no GPU"

    def runnable_with(self) -> list[str]:
        """The runtimes that run this GPU, in the runtimes table's order."""
        return [name for name, runs, _ in self.runtimes if runs]


def gpus_file() -> Path:
    """The shipped table (``gpucompare/data/gpus.csv``)."""
    return resources.shipped_table("gpus.csv", "the GPU model table")


def columns() -> tuple[str, ...]:
    """Every column of data/gpus.csv: the model's, then a pair per GPU runtime."""
    pairs = [(r.name, f"{r.name}_reason") for r in runtimes.gpu_runtimes()]
    return COLUMNS + tuple(c for pair in pairs for c in pair)


def _parse_row(row: Mapping[str, str], where: str) -> GpuModel:
    expected = columns()
    if None in row or any(row.get(c) is None for c in expected):
        raise ValidationError(where, f"expected the columns {', '.join(expected)}")
    try:
        patterns.capability(row["compute_capability"])
    except ValueError as exc:
        raise ValidationError(f"{where}.compute_capability", str(exc)) from None
    flags = []
    for runtime in runtimes.gpu_runtimes():
        if row[runtime.name] not in ("true", "false"):
            raise ValidationError(f"{where}.{runtime.name}", f"{row[runtime.name]!r} is not allowed",
                                  "true, false")
        flags.append((runtime.name, row[runtime.name] == "true", row[f"{runtime.name}_reason"]))
    aliases = tuple(a.strip() for a in row["aliases"].split("|") if a.strip())
    return GpuModel(name=row["name"], aliases=aliases, memory_gib=float(row["memory_gib"]),
                    architecture=row["architecture"], compute_capability=row["compute_capability"],
                    runtimes=tuple(flags))


def read_table(path: Path | None = None) -> tuple[GpuModel, ...]:
    """Every row of the table (the shipped one unless ``path`` is given), checked."""
    path = path or gpus_file()
    models = []
    for number, row in enumerate(csv.DictReader(resources.table_lines(path)), start=1):
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


def check_runnable(name: str, field: str = "gpu_model", *, machine: str | None = None,
                   runtime: str = "pip-cu112") -> None:
    """Refuse a GPU that the worker runtime ``runtime`` cannot run; ``field`` is the value's name in
    the error and ``machine`` (an instance type) is named in it when the GPU came from one.

    Raises :class:`~gpucompare.config.validation.ValidationError` (a PermanentError) naming the
    GPU, its compute capability and the reason, with the runtimes that do run it as the allowed
    values. A GPU the table does not know only logs a warning.
    """
    model = lookup(name)
    if model is None:
        log.warning("GPU %r is not in the GPU model table (gpucompare/data/gpus.csv): cannot check that "
                    "the worker runtime %s runs on it; add it to the table", name, runtime)
        return
    runs, reason = model.runs_on(runtime)
    if not runs:
        raise ValidationError(field, f"{describe(model, name, machine)} cannot run worker runtime "
                              f"{runtime}: {reason}", allowed_runtimes(model))


def describe(model: GpuModel, name: str, machine: str | None = None) -> str:
    """``'p5.48xlarge' has the GPU H100 (compute capability 9.0), which`` or ``the GPU …``."""
    shown = name if normalize(name) == normalize(model.name) else f"{name} ({model.name})"
    shown = f"{shown} (compute capability {model.compute_capability})"
    return f"{machine!r} has the GPU {shown}, which" if machine else f"the GPU {shown}"


def allowed_runtimes(model: GpuModel) -> str:
    """What to say is allowed for ``model``: the runtimes that run it, or that none does."""
    usable = model.runnable_with()
    if usable:
        return "worker_runtime " + ", ".join(["auto", *usable])
    return (f"no worker runtime runs compute capability {model.compute_capability}; GPUs of "
            f"{runnable_range()}")


def runnable_range() -> str:
    """The compute capabilities some runtime runs, e.g. ``5.0 to 9.0 (Maxwell to Hopper)``."""
    lows = [r.cc_min for r in runtimes.gpu_runtimes() if r.cc_min]
    highs = [r.cc_max for r in runtimes.gpu_runtimes() if r.cc_max]
    low, high = min(lows), max(highs)
    return f"compute capability {low[0]}.{low[1]} to {high[0]}.x, e.g. T4, V100, A10G, A100, L4, H100, H200"
