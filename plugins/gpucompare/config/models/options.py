"""The options of each target kind, one model per kind, and the target itself: a union
discriminated on ``kind`` (:data:`Target`), as a fleet entry, a manual request and a target class
building from a plan state it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, model_validator

from gpucompare.config import instances, patterns, runtime_choice
from gpucompare.config.fields import Number, OneOf, Whole
from gpucompare.config.models.prices import DeclaredPrice, TargetPrice
from gpucompare.config.models.values import (
    DEFAULT_CONTAINER_AMI,
    PLACEHOLDER_BUCKET,
    REQUIREMENTS,
    AmiRef,
    AvailabilityZones,
    AwsRegion,
    BasePython,
    Bucket,
    ConnId,
    Currency,
    Deployment,
    DockerGpus,
    DockerImage,
    Ec2InstanceType,
    Enabled,
    GpuCount,
    InstanceLabel,
    InstanceProfile,
    LocalPath,
    Market,
    Money,
    Name,
    Prefix,
    Provider,
    Region,
    RemotePath,
    SecurityGroups,
    Strict,
    SubnetId,
    Subnets,
    Tags,
    TtlMinutes,
    VolumeSize,
    WorkerRuntime,
    partial_options,
    rule,
)
from gpucompare.config.validation import ValidationError


# -- target options, one model per kind -----------------------------------------------------------
class _Options(Strict):
    #: options a complete target needs (not the fleet's per-kind defaults, nor a manual request
    #: before those are merged in)
    required: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _complete(self, info: ValidationInfo) -> Any:
        if not partial_options(info):
            for name in self.required:
                if getattr(self, name) is None:
                    raise rule(name, "None is not allowed (missing: a target of this kind needs it)")
        return self

    def given(self) -> dict[str, Any]:
        """The options as stated (what a ``TargetSpec`` carries), tuples as lists for JSON."""
        stated = self.model_dump(exclude_unset=True)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in stated.items()}


class LocalOptions(_Options):
    """A ``local`` target: the worker interpreter, where runs go, how it is stopped."""

    python: LocalPath | None = None  # default: settings.bench_python()
    work_dir: LocalPath | None = None  # default: $GPUCOMPARE_LOCAL_WORK_DIR or <tmp>/gpucompare-local
    kill_grace_s: Annotated[float, Number(0.1, 600.0)] = 10.0
    remove_run_dir: Enabled = False


class SshOptions(_Options):
    """An ``ssh`` target (a rented host): connection, remote paths, isolation, patience."""

    required: ClassVar[tuple[str, ...]] = ("ssh_conn_id",)

    ssh_conn_id: ConnId | None = None
    remote_dir: RemotePath | None = None
    python: RemotePath | None = None
    base_python: BasePython = "python3"
    requirements: Annotated[str, OneOf(REQUIREMENTS)] | None = None  # default: from the gpu_count
    use_docker: Enabled = False
    image: DockerImage = "gpucompare-worker:latest"
    docker_gpus: DockerGpus = "all"
    known_hosts_file: LocalPath | None = None
    connect_retries: Annotated[int, Whole(1, 30)] = 6
    retry_backoff_s: Annotated[float, Number(0.05, 120)] = 2.0
    poll_interval_s: Annotated[float, Number(0.05, 120)] = 2.0
    kill_grace_s: Annotated[int, Whole(1, 600)] = 20
    env_timeout_s: Annotated[int, Whole(10, 86400)] = 3600
    remove_run_dir: Enabled = False


class Ec2Options(_Options):
    """An ``ec2`` target: the image, the role and bucket, the network, limits and the budget.

    ``sweep_configs``, ``deployment`` and a derived ``ttl_minutes`` are added by the plan
    (``gpucompare.config.fleet``); a fleet file does not need to state them. A manual request is
    checked with the context ``{"partial": True}`` (the fleet's defaults are merged later)."""

    required: ClassVar[tuple[str, ...]] = ("ami", "instance_profile", "results_bucket")

    ami: AmiRef | None = None
    instance_profile: InstanceProfile | None = None
    results_bucket: Bucket | None = None
    results_prefix: Prefix = "gpucompare"
    aws_conn_id: ConnId = "aws_default"
    subnet_id: SubnetId | None = None
    #: where a launch may go, tried in order when one has no capacity (subnets, or zones of the
    #: default VPC); none given: subnet_id, else every zone of the region offering the type
    subnets: Subnets = ()
    availability_zones: AvailabilityZones = ()
    security_group_ids: SecurityGroups = ()
    ttl_minutes: TtlMinutes | None = None  # default: derived by the plan
    volume_size_gb: VolumeSize = 150
    remote_root: RemotePath = "/opt/gpucompare"
    bench_python: RemotePath | None = None
    budget_cap: Money | None = None  # 0 refuses every paid run
    budget_currency: Currency = "USD"
    sweep_configs: tuple[dict[str, Any], ...] = ()
    poll_interval_s: Annotated[float, Number(0.1, 600)] = 15.0
    agent_timeout_s: Annotated[float, Number(1, 7200)] = 900.0
    launch_timeout_s: Annotated[float, Number(1, 7200)] = 900.0
    deploy_timeout_s: Annotated[float, Number(1, 14400)] = 1800.0
    #: replacements a night may launch after its instance was lost mid-sweep or during its deploy
    #: (``ec2.reclaim``)
    max_reclaims: Annotated[int, Whole(0, 10)] = 2
    tags: Tags = Field(default_factory=dict)
    deployment: Deployment | None = None
    #: the AMI when the worker runtime is a container (ngc-…): Docker and the Container Toolkit
    container_ami: AmiRef = DEFAULT_CONTAINER_AMI

    @model_validator(mode="before")
    @classmethod
    def _one_is_a_list(cls, data: Any) -> Any:
        # a single sweep (a mapping) is a list of one, as in the worker's own files
        if isinstance(data, Mapping) and isinstance(data.get("sweep_configs"), Mapping):
            return {**data, "sweep_configs": [data["sweep_configs"]]}
        return data

    @model_validator(mode="after")
    def _one_placement_option(self) -> Any:
        given = [name for name in ("subnet_id", "subnets", "availability_zones") if getattr(self, name)]
        if len(given) > 1:
            raise rule(given[1], f"is not allowed with {given[0]}: give one of subnet_id, subnets or "
                       "availability_zones (a subnet lies in one zone)")
        return self


# -- targets: a union discriminated on kind -------------------------------------------------------
class _TargetFields(Strict):
    kind: str  # each kind's class narrows it to its literal (the union's tag); first in key lists
    name: Name
    provider: Provider
    instance_type: InstanceLabel
    region: Region | None = None
    market: Market = patterns.DEFAULT_MARKET
    gpu_count: GpuCount = 0
    profile: Name = "nightly"  # the fleet's sweep profile (fleet entries only)
    enabled: Enabled = True  # fleet entries only
    #: None: the profile's, else auto (``config.runtime_choice``); the plan states the one chosen
    worker_runtime: WorkerRuntime | None = None
    price: TargetPrice | None = None  # the machine's own price, declared (fleet entries only)

    def spec(self) -> dict[str, Any]:
        """The ``gpucompare.targets.base.TargetSpec`` fields, as JSON for XCom."""
        return {"name": self.name, "kind": self.kind, "provider": self.provider,
                "instance_type": self.instance_type, "region": self.region, "market": self.market,
                "gpu_count": self.gpu_count, "worker_runtime": self.worker_runtime or "auto",
                "options": self.options.given()}  # type: ignore[attr-defined]

    def declared_price(self) -> DeclaredPrice | None:
        """``price`` as a price of this target's machine (provider, type, region, market)."""
        if self.price is None:
            return None
        return DeclaredPrice(**self.price.model_dump(exclude_unset=True), provider=self.provider,
                             instance_type=self.instance_type, region=self.region, market=self.market,
                             gpu_count=self.gpu_count or None)

    @model_validator(mode="after")
    def _runnable_gpu(self) -> Any:
        """The one place a target's GPU is checked (``config.runtime_choice``): a GPU no worker
        runtime runs (B200, K80 …), or that the stated runtime does not run (H100 with pip-cu112),
        is refused here, wherever the target comes from (fleet file, trigger form, a target class
        building from a plan), before anything is provisioned."""
        try:
            runtime_choice.choose(self.spec(), self.worker_runtime)
        except ValidationError as exc:
            raise rule(exc.field, exc.message, exc.allowed or "") from None
        return self

    @model_validator(mode="after")
    def _gpu_count_as_listed(self) -> Any:
        """A stated ``gpu_count`` (0: not stated) must be the count the instance type table
        (``data/instances.csv``) lists for the type: a p5e.48xlarge with ``gpu_count: 1`` would
        sweep one of its eight H200s and price the whole machine against that."""
        listed = instances.lookup(self.provider, self.instance_type)
        if listed is not None and self.gpu_count and self.gpu_count != listed.gpu_count:
            machine = f"{self.provider} {self.instance_type}"
            raise rule("gpu_count", f"{self.gpu_count} is not allowed for {machine}: it has "
                       f"{listed.gpu_count} × {listed.gpu_model} (data/instances.csv, {listed.source})",
                       str(listed.gpu_count))
        return self

    @model_validator(mode="after")
    def _spot_is_ec2(self) -> Any:
        if self.market == "spot" and self.kind != "ec2":
            raise rule("market", f"'spot' is not allowed for a {self.kind} target",
                       patterns.DEFAULT_MARKET)
        return self


class LocalTarget(_TargetFields):
    """This machine, through the worker environment."""

    kind: Literal["local"]
    provider: Annotated[str, OneOf(("local",))]
    options: LocalOptions = Field(default_factory=LocalOptions)


class SshTarget(_TargetFields):
    """A rented host reached over SSH (any provider name but aws and local)."""

    kind: Literal["ssh"]
    options: SshOptions = Field(default_factory=SshOptions)


class Ec2Target(_TargetFields):
    """An EC2 instance provisioned for the run and terminated after it."""

    kind: Literal["ec2"]
    provider: Annotated[str, OneOf(("aws",))]
    instance_type: Ec2InstanceType
    region: AwsRegion
    options: Ec2Options = Field(default_factory=Ec2Options)

    @model_validator(mode="after")
    def _real_bucket(self) -> Any:
        """The shipped example's bucket is a placeholder: a target that can run must name a real one."""
        if self.enabled and self.options.results_bucket == PLACEHOLDER_BUCKET:
            raise rule("options.results_bucket", f"{PLACEHOLDER_BUCKET!r} is the shipped example's "
                       "placeholder, not your bucket: set defaults.ec2.results_bucket (or this "
                       "target's options.results_bucket) in your fleet file",
                       "an S3 bucket of your account that the orchestrator role may write")
        return self



Target = Annotated[LocalTarget | SshTarget | Ec2Target, Field(discriminator="kind")]
