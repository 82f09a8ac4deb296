"""The ``ec2`` target's cost guard and its instance's time-to-live.

``CostGuard.check`` runs first in ``prepare``: over the budget cap (``cost.check_budget``),
nothing is created. The estimate is the night estimate ``python -m gpucompare plan`` shows
(``targets.night``), from the lake's recorded phases and current prices. ``ttl_minutes`` is how
long the instance lives before it powers itself off (the option, else derived from the sweep
estimate: late, never early).
"""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from gpucompare.targets import cost
from gpucompare.targets.base import TargetConfigError, TargetSpec
from gpucompare.targets.ec2.options import DEFAULT_TTL_MINUTES, Ec2Options

log = logging.getLogger(__name__)


class CostGuard:
    """The budget check and the time-to-live of one target's run (see the module docstring).

    :param price_lookup: prices to use instead of the lake's (tests, ``plan``)
    :param lake_uri: where current prices and measured throughput are read (default: the
        ``[gpucompare]`` lake setting)
    """

    def __init__(self, spec: TargetSpec, options: Ec2Options, *, price_lookup: cost.PriceLookup | None = None,
                 lake_uri: str | None = None) -> None:
        self.spec, self.options = spec, options
        self.price_lookup, self.lake_uri = price_lookup, lake_uri

    def estimate(self) -> cost.CostEstimate | None:
        """The run's cost estimate (None when no budget cap is set)."""
        if self.options.budget_cap is None:
            return None
        night = self.night_estimate()
        if night.cost_estimate is None:
            raise TargetConfigError(night.unpriced_reason or "cost guard: no price")
        return night.cost_estimate

    def night_estimate(self) -> Any:
        """The run's phases, time and cost as ``plan`` shows them (``targets.night``)."""
        from gpucompare import settings
        from gpucompare.targets.night import estimate_night

        return estimate_night(self.spec.to_dict(), self.options.sweep_configs,
                              lake_uri=self.lake_uri or settings.lake_uri(),
                              currency=self.options.budget_currency, price_lookup=self.price_lookup)

    def check(self) -> None:
        """Raise (``cost.check_budget``) when the run's estimate is over the cap; log it otherwise."""
        estimate = self.estimate()
        if estimate is None:
            return
        cost.check_budget(estimate, float(self.options.budget_cap or 0), self.options.budget_currency)
        log.info("Cost guard passed: %s (cap %.2f %s)", estimate.describe(), self.options.budget_cap,
                 self.options.budget_currency)

    def ttl_minutes(self) -> int:
        """The instance's time-to-live: the option, else derived from the sweep estimate."""
        expected_minutes = None
        if self.options.sweep_configs:
            expected_minutes = cost.estimate_sweep_time(self.options.sweep_configs).hours * 60
        if self.options.ttl_minutes is not None:
            if expected_minutes is not None and expected_minutes > self.options.ttl_minutes:
                # a warning, not a refusal: the estimate assumes the slowest published GPU
                log.warning("ttl_minutes=%d is shorter than the estimated %.0f min of the run: the "
                            "instance may power off before the sweeps end", self.options.ttl_minutes,
                            expected_minutes)
            return self.options.ttl_minutes
        if expected_minutes is not None:
            # half as long again as expected, plus time to collect: late, never early
            return max(60, math.ceil(expected_minutes * 1.5) + 30)
        return DEFAULT_TTL_MINUTES

    def expires_at(self, ttl_minutes: int) -> str:
        """When an instance launched now with this time-to-live ends (ISO 8601 UTC, the tag's form)."""
        return (datetime.now(UTC) + timedelta(minutes=ttl_minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
