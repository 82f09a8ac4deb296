"""Methodologies and stopping rules (issue 14) without MXNet: the rules themselves, the sweep
file's checks, the record's rules between the new fields, and the fleet profile's
``methodology`` key (real MXNet runs under each rule: tests/integration/worker/test_worker_methodology.py).
"""

from __future__ import annotations

import statistics

import pytest

from bench_tasks.configs import ConfigError, parse_sweep
from bench_tasks.methodology import MethodologyError, StopPolicy, coefficient_of_variation, resolve
from bench_tasks.record import validate_record
from bench_tasks.record_fields import RecordError, empty_record
from gpucompare.config import fleet
from gpucompare.config.validation import ValidationError


# -- the rules, without MXNet ------------------------------------------------------------------
def test_a_repeat_ends_after_its_batches_and_with_min_time_not_before_it() -> None:
    fixed = StopPolicy(batches=10, repeats=3)
    assert not fixed.repeat_done(9, 100.0) and fixed.repeat_done(10, 0.001)
    timed = StopPolicy("custom", batches=10, repeats=3, min_time_s=2.0)
    assert not timed.repeat_done(10, 1.99) and not timed.repeat_done(9, 5.0)
    assert timed.repeat_done(10, 2.0) and timed.repeat_done(500, 2.1)


def test_repeats_continue_until_the_cv_is_under_the_target_or_the_limit() -> None:
    policy = StopPolicy("custom", batches=1, repeats=3, target_cv=0.03, max_repeats=5)
    assert policy.more_repeats([100.0, 100.0])  # fewer than the minimum
    assert not policy.more_repeats([100.0, 101.0, 99.0])  # cv 1 %
    assert policy.stop_rule([100.0, 101.0, 99.0]) == "target_cv_met"
    spread = [100.0, 130.0, 80.0]
    assert coefficient_of_variation(spread) > 0.03 and policy.more_repeats(spread)
    assert not policy.more_repeats([*spread, 90.0, 120.0])  # the limit
    assert policy.stop_rule([*spread, 90.0, 120.0]) == "max_repeats"
    assert StopPolicy(batches=10, repeats=3).stop_rule([1.0, 2.0, 3.0]) == "fixed_batches"
    assert StopPolicy("custom", 10, 3, min_time_s=1.0).stop_rule([1.0, 2.0, 3.0]) == "min_time"


def test_methodologies_resolve_to_their_values_and_refuse_mixed_values() -> None:
    assert resolve(None, batches=10, repeats=3, min_time_s=None, target_cv_pct=None,
                   max_repeats=None) == StopPolicy("official", 10, 3)
    assert resolve("robust", batches=10, repeats=3, min_time_s=None, target_cv_pct=None,
                   max_repeats=None) == StopPolicy("robust", 10, 3, 2.0, 0.03, 10)
    custom = resolve(None, batches=10, repeats=3, min_time_s=None, target_cv_pct=5, max_repeats=None)
    assert (custom.methodology, custom.target_cv, custom.max_repeats) == ("custom", 0.05, 10)
    for methodology, key, values in (
        ("official", "min_time_s", {"min_time_s": 1.0}),
        ("robust", "target_cv_pct", {"target_cv_pct": 1.0}),
        ("custom", "max_repeats", {"max_repeats": 5}),  # a limit without a target
        ("custom", "max_repeats", {"target_cv_pct": 3.0, "max_repeats": 2}),  # below repeats 3
        ("custom", "min_time_s", {"min_time_s": float("inf")}),
        ("custom", "target_cv_pct", {"target_cv_pct": 0.0}),
    ):
        arguments = {"min_time_s": None, "target_cv_pct": None, "max_repeats": None, **values}
        with pytest.raises(MethodologyError) as caught:
            resolve(methodology, batches=10, repeats=3, **arguments)
        assert caught.value.key == key


@pytest.mark.parametrize(("matrix", "key", "needle"), [
    ({"batch_sizes": [2 ** 70]}, "batch_sizes", "[1, 4096]"),  # the issue-9 finding
    ({"batch_sizes": [0]}, "batch_sizes", "[1, 4096]"),
    ({"batches": 10 ** 9}, "batches", "[1, 100000]"),
    ({"warmup": -1}, "warmup", "[0, 1000]"),
    ({"repeats": 101}, "repeats", "[1, 100]"),
    ({"timeout_s": float("inf")}, "timeout_s", "(0, 86400]"),
    ({"timeout_s": True}, "timeout_s", "(0, 86400]"),
    ({"methodology": "fast"}, "methodology", "official, robust, custom"),
    ({"methodology": "official", "min_time_s": 2}, "min_time_s", "not allowed with methodology official"),
    ({"min_time_s": 1e9}, "min_time_s", "(0, 3600]"),
    ({"target_cv_pct": "3"}, "target_cv_pct", "percentage"),
    ({"train_loop": "fast"}, "train_loop", "official, unsynchronised"),
    ({"modes": ["train"], "kvstore": "dist_sync", "methodology": "robust"}, "methodology",
     "allowed: official"),
])
def test_a_bad_sweep_file_names_the_key_the_value_and_the_range(matrix: dict, key: str, needle: str) -> None:
    document = {"matrix": [{"modes": ["score"], "networks": ["alexnet"], "batch_sizes": [1], **matrix}]}
    with pytest.raises(ConfigError) as caught:
        parse_sweep(document)
    assert caught.value.where.endswith(f"matrix[0].{key}")
    assert needle in caught.value.message


# -- the record's rules -------------------------------------------------------------------------
def measured(**overrides: object) -> dict:
    """A valid record of a timed configuration, as the worker writes it (overridable)."""
    samples = [10.0, 10.1, 9.9]
    values = dict(
        run_id="r", config_id="c", mode="score", network="alexnet", image_shape="3,224,224",
        dtype="float32", batch_size=2, per_device_batch=2, devices=["cpu:0"], device_kind="cpu",
        gpu_count=1, num_nodes=1, warmup_batches=5, timed_batches=30, repeats=3,
        images_per_sec=statistics.median(samples), images_per_sec_samples=samples,
        cv=coefficient_of_variation(samples), status="ok", started_at="2026-11-30T02:00:00Z",
        finished_at="2026-11-30T02:01:00Z", host="h", methodology="official", stop_rule="fixed_batches",
        setup_seconds=1.5, warmup_seconds=1.0, timed_seconds=6.0,
    )
    values.update(overrides)
    return empty_record(**values)


ROBUST = {"methodology": "robust", "min_time_s": 2.0, "target_cv": 0.03, "max_repeats": 10}


def test_records_under_each_rule_are_valid() -> None:
    validate_record(measured())
    validate_record(measured(**ROBUST, stop_rule="target_cv_met"))
    spread = [10.0, 14.0, 7.0] + [10.0] * 7
    validate_record(measured(**ROBUST, stop_rule="max_repeats", repeats=10, timed_batches=100,
                             images_per_sec_samples=spread, images_per_sec=10.0,
                             cv=coefficient_of_variation(spread), timed_seconds=25.0))
    validate_record(measured(methodology="custom", min_time_s=1.0, stop_rule="min_time", timed_batches=77))
    validate_record(measured(mode="train", kvstore="device", train_loop="unsynchronised"))


@pytest.mark.parametrize(("overrides", "field"), [
    ({"min_time_s": 1.0}, "methodology"),  # official with a min time
    ({**ROBUST, "target_cv": 0.05, "stop_rule": "target_cv_met"}, "target_cv"),  # robust is 3 %
    ({**ROBUST, "stop_rule": "target_cv_met", "images_per_sec_samples": [5.0, 10.0, 15.0],
      "cv": 0.5}, "stop_rule"),  # cv not under the target
    ({**ROBUST, "stop_rule": "max_repeats"}, "stop_rule"),  # 3 repeats are not the limit of 10
    ({"methodology": "custom", "target_cv": 0.03, "stop_rule": "target_cv_met"}, "max_repeats"),
    ({"methodology": "custom", "min_time_s": 5.0, "stop_rule": "min_time"}, "timed_seconds"),  # 6 s < 3 × 5
    ({"stop_rule": "min_time"}, "min_time_s"),
    ({"repeats": 4}, "repeats"),  # 3 samples
    ({"timed_batches": 2}, "timed_batches"),
    ({"timed_seconds": None}, "timed_seconds"),
    ({"warmup_seconds": -0.1}, "warmup_seconds"),
    ({"train_loop": "official"}, "train_loop"),  # scoring
    ({"status": "oom", "error": "out of memory", "images_per_sec": None, "images_per_sec_samples": []},
     "stop_rule"),
    ({"methodology": "fast"}, "methodology"),
])
def test_records_that_break_a_rule_between_the_new_fields_are_refused(overrides: dict, field: str) -> None:
    with pytest.raises(RecordError) as caught:
        validate_record(measured(**overrides))
    assert caught.value.field == field


# -- the fleet file --------------------------------------------------------------------------------
PROFILE = {"networks": ["alexnet"], "batch_sizes": [1], "modes": ["score", "train"]}


def test_a_fleet_profile_chooses_the_methodology_of_its_sweeps() -> None:
    robust = fleet.parse_profile("careful", {**PROFILE, "methodology": "robust"})
    document = fleet.sweep_config(robust, "score", gpu_count=1)
    assert document["methodology"] == "robust"
    (config,) = parse_sweep(document).configs
    assert (config.methodology, config.min_time_s, config.target_cv, config.max_repeats) == (
        "robust", 2.0, 0.03, 10)
    default = fleet.sweep_config(fleet.parse_profile("plain", PROFILE), "train", gpu_count=1)
    assert parse_sweep(default).configs[0].methodology == "official"
    for bad in ("custom", "fast", 3):
        with pytest.raises(ValidationError) as caught:
            fleet.parse_profile("bad", {**PROFILE, "methodology": bad})
        assert "methodology" in str(caught.value) and "official, robust" in str(caught.value)
