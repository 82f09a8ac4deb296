"""When a configuration stops timing: the methodologies and their stopping rules.

Every configuration binds once, runs ``warmup`` untimed batches, then timed *repeats*; each
repeat yields one images/s sample. Two questions decide how long that goes on:

* when does a repeat end? After ``batches`` batches (MXNet's harness: ``benchmark_score.py``
  times a fixed 10 batches), or, with ``min_time_s``, after at least ``batches`` batches *and*
  at least ``min_time_s`` seconds (on a fast GPU, 10 AlexNet batches take 0.1 s: timer
  resolution and a single hiccup would decide the figure; MLPerf fixes minimum durations);
* when do the repeats end? After ``repeats`` repeats, or, with ``target_cv``, once at least
  ``repeats`` were timed and their coefficient of variation is under the target, or at
  ``max_repeats`` (Phoronix Test Suite adds runs until the deviation is under 3 %).

The methodologies name the combinations (``--methodology``):

* ``official`` (the default): fixed counts, ``warmup`` + ``repeats`` × ``batches`` (5 + 3 × 10),
  MXNet's own harness per repeat, for comparisons with published figures; ends ``fixed_batches``;
* ``robust``: at least 2 s per repeat, repeats until the CV is under 3 %, at most 10 repeats;
  ends ``target_cv_met`` or ``max_repeats``;
* ``custom``: the stopping values given (``--min-time``, ``--target-cv``, ``--max-repeats``);
  ends with any of the four rules.

The record carries the methodology, its values and the rule that ended the configuration
(``stop_rule``), so figures measured under different methodologies are never mixed up.

Standard library only: the sweep and the orchestrator import this (never mxnet).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from bench_tasks.constants import (
    MAX_MIN_TIME_S,
    MAX_REPEATS,
    MAX_TARGET_CV_PCT,
    METHODOLOGIES,
    MIN_TARGET_CV_PCT,
    NAMED_METHODOLOGIES,
)

#: The robust methodology's values (min time per repeat, target CV as a fraction, repeat limit).
ROBUST_MIN_TIME_S = 2.0
ROBUST_TARGET_CV = 0.03
ROBUST_MAX_REPEATS = 10
#: ``max_repeats`` when a target CV is given without one.
DEFAULT_MAX_REPEATS = 10


class MethodologyError(ValueError):
    """Stopping values that do not fit together; ``key`` is the sweep key at fault."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


def coefficient_of_variation(samples: Sequence[float]) -> float | None:
    """Sample standard deviation / mean, or None with fewer than two samples.

    The one definition used both to stop repeating (in the measuring process) and for the
    record's ``cv`` (in the sweep), so ``stop_rule = target_cv_met`` always agrees with ``cv``.
    """
    if len(samples) < 2:
        return None
    return statistics.stdev(samples) / statistics.mean(samples)


@dataclass(frozen=True)
class StopPolicy:
    """The resolved stopping values of one configuration (see the module docstring)."""

    methodology: str = "official"
    batches: int = 10
    repeats: int = 3
    min_time_s: float | None = None
    target_cv: float | None = None  # a fraction, as the record's cv (0.03 = 3 %)
    max_repeats: int | None = None

    def repeat_done(self, batches_done: int, elapsed_s: float) -> bool:
        """Whether a repeat that has run ``batches_done`` batches in ``elapsed_s`` may end."""
        if batches_done < self.batches:
            return False
        return self.min_time_s is None or elapsed_s >= self.min_time_s

    def more_repeats(self, samples: Sequence[float]) -> bool:
        """Whether to time another repeat after ``samples``."""
        if len(samples) < self.repeats:
            return True
        if self.target_cv is None or len(samples) >= (self.max_repeats or self.repeats):
            return False
        cv = coefficient_of_variation(samples)
        return cv is None or cv >= self.target_cv

    def stop_rule(self, samples: Sequence[float]) -> str:
        """Which rule ended the repeats that gave ``samples`` (a value of STOP_RULES)."""
        if self.target_cv is not None:
            cv = coefficient_of_variation(samples)
            return "target_cv_met" if cv is not None and cv < self.target_cv else "max_repeats"
        return "min_time" if self.min_time_s is not None else "fixed_batches"


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def resolve(methodology: str | None, *, batches: int, repeats: int, min_time_s: float | None,
            target_cv_pct: float | None, max_repeats: int | None) -> StopPolicy:
    """The stopping values of a methodology and the explicit values given with it.

    ``official`` and ``robust`` are fixed sets and refuse explicit stopping values (a figure
    labelled robust is always the robust rule); giving stopping values without a methodology
    means ``custom``. ``batches`` and ``repeats`` (per repeat and minimum repeats) apply to
    every methodology. Raises MethodologyError naming the sweep key at fault.
    """
    given = {key: value for key, value in (("min_time_s", min_time_s), ("target_cv_pct", target_cv_pct),
                                           ("max_repeats", max_repeats)) if value is not None}
    if methodology is None:
        methodology = "custom" if given else "official"
    if methodology not in METHODOLOGIES:
        raise MethodologyError("methodology", f"{methodology!r} is not one of {', '.join(METHODOLOGIES)}")
    if methodology in NAMED_METHODOLOGIES and given:
        key = next(iter(given))
        fixed = ("fixed warm-up and timed batch counts" if methodology == "official" else
                 f"min time {ROBUST_MIN_TIME_S:g} s, target CV {ROBUST_TARGET_CV * 100:g} %, "
                 f"max {ROBUST_MAX_REPEATS} repeats")
        raise MethodologyError(key, f"{given[key]!r} is not allowed with methodology {methodology} "
                               f"({fixed}); use methodology "
                               "custom to set stopping values")
    if methodology == "official":
        return StopPolicy("official", batches, repeats)
    if methodology == "robust":
        min_time_s, target_cv, max_repeats = ROBUST_MIN_TIME_S, ROBUST_TARGET_CV, ROBUST_MAX_REPEATS
    else:
        if min_time_s is not None and not (_is_number(min_time_s) and 0 < min_time_s <= MAX_MIN_TIME_S):
            raise MethodologyError("min_time_s", f"{min_time_s!r} must be a number of seconds in "
                                   f"(0, {MAX_MIN_TIME_S:g}]")
        if target_cv_pct is not None and not (_is_number(target_cv_pct)
                                              and MIN_TARGET_CV_PCT <= target_cv_pct <= MAX_TARGET_CV_PCT):
            raise MethodologyError("target_cv_pct", f"{target_cv_pct!r} must be a percentage in "
                                   f"[{MIN_TARGET_CV_PCT:g}, {MAX_TARGET_CV_PCT:g}]")
        if max_repeats is not None:
            if target_cv_pct is None:
                raise MethodologyError("max_repeats", "only with a target CV (target_cv_pct / --target-cv): "
                                       "without one, repeats is the number of repeats")
            if isinstance(max_repeats, bool) or not isinstance(max_repeats, int) \
                    or not 2 <= max_repeats <= MAX_REPEATS:
                raise MethodologyError("max_repeats",
                                       f"{max_repeats!r} must be an integer in [2, {MAX_REPEATS}]")
        target_cv = None if target_cv_pct is None else float(target_cv_pct) / 100.0
        if target_cv is not None and max_repeats is None:
            max_repeats = max(DEFAULT_MAX_REPEATS, repeats)
        min_time_s = None if min_time_s is None else float(min_time_s)
    if max_repeats is not None and max_repeats < repeats:
        raise MethodologyError("max_repeats", f"{max_repeats} is below repeats {repeats} (the minimum "
                               "number of repeats); allowed: >= repeats")
    return StopPolicy(methodology, batches, repeats, min_time_s, target_cv, max_repeats)
