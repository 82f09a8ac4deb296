"""What one target's night is expected to take and cost, phase by phase, before anything runs.

ONE estimate serves both ``python -m gpucompare plan`` and the cost guard (``Ec2Target.estimate``
calls :func:`estimate_night` and checks its ``cost_estimate`` against the budget cap), so the
user and the guard always see the same figures.

Phases (the names of ``run_phases``, plus two the estimate needs):

* ``provision``, ``deploy``, ``pull`` (a container runtime's image: ``PULL_S`` until recorded),
  ``teardown``: the median, over the last ``RECENT_RUNS`` runs of the
  same kind, provider and instance type, of each run's seconds in that phase (every attempt
  counted: a retried provisioning is paid twice), from the lake's ``run_phases``;
* ``setup``, ``warmup``, ``timed``, per configuration of the sweeps (expanded by the worker's own
  parser): from the last ``RECENT_RUNS`` ok records of the same configuration key on that
  instance type (median setup seconds; warm-up and timed seconds per batch, times the batches
  this sweep asks for), else the per-process constant ``cost.CONFIG_OVERHEAD_S`` and the
  batches at the throughput the guard always used (measured images/s, else the published guess);
* ``sweep_other``: sweep wall time outside the configurations' own seconds, per configuration
  (median over the recorded runs), else 0;
* ``idle`` (ec2 only): billed seconds outside every phase (waits between Airflow tasks,
  collect), median over the recorded runs, else 0.

Where the lake has nothing, today's constants stand: ``cost.PROVISIONING_OVERHEAD_S`` (15 min:
``PROVISION_S`` + ``DEPLOY_S`` on ec2) and ``cost.CONFIG_OVERHEAD_S`` (60 s per configuration).
Every phase says which it used (``PhaseEstimate.source``).

Billed: every ec2 phase; on ssh and local the sweep's phases only (see ``targets.phases``).
The price is the guard's: the on-demand price of the instance type (spot may fall back), from
the lake's price history merged with the shipped tables.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from bench_tasks.configs import Config
from gpucompare.config import patterns, runtime_choice, runtimes
from gpucompare.lake.schema import CONFIG_PHASES
from gpucompare.targets import cost
from gpucompare.targets.base import TargetConfigError
from gpucompare.targets.phases import BILLED_PHASES

log = logging.getLogger(__name__)

#: How many of the latest recorded runs (or ok records of a configuration) a median is taken of.
RECENT_RUNS = 5
#: The split of the guard's 15 min of provisioning (cost.PROVISIONING_OVERHEAD_S) on ec2: boot and
#: SSM agent registration, then the worker download and environment (pip install of mxnet-cu112).
DEPLOY_S = 600.0
PROVISION_S = cost.PROVISIONING_OVERHEAD_S - DEPLOY_S
#: A container runtime's first pull of its image (NGC's MXNet image is ~10 GB: at ~20 MB/s, about
#: 8 min; a constant until the lake has recorded pulls of this instance type). A host that has
#: the image already takes seconds, which the recorded median then shows.
PULL_S = 600.0
#: Run-level constants per kind where the lake has no recorded phase (see the module docstring).
#: An ssh host is rented already (reaching it takes seconds) but builds the same environment.
FALLBACK_S: Mapping[str, Mapping[str, float]] = {
    "ec2": {"provision": PROVISION_S, "deploy": DEPLOY_S, "pull": PULL_S, "teardown": 0.0, "idle": 0.0},
    "ssh": {"provision": 0.0, "deploy": DEPLOY_S, "pull": PULL_S, "teardown": 0.0},
    "local": {"provision": 0.0, "deploy": 0.0, "pull": 0.0, "teardown": 0.0},
}
#: Phases inside the sweep (billed on every kind).
SWEEP_PARTS = ("setup", "warmup", "timed", "sweep_other")
#: The order phases are shown in.
ORDER = ("provision", "deploy", "pull", "setup", "warmup", "timed", "sweep_other", "teardown", "idle")


@dataclass(frozen=True)
class PhaseEstimate:
    """One phase of the night: expected seconds, whether paid for, and where the figure came from."""

    phase: str
    seconds: float
    billed: bool
    source: str


@dataclass(frozen=True)
class ConfigHistory:
    """Medians of the recent ok records of one configuration key on one instance type."""

    setup_s: float
    warmup_s_per_batch: float
    timed_s_per_batch: float
    records: int


@dataclass
class PhaseHistory:
    """What the lake recorded of earlier runs of one kind, provider and instance type."""

    #: phase -> (median seconds per run, runs it is the median of); ``sweep_other`` per configuration
    run_level: dict[str, tuple[float, int]] = field(default_factory=dict)
    per_config: dict[cost.MeasuredKey, ConfigHistory] = field(default_factory=dict)


@dataclass(frozen=True)
class NightEstimate:
    """A target's night: its phases, its price (None: unpriced) and the guard's CostEstimate."""

    target: str
    kind: str
    provider: str
    instance_type: str
    region: str | None
    market: str
    configurations: int
    recorded_configurations: int
    phases: tuple[PhaseEstimate, ...]
    cost_estimate: cost.CostEstimate | None
    unpriced_reason: str | None = None

    def seconds(self, phase: str) -> float:
        return sum(p.seconds for p in self.phases if p.phase == phase)

    @property
    def wall_seconds(self) -> float:
        return sum(p.seconds for p in self.phases)

    @property
    def billed_seconds(self) -> float:
        return sum(p.seconds for p in self.phases if p.billed)

    @property
    def timed_seconds(self) -> float:
        return self.seconds("timed")

    @property
    def overhead_ratio(self) -> float | None:
        """Billed ÷ timed seconds (None when nothing would be timed)."""
        return self.billed_seconds / self.timed_seconds if self.timed_seconds > 0 else None

    @property
    def price_per_hour(self) -> float | None:
        return None if self.cost_estimate is None else self.cost_estimate.price_per_hour

    @property
    def currency(self) -> str | None:
        return None if self.cost_estimate is None else self.cost_estimate.currency

    @property
    def cost(self) -> float | None:
        """The billed seconds at the price per hour (None when unpriced: never 0)."""
        return None if self.cost_estimate is None else self.cost_estimate.cost

    def phase_cost(self, phase: PhaseEstimate) -> float | None:
        if self.price_per_hour is None:
            return None
        return phase.seconds * self.price_per_hour / 3600.0 if phase.billed else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target, "kind": self.kind, "provider": self.provider,
            "instance_type": self.instance_type, "region": self.region, "market": self.market,
            "configurations": self.configurations, "recorded_configurations": self.recorded_configurations,
            "wall_seconds": self.wall_seconds, "billed_seconds": self.billed_seconds,
            "timed_seconds": self.timed_seconds, "overhead_ratio": self.overhead_ratio,
            "price_per_hour": self.price_per_hour, "currency": self.currency, "cost": self.cost,
            "price_source": None if self.cost_estimate is None else self.cost_estimate.price_source,
            "unpriced_reason": self.unpriced_reason,
            "phases": [{"phase": p.phase, "seconds": p.seconds, "billed": p.billed, "source": p.source,
                        "cost": self.phase_cost(p)} for p in self.phases],
        }


# ---- what the lake recorded ----------------------------------------------------------------
def _median_of_recent(values: list[tuple[Any, float]], recent: int) -> tuple[float, int]:
    chosen = [v for _, v in sorted(values, key=lambda item: item[0])[-recent:]]
    return statistics.median(chosen), len(chosen)


def phase_history(run_phases: Any, results: Any, *, kind: str, provider: str, instance_type: str,
                  recent: int = RECENT_RUNS) -> PhaseHistory:
    """The medians of the recent runs of one kind, provider and instance type, from the lake's
    ``run_phases`` rows and ``results`` rows (Arrow tables, or anything with ``to_pylist``)."""
    runs: dict[str, dict[str, Any]] = {}
    for row in run_phases.to_pylist():
        if (row["kind"], row["provider"], row["instance_type"]) != (kind, provider, instance_type):
            continue
        run = runs.setdefault(row["run_id"], {"start": row["started_at"], "seconds": {}, "ok": set(),
                                              "billed": [], "billed_s": 0.0})
        run["start"] = min(run["start"], row["started_at"])
        run["seconds"][row["phase"]] = run["seconds"].get(row["phase"], 0.0) + row["seconds"]
        if row["status"] == "ok":
            run["ok"].add(row["phase"])
        if row["billed"]:
            run["billed"].append((row["started_at"], row["finished_at"]))
            run["billed_s"] += row["seconds"]
    records: dict[str, list[dict[str, Any]]] = {}
    per_key: dict[cost.MeasuredKey, list[tuple[Any, tuple[float, float, float]]]] = {}
    for row in results.to_pylist():
        if row["provider"] != provider or row["instance_type"] != instance_type or row["target"] != kind:
            continue
        records.setdefault(row["run_id"], []).append(row)
        if (row["status"] == "ok" and row.get("num_nodes", 1) == 1 and row["setup_seconds"] is not None
                and row["warmup_seconds"] is not None and row["timed_seconds"]
                and row["warmup_batches"] and row["timed_batches"]):
            key = (row["mode"], row["network"], row["batch_size"], row["dtype"], len(row["devices"] or ()))
            per_key.setdefault(key, []).append((row["started_at"], (
                row["setup_seconds"], row["warmup_seconds"] / row["warmup_batches"],
                row["timed_seconds"] / row["timed_batches"])))
    history = PhaseHistory()
    for phase in ("provision", "deploy", "pull", "teardown"):
        values = [(r["start"], r["seconds"][phase]) for r in runs.values() if phase in r["ok"]]
        if values:
            history.run_level[phase] = _median_of_recent(values, recent)
    idle, other = [], []
    for run_id, run in runs.items():
        if kind == "ec2" and {"sweep", "teardown"} <= run["ok"] and run["billed"]:
            span = (max(end for _, end in run["billed"]) - min(start for start, _ in run["billed"]))
            idle.append((run["start"], max(span.total_seconds() - run["billed_s"], 0.0)))
        done = records.get(run_id, [])
        # a night that lost its machine keeps the lost machine's records, whose seconds are not in
        # its sweep rows: its time outside the configurations cannot be told, so it is left out
        if "sweep" in run["ok"] and done and "reclaim" not in run["seconds"]:
            inside = sum((r["setup_seconds"] or 0) + (r["warmup_seconds"] or 0) + (r["timed_seconds"] or 0)
                         for r in done)
            other.append((run["start"], max(run["seconds"]["sweep"] - inside, 0.0) / len(done)))
    if idle:
        history.run_level["idle"] = _median_of_recent(idle, recent)
    if other:
        history.run_level["sweep_other"] = _median_of_recent(other, recent)
    for key, values in per_key.items():
        chosen = [v for _, v in sorted(values, key=lambda item: item[0])[-recent:]]
        history.per_config[key] = ConfigHistory(
            setup_s=statistics.median(v[0] for v in chosen),
            warmup_s_per_batch=statistics.median(v[1] for v in chosen),
            timed_s_per_batch=statistics.median(v[2] for v in chosen), records=len(chosen))
    return history


def lake_history(lake_uri: str | None, *, kind: str, provider: str, instance_type: str) -> PhaseHistory:
    """:func:`phase_history` of the lake at ``lake_uri``; an absent or unreadable lake gives an
    empty history (the constants then stand), as the cost guard's other lake inputs do."""
    if not lake_uri:
        return PhaseHistory()
    try:
        import pyarrow.compute as pc

        from gpucompare.lake import schema
        from gpucompare.lake.phases import read_phases
        from gpucompare.lake.tables import open_lake

        lake = open_lake(lake_uri)
        if not lake.exists():
            return PhaseHistory()
        phases = read_phases(lake) if lake.has_table("run_phases") else schema.RUN_PHASES_SCHEMA.empty_table()
        columns = ["run_id", "target", "provider", "instance_type", "status", "num_nodes", "mode", "network",
                   "batch_size", "dtype", "devices", "started_at", "setup_seconds", "warmup_seconds",
                   "timed_seconds", "warmup_batches", "timed_batches"]
        results = (lake.results_table(filter=(pc.field("instance_type") == instance_type)
                                      & (pc.field("provider") == provider), columns=columns)
                   if lake.has_table("results") else schema.empty_results().select(columns))
        return phase_history(phases, results, kind=kind, provider=provider, instance_type=instance_type)
    except Exception as exc:  # noqa: BLE001 - a lake that cannot be read must not block the guard
        log.warning("Night estimate: cannot read the recorded phases in the lake at %s (%s: %s); "
                    "using the constants", lake_uri, type(exc).__name__, exc)
        return PhaseHistory()


# ---- the estimate ----------------------------------------------------------------------------
def _config_phases(config: Config, history: PhaseHistory,
                   measured: Mapping[cost.MeasuredKey, float]) -> tuple[dict[str, float], bool]:
    """Expected setup, warm-up and timed seconds of one configuration; True if from records."""
    timed_batches = config.batches * config.repeats
    recorded = history.per_config.get(cost.measured_key(config))
    if recorded is not None:
        seconds = {"setup": recorded.setup_s, "warmup": recorded.warmup_s_per_batch * config.warmup,
                   "timed": recorded.timed_s_per_batch * timed_batches}
    else:
        images_per_sec = (measured.get(cost.measured_key(config))
                          or cost.DEFAULT_IMAGES_PER_SEC.get((config.network, config.mode)))
        if not images_per_sec or images_per_sec <= 0:
            raise TargetConfigError(f"night estimate: no throughput estimate for network={config.network!r} "
                                    f"mode={config.mode!r}")
        per_batch = config.worker_batch / images_per_sec
        seconds = {"setup": cost.CONFIG_OVERHEAD_S, "warmup": config.warmup * per_batch,
                   "timed": timed_batches * per_batch}
    if config.min_time_s:  # each repeat runs at least this long
        seconds["timed"] = max(seconds["timed"], config.min_time_s * config.repeats)
    # never more than the configuration's time limit: the worker kills it there (timed goes first)
    excess = sum(seconds.values()) - config.timeout_s
    for phase in reversed(CONFIG_PHASES):
        if excess <= 0:
            break
        cut = min(excess, seconds[phase])
        seconds[phase] -= cut
        excess -= cut
    return seconds, recorded is not None


def _run_level(phase: str, kind: str, history: PhaseHistory, configurations: int) -> tuple[float, str]:
    recorded = history.run_level.get(phase)
    if phase == "sweep_other":
        if recorded is None:
            return 0.0, "constant: 0 (today's 60 s per configuration covers process start)"
        per_config, runs = recorded
        return (per_config * configurations,
                f"recorded: median of {runs} run(s), {per_config:.1f} s per configuration")
    if recorded is not None:
        return recorded[0], f"recorded: median of {recorded[1]} run(s)"
    constant = FALLBACK_S[kind].get(phase, 0.0)
    return constant, f"constant: {constant:.0f} s"


@dataclass(frozen=True)
class PhasePlan:
    """The phases of a night and how its configurations were estimated."""

    phases: list[PhaseEstimate]
    configurations: int
    recorded: int  # from recent records of the same configuration
    measured: int  # batches at the measured images/s (no timing records)

    @property
    def guessed(self) -> int:
        return self.configurations - self.recorded - self.measured


def _config_source(phase: str, plan_counts: tuple[int, int, int]) -> str:
    configurations, recorded, measured = plan_counts
    parts = []
    if recorded:
        parts.append(f"recorded: median of recent records for {recorded} of {configurations} "
                     "configuration(s)")
    rest = configurations - recorded
    if rest and phase == "setup":
        parts.append(f"constant: {cost.CONFIG_OVERHEAD_S:.0f} s per configuration for {rest}")
    elif rest:
        guessed = rest - measured
        parts.append(f"constant: batches at measured images/s for {measured}, at the published guess "
                     f"for {guessed}" if measured
                     else f"constant: batches at the published guess for {guessed}")
    return "; ".join(parts) or "no configuration"


def estimate_phases(kind: str, sweep_configs: Iterable[Mapping[str, Any]], history: PhaseHistory,
                    measured: Mapping[cost.MeasuredKey, float] | None = None, *,
                    pulls_image: bool = False) -> PhasePlan:
    """Every phase of a night of these sweeps (see the module docstring for the sources);
    ``pulls_image``: the worker runtime is a container, whose image pull is a phase of its own."""
    if kind not in FALLBACK_S:
        raise TargetConfigError(f"night estimate: kind {kind!r} is not one of {', '.join(FALLBACK_S)}")
    measured = measured or {}
    configs = cost.parse_sweeps(sweep_configs)
    totals = {"setup": 0.0, "warmup": 0.0, "timed": 0.0}
    recorded_configs = measured_configs = 0
    for config in configs:
        seconds, recorded = _config_phases(config, history, measured)
        recorded_configs += recorded
        measured_configs += (not recorded) and cost.measured_key(config) in measured
        for phase, value in seconds.items():
            totals[phase] += value
    counts = (len(configs), recorded_configs, measured_configs)
    estimates: list[PhaseEstimate] = []
    for phase in ORDER:
        if (phase == "idle" and kind != "ec2") or (phase == "pull" and not pulls_image):
            continue
        if phase in totals:
            estimates.append(PhaseEstimate(phase, totals[phase], True, _config_source(phase, counts)))
            continue
        seconds, source = _run_level(phase, kind, history, len(configs))
        billed = phase in BILLED_PHASES[kind] or phase in SWEEP_PARTS or phase == "idle"
        estimates.append(PhaseEstimate(phase, seconds, billed, source))
    return PhasePlan(estimates, len(configs), recorded_configs, measured_configs)


def estimate_night(spec: Mapping[str, Any], sweep_configs: Iterable[Mapping[str, Any]], *,
                   lake_uri: str | None, currency: str | None = None,
                   price_lookup: cost.PriceLookup | None = None,
                   on_date: date | None = None) -> NightEstimate:
    """The night of ``spec`` (a ``TargetSpec`` dict) running ``sweep_configs``, from the lake's
    recorded phases, prices and measured throughput (constants where it has none)."""
    sweep_configs = list(sweep_configs)
    kind, provider, instance_type = spec["kind"], spec["provider"], spec["instance_type"]
    lake = cost.lake_inputs(lake_uri, instance_type=instance_type, provider=provider)
    history = lake_history(lake_uri, kind=kind, provider=provider, instance_type=instance_type)
    runtime = runtime_choice.choose(spec, spec.get("worker_runtime"))
    plan = estimate_phases(kind, sweep_configs, history, lake.measured,
                           pulls_image=runtimes.get(runtime).delivery == "docker")
    phases = plan.phases
    # the guard's CostEstimate prices (sweep + provisioning) seconds: the billed seconds exactly
    time = cost.SweepTimeEstimate(
        configurations=plan.configurations,
        sweep_seconds=sum(p.seconds for p in phases if p.phase in SWEEP_PARTS),
        provisioning_seconds=sum(p.seconds for p in phases if p.billed and p.phase not in SWEEP_PARTS),
        measured_configurations=plan.recorded + plan.measured)
    priced: cost.CostEstimate | None = None
    reason = None
    try:
        priced = cost.estimate_run_cost(instance_type, str(spec.get("region")),
                                        spec.get("market", patterns.DEFAULT_MARKET), sweep_configs,
                                        currency=currency,
                                        price_lookup=price_lookup or lake.price_lookup or
                                        cost.table_price_lookup(provider=provider),
                                        on_date=on_date, time_estimate=time)
    except TargetConfigError as exc:
        reason = str(exc)
    return NightEstimate(target=spec["name"], kind=kind, provider=provider, instance_type=instance_type,
                         region=spec.get("region"), market=spec.get("market", patterns.DEFAULT_MARKET),
                         configurations=plan.configurations, recorded_configurations=plan.recorded,
                         phases=tuple(phases), cost_estimate=priced, unpriced_reason=reason)
