"""The result record: the one data contract between the worker and the orchestrator.

Every configuration a sweep is asked to run produces exactly one record, also the ones that
did not run (``status`` says why). The worker validates each record here before writing it,
and the orchestrator validates each line here again before it reaches the lake, so the
contract is checked in one place on both sides of the boundary.

This module holds the rules of a record (``validate_record``: types, allowed values, the rules
between fields, plausibility, methodology, energy, build, exclusivity). The fields themselves,
the schema version, ``RecordError`` and ``empty_record`` are ``bench_tasks.record_fields``; the
record as untrusted text (strict JSON, int64/Unicode/size/date limits) is ``bench_tasks.record_text``.

Standard library only: this module is imported by the orchestrator too, which never
imports mxnet.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from bench_tasks.compat import zip_strict
from bench_tasks.constants import (
    DEVICE_PATTERN,
    ENERGY_METHODS,
    ENERGY_UNAVAILABLE_PREFIX,
    MAX_MIN_TIME_S,
    MAX_REPEATS,
)
from bench_tasks.methodology import ROBUST_MAX_REPEATS, ROBUST_MIN_TIME_S, ROBUST_TARGET_CV
from bench_tasks.record_fields import FIELD_NAMES, FIELDS, SCHEMA_VERSION, Field, RecordError
from bench_tasks.record_text import check_hostile

# Used with fullmatch only: "^…$" with match accepts a trailing newline; [0-9], not \d, which
# also matches other scripts' digits.
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
                        r"(Z|[+-][0-9]{2}:[0-9]{2})")
_DEVICE = re.compile(DEVICE_PATTERN)
_IMAGE_SHAPE = re.compile(r"[0-9]+,[0-9]+,[0-9]+")


def _check_type(field: Field, value: Any) -> None:
    if value is None:
        if not field.nullable:
            raise RecordError(field.name, "must not be null")
        return
    kind = field.kind
    if kind == "str":
        ok = isinstance(value, str)
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "float":
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
              and math.isfinite(value))
    elif kind == "str_list":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    elif kind == "float_list":
        ok = isinstance(value, list) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in value
        )
    else:  # pragma: no cover - a typo in FIELDS
        raise AssertionError(kind)
    if not ok:
        raise RecordError(field.name, f"expected {kind}, got {type(value).__name__} {value!r}")
    if field.allowed is not None and value not in field.allowed:
        raise RecordError(
            field.name, f"{value!r} is not one of {', '.join(field.allowed)}"
        )


def validate_record(record: Any) -> dict[str, Any]:
    """Check one record against the contract and return it; raise RecordError otherwise.

    Checks types, allowed values, and the rules between fields (an ``ok`` record has a
    positive throughput, any other status has an error message, the batch is positive...).
    Unknown fields are refused so that a typo cannot silently drop a column.
    """
    if not isinstance(record, dict):
        raise RecordError("record", f"expected a JSON object, got {type(record).__name__}")
    unknown = sorted(set(record) - set(FIELD_NAMES))
    if unknown:
        raise RecordError(unknown[0], "unknown field (allowed: the fields of bench_tasks.record)")
    for field in FIELDS:
        if field.name not in record:
            raise RecordError(field.name, "missing")
        _check_type(field, record[field.name])

    if record["schema_version"] != SCHEMA_VERSION:
        raise RecordError("schema_version", f"expected {SCHEMA_VERSION}, got {record['schema_version']}")
    if not _IMAGE_SHAPE.fullmatch(record["image_shape"]):
        raise RecordError("image_shape", f"expected C,H,W such as 3,224,224, got {record['image_shape']!r}")
    for name in ("batch_size", "gpu_count", "num_nodes", "repeats"):
        if record[name] <= 0:
            raise RecordError(name, f"must be > 0, got {record[name]}")
    for name in ("warmup_batches", "timed_batches"):
        if record[name] < 0:
            raise RecordError(name, f"must be >= 0, got {record[name]}")
    if not record["devices"]:
        raise RecordError("devices", "must name at least one device")
    for device in record["devices"]:
        if not _DEVICE.fullmatch(device):
            raise RecordError("devices", f"{device!r} is not of the form cpu:N or gpu:N")
    for name in ("started_at", "finished_at"):
        if not _TIMESTAMP.fullmatch(record[name]):
            raise RecordError(name, f"expected ISO 8601 with a time zone, got {record[name]!r}")

    status = record["status"]
    if status == "ok":
        ips = record["images_per_sec"]
        if ips is None or ips <= 0:
            raise RecordError("images_per_sec", "an ok record needs a throughput > 0")
        if not record["images_per_sec_samples"]:
            raise RecordError("images_per_sec_samples", "an ok record needs its samples")
        if record["error"] is not None:
            raise RecordError("error", "an ok record has no error")
    else:
        if record["images_per_sec"] is not None:
            raise RecordError("images_per_sec", f"a {status} record has no throughput")
        if not record["error"]:
            raise RecordError("error", f"a {status} record must say what went wrong")
    if record["mode"] == "score" and record["kvstore"] is not None:
        raise RecordError("kvstore", "scoring uses no kvstore; must be null")
    check_hostile(record)
    _check_plausible(record)
    _check_methodology(record)
    _check_energy(record)
    _check_build(record["framework_build"])
    _check_exclusive(record)
    return record


def _check_exclusive(record: dict[str, Any]) -> None:
    """gpu_busy goes with gpu_exclusive false, and a false one names the processes."""
    exclusive, note = record["gpu_exclusive"], record["gpu_exclusive_note"]
    if record["status"] == "gpu_busy" and exclusive is not False:
        raise RecordError("gpu_exclusive", f"a gpu_busy record has gpu_exclusive false, not {exclusive}")
    if exclusive is False and not note:
        raise RecordError("gpu_exclusive_note", "gpu_exclusive false must name the other processes")
    if exclusive is True and note is not None:
        raise RecordError("gpu_exclusive_note", "only a false or null gpu_exclusive has a note")


def _check_energy(record: dict[str, Any]) -> None:
    """A measured energy says how; a missing one says why (or is null: records made elsewhere)."""
    joules, method, watts = record["energy_joules"], record["energy_method"], record["avg_power_watts"]
    if joules is not None:
        if joules < 0:
            raise RecordError("energy_joules", f"must be >= 0, got {joules}")
        if method not in ENERGY_METHODS:
            raise RecordError("energy_method", f"{method!r} is not one of {', '.join(ENERGY_METHODS)} "
                              "(a measured energy says how)")
        if record["status"] != "ok":
            raise RecordError("energy_joules", f"a {record['status']} record was not timed; must be null")
    elif method is not None and not method.startswith(ENERGY_UNAVAILABLE_PREFIX):
        raise RecordError("energy_method", f"{method!r}: without energy_joules it must say "
                          f"'{ENERGY_UNAVAILABLE_PREFIX}<reason>'")
    if watts is not None and (joules is None or watts < 0):
        raise RecordError("avg_power_watts", "needs energy_joules and must be >= 0")


def _check_build(text: str | None) -> None:
    if text is None:
        return
    try:
        build = json.loads(text)
    except ValueError:
        raise RecordError("framework_build", f"is not JSON: {text[:60]!r}") from None
    if not isinstance(build, dict):
        raise RecordError("framework_build", f"expected a JSON object, got {type(build).__name__}")


# ---- plausibility: what a measurement can be at all ----------------------------------------
#: The physical ceiling of ``images_per_sec`` (and of each sample) per device kind. The fastest
#: published single-node figures are around 10^5 images/s (AlexNet scoring on 8 GPUs); a node
#: cannot feed more than 10^7 images a second through any network here, a CPU 10^6.
MAX_IMAGES_PER_SEC: dict[str, float] = {"gpu": 1e7, "cpu": 1e6}
#: The floor of an ok record's ``images_per_sec``: one image in 27.8 hours, slower than any
#: configuration can finish inside the 24-hour configuration time limit.
MIN_IMAGES_PER_SEC = 1e-5
#: Fields that count things: at least 1 when given (null allowed where the field is nullable).
_COUNTS = ("batch_size", "per_device_batch", "gpu_count", "num_nodes", "repeats", "parameters")
#: Fields that must not be negative when given.
_NON_NEGATIVE = ("warmup_batches", "timed_batches", "cv", "gpu_memory_mib", "setup_seconds",
                 "warmup_seconds", "timed_seconds")


def _check_plausible(record: dict[str, Any]) -> None:
    """Values no measurement can produce: counts below 1, negative samples, cv, memory or
    times, throughput above the device kind's ceiling (``MAX_IMAGES_PER_SEC``) or below the floor
    (``MIN_IMAGES_PER_SEC``: the median and, in an ok record, every sample)."""
    for name in _COUNTS:
        if record[name] is not None and record[name] < 1:
            raise RecordError(name, f"counts something: must be >= 1, got {record[name]}")
    for name in _NON_NEGATIVE:
        if record[name] is not None and record[name] < 0:
            raise RecordError(name, f"must be >= 0, got {record[name]}")
    ips = record["images_per_sec"]
    if ips is not None and ips < MIN_IMAGES_PER_SEC:
        raise RecordError("images_per_sec", f"{ips:g} images/s is below the floor of {MIN_IMAGES_PER_SEC:g} "
                          "(one image in 27.8 hours: MIN_IMAGES_PER_SEC)")
    ceiling = MAX_IMAGES_PER_SEC[record["device_kind"]]
    figures = [("images_per_sec", record["images_per_sec"])]
    figures += [("images_per_sec_samples", v) for v in record["images_per_sec_samples"]]
    figures += [("per_worker_images_per_sec", v) for v in record["per_worker_images_per_sec"]]
    for name, value in figures:
        if value is None:
            continue
        if value < 0:
            raise RecordError(name, f"must be >= 0, got {value}")
        if record["status"] == "ok" and value < MIN_IMAGES_PER_SEC:
            # a timed repeat of an ok record measured something: 0 (or 5e-324) is no measurement,
            # and the reports' intervals and ratios need every sample > 0 (issue 32)
            raise RecordError(name, f"{value:g} images/s is below the floor of {MIN_IMAGES_PER_SEC:g} "
                              "(every sample of an ok record is a measurement > 0: MIN_IMAGES_PER_SEC)")
        if value > ceiling:
            raise RecordError(name, f"{value:g} images/s is above the physical ceiling of "
                              f"{ceiling:g} for a {record['device_kind']} node (MAX_IMAGES_PER_SEC)")


#: The robust methodology's values as the record stores them.
_ROBUST = {"min_time_s": ROBUST_MIN_TIME_S, "target_cv": ROBUST_TARGET_CV, "max_repeats": ROBUST_MAX_REPEATS}


def _check_methodology(record: dict[str, Any]) -> None:
    """The rules between the stopping values, the stop rule, the samples and the phase times.

    Records built outside the worker (hand-made, published) may leave these fields null; what
    is given must agree.
    """
    methodology, stop_rule = record["methodology"], record["stop_rule"]
    min_time, target_cv, max_repeats = record["min_time_s"], record["target_cv"], record["max_repeats"]
    if min_time is not None and not 0 < min_time <= MAX_MIN_TIME_S:
        raise RecordError("min_time_s", f"{min_time} is not in (0, {MAX_MIN_TIME_S:g}]")
    if target_cv is not None and not 0 < target_cv <= 1:
        raise RecordError("target_cv", f"{target_cv} is not a fraction in (0, 1]")
    if (target_cv is None) != (max_repeats is None):
        raise RecordError("max_repeats", "a target cv and a repeat limit go together")
    if max_repeats is not None and not record["repeats"] <= max_repeats <= MAX_REPEATS:
        raise RecordError("max_repeats", f"{max_repeats} must be in [repeats ({record['repeats']}), "
                          f"{MAX_REPEATS}]")
    if methodology == "official" and (min_time, target_cv) != (None, None):
        raise RecordError("methodology", "official times fixed batch counts: min_time_s and target_cv "
                          "must be null")
    if methodology == "robust":
        for name, value in _ROBUST.items():
            if record[name] != value:
                raise RecordError(name, f"robust means {name} = {value}, got {record[name]}")
    if record["mode"] == "score" and record["train_loop"] is not None:
        raise RecordError("train_loop", "scoring has no training loop; must be null")
    for name in ("setup_seconds", "warmup_seconds", "timed_seconds"):
        if record[name] is not None and record[name] < 0:
            raise RecordError(name, f"must be >= 0, got {record[name]}")
    if record["status"] != "ok":
        for name in ("stop_rule", "warmup_seconds", "timed_seconds"):
            if record[name] is not None:
                raise RecordError(name, f"a {record['status']} record was not timed; must be null")
        return
    if stop_rule is None:
        return
    samples = record["images_per_sec_samples"]
    if len(samples) != record["repeats"]:
        raise RecordError("repeats", f"{record['repeats']} repeats but {len(samples)} samples")
    if record["timed_batches"] < record["repeats"]:
        raise RecordError("timed_batches", f"{record['timed_batches']} batches cannot make "
                          f"{record['repeats']} repeats")
    if record["timed_seconds"] is None or record["timed_seconds"] <= 0:
        raise RecordError("timed_seconds", "a timed record needs its timed seconds > 0")
    expected = {"fixed_batches": (False, False), "min_time": (True, False),
                "target_cv_met": (None, True), "max_repeats": (None, True)}[stop_rule]
    for name, wanted in zip_strict(("min_time_s", "target_cv"), expected):
        if wanted is not None and (record[name] is not None) != wanted:
            raise RecordError(name, f"stop_rule {stop_rule} {'needs' if wanted else 'excludes'} {name}")
    if min_time is not None and record["timed_seconds"] < min_time * record["repeats"]:
        raise RecordError("timed_seconds", f"{record['timed_seconds']} s is less than {record['repeats']} "
                          f"repeats of at least {min_time} s")
    if stop_rule == "target_cv_met" and (record["cv"] is None or record["cv"] >= target_cv):
        raise RecordError("stop_rule", f"target_cv_met but cv {record['cv']} is not under {target_cv}")
    if stop_rule == "max_repeats" and record["repeats"] != max_repeats:
        raise RecordError("stop_rule", f"max_repeats but {record['repeats']} repeats of {max_repeats}")
