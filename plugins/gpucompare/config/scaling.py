"""What a scaling run measures: the fleet file's scaling profiles and groups, their points, the plan.

Parsed from the fleet file (``gpucompare.config.fleet`` reads ``scaling_profiles`` and
``scaling_groups`` through this module) and planned into the JSON a scaling task receives;
``gpucompare.scaling.launcher`` launches the planned points. Imports point one way: distributed →
this module, fleet → this module; nothing here imports either of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bench_tasks.constants import DTYPES, NETWORKS, SCALING_KINDS
from gpucompare.config import patterns, validation
from gpucompare.config.validation import ValidationError

DIST_KVSTORES: tuple[str, ...] = ("dist_sync", "dist_device_sync")
SINGLE_NODE_KVSTORE = "device"
MAX_NODES = 256

#: A network interface name (``DMLC_INTERFACE``), e.g. eth0 or ens5.
INTERFACE_PATTERN = patterns.INTERFACE


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


# -- the scaling profile and the group ------------------------------------------------

SCALING_PROFILE_KEYS: tuple[str, ...] = (
    "description", "networks", "scaling", "per_device_batch", "global_batch", "nodes",
    "devices_per_node", "points", "kvstore", "dtype", "servers", "warmup", "batches", "repeats",
    "timeout_s",
)


@dataclass(frozen=True)
class ScalingProfile:
    """What a scaling run measures: networks × weak/strong × (nodes, devices per node).

    ``points`` (explicit ``(nodes, devices_per_node)`` pairs) replaces the product of
    ``nodes`` × ``devices_per_node`` when given. Weak scaling holds ``per_device_batch``;
    strong scaling holds ``global_batch``. Pairs the group cannot host (more nodes than
    hosts, more devices than a host has) are skipped by :func:`scaling_points`.
    """

    name: str
    networks: tuple[str, ...]
    scaling: tuple[str, ...] = ("weak",)
    per_device_batch: int | None = 32
    global_batch: int | None = None
    nodes: tuple[int, ...] = (1,)
    devices_per_node: tuple[int, ...] = (1,)
    points: tuple[tuple[int, int], ...] = ()
    kvstore: str = "dist_sync"
    dtype: str = "float32"
    servers: int | None = None
    warmup: int = 5
    batches: int = 10
    repeats: int = 3
    timeout_s: int = 900
    description: str = ""

    def pairs(self) -> list[tuple[int, int]]:
        if self.points:
            return list(self.points)
        return [(n, d) for n in self.nodes for d in self.devices_per_node]


def _int_list(field_name: str, value: Any, *, maximum: int) -> tuple[int, ...]:
    items = value if isinstance(value, list) else [value]
    return tuple(sorted({validation.check_int(field_name, v, minimum=1, maximum=maximum) for v in items}))


def _pairs(value: Any) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list) or not all(
            isinstance(p, dict) and set(p) == {"nodes", "devices_per_node"} for p in value):
        raise ValidationError("points", f"expected a list of {{nodes: N, devices_per_node: D}}, "
                              f"got {value!r}")
    return tuple((validation.check_int("points.nodes", p["nodes"], minimum=1, maximum=MAX_NODES),
                  validation.check_int("points.devices_per_node", p["devices_per_node"], minimum=1,
                                       maximum=validation.MAX_GPU_COUNT)) for p in value)


def parse_scaling_profile(name: Any, body: Any) -> ScalingProfile:
    """Validate one ``scaling_profiles`` entry of the fleet file; errors name the key."""
    name = validation.check_pattern("name", name, patterns.NAME, "a lower-case profile name")
    validation.check_keys(body, SCALING_PROFILE_KEYS, required=("networks",))
    kinds = validation.check_subset("scaling", body.get("scaling", ["weak"]), SCALING_KINDS)
    for key, kind in (("per_device_batch", "weak"), ("global_batch", "strong")):
        if kind in kinds and key not in body:
            raise ValidationError(key, f"missing: {kind} scaling holds it")

    def batch(key: str) -> int | None:
        if key not in body:
            return None
        return validation.check_int(key, body[key], minimum=1, maximum=validation.MAX_BATCH_SIZE)

    servers = body.get("servers")
    return ScalingProfile(
        name=name,
        networks=tuple(validation.check_networks(body["networks"])),
        scaling=tuple(kinds),
        per_device_batch=batch("per_device_batch"),
        global_batch=batch("global_batch"),
        nodes=_int_list("nodes", body.get("nodes", [1]), maximum=MAX_NODES),
        devices_per_node=_int_list("devices_per_node", body.get("devices_per_node", [1]),
                                   maximum=validation.MAX_GPU_COUNT),
        points=_pairs(body["points"]) if "points" in body else (),
        kvstore=validation.check_choice("kvstore", body.get("kvstore", "dist_sync"), DIST_KVSTORES),
        dtype=validation.check_choice("dtype", body.get("dtype", "float32"), DTYPES),
        servers=None if servers is None else validation.check_int("servers", servers, minimum=1,
                                                                  maximum=MAX_NODES),
        **validation.check_measurement(body),
        description=str(body.get("description", "")),
    )


def scaling_points(profile: ScalingProfile, *, host_count: int, devices_per_host: int,
                   device_kind: str) -> list[ScalingPoint]:
    """The points a group of ``host_count`` hosts with ``devices_per_host`` devices each can run,
    in the order network, scaling kind, device count, node count."""
    validation.check_choice("device_kind", device_kind, ("cpu", "gpu"))
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


SCALING_GROUP_KEYS: tuple[str, ...] = ("name", "targets", "profile", "enabled", "interface", "ps_verbose")
#: Seconds on top of the points' own limits for a group's task: prepare, deploy, teardown.
GROUP_SLACK_S = 1800


@dataclass(frozen=True)
class ScalingGroup:
    """Hosts of the fleet that run one scaling profile together (a parameter-server job)."""

    name: str
    targets: tuple[str, ...]
    profile: str
    enabled: bool = True
    interface: str | None = None
    ps_verbose: int = 0


def parse_scaling_group(entry: Any, targets: Mapping[str, Mapping[str, Any]],
                        profiles: Mapping[str, ScalingProfile]) -> ScalingGroup:
    """Validate one ``scaling_groups`` entry against the fleet's targets (specs by name) and
    scaling profiles: ssh or ec2 targets of one provider, instance type and GPU count."""
    if not isinstance(entry, Mapping):
        raise ValidationError("", "expected a mapping", ", ".join(SCALING_GROUP_KEYS))
    unknown = sorted(set(entry) - set(SCALING_GROUP_KEYS))
    if unknown:
        raise ValidationError(unknown[0], "unknown key", ", ".join(SCALING_GROUP_KEYS))
    name = validation.check_pattern("name", entry.get("name"), patterns.NAME,
                                    "a lower-case group name")
    names = validation.check_subset("targets", entry.get("targets"), tuple(targets))
    specs = [targets[n] for n in names]
    kinds = {s["kind"] for s in specs}
    if len(kinds) != 1 or not kinds <= {"ssh", "ec2"}:
        raise ValidationError("targets", f"kinds {sorted(kinds)}: a group's hosts are all ssh or all ec2")
    for key in ("provider", "instance_type", "gpu_count"):
        if len({s[key] for s in specs}) != 1:
            raise ValidationError("targets", f"the hosts differ in {key}: a group is one kind of machine")
    profile = validation.check_choice("profile", entry.get("profile"), tuple(profiles))
    interface = entry.get("interface")
    if interface is not None and (not isinstance(interface, str)
                                  or not INTERFACE_PATTERN.fullmatch(interface)):
        raise ValidationError("interface", f"{interface!r} is not a network interface name",
                              "e.g. eth0, ens5")
    group = ScalingGroup(
        name=name, targets=tuple(names), profile=profile,
        enabled=validation.check_bool("enabled", entry.get("enabled", True)),
        interface=interface,
        ps_verbose=validation.check_int("ps_verbose", entry.get("ps_verbose", 0), minimum=0, maximum=2),
    )
    group_points(group, specs, profiles[profile])  # refuses a profile the group cannot run
    return group


def group_points(group: ScalingGroup, specs: Sequence[Mapping[str, Any]],
                 profile: ScalingProfile) -> list[ScalingPoint]:
    """The points of ``profile`` the group's hosts can run: GPU hosts up to their GPU count;
    CPU hosts (gpu_count 0) up to the profile's largest devices per node (CPU contexts)."""
    gpus = int(specs[0].get("gpu_count") or 0)
    devices = gpus or max(max(profile.devices_per_node), max((d for _n, d in profile.points), default=1))
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
