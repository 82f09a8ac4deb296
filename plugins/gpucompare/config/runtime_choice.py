"""Which worker runtime a target uses: its ``worker_runtime`` (or its profile's), ``auto`` resolved.

``auto`` picks a runtime that runs the target's GPU (its instance type's GPU in the instance type
table, ``instances.instance_gpu``, no price needed; then the GPU model table), preferring one
runtime for the whole fleet where possible, so a night's figures come from one software stack
(:func:`fleet_preference`). A target without GPUs (``gpu_count`` 0, the local CPU) uses ``cpu``. A
target whose GPU no runtime runs, or whose stated runtime does not run its GPU, is refused here,
before anything is provisioned, naming the GPU, its compute capability and the runtimes tried with
their reasons. A GPU the tables do not know is allowed with a warning, as before runtimes existed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from gpucompare.config import gpus, instances, runtimes
from gpucompare.config.validation import ValidationError

log = logging.getLogger(__name__)


def _gpu_of(spec: Mapping[str, Any]) -> tuple[str | None, gpus.GpuModel | None]:
    name = instances.instance_gpu(str(spec.get("provider")), str(spec.get("instance_type")))
    return name, (gpus.lookup(name) if name else None)


def _without_gpus(spec: Mapping[str, Any], requested: str) -> str:
    kind = spec.get("kind")
    if requested in (runtimes.AUTO, runtimes.CPU):
        return runtimes.CPU
    runtime = runtimes.get(requested)
    if kind == "local" and runtime.delivery == "docker":
        raise ValidationError("worker_runtime", f"{requested!r} runs in a container; the local target "
                              "runs the worker environment (.venv-bench)", "auto, cpu")
    if int(spec.get("gpu_count") or 0) <= 0:
        raise ValidationError("worker_runtime", f"{requested!r} runs GPUs; a target with gpu_count 0 "
                              f"runs the {runtimes.CPU} runtime", f"auto, {runtimes.CPU}")
    return requested


def choose(spec: Mapping[str, Any], requested: str | None = None, preference: Sequence[str] = ()) -> str:
    """The runtime ``spec`` (TargetSpec fields) runs with; ``requested`` is what the fleet entry or
    its profile says (None: auto); ``preference`` orders the GPU runtimes ``auto`` picks among."""
    requested = requested or runtimes.AUTO
    if requested not in runtimes.choices():
        raise ValidationError("worker_runtime", f"{requested!r} is not a worker runtime",
                              ", ".join(runtimes.choices()))
    if spec.get("kind") == "local" or int(spec.get("gpu_count") or 0) <= 0:
        return _without_gpus(spec, requested)
    if requested == runtimes.CPU:
        raise ValidationError("worker_runtime", f"{runtimes.CPU!r} measures no GPU; this target has "
                              f"gpu_count {spec.get('gpu_count')} (set gpu_count 0 for a CPU host)",
                              ", ".join(c for c in runtimes.choices() if c != runtimes.CPU))
    machine = str(spec.get("instance_type"))
    name, model = _gpu_of(spec)
    order = [*preference, *(r.name for r in runtimes.gpu_runtimes())]
    if model is None:
        chosen = requested if requested != runtimes.AUTO else order[0]
        if name is not None:  # listed with a GPU the model table does not know
            gpus.check_runnable(name, "instance_type", machine=machine, runtime=chosen)
        return chosen
    if requested != runtimes.AUTO:
        gpus.check_runnable(name or model.name, "worker_runtime", machine=machine, runtime=requested)
        return requested
    usable = model.runnable_with()
    if not usable:
        tried = "; ".join(f"{r}: {model.runs_on(r)[1]}" for r in (x.name for x in runtimes.gpu_runtimes()))
        raise ValidationError("instance_type", f"{gpus.describe(model, name or model.name, machine)} no "
                              f"worker runtime runs (tried {tried})", gpus.allowed_runtimes(model))
    return next(r for r in order if r in usable)


def fleet_preference(entries: Sequence[tuple[Mapping[str, Any], str | None]]) -> list[str]:
    """GPU runtimes ordered by how many of the fleet's GPU targets each could run (``auto``
    targets: every runtime that runs their GPU; pinned ones: their own), the table's order among
    equals; so a runtime that runs every GPU of the fleet comes first and ``auto`` picks it."""
    table_order = [r.name for r in runtimes.gpu_runtimes()]
    counts = dict.fromkeys(table_order, 0)
    for spec, requested in entries:
        if spec.get("kind") == "local" or int(spec.get("gpu_count") or 0) <= 0:
            continue
        _, model = _gpu_of(spec)
        if requested not in (None, runtimes.AUTO):
            possible = [requested]
        elif model is None:
            possible = []
        else:
            possible = model.runnable_with()
        for name in possible:
            if name in counts:
                counts[name] += 1
    return sorted(table_order, key=lambda n: (-counts[n], table_order.index(n)))


def _possible(spec: Mapping[str, Any], requested: str | None) -> list[str] | None:
    """The GPU runtimes ``spec`` could run with (None: it runs no GPU, or its GPU is unknown)."""
    if spec.get("kind") == "local" or int(spec.get("gpu_count") or 0) <= 0:
        return None
    if requested not in (None, runtimes.AUTO):
        return [str(requested)]
    _, model = _gpu_of(spec)
    return None if model is None else model.runnable_with()


def explain(spec: Mapping[str, Any], requested: str | None, chosen: str,
            fleet: Sequence[tuple[Mapping[str, Any], str | None]] = ()) -> str:
    """Why ``spec`` runs ``chosen``: the fleet file's value, no GPU, its GPU's compute capability,
    or the fleet-wide choice, naming the targets whose GPUs forced it (``fleet``: the enabled
    targets' (spec, requested), as :func:`fleet_preference` saw them)."""
    if requested not in (None, runtimes.AUTO):
        return f"worker_runtime {requested} in the fleet file"
    possible = _possible(spec, requested)
    if spec.get("kind") == "local" or int(spec.get("gpu_count") or 0) <= 0:
        return "no GPU: the CPU runtime"
    name, model = _gpu_of(spec)
    if model is None or possible is None:
        return f"GPU {name or 'unknown'} is not in the GPU table: the first GPU runtime"
    gpu = f"{model.name} (compute capability {model.compute_capability})"
    alone = next(r.name for r in runtimes.gpu_runtimes() if r.name in possible)
    if chosen == alone:
        others = [r for r in possible if r != chosen]
        return f"its GPU {gpu} runs in {chosen}" + (f" (also in {', '.join(others)})" if others else "")
    forced = [str(other.get("name")) for other, wanted in fleet
              if (runs := _possible(other, wanted)) is not None and alone not in runs and chosen in runs]
    return (f"fleet-wide choice: {chosen} runs every GPU of the fleet; alone its GPU {gpu} would use "
            f"{alone}" + (f"; forced by {', '.join(forced)}" if forced else ""))
