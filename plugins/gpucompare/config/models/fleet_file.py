"""The fleet file (``dags/config/fleet.yaml``) as one model: :class:`FleetFile`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import Field, model_validator

from gpucompare.config.fields import Whole
from gpucompare.config.models.options import (
    Ec2Options,
    Ec2Target,
    LocalOptions,
    LocalTarget,
    SshOptions,
    SshTarget,
    Target,
)
from gpucompare.config.models.prices import DeclaredPrice
from gpucompare.config.models.profiles import ScalingGroup, ScalingProfile, SweepProfile
from gpucompare.config.models.values import (
    DEFAULT_MAX_INSTANCES,
    DEFAULT_SCHEDULE,
    Cron,
    Currency,
    Money,
    Name,
    Strict,
    rule,
)


# -- the fleet file -----------------------------------------------------------------------------------
class _SshDefaults(SshOptions):
    required: ClassVar[tuple[str, ...]] = ()


class _Ec2Defaults(Ec2Options):
    required: ClassVar[tuple[str, ...]] = ()


class Defaults(Strict):
    """Options merged into every target of a kind (manual runs too); each may be partial."""

    local: LocalOptions | None = None
    ssh: _SshDefaults | None = None
    ec2: _Ec2Defaults | None = None


class BudgetCeiling(Strict):
    amount: Money
    currency: Currency = "USD"


class FleetFile(Strict):
    """``dags/config/fleet.yaml``: see ``gpucompare.config.fleet`` for the format."""

    schedule: Cron = DEFAULT_SCHEDULE
    max_instances: Annotated[int, Whole(1, 1000)] = DEFAULT_MAX_INSTANCES
    defaults: Defaults = Field(default_factory=Defaults)
    budget_ceiling: BudgetCeiling | None = None
    profiles: Annotated[dict[Name, SweepProfile], Field(min_length=1)]
    targets: Annotated[list[Target], Field(min_length=1)]
    scaling_profiles: dict[Name, ScalingProfile] = Field(default_factory=dict)
    scaling_groups: list[ScalingGroup] = Field(default_factory=list)
    #: prices the user declares for machines of their own (``config.models.prices``)
    prices: list[DeclaredPrice] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _prepare(cls, data: Any) -> Any:
        """Profile names from their keys; each target's options over its kind's defaults."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        for key in ("defaults", "scaling_profiles", "scaling_groups", "prices"):
            if data.get(key) is None:
                data.pop(key, None)
        for key in ("profiles", "scaling_profiles"):
            if isinstance(data.get(key), Mapping):
                data[key] = {name: {**body, "name": name} if isinstance(body, Mapping) else body
                             for name, body in data[key].items()}
        defaults = data.get("defaults") or {}
        if isinstance(data.get("targets"), list) and isinstance(defaults, Mapping):
            targets = []
            for entry in data["targets"]:
                if isinstance(entry, Mapping) and isinstance(defaults.get(entry.get("kind")), Mapping):
                    own = entry.get("options") or {}
                    if isinstance(own, Mapping):
                        entry = {**entry, "options": {**defaults[entry["kind"]], **own}}
                targets.append(entry)
            data["targets"] = targets
        return data

    @model_validator(mode="after")
    def _references(self) -> FleetFile:
        names: list[str] = []
        for index, target in enumerate(self.targets):
            if target.name in names:
                raise rule(f"targets[{index}].name", f"{target.name!r} is used twice",
                           "a name unique in the fleet")
            if target.profile not in self.profiles:
                raise rule(f"targets[{index}].profile", f"{target.profile!r} is not allowed",
                           ", ".join(self.profiles))
            names.append(target.name)
        groups: list[str] = []
        for index, group in enumerate(self.scaling_groups):
            where = f"scaling_groups[{index}]"
            if group.name in groups:
                raise rule(f"{where}.name", f"{group.name!r} is used twice", "a name unique in the fleet")
            groups.append(group.name)
            for name in group.targets:
                if name not in names:
                    raise rule(f"{where}.targets", f"{name!r} is not allowed", ", ".join(names))
            if group.profile not in self.scaling_profiles:
                raise rule(f"{where}.profile", f"{group.profile!r} is not allowed",
                           ", ".join(self.scaling_profiles))
            specs = [self.target(n) for n in group.targets]
            kinds = {s.kind for s in specs}
            if len(kinds) != 1 or not kinds <= {"ssh", "ec2"}:
                raise rule(f"{where}.targets",
                           f"kinds {sorted(kinds)}: a group's hosts are all ssh or all ec2")
            for key in ("provider", "instance_type", "gpu_count"):
                if len({getattr(s, key) for s in specs}) != 1:
                    raise rule(f"{where}.targets",
                               f"the hosts differ in {key}: a group is one kind of machine")
        return self

    def declared_prices(self) -> list[DeclaredPrice]:
        """Every declared price: the ``prices`` entries, then each target's own ``price``."""
        own = [p for t in self.targets if (p := t.declared_price()) is not None]
        return [*self.prices, *own]

    def target(self, name: str) -> LocalTarget | SshTarget | Ec2Target:
        return next(t for t in self.targets if t.name == name)

    def ceiling(self) -> tuple[float, str] | None:
        """(amount, currency) of ``budget_ceiling``; absent: the ec2 defaults' ``budget_cap``."""
        if self.budget_ceiling is not None:
            return self.budget_ceiling.amount, self.budget_ceiling.currency
        ec2 = self.defaults.ec2
        if ec2 is None or ec2.budget_cap is None:
            return None
        return ec2.budget_cap, ec2.budget_currency
