"""What a scaling run measures: the fleet file's scaling profiles and groups, their points, the plan.

The fleet file's ``scaling_profiles`` and ``scaling_groups`` are validated by their models
(``gpucompare.config.models``); this module turns them into points and plans them into the JSON
a scaling task receives;
``gpucompare.scaling.launcher`` launches the planned points. Imports point one way: distributed →
this module, fleet → this module; nothing here imports either of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bench_tasks.constants import DEVICE_KINDS, DTYPES, NETWORKS, SCALING_KINDS
from gpucompare.config import models, patterns, validation
from gpucompare.config.models import (  # noqa: F401  (the launcher's vocabulary)
    DIST_KVSTORES,
    MAX_NODES,
    ScalingGroup,
    ScalingProfile,
)
from gpucompare.config.validation import ValidationError

SINGLE_NODE_KVSTORE = "device"


# -- what to measure -------------------------------------------------------------------------

@dataclass(frozen=True)
class ScalingPoint:
    """One measurement of a scaling run: a training configuration on nodes × devices.

    ``batch_size`` is the per-device batch for ``weak`` scaling and the global batch for
    ``strong`` scaling (it must then split evenly over the nodes).
    """

    network: str
    scaling: str
    batch_size: int
    nodes: int
    devices: tuple[str, ...]  # the devices of each node, e.g. ('gpu:0', 'gpu:1')
    kvstore: str = "dist_sync"
    dtype: str = "float32"
    servers: int | None = None  # None: one per worker node
    warmup: int = 5
    batches: int = 10
    repeats: int = 3
    timeout_s: float = 900.0

    def __post_init__(self) -> None:
        check = _point_check
        check(self.network in NETWORKS, "network", f"{self.network!r} is not one of {', '.join(NETWORKS)}")
        check(self.scaling in SCALING_KINDS, "scaling",
              f"{self.scaling!r} is not one of {', '.join(SCALING_KINDS)}")
        check(self.dtype in DTYPES, "dtype", f"{self.dtype!r} is not one of {', '.join(DTYPES)}")
        check(self.kvstore in DIST_KVSTORES, "kvstore",
              f"{self.kvstore!r} is not one of {', '.join(DIST_KVSTORES)}")
        for name in ("batch_size", "nodes", "batches", "repeats"):
            value = getattr(self, name)
            check(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value!r}")
        check(isinstance(self.warmup, int) and self.warmup >= 0, "warmup", "must be an integer >= 0")
        check(self.timeout_s > 0, "timeout_s", "must be > 0 seconds")
        check(bool(self.devices) and all(patterns.DEVICE.fullmatch(d) for d in self.devices)
              and len(set(self.devices)) == len(self.devices), "devices",
              f"expected distinct devices such as cpu:0 or gpu:1, got {self.devices!r}")
        check(self.servers is None or (isinstance(self.servers, int) and self.servers >= 1), "servers",
              f"must be an integer >= 1, got {self.servers!r}")
        if self.scaling == "strong":
            check(self.batch_size % self.nodes == 0, "batch_size",
                  f"strong scaling holds the global batch {self.batch_size}; it must split evenly "
                  f"over {self.nodes} nodes")

    @property
    def distributed(self) -> bool:
        return self.nodes > 1

    @property
    def device_count(self) -> int:
        return self.nodes * len(self.devices)

    @property
    def worker_batch_flag(self) -> int:
        """``--batch-sizes`` of each worker: per device (weak) or this worker's share (strong)."""
        return self.batch_size if self.scaling == "weak" else self.batch_size // self.nodes

    @property
    def server_count(self) -> int:
        return self.servers or self.nodes

    @property
    def point_id(self) -> str:
        devices = "+".join(d.replace(":", "") for d in self.devices)
        return f"{self.network}-{self.dtype}-{self.scaling}-b{self.batch_size}-n{self.nodes}-{devices}"


def _point_check(ok: bool, name: str, message: str) -> None:
    if not ok:
        raise ValueError(f"scaling point: {name}: {message}")


# -- the scaling profile (``models.ScalingProfile``) and its points ------------------------------

def parse_scaling_profile(name: Any, body: Any) -> ScalingProfile:
    """One scaling profile, as a fleet file's ``scaling_profiles.<name>`` states it."""
    named = {**body, "name": name} if isinstance(body, Mapping) else body
    return validation.validate(models.ScalingProfile, named)


def scaling_points(profile: ScalingProfile, *, host_count: int, devices_per_host: int,
                   device_kind: str) -> list[ScalingPoint]:
    """The points a group of ``host_count`` hosts with ``devices_per_host`` devices each can run,
    in the order network, scaling kind, device count, node count."""
    if device_kind not in DEVICE_KINDS:
        raise ValidationError("device_kind", f"{device_kind!r} is not allowed", ", ".join(DEVICE_KINDS))
    pairs = sorted({(n, d) for n, d in profile.pairs() if n <= host_count and d <= devices_per_host},
                   key=lambda p: (p[0] * p[1], p[0]))
    if not pairs:
        raise ValidationError("nodes", f"no (nodes, devices per node) pair of profile {profile.name} fits "
                              f"a group of {host_count} host(s) with {devices_per_host} device(s) each")
    points = []
    for network in profile.networks:
        for kind in profile.scaling:
            batch = profile.per_device_batch if kind == "weak" else profile.global_batch
            for nodes, per_node in pairs:
                if kind == "strong" and (batch % nodes or batch // nodes < per_node):
                    continue  # the global batch does not split over these nodes and devices
                points.append(ScalingPoint(
                    network=network, scaling=kind, batch_size=int(batch or 1), nodes=nodes,
                    devices=tuple(f"{device_kind}:{i}" for i in range(per_node)),
                    kvstore=profile.kvstore, dtype=profile.dtype, servers=profile.servers,
                    warmup=profile.warmup, batches=profile.batches, repeats=profile.repeats,
                    timeout_s=float(profile.timeout_s)))
    return points


#: Seconds on top of the points' own limits for a group's task: prepare, deploy, teardown.
GROUP_SLACK_S = 1800


def group_points(group: ScalingGroup, specs: Sequence[Mapping[str, Any]],
                 profile: ScalingProfile) -> list[ScalingPoint]:
    """The points of ``profile`` the group's hosts can run: GPU hosts up to their GPU count;
    CPU hosts (gpu_count 0) up to the profile's largest devices per node (CPU contexts)."""
    gpus = int(specs[0].get("gpu_count") or 0)
    devices = gpus or max(d for _n, d in profile.pairs())
    return scaling_points(profile, host_count=len(specs), devices_per_host=devices,
                          device_kind="gpu" if gpus else "cpu")


def plan_scaling_group(group: ScalingGroup, specs: Sequence[Mapping[str, Any]], profile: ScalingProfile,
                       run_id: str) -> dict[str, Any]:
    """What the scaling task of one group needs, as JSON (XCom)."""
    points = group_points(group, specs, profile)
    specs = [{**s, "options": dict(s.get("options") or {})} for s in specs]
    for spec in specs:
        if spec["kind"] == "ec2":
            # the cost guard and the TTL of each instance: it is held for every point of the run
            spec["options"]["sweep_configs"] = [points_as_sweep(points)]
    return {
        "group": group.name,
        "profile": profile.name,
        "run_id": run_id,
        "specs": specs,
        "interface": group.interface,
        "ps_verbose": group.ps_verbose,
        "points": [{**asdict(p), "devices": list(p.devices)} for p in points],
        "timeout_s": sum(p.timeout_s for p in points) + GROUP_SLACK_S,
    }


def points_as_sweep(points: Sequence[ScalingPoint]) -> dict[str, Any]:
    """The points as one worker sweep document (one matrix each): what ``bench_tasks`` and the
    ec2 cost guard understand, for estimating how long a host is held."""
    return {"matrix": [{
        "modes": ["train"], "networks": [p.network], "dtypes": [p.dtype],
        "batch_sizes": [p.worker_batch_flag], "devices": [",".join(p.devices)],
        "kvstore": p.kvstore if p.distributed else SINGLE_NODE_KVSTORE, "scaling": p.scaling,
        "warmup": p.warmup, "batches": p.batches, "repeats": p.repeats, "timeout_s": p.timeout_s,
    } for p in points]}
