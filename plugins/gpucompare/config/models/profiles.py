"""What to measure: a sweep profile (and the worker's sweep document it makes), a scaling
profile and a scaling group of the fleet file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import ConfigDict, model_validator

from bench_tasks.configs import ConfigError, parse_sweep
from bench_tasks.constants import (
    DEFAULT_CONFIG_TIMEOUT_S,
    DEFAULT_REPEATS,
    DEFAULT_TIMED_BATCHES,
    DEFAULT_WARMUP_BATCHES,
    DTYPES,
    KVSTORES,
    MAX_BATCH_SIZE,
    MAX_REPEATS,
    MAX_TIMED_BATCHES,
    MAX_WARMUP_BATCHES,
    NAMED_METHODOLOGIES,
    SCALING_KINDS,
)
from gpucompare.config import patterns
from gpucompare.config.fields import Matching, OneOf, Subset, TextList, Whole, WholeList
from gpucompare.config.models.values import (
    DIST_KVSTORES,
    MAX_GPU_COUNT,
    MAX_NODES,
    MAX_TIMEOUT_S,
    BatchSizes,
    DeviceLists,
    Dtypes,
    Enabled,
    Interface,
    Modes,
    Name,
    Networks,
    Strict,
    WorkerRuntime,
    rule,
)


# -- sweep profiles ---------------------------------------------------------------------------------
def _name_is_the_key(schema: dict[str, Any]) -> None:
    """JSON schema of a profile as the file states it: its name is its key, not a field."""
    schema["properties"].pop("name", None)
    schema["required"] = [key for key in schema.get("required", []) if key != "name"]


class ModeOverride(Strict):
    """What a profile sets for one mode only (e.g. fewer networks for training)."""

    networks: Networks | None = None
    batch_sizes: BatchSizes | None = None
    dtypes: Dtypes | None = None
    devices: DeviceLists | None = None
    kvstore: Annotated[str, OneOf(KVSTORES)] | None = None
    scaling: Annotated[str, OneOf(SCALING_KINDS)] | None = None


class _Measurement(Strict):
    """How each configuration is measured; the limits are the worker's own."""

    warmup: Annotated[int, Whole(0, MAX_WARMUP_BATCHES)] = DEFAULT_WARMUP_BATCHES
    batches: Annotated[int, Whole(1, MAX_TIMED_BATCHES)] = DEFAULT_TIMED_BATCHES
    repeats: Annotated[int, Whole(1, MAX_REPEATS)] = DEFAULT_REPEATS
    timeout_s: Annotated[int, Whole(1, MAX_TIMEOUT_S)] = DEFAULT_CONFIG_TIMEOUT_S
    description: str = ""


class SweepProfile(_Measurement):
    """What to measure on a target: networks × batch sizes × modes × dtypes, and how."""

    model_config = ConfigDict(json_schema_extra=_name_is_the_key)

    name: Name
    networks: Networks
    batch_sizes: BatchSizes
    modes: Modes
    dtypes: Dtypes = ("float32",)
    devices: DeviceLists | None = None  # None (or "auto"): derived from the target's gpu_count
    methodology: Annotated[str, OneOf(NAMED_METHODOLOGIES)] = "official"
    score: ModeOverride | None = None
    train: ModeOverride | None = None
    #: the runtime of the profile's targets that do not state one (None: auto)
    worker_runtime: WorkerRuntime | None = None

    @model_validator(mode="before")
    @classmethod
    def _auto_devices(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and data.get("devices") == "auto":
            return {**data, "devices": None}
        return data

    @model_validator(mode="after")
    def _the_worker_accepts_it(self) -> SweepProfile:
        # the worker's own parser has the last word on the sweeps this profile produces
        for mode in self.modes:
            try:
                parse_sweep(sweep_config(self, mode, gpu_count=1), where=f"{mode} sweep")
            except ConfigError as exc:
                raise rule(mode, f"the worker refuses it: {exc.where}: {exc.message}") from None
        return self


def default_devices(mode: str, gpu_count: int) -> list[str]:
    """CPU hosts run on ``cpu``; GPU hosts score on one GPU and train on one and on all of them."""
    if gpu_count <= 0:
        return ["cpu"]
    if mode == "score" or gpu_count == 1:
        return ["gpu:0"]
    return ["gpu:0", ",".join(f"gpu:{i}" for i in range(gpu_count))]


def sweep_config(profile: SweepProfile, mode: str, gpu_count: int) -> dict[str, Any]:
    """The worker's sweep document for one mode of a profile on a machine with ``gpu_count`` GPUs."""
    override = getattr(profile, mode, None)
    stated = override.model_dump(exclude_none=True) if override is not None else {}
    matrix: dict[str, Any] = {
        "modes": [mode],
        "networks": list(stated.pop("networks", profile.networks)),
        "batch_sizes": list(stated.pop("batch_sizes", profile.batch_sizes)),
        "dtypes": list(stated.pop("dtypes", profile.dtypes)),
        "devices": list(stated.pop("devices", profile.devices or default_devices(mode, gpu_count))),
        **stated,
    }
    return {
        "timeout_s": profile.timeout_s,
        "warmup": profile.warmup,
        "batches": profile.batches,
        "repeats": profile.repeats,
        "methodology": profile.methodology,
        "matrix": [matrix],
    }


# -- scaling ------------------------------------------------------------------------------------------
class ScalingPair(Strict):
    nodes: Annotated[int, Whole(1, MAX_NODES)]
    devices_per_node: Annotated[int, Whole(1, MAX_GPU_COUNT)]


class ScalingProfile(_Measurement):
    """What a scaling run measures: networks × weak/strong × (nodes, devices per node).

    ``points`` (explicit pairs) replaces the product of ``nodes`` × ``devices_per_node`` when
    given. Weak scaling holds ``per_device_batch``; strong scaling holds ``global_batch``.
    Pairs a group cannot host are skipped by ``config.scaling.scaling_points``.
    """

    model_config = ConfigDict(json_schema_extra=_name_is_the_key)

    name: Name
    networks: Networks
    scaling: Annotated[tuple[str, ...], Subset(SCALING_KINDS)] = ("weak",)
    per_device_batch: Annotated[int, Whole(1, MAX_BATCH_SIZE)] | None = None
    global_batch: Annotated[int, Whole(1, MAX_BATCH_SIZE)] | None = None
    nodes: Annotated[tuple[int, ...], WholeList(1, MAX_NODES, sort=True)] = (1,)
    devices_per_node: Annotated[tuple[int, ...], WholeList(1, MAX_GPU_COUNT, sort=True)] = (1,)
    points: tuple[ScalingPair, ...] = ()
    kvstore: Annotated[str, OneOf(DIST_KVSTORES)] = "dist_sync"
    dtype: Annotated[str, OneOf(DTYPES)] = "float32"
    servers: Annotated[int, Whole(1, MAX_NODES)] | None = None

    @model_validator(mode="after")
    def _batch_of_each_kind(self) -> ScalingProfile:
        for key, kind in (("per_device_batch", "weak"), ("global_batch", "strong")):
            if kind in self.scaling and getattr(self, key) is None:
                raise rule(key, f"missing: {kind} scaling holds it")
        return self

    def pairs(self) -> list[tuple[int, int]]:
        if self.points:
            return [(p.nodes, p.devices_per_node) for p in self.points]
        return [(n, d) for n in self.nodes for d in self.devices_per_node]


class ScalingGroup(Strict):
    """Hosts of the fleet that run one scaling profile together (a parameter-server job)."""

    name: Name
    targets: Annotated[tuple[str, ...], TextList(Matching(patterns.NAME, "names of the fleet's targets"))]
    profile: Name
    enabled: Enabled = True
    interface: Interface | None = None
    ps_verbose: Annotated[int, Whole(0, 2)] = 0
