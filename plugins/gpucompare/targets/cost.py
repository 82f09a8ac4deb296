"""The cost guard: estimate what a run on a paid machine will cost, refuse it if over budget.

Called before anything is provisioned (``Ec2Target.prepare`` calls it first), so a refused
run has started nothing and costs nothing.

The estimate is deliberately pessimistic, because the guard exists to stop surprises:

    hours = (provisioning overhead + Σ per-configuration seconds) / 3600
    cost  = hours × price per hour (of the instance type, region and market, at a date)

* The sweeps are expanded into configurations by the worker's own parser
  (``bench_tasks.configs.parse_sweep``), so the guard counts exactly what will run.
* A configuration's seconds = a fixed per-process overhead (interpreter start, MXNet
  import, symbol bind, cuDNN autotune: ``CONFIG_OVERHEAD_S``) + (warm-up + timed batches ×
  repeats) × images per step / images per second, and never more than the configuration's own
  time limit (the worker kills it there).
* Images per second come, in this order, from ``measured`` (the median of the recent ok results
  of this instance type in the lake, per mode, network, batch size, dtype and device count:
  :func:`measured_throughput`), from ``history`` (a per network and mode figure a caller
  gives), otherwise from ``DEFAULT_IMAGES_PER_SEC``: the slowest published single-GPU figure
  (Tesla K80, batch 1 where published; see the table's notes). The estimate counts how many
  configurations came from measurements and how many from the guess.
* The price per hour comes from the lake's price history (the prices DAG's refreshed rows
  merged with the shipped tables: :func:`lake_inputs`) when the lake can be read, otherwise
  from the shipped tables alone; the estimate names which.
* A spot run is priced at the on-demand rate: the spot request may fall back to on-demand
  (``targets/ec2/launch.py``) and the guard must hold for the market the run may actually get.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, NamedTuple

from bench_tasks import constants
from bench_tasks.configs import Config, ConfigError, parse_sweep
from gpucompare.config import patterns
from gpucompare.targets.base import BudgetExceeded, TargetConfigError

log = logging.getLogger(__name__)

#: Seconds a configuration costs beyond its batches: a fresh process, ``import mxnet``,
#: binding the symbol and cuDNN's algorithm search (measured at 20-60 s on GPU hosts).
CONFIG_OVERHEAD_S = 60.0

#: Boot, SSM agent registration, worker download and creating the worker environment
#: (pip install of mxnet-cu112, ~1.5 GB) before the first configuration starts.
PROVISIONING_OVERHEAD_S = 900.0

#: Images/s assumed when no history is given: the slowest published single-GPU figures,
#: from MXNet's perf.md K80 rows quoted in the LeaderGPU article
#: (``/work/shared/reference/published_results.csv``, p2.xlarge: the lowest figure of any batch,
#: so a GPU nothing was measured on, an H100 on its first night or one the tables do not know,
#: is guessed slow and its cost errs high, never low; VGG-16 scores 63.53 at batch 2 against 70.76
#: at batch 1). Networks without a published K80 figure:
#: googlenet scores like inception-bn (similar FLOPs); training is a third of scoring
#: (forward + backward + update ≈ three forward passes) where no training figure exists.
DEFAULT_IMAGES_PER_SEC: Mapping[tuple[str, str], float] = {
    ("alexnet", "score"): 202.66,
    ("vgg-16", "score"): 63.53,
    ("googlenet", "score"): 74.91,
    ("inception-bn", "score"): 74.91,
    ("inception-v3", "score"): 42.61,
    ("resnet-50", "score"): 70.94,
    ("resnet-152", "score"): 24.87,
    ("alexnet", "train"): 230.69,  # published at batch 8 (the article's "Alexnet(*8)")
    ("vgg-16", "train"): 63.53 / 3,
    ("googlenet", "train"): 74.91 / 3,
    ("inception-bn", "train"): 74.91 / 3,
    ("inception-v3", "train"): 13.83,
    ("resnet-50", "train"): 9.81,
    ("resnet-152", "train"): 24.87 / 3,
}

#: How many of the latest ok results of one configuration the measured throughput is the
#: median of (recent enough to follow driver and MXNet updates, enough to ignore one outlier).
RECENT_RESULTS = 5

#: ``(mode, network, batch_size, dtype, device count)`` → measured images/s on one instance type.
MeasuredKey = tuple[str, str, int, str, int]



class PriceQuote(NamedTuple):
    """A price per instance-hour, its currency and where it came from (for the error text)."""

    price_per_hour: float
    currency: str
    source: str = ""


#: ``lookup(instance_type, region, market, on_date) -> PriceQuote``; raises LookupError when
#: the table has no price for it.
PriceLookup = Callable[[str, str, str, date], PriceQuote]


@dataclass(frozen=True)
class SweepTimeEstimate:
    """How long the sweeps are expected to take on the machine, before provisioning."""

    configurations: int
    sweep_seconds: float
    provisioning_seconds: float
    #: configurations whose throughput came from results measured before on the instance type
    measured_configurations: int = 0

    @property
    def guessed_configurations(self) -> int:
        return self.configurations - self.measured_configurations

    @property
    def hours(self) -> float:
        return (self.sweep_seconds + self.provisioning_seconds) / 3600.0


@dataclass(frozen=True)
class CostEstimate:
    """The guard's verdict material: what the run is expected to cost and why."""

    instance_type: str
    region: str
    market: str
    priced_market: str
    price_per_hour: float
    currency: str
    price_source: str
    time: SweepTimeEstimate

    @property
    def cost(self) -> float:
        return self.time.hours * self.price_per_hour

    def describe(self) -> str:
        return (
            f"{self.cost:.2f} {self.currency} for {self.instance_type} in {self.region} "
            f"({self.market}, priced as {self.priced_market} at {self.price_per_hour:.4f} "
            f"{self.currency}/h from {self.price_source or 'the price table'}): "
            f"{self.time.configurations} configurations ({self.time.measured_configurations} timed "
            f"from measured throughput, {self.time.guessed_configurations} from the per-network "
            f"guess), {self.time.hours:.2f} h including "
            f"{self.time.provisioning_seconds / 60:.0f} min of provisioning"
        )


def parse_sweeps(sweep_configs: Iterable[Mapping[str, Any]]) -> list[Config]:
    """Every configuration of the sweeps, expanded by the worker's own parser (one rule)."""
    configs: list[Config] = []
    for index, sweep_config in enumerate(sweep_configs):
        try:
            configs.extend(parse_sweep(dict(sweep_config), where=f"sweep_configs[{index}]").configs)
        except ConfigError as exc:
            raise TargetConfigError(f"cost guard: {exc}") from exc
    return configs


def measured_key(config: Config) -> MeasuredKey:
    """The key of ``config`` in a :func:`measured_throughput` mapping."""
    return (config.mode, config.network, config.batch_size, config.dtype, len(config.devices))


def configuration_seconds(config: Config, history: Mapping[tuple[str, str], float] | None = None,
                          measured: Mapping[MeasuredKey, float] | None = None) -> float:
    """Expected wall time of one configuration (fresh process + warm-up + timed batches)."""
    key = (config.network, config.mode)
    images_per_sec = ((measured or {}).get(measured_key(config)) or (history or {}).get(key)
                      or DEFAULT_IMAGES_PER_SEC.get(key))
    if not images_per_sec or images_per_sec <= 0:
        raise TargetConfigError(f"cost guard: no throughput estimate for network={config.network!r} "
                          f"mode={config.mode!r}; known: {', '.join(constants.NETWORKS)}")
    steps = config.warmup + config.batches * config.repeats
    # worker_batch: the images of one step on this host (weak scaling multiplies per device)
    seconds = CONFIG_OVERHEAD_S + steps * config.worker_batch / images_per_sec
    return min(seconds, config.timeout_s)


def estimate_sweep_time(sweep_configs: Iterable[Mapping[str, Any]], *,
                        history: Mapping[tuple[str, str], float] | None = None,
                        measured: Mapping[MeasuredKey, float] | None = None,
                        provisioning_overhead_s: float = PROVISIONING_OVERHEAD_S) -> SweepTimeEstimate:
    """Expected time of the given sweeps on one machine: configurations × their estimates."""
    configs = parse_sweeps(sweep_configs)
    measured = measured or {}
    return SweepTimeEstimate(configurations=len(configs),
                             sweep_seconds=sum(configuration_seconds(c, history, measured) for c in configs),
                             provisioning_seconds=provisioning_overhead_s,
                             measured_configurations=sum(measured_key(c) in measured for c in configs))


def table_price_lookup(prices_table: Any = None, *, provider: str = "aws",
                       refreshed: Any = None) -> PriceLookup:
    """A ``PriceLookup`` over the project's price table (``gpucompare.prices.tables``; default: the
    tables shipped in ``gpucompare/data/prices``): the row valid on the date, exact region
    first, converted to a price per hour. ``refreshed``: the lake's own price rows (part of
    ``prices_table``), so the quote's source says whether the price came from the lake."""
    from gpucompare.prices import tables as prices

    table = prices.shipped_prices() if prices_table is None else prices_table
    lake_rows = [] if refreshed is None else refreshed.to_pylist()

    def lookup(instance_type: str, region: str, market: str, on_date: date) -> PriceQuote:
        row = prices.price_at(table, provider=provider, instance_type=instance_type, market=market,
                              on=on_date, region=region)
        if row is None:
            raise LookupError(f"the price table has no {provider} row for it")
        source = row.get("source") or ""
        if refreshed is not None:
            origin = "the lake's refreshed prices" if row in lake_rows else "the shipped price table"
            source = f"{origin}: {source}" if source else origin
        return PriceQuote(prices.hourly(row["price"], row["unit"]), row["currency"], source)

    return lookup


def measured_throughput(results: Any, *, instance_type: str, provider: str = "aws",
                        recent: int = RECENT_RESULTS) -> dict[MeasuredKey, float]:
    """Median images/s of the ``recent`` latest ok single-node results of ``instance_type``,
    per (mode, network, batch size, dtype, device count), from a results table (the lake's)."""
    latest: dict[MeasuredKey, list[tuple[Any, float]]] = {}
    for row in results.to_pylist():
        if (row["status"] != "ok" or row["provider"] != provider or row["instance_type"] != instance_type
                or row["num_nodes"] != 1 or not row["images_per_sec"] or row["images_per_sec"] <= 0):
            continue
        key = (row["mode"], row["network"], row["batch_size"], row["dtype"], len(row["devices"] or ()))
        latest.setdefault(key, []).append((row["started_at"], float(row["images_per_sec"])))
    return {key: statistics.median(ips for _, ips in sorted(rows, key=lambda r: r[0])[-recent:])
            for key, rows in latest.items()}


class LakeInputs(NamedTuple):
    """What the cost guard read from the lake: a price lookup and the measured throughput."""

    price_lookup: PriceLookup | None
    measured: dict[MeasuredKey, float]


def lake_inputs(lake_uri: str | None, *, instance_type: str, provider: str = "aws") -> LakeInputs:
    """The lake's current prices (its refreshed rows merged with the shipped tables) and the
    throughput measured before on ``instance_type``. An unreachable, missing or empty lake
    gives ``(None, {})``: the guard then behaves as with no lake (shipped tables, the guess)."""
    if not lake_uri:
        return LakeInputs(None, {})
    try:
        from gpucompare.lake.tables import open_lake
        from gpucompare.prices import tables as prices

        lake = open_lake(lake_uri)
        if not lake.exists():
            return LakeInputs(None, {})
        lookup = None
        if lake.has_table("prices"):
            refreshed = lake.read_kind("prices")
            if refreshed.num_rows:
                lookup = table_price_lookup(prices.price_history(lake), provider=provider,
                                            refreshed=refreshed)
        measured: dict[MeasuredKey, float] = {}
        if lake.has_table("results"):
            import pyarrow.compute as pc

            measured = measured_throughput(
                lake.results_table(filter=(pc.field("instance_type") == instance_type)
                                   & (pc.field("status") == "ok")),
                instance_type=instance_type, provider=provider)
        return LakeInputs(lookup, measured)
    except Exception as exc:  # noqa: BLE001 - a lake that cannot be read must not block the guard
        log.warning("Cost guard: cannot read the lake at %s (%s: %s); using the shipped price tables "
                    "and the per-network throughput guess", lake_uri, type(exc).__name__, exc)
        return LakeInputs(None, {})


#: ``rate(from_currency, to_currency, on_date) -> units of to per unit of from``.
FxRate = Callable[[str, str, date], float]


def estimate_run_cost(instance_type: str, region: str, market: str,
                      sweep_configs: Iterable[Mapping[str, Any]], *,
                      currency: str | None = None,
                      price_lookup: PriceLookup | None = None, fx_rate: FxRate | None = None,
                      on_date: date | None = None,
                      history: Mapping[tuple[str, str], float] | None = None,
                      measured: Mapping[MeasuredKey, float] | None = None,
                      provisioning_overhead_s: float = PROVISIONING_OVERHEAD_S,
                      time_estimate: SweepTimeEstimate | None = None) -> CostEstimate:
    """Estimate the cost of running ``sweep_configs`` on one instance (see the module doc),
    in ``currency`` (default: the price table's own) converted at the date's rate.
    ``time_estimate``: the time to price instead of this module's own (the night estimate of
    ``targets.night``, from the recorded phases, which the guard and ``plan`` share)."""
    if market not in patterns.MARKETS:
        raise TargetConfigError(f"cost guard: market={market!r} is not one of {', '.join(patterns.MARKETS)}")
    lookup = price_lookup or table_price_lookup()
    on_date = on_date or datetime.now(UTC).date()
    # spot may fall back to on-demand: price the worst market the run can land in
    priced_market = "on_demand"
    try:
        quote = lookup(instance_type, region, priced_market, on_date)
    except LookupError as exc:
        raise TargetConfigError(
            f"cost guard: no {priced_market} price for instance_type={instance_type!r} in "
            f"region={region!r} on {on_date.isoformat()}: {exc}. Add it to the price table "
            f"(python -m gpucompare refresh-prices) or remove budget_cap."
        ) from exc
    price, price_currency, source = float(quote.price_per_hour), quote.currency.upper(), quote.source
    if currency and currency.upper() != price_currency:
        from gpucompare.prices import tables as prices

        try:
            rate = (fx_rate or prices.shipped_fx_rate)(price_currency, currency.upper(), on_date)
        except (LookupError, ValueError) as exc:
            raise TargetConfigError(f"cost guard: cannot convert {price_currency} to {currency.upper()} on "
                              f"{on_date.isoformat()}: {exc}") from exc
        source = f"{source or 'the price table'}, {price:.4f} {price_currency}/h × {rate:.4f}"
        price, price_currency = price * rate, currency.upper()
    if time_estimate is None:
        time_estimate = estimate_sweep_time(sweep_configs, history=history, measured=measured,
                                            provisioning_overhead_s=provisioning_overhead_s)
    return CostEstimate(instance_type=instance_type, region=region, market=market,
                        priced_market=priced_market, price_per_hour=price,
                        currency=price_currency, price_source=source, time=time_estimate)


def check_budget(estimate: CostEstimate, budget_cap: float, budget_currency: str) -> CostEstimate:
    """Refuse (``BudgetExceeded``) when the estimate is over the cap; return it otherwise."""
    if not isinstance(budget_cap, int | float) or isinstance(budget_cap, bool) or budget_cap < 0:
        raise TargetConfigError(f"budget_cap must be a number ≥ 0 (0 refuses every paid run), "
                                f"got {budget_cap!r}")
    if estimate.currency.upper() != budget_currency.upper():
        raise TargetConfigError(
            f"budget_currency={budget_currency!r} does not match the price table's currency "
            f"{estimate.currency!r} for {estimate.instance_type}; give the cap in {estimate.currency}"
        )
    # the estimate is rounded up to the cent so a cap equal to the shown figure is honest
    if math.ceil(estimate.cost * 100) / 100 > budget_cap:
        raise BudgetExceeded(
            f"budget cap refused the run before anything was started: estimated "
            f"{estimate.describe()}; cap {budget_cap:.2f} {budget_currency.upper()}. "
            f"Raise budget_cap, choose a cheaper instance_type or a smaller sweep."
        )
    return estimate
