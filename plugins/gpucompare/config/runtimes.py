"""The worker runtimes table: where the one worker (``bench_tasks``) runs, and what it contains.

The table ships as ``gpucompare/data/runtimes.csv`` (its header comment cites each fact's source).
A runtime is a venv (``pip-cu112``: ``mxnet-cu112`` from ``bench_tasks/requirements-gpu.txt``;
``cpu``: ``mxnet``) or a container image run with ``docker run --gpus all`` (``ngc-24.06``:
NVIDIA's MXNet 1.9.1 build on CUDA 12.4.1). Each states the compute capabilities its kernels run
(:func:`runs_capability`, the rule ``gpus.csv``'s per-runtime flags are checked against). Which
runtime a target uses is decided in ``config.runtime_choice``.

Standard library, ``gpucompare.resources`` and ``config.validation`` only (the DAG files import
the configuration at parse time).
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpucompare import resources
from gpucompare.config import patterns
from gpucompare.config.validation import ValidationError

COLUMNS = ("name", "mxnet", "cuda", "cudnn", "python", "cc_min", "cc_max", "ptx", "delivery", "image",
           "digest", "source", "source_date")
DELIVERIES = ("venv", "docker")
PTX_VALUES = ("yes", "no", "unknown")
#: what a fleet entry may say besides a runtime's name: pick one that runs the target's GPU
AUTO = "auto"
#: the runtime of a target without GPUs (gpu_count 0, the local target on this machine)
CPU = "cpu"


@dataclass(frozen=True)
class WorkerRuntime:
    """One row of data/runtimes.csv (see its header for each column)."""

    name: str
    mxnet: str
    cuda: str | None
    cudnn: str | None
    python: str
    cc_min: tuple[int, int] | None
    cc_max: tuple[int, int] | None
    ptx: str
    delivery: str
    image: str | None
    digest: str | None
    source: str
    source_date: str

    @property
    def runs_gpus(self) -> bool:
        return self.cc_min is not None

    @property
    def image_reference(self) -> str | None:
        """What ``docker pull``/``docker run`` is given: ``image@digest`` when the digest is
        known (pinned), else ``image`` (a tag: the pull records the digest it got)."""
        if self.image is None:
            return None
        return f"{self.image.rsplit(':', 1)[0]}@{self.digest}" if self.digest else self.image

    def capability_text(self) -> str:
        if self.cc_min is None or self.cc_max is None:
            return "none (CPU)"
        ptx = {"yes": "PTX", "no": "no PTX", "unknown": "PTX unknown"}[self.ptx]
        return f"{_text(self.cc_min)} to {_text(self.cc_max)}, {ptx}"


def _text(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


def runs_capability(runtime: WorkerRuntime, capability: tuple[int, int]) -> bool:
    """Whether ``runtime`` has a kernel for a GPU of ``capability``: a cubin of sm_XY runs on the
    same major X with a minor >= Y (CUDA's binary compatibility), so up to ``cc_max``'s major;
    beyond it only PTX could help (``ptx: yes``, JIT-compiled); ``unknown`` counts as no."""
    if runtime.cc_min is None or runtime.cc_max is None:
        return False
    if capability < runtime.cc_min:
        return False
    return capability[0] <= runtime.cc_max[0] or runtime.ptx == "yes"


def runtimes_file() -> Path:
    """The shipped table (``gpucompare/data/runtimes.csv``)."""
    return resources.shipped_table("runtimes.csv", "the worker runtimes table")


def _capability(row: Mapping[str, str], column: str, where: str) -> tuple[int, int] | None:
    text = row[column]
    if not text:
        return None
    try:
        return patterns.capability(text)
    except ValueError as exc:
        raise ValidationError(f"{where}.{column}", str(exc)) from None


def _parse_row(row: Mapping[str, str], where: str) -> WorkerRuntime:
    if None in row or any(row.get(c) is None for c in COLUMNS):
        raise ValidationError(where, f"expected the columns {', '.join(COLUMNS)}")
    for column, allowed in (("delivery", DELIVERIES), ("ptx", PTX_VALUES)):
        if row[column] not in allowed:
            raise ValidationError(f"{where}.{column}", f"{row[column]!r} is not allowed", ", ".join(allowed))
    if not patterns.RUNTIME_NAME.fullmatch(row["name"]) or row["name"] == AUTO:
        raise ValidationError(f"{where}.name", f"{row['name']!r} is not a runtime name")
    if row["digest"] and not patterns.IMAGE_DIGEST.fullmatch(row["digest"]):
        raise ValidationError(f"{where}.digest", f"{row['digest']!r} is not sha256:<64 hex>")
    docker = row["delivery"] == "docker"
    if docker != bool(row["image"]) or (docker and not patterns.DOCKER_IMAGE_TAGGED.fullmatch(row["image"])):
        raise ValidationError(f"{where}.image", "a docker runtime names its image as name:tag; a venv none")
    cc_min, cc_max = _capability(row, "cc_min", where), _capability(row, "cc_max", where)
    if (cc_min is None) != (cc_max is None) or (cc_min and cc_max and cc_min > cc_max):
        raise ValidationError(f"{where}.cc_max", "cc_min and cc_max go together, cc_min <= cc_max")
    return WorkerRuntime(
        name=row["name"], mxnet=row["mxnet"], cuda=row["cuda"] or None, cudnn=row["cudnn"] or None,
        python=row["python"], cc_min=cc_min, cc_max=cc_max, ptx=row["ptx"], delivery=row["delivery"],
        image=row["image"] or None, digest=row["digest"] or None, source=row["source"],
        source_date=row["source_date"])


def read_table(path: Path | None = None) -> tuple[WorkerRuntime, ...]:
    """Every runtime of the table (the shipped one unless ``path`` is given), checked."""
    path = path or runtimes_file()
    found = [_parse_row(row, f"{path.name} row {n}")
             for n, row in enumerate(csv.DictReader(resources.table_lines(path)), start=1)]
    names = [r.name for r in found]
    if len(set(names)) != len(names) or CPU not in names:
        raise ValidationError(path.name, f"runtime names must be unique and include {CPU!r}: {names}")
    return tuple(found)


@functools.lru_cache(maxsize=1)
def table() -> tuple[WorkerRuntime, ...]:
    """The shipped table, in its order (the order ``auto`` prefers among equals)."""
    return read_table()


def names() -> tuple[str, ...]:
    return tuple(r.name for r in table())


def gpu_runtimes() -> tuple[WorkerRuntime, ...]:
    """The runtimes that run GPUs (each has a column pair in gpus.csv)."""
    return tuple(r for r in table() if r.runs_gpus)


def choices() -> tuple[str, ...]:
    """What ``worker_runtime`` accepts: ``auto`` and every runtime's name."""
    return (AUTO, *names())


def get(name: str) -> WorkerRuntime:
    for runtime in table():
        if runtime.name == name:
            return runtime
    raise ValidationError("worker_runtime", f"{name!r} is not a worker runtime", ", ".join(choices()))
