"""The manual DAG's trigger params: their model (:class:`TriggerParams`) and the form made from it.

The form (``dags/gpucompare_manual.py``) is :func:`form_fields`: each param's default, title,
description and JSON schema come from :class:`TriggerParams` (``model_json_schema``), so the form
refuses what it can (types, enums, patterns, ranges) with the same rules the run's first task
applies. That task calls :func:`check_request`: the model again (the form's checks can be skipped
through the API or the CLI), then the rules between fields, through the target's own model
(``Target``), so an ec2 instance type or an ssh connection is judged as in the fleet file.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from gpucompare.config import patterns, runtime_choice, runtimes, validation
from gpucompare.config.fields import Number, OneOf, Whole
from gpucompare.config.models.options import Target
from gpucompare.config.models.values import (
    KNOWN_PROVIDERS,
    MAX_GPU_COUNT,
    BatchSizes,
    ConnId,
    Currency,
    Dtypes,
    InstanceLabel,
    Market,
    Modes,
    Name,
    Networks,
    Provider,
    Region,
    Strict,
)
from gpucompare.config.validation import ValidationError


class TriggerParams(Strict):
    """What the manual DAG's form asks; the defaults are the form's."""

    kind: Annotated[str, OneOf(patterns.TARGET_KINDS), Field(
        title="Target kind",
        description="ec2 (provisioned and terminated), ssh (rented host), local")] = "ec2"
    provider: Annotated[Provider, Field(
        title="Provider", description="aws for ec2, local for local, the renter's name for ssh",
        examples=list(KNOWN_PROVIDERS))] = "aws"
    instance_type: Annotated[InstanceLabel, Field(
        title="Instance type", description="EC2 family.size (p3.2xlarge), or the renter's machine name")] \
        = "g5.xlarge"
    region: Annotated[Region | None, Field(
        title="Region", description="AWS region for ec2; optional for others")] = "us-east-1"
    market: Annotated[Market, Field(
        title="Market",
        description="spot falls back to on-demand when refused (ec2 only)")] = patterns.DEFAULT_MARKET
    gpu_count: Annotated[int, Whole(0, MAX_GPU_COUNT), Field(
        title="GPU count", description="GPUs of the machine; 0 for a CPU-only host")] = 1
    networks: Annotated[Networks, Field(
        title="Networks", description="classic MXNet networks to measure")] = ("resnet-50",)
    batch_sizes: Annotated[BatchSizes, Field(
        title="Batch sizes", description="global batch sizes, each > 0")] = (1, 8, 32)
    modes: Annotated[Modes, Field(title="Modes", description="score (inference) and/or train")] = ("score",)
    dtypes: Annotated[Dtypes, Field(title="Data types", description="float32 and/or float16")] = ("float32",)
    worker_runtime: Annotated[str, OneOf(runtimes.choices()), Field(
        title="Worker runtime",
        description="auto picks one that runs the GPU; pip-cu112 (venv, up to Ada), ngc-… (NVIDIA's "
                    "MXNet container, Hopper too; docker on the host), cpu")] = "auto"
    profile: Annotated[Name, Field(
        title="Profile", description="fleet profile for warm-up, batches, repeats, time limits")] = "nightly"
    ssh_conn_id: Annotated[ConnId | None, Field(
        title="SSH connection", description="Airflow SSH connection of a rented host (ssh only)")] = None
    budget_cap: Annotated[float, Number(0.0, 1e6), Field(
        title="Budget cap", description="largest estimated cost accepted for an ec2 run")] = 5.0
    budget_currency: Annotated[Currency, Field(
        title="Budget currency", description="currency of the budget cap")] = "USD"

    def request(self) -> dict[str, Any]:
        """The rules between fields, then the normalised request ``fleet.plan_manual`` takes:
        ``target`` (the ``TargetSpec`` fields; name derived from provider and instance type),
        ``networks``, ``batch_sizes``, ``modes``, ``dtypes``, ``profile``, ``budget_cap``,
        ``budget_currency``."""
        options: dict[str, Any] = {}
        if self.kind == "ssh":
            if self.ssh_conn_id is None:
                raise ValidationError("ssh_conn_id", "missing: a rented host (kind ssh) is reached through "
                                      "an Airflow SSH connection; name it", "an Airflow connection id")
            options["ssh_conn_id"] = self.ssh_conn_id
        elif self.ssh_conn_id is not None:
            raise ValidationError("ssh_conn_id", f"{self.ssh_conn_id!r} is not allowed (only ssh targets "
                                  f"use it, not {self.kind})", "empty")
        if self.kind == "ec2":
            options.update(budget_cap=self.budget_cap, budget_currency=self.budget_currency)
        # a readable, unique-enough target name for logs and lake rows: provider-instance type
        name = patterns.NOT_NAME_CHAR.sub("-", f"{self.provider}-{self.instance_type}".lower())[:40]
        target = {"name": name, "kind": self.kind, "provider": self.provider,
                  "instance_type": self.instance_type, "region": self.region, "market": self.market,
                  "gpu_count": self.gpu_count, "worker_runtime": self.worker_runtime, "options": options}
        try:  # the target's own model; the fleet's defaults (AMI, bucket …) are merged by the plan
            spec = validation.check("", Target, target, context={"partial": True}).spec()
            spec["worker_runtime"] = runtime_choice.choose(spec, self.worker_runtime)
        except ValidationError as exc:
            field = exc.field.removeprefix("options.")
            raise ValidationError(field, exc.message, exc.allowed, exc.more) from None
        return {
            "target": spec,
            "networks": list(self.networks),
            "batch_sizes": list(self.batch_sizes),
            "modes": list(self.modes),
            "dtypes": list(self.dtypes),
            "profile": self.profile,
            "budget_cap": self.budget_cap,
            "budget_currency": self.budget_currency,
        }


def check_request(params: Any) -> dict[str, Any]:
    """A manual run's params, checked whole (``TriggerParams``, then ``request()``)."""
    return validation.validate(TriggerParams, params).request()


def _form_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """One property of ``TriggerParams.model_json_schema()`` as Airflow's form renders it: an
    optional value is ``type: [<type>, "null"]`` (the form has no widget for ``anyOf``), and
    title, description and default go to ``Param`` itself."""
    schema = {k: v for k, v in schema.items() if k not in ("title", "description", "default")}
    variants = schema.pop("anyOf", None)
    if variants:
        [value] = [v for v in variants if v.get("type") != "null"]
        value = {k: v for k, v in value.items() if k != "description"}
        schema = {**value, **schema, "type": [value["type"], "null"]}
    return schema


def form_fields() -> dict[str, dict[str, Any]]:
    """Per param: ``default``, ``title``, ``description`` and ``schema`` (keyword arguments of
    ``airflow.sdk.Param``), all from :class:`TriggerParams`."""
    properties = TriggerParams.model_json_schema()["properties"]
    fields = {}
    for name, info in TriggerParams.model_fields.items():
        default = info.default
        fields[name] = {
            "default": list(default) if isinstance(default, tuple) else default,
            "title": info.title,
            "description": info.description,
            "schema": _form_schema(properties[name]),
        }
    return fields
