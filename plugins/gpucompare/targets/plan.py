"""``python -m gpucompare plan``: each target's night before anything runs (``targets.night``).

For every enabled target of a fleet file (or the one named with ``--target``, enabled or not)
it expands the target's profile into the sweeps the nightly DAG would run
(``config.fleet.plan_target``) and prints the expected seconds of each phase, which are paid
for, what they cost, and where each figure came from (the lake's recorded phases, or today's
constants), then the night's wall, billed and timed time, billed ÷ timed and its cost. For an
ec2 target it asks the target itself (``Ec2Target.night_estimate``), the very call its cost
guard makes, so the figures are the guard's.
"""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass
from typing import Any

from gpucompare import settings
from gpucompare.errors import PermanentError, UsageError
from gpucompare.targets.base import TargetError

log = logging.getLogger(__name__)

#: the DAG run id the plans are made for (it only names the run)
PLAN_RUN = "plan"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fleet", default=None,
                        help="the fleet file (default: the fleet setting, GPUCOMPARE_FLEET, else the shipped "
                             "one)")
    parser.add_argument("--target", default=None,
                        help="only this target of the file (enabled or not); default: every enabled target")
    parser.add_argument("--lake", default=None,
                        help="the lake whose recorded phases, prices and results are used (default: the lake "
                             "setting, as the cost guard reads it)")
    parser.add_argument("--json", action="store_true", help="print the estimates as JSON")


@dataclass(frozen=True)
class TargetPlan:
    """One target's night and the worker runtime it will use: why, and whether its recorded
    history used another (then its figures are not comparable with the earlier nights')."""

    estimate: Any  # NightEstimate
    runtime: str
    runtime_reason: str
    history_runtime: str | None = None
    #: the target's budget cap (None: no cap, so the cost guard lets an unpriced night run)
    budget_cap: float | None = None

    def fix_command(self) -> str:
        """The command that puts a current price for this target into the price history."""
        e = self.estimate
        if e.provider == "aws":
            return (f"gpucompare refresh-prices --provider aws --region {e.region or 'us-east-1'} "
                    f"--instance-types {e.instance_type}")
        return (f"gpucompare add-price --provider {e.provider} --instance-type {e.instance_type} "
                "--per-hour PRICE")

    @property
    def price_warning(self) -> str | None:
        """A price the table itself calls superseded, or no price where the cost guard refuses."""
        e = self.estimate
        if e.cost_estimate is not None and "superseded" in (e.cost_estimate.price_source or "").lower():
            return (f"the price table calls this price superseded ({e.cost_estimate.price_source}); the "
                    f"cost is stale: run `{self.fix_command()}`")
        if e.cost is None and self.budget_cap is not None:
            return (f"unpriced with budget_cap {self.budget_cap:g}: the cost guard will refuse this night; "
                    f"run `{self.fix_command()}` (or remove budget_cap)")
        return None

    @property
    def runtime_warning(self) -> str | None:
        if self.history_runtime is None or self.history_runtime == self.runtime:
            return None
        return (f"its recorded history ran {self.history_runtime}, this night runs {self.runtime}: a new "
                "software stack, so its figures start a new series (not comparable with the earlier ones)")

    def to_dict(self) -> dict[str, Any]:
        return {**self.estimate.to_dict(), "billed_per_timed": billed_per_timed(self.estimate),
                "worker_runtime": self.runtime, "runtime_reason": self.runtime_reason,
                "history_runtime": self.history_runtime, "runtime_warning": self.runtime_warning,
                "price_warning": self.price_warning}


def billed_per_timed(estimate: Any) -> float | None:
    """Billed ÷ timed seconds, None when less than a second would be timed (a ratio over
    nothing is no overhead figure)."""
    return None if estimate.timed_seconds < 1 else estimate.overhead_ratio


def history_runtime(lake_uri: str, provider: str, instance_type: str) -> str | None:
    """The worker runtime of the latest measured record of this provider and instance type in
    the lake (None: no such record, or a lake that cannot be read)."""
    try:
        import pyarrow.compute as pc

        from gpucompare.lake.tables import open_lake

        lake = open_lake(lake_uri)
        if not lake.exists() or not lake.has_table("results"):
            return None
        rows = lake.results_table(filter=(pc.field("instance_type") == instance_type)
                                  & (pc.field("provider") == provider),
                                  columns=["worker_runtime", "started_at", "target"]).to_pylist()
    except Exception as exc:  # noqa: BLE001 - the plan is still worth printing without the history
        log.warning("plan: cannot read the lake at %s for the runtime history (%s)", lake_uri, exc)
        return None
    measured = [r for r in rows if r["target"] != "published" and r["worker_runtime"]]
    return max(measured, key=lambda r: r["started_at"])["worker_runtime"] if measured else None


def plan_targets(fleet_file: str | None, target: str | None, lake_uri: str) -> list[TargetPlan]:
    """The night of each chosen target of the fleet file, with its worker runtime and why."""
    from gpucompare.config import fleet as fleet_config
    from gpucompare.prices.tables import shipped_fx_rate
    from gpucompare.targets import make_target
    from gpucompare.targets.night import estimate_night

    fleet = fleet_config.load_fleet(fleet_file, fx_rate=shipped_fx_rate)
    if target is None:
        chosen = fleet.enabled_targets()
    else:
        chosen = [t for t in fleet.targets if t.name == target]
        if not chosen:
            names = ", ".join(t.name for t in fleet.targets) or "(none)"
            raise UsageError(f"--target {target!r} is not a target of {fleet.source}: {names}")
    plans = []
    for entry in chosen:
        plan = fleet_config.plan_target(entry.spec, fleet.profile(entry.profile), PLAN_RUN,
                                        budget_ceiling=fleet.budget_ceiling, fx_rate=fleet.fx_rate)
        spec = plan["spec"]
        if spec["kind"] == "ec2":  # the cost guard's own call: the same figures
            estimate = make_target(spec, lake_uri=lake_uri).night_estimate()
        else:
            estimate = estimate_night(spec, [s["config"] for s in plan["sweeps"].values()], lake_uri=lake_uri)
        cap = (spec.get("options") or {}).get("budget_cap")
        plans.append(TargetPlan(estimate, str(spec.get("worker_runtime")), entry.runtime_reason,
                                history_runtime(lake_uri, str(spec["provider"]), str(spec["instance_type"])),
                                None if cap is None else float(cap)))
    return plans


def plan_estimates(fleet_file: str | None, target: str | None, lake_uri: str) -> list[Any]:
    """The ``NightEstimate`` of each chosen target of the fleet file."""
    return [p.estimate for p in plan_targets(fleet_file, target, lake_uri)]


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def render(plan: TargetPlan) -> str:
    """The text of one target's night."""
    estimate = plan.estimate
    currency = estimate.currency or ""
    lines = [f"{estimate.target} ({estimate.kind}, {estimate.provider} {estimate.instance_type}"
             f"{' ' + estimate.region if estimate.region else ''}, {estimate.market}): "
             f"{estimate.configurations} configuration(s), {estimate.recorded_configurations} with recorded "
             "timings",
             f"  runtime {plan.runtime}: {plan.runtime_reason}",
             f"  {'phase':<12}{'seconds':>10}  {'billed':<7}{'cost ' + currency:>12}  source"]
    if plan.runtime_warning:
        lines.insert(2, f"  WARNING: {plan.runtime_warning}")
    for phase in estimate.phases:
        cost = estimate.phase_cost(phase)
        shown = "unpriced" if cost is None else f"{cost:.2f}"
        lines.append(f"  {phase.phase:<12}{phase.seconds:>10.1f}  {'yes' if phase.billed else 'no':<7}"
                     f"{shown:>12}  {phase.source}")
    ratio = billed_per_timed(estimate)
    lines.append(f"  wall {_hours(estimate.wall_seconds)}, billed {_hours(estimate.billed_seconds)} "
                 f"({estimate.billed_seconds:.0f} s), timed {estimate.timed_seconds:.0f} s; billed / timed = "
                 + ("n/a (nothing timed)" if ratio is None else f"{ratio:.1f}"))
    if estimate.cost is None:
        lines.append(f"  cost: unpriced: no {estimate.provider} price for {estimate.instance_type} in the "
                     "lake's or the shipped price tables (an empty cost, not 0)")
    else:
        lines.append(f"  cost {estimate.cost:.2f} {currency} at {estimate.price_per_hour:.4f} {currency}/h "
                     f"(on-demand, as the cost guard prices it; from "
                     f"{estimate.cost_estimate.price_source or 'the price table'})")
    if plan.price_warning:
        lines.append(f"  WARNING: {plan.price_warning}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    lake_uri = args.lake or settings.lake_uri()
    try:
        plans = plan_targets(args.fleet, args.target, lake_uri)
    except (PermanentError, TargetError) as exc:  # a bad fleet file or option: exit 2, the field named
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps([p.to_dict() for p in plans], indent=2))
        return 0
    if not plans:
        print("no enabled target in the fleet file (name one with --target)")
    print(f"Night estimates from the lake at {lake_uri} (recorded phases: median of the last runs of the "
          "same kind and instance type; constants where there are none)")
    for plan in plans:
        print()
        print(render(plan))
    return 0
