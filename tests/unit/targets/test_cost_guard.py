"""The cost guard: the estimate's parts, the price table it reads, and the refusal that comes
before anything is created (checked on moto's server on 127.0.0.1 as the EC2 endpoint)."""

from __future__ import annotations

import logging
import math
from datetime import date
from typing import Any

import pytest

from bench_tasks.configs import Config, parse_sweep
from gpucompare.targets import cost
from gpucompare.targets.base import BudgetExceeded, TargetError, TargetSpec
from gpucompare.targets.ec2 import target as ec2
from gpucompare.targets.ec2.options import DEFAULT_TTL_MINUTES
from tests.support.ec2_support import NIGHTLY, TINY_SWEEP

#: The published matrix, as the fleet's nightly profile runs it: 7 networks × 6 batch sizes
#: of scoring, 3 networks × 4 batch sizes of training.
ON = date(2026, 11, 30)


def _fixed_price(price: float, currency: str = "USD"):
    asked: list[tuple[str, str, str, date]] = []

    def lookup(instance_type: str, region: str, market: str, on_date: date) -> cost.PriceQuote:
        asked.append((instance_type, region, market, on_date))
        return cost.PriceQuote(price, currency, "test table")

    return lookup, asked


def _one(network: str, mode: str, batch: int, **settings: Any) -> Config:
    [config] = parse_sweep({**settings, "matrix": [{"modes": [mode], "networks": [network],
                                                    "batch_sizes": [batch]}]}).configs
    return config


def test_configurations_are_counted_like_the_sweep_expands_them():
    config = {"matrix": [
        {"modes": ["score", "train"], "networks": ["alexnet", "resnet-50"], "batch_sizes": [1, 2, 4],
         "dtypes": ["float32", "float16"], "devices": ["gpu:0", "gpu:0,gpu:1"]},
        {"modes": ["score"], "networks": ["resnet-50", "googlenet"], "batch_sizes": [8]},
    ]}
    estimate = cost.estimate_sweep_time([config])
    assert estimate.configurations == 2 * 2 * 3 * 2 * 2 + 2
    assert cost.estimate_sweep_time([NIGHTLY]).configurations == 7 * 6 + 3 * 4
    with pytest.raises(TargetError, match=r"sweep_configs\[0\].*networks"):
        cost.estimate_sweep_time([{"matrix": [{"modes": ["score"], "networks": ["lenet"],
                                               "batch_sizes": [1]}]}])


def test_a_configuration_costs_its_overhead_plus_its_batches_and_never_more_than_its_timeout():
    settings = {"warmup": 5, "batches": 10, "repeats": 3, "timeout_s": 900}
    alexnet = cost.configuration_seconds(_one("alexnet", "score", 32, **settings))
    assert alexnet == pytest.approx(cost.CONFIG_OVERHEAD_S + 35 * 32 / 202.66)
    # a slow network at a big batch would run past its time limit: the worker stops it there
    assert cost.configuration_seconds(_one("resnet-50", "train", 512, **settings)) == 900
    # measured history (faster than the K80 default) shortens the estimate
    history = {("alexnet", "score"): 2000.0}
    faster = cost.configuration_seconds(_one("alexnet", "score", 32, **settings), history)
    assert cost.CONFIG_OVERHEAD_S < faster < alexnet
    # weak scaling holds the per-device batch: two devices, twice the images per step
    matrix = {"modes": ["train"], "networks": ["alexnet"], "batch_sizes": [8], "devices": ["gpu:0,gpu:1"],
              "scaling": "weak"}
    weak = parse_sweep({**settings, "matrix": [matrix]}).configs[0]
    assert cost.configuration_seconds(weak) == pytest.approx(cost.CONFIG_OVERHEAD_S + 35 * 16 / 230.69)


def test_every_network_and_mode_has_a_default_throughput():
    from bench_tasks import constants

    for network in constants.NETWORKS:
        for mode in constants.MODES:
            assert cost.DEFAULT_IMAGES_PER_SEC[(network, mode)] > 0


def test_spot_is_priced_at_on_demand_and_the_cost_is_hours_times_price():
    lookup, asked = _fixed_price(2.0)
    estimate = cost.estimate_run_cost("g5.xlarge", "us-east-1", "spot", [TINY_SWEEP], price_lookup=lookup,
                                      on_date=ON, provisioning_overhead_s=1800)
    assert asked == [("g5.xlarge", "us-east-1", "on_demand", ON)]
    seconds = 1800 + cost.configuration_seconds(parse_sweep(TINY_SWEEP).configs[0])
    assert estimate.cost == pytest.approx(seconds / 3600 * 2.0)
    assert estimate.market == "spot" and estimate.priced_market == "on_demand"


def test_the_shipped_price_table_and_exchange_rates_are_used():
    usd = cost.estimate_run_cost("g4dn.xlarge", "us-east-1", "on_demand", [NIGHTLY], on_date=ON)
    assert usd.currency == "USD" and usd.price_per_hour == pytest.approx(0.526)  # data/prices/aws.csv
    eur = cost.estimate_run_cost("g4dn.xlarge", "us-east-1", "on_demand", [NIGHTLY], on_date=ON,
                                 currency="EUR")
    assert eur.currency == "EUR"
    assert eur.price_per_hour == pytest.approx(0.526 / 1.0411)  # data/fx/eur_usd.csv, 2025-02-28
    with pytest.raises(TargetError, match="no on_demand price for instance_type='x9.huge'"):
        cost.estimate_run_cost("x9.huge", "us-east-1", "on_demand", [NIGHTLY], on_date=ON)


def test_the_refusal_names_estimate_cap_currency_and_instance_type():
    lookup, _ = _fixed_price(3.06)
    estimate = cost.estimate_run_cost("p3.2xlarge", "us-east-1", "on_demand", [NIGHTLY], price_lookup=lookup,
                                      on_date=ON)
    with pytest.raises(BudgetExceeded) as refused:
        cost.check_budget(estimate, 1.0, "USD")
    message = str(refused.value)
    assert f"{estimate.cost:.2f} USD" in message and "cap 1.00 USD" in message
    assert "p3.2xlarge" in message and "54 configurations" in message
    # a cap at the estimate (rounded up to the cent) passes
    just_enough = (int(estimate.cost * 100) + 1) / 100
    assert cost.check_budget(estimate, just_enough, "USD") is estimate
    with pytest.raises(BudgetExceeded):
        cost.check_budget(estimate, just_enough - 0.02, "USD")
    with pytest.raises(TargetError, match="budget_currency='EUR'"):
        cost.check_budget(estimate, 100.0, "EUR")
    with pytest.raises(BudgetExceeded):  # a cap of 0 refuses every paid run
        cost.check_budget(estimate, 0, "USD")


def test_the_time_to_live_follows_the_estimate_and_a_short_one_is_flagged(caplog):
    options = {"ami": "ami-0123456789abcdef0", "instance_profile": "p", "results_bucket": "my-bucket"}

    def target(**extra: Any) -> ec2.Ec2Target:
        return ec2.Ec2Target(TargetSpec(name="t", kind="ec2", provider="aws", instance_type="p3.2xlarge",
                                        region="us-east-1", options={**options, **extra}))

    expected = cost.estimate_sweep_time([NIGHTLY]).hours * 60
    derived = target(sweep_configs=[NIGHTLY]).ttl_minutes()
    assert derived == math.ceil(expected * 1.5) + 30
    assert target().ttl_minutes() == DEFAULT_TTL_MINUTES
    with caplog.at_level(logging.WARNING, logger="gpucompare.targets.ec2.guard"):
        assert target(sweep_configs=[NIGHTLY], ttl_minutes=30).ttl_minutes() == 30
    assert "ttl_minutes=30 is shorter than the estimated" in caplog.text
