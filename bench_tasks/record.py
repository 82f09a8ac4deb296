"""The result record: the one data contract between the worker and the orchestrator.

Every configuration a sweep is asked to run produces exactly one record, also the ones that
did not run (``status`` says why). The worker validates each record here before writing it,
and the orchestrator validates each line here again before it reaches the lake, so the
contract is checked in one place on both sides of the boundary.

Standard library only: this module is imported by the orchestrator too, which never
imports mxnet.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from bench_tasks.compat import zip_strict
from bench_tasks.constants import (
    DEVICE_KINDS,
    DTYPES,
    ENERGY_METHODS,
    ENERGY_UNAVAILABLE_PREFIX,
    FRESH_PROCESS_REASONS,
    KVSTORES,
    MAX_MIN_TIME_S,
    MAX_REPEATS,
    METHODOLOGIES,
    MODES,
    NETWORKS,
    SCALING_KINDS,
    STATUSES,
    STOP_RULES,
    TRAIN_LOOPS,
)
from bench_tasks.methodology import ROBUST_MAX_REPEATS, ROBUST_MIN_TIME_S, ROBUST_TARGET_CV

#: 2: timed_batches counts every timed batch of all repeats (1: per repeat); methodology,
#: stopping values and rule, training loop and phase times added.
#: 3: energy of the timed window (energy_joules, energy_method, avg_power_watts); worker_runtime
#:    and framework_build (which software stack produced the figure).
#: 4: gpu_exclusive and gpu_exclusive_note (was another process computing on the GPUs?), the
#:    status gpu_busy.
SCHEMA_VERSION = 4

_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_DEVICE = re.compile(r"^(cpu|gpu):\d+$")
_IMAGE_SHAPE = re.compile(r"^\d+,\d+,\d+$")


@dataclass(frozen=True)
class Field:
    """One column of the record: its JSON type, whether it may be null, its allowed values."""

    name: str
    kind: str  # str | int | float | bool | str_list | float_list
    nullable: bool = False
    allowed: tuple[str, ...] | None = None
    doc: str = ""


FIELDS: tuple[Field, ...] = (
    Field("schema_version", "int", doc="version of this record format"),
    Field("run_id", "str", doc="one sweep invocation; every record of a sweep shares it"),
    Field("config_id", "str", doc="stable id of the configuration inside the run"),
    Field("mode", "str", allowed=MODES, doc="score = inference, train = forward+backward+update"),
    Field("network", "str", allowed=NETWORKS),
    Field("image_shape", "str", doc="C,H,W of one input image, e.g. 3,224,224"),
    Field("dtype", "str", allowed=DTYPES),
    Field("batch_size", "int", doc="global batch: images per step over all devices and nodes"),
    Field("per_device_batch", "int", nullable=True, doc="batch_size / (gpu or device count)"),
    Field("devices", "str_list", doc="device contexts of one node, e.g. ['gpu:0', 'gpu:1']"),
    Field("device_kind", "str", allowed=DEVICE_KINDS),
    Field("gpu_count", "int", doc="devices used over all nodes (GPUs, or CPU contexts on CPU)"),
    Field("num_nodes", "int", doc="hosts taking part (1 unless a parameter-server run)"),
    Field("kvstore", "str", nullable=True, allowed=KVSTORES, doc="null for scoring"),
    Field("scaling", "str", nullable=True, allowed=SCALING_KINDS,
          doc="weak = per-device batch held, strong = global batch held, null = not a series"),
    Field("parameters", "int", nullable=True, doc="trainable parameter count of the network"),
    Field("warmup_batches", "int", doc="untimed batches before the first repeat"),
    Field("timed_batches", "int", doc="batches actually timed, summed over the repeats"),
    Field("repeats", "int", doc="repeats actually timed (one images/s sample each)"),
    Field("methodology", "str", nullable=True, allowed=METHODOLOGIES,
          doc="official = fixed batch counts (MXNet's harness), robust = min time 2 s, CV under 3 %, "
              "at most 10 repeats, custom = the stopping values recorded"),
    Field("min_time_s", "float", nullable=True, doc="minimum seconds per repeat; null = fixed batches"),
    Field("target_cv", "float", nullable=True,
          doc="repeats were added until cv < this (a fraction, 0.03 = 3 %); null = fixed repeats"),
    Field("max_repeats", "int", nullable=True, doc="repeat limit with a target cv; null otherwise"),
    Field("stop_rule", "str", nullable=True, allowed=STOP_RULES,
          doc="what ended the timing: fixed_batches, min_time, target_cv_met or max_repeats; "
              "null unless ok"),
    Field("train_loop", "str", nullable=True, allowed=TRAIN_LOOPS,
          doc="training step: official = accuracy metric every batch (Module.fit), unsynchronised "
              "= no metric; null for scoring"),
    Field("setup_seconds", "float", nullable=True,
          doc="before the warm-up: the measuring process's start (for the first configuration it "
              "ran), symbol, bind, parameters, input; null unless ok"),
    Field("warmup_seconds", "float", nullable=True, doc="the warm-up batches; null unless ok"),
    Field("timed_seconds", "float", nullable=True,
          doc="inside timed batches, summed over the repeats; null unless ok"),
    Field("fresh_process_reason", "str", nullable=True, allowed=FRESH_PROCESS_REASONS,
          doc="why the configuration ran in a fresh measuring process (series_start, after_failure, "
              "oom_retry, low_gpu_memory, gpu_memory_dropped); null = it shared the process of "
              "earlier configurations, or ran in none (decided before measuring)"),
    Field("energy_joules", "float", nullable=True,
          doc="energy of the devices used over the timed batches of all repeats, joules; null when not "
              "measured (energy_method says why)"),
    Field("energy_method", "str", nullable=True,
          doc="how energy_joules was measured: nvml_energy_counter | nvml_power_sampling | rapl, or "
              "'unavailable: <reason>' when it was not"),
    Field("avg_power_watts", "float", nullable=True,
          doc="energy_joules / the seconds of the timed window, watts; null when not measured"),
    Field("images_per_sec", "float", nullable=True, doc="median of the repeats; null unless ok"),
    Field("images_per_sec_samples", "float_list", doc="one figure per repeat"),
    Field("per_worker_images_per_sec", "float_list",
          doc="multi-node runs: each worker's throughput; empty otherwise"),
    Field("cv", "float", nullable=True, doc="coefficient of variation of the samples"),
    Field("status", "str", allowed=STATUSES),
    Field("error", "str", nullable=True, doc="what went wrong, for every status but ok"),
    Field("started_at", "str", doc="ISO 8601 with time zone"),
    Field("finished_at", "str", doc="ISO 8601 with time zone"),
    Field("host", "str"),
    Field("cpu_model", "str", nullable=True),
    Field("gpu_model", "str", nullable=True),
    Field("gpu_memory_mib", "int", nullable=True),
    Field("driver_version", "str", nullable=True),
    Field("cuda_version", "str", nullable=True),
    Field("cudnn_version", "str", nullable=True),
    Field("mxnet_version", "str", nullable=True),
    Field("gpu_exclusive", "bool", nullable=True,
          doc="true: no other process computed on the configuration's GPUs before it was measured; "
              "false: one did (status gpu_busy, gpu_exclusive_note lists it); null: not known "
              "(gpu_exclusive_note says why: cpu device, NVML and nvidia-smi unavailable…)"),
    Field("gpu_exclusive_note", "str", nullable=True,
          doc="why gpu_exclusive is null, or the foreign processes (device, pid, name) when false"),
    Field("worker_runtime", "str", nullable=True,
          doc="the worker runtime of data/runtimes.csv that ran it (pip-cu112, ngc-24.06, cpu …); "
              "null for published figures"),
    Field("framework_build", "str", nullable=True,
          doc="JSON object: MXNet version and enabled build features (mx.runtime.Features), CUDA and "
              "cuDNN as MXNet loaded them, Python version, the container image and its digest when "
              "there is one"),
)

FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)
_BY_NAME = {f.name: f for f in FIELDS}


class RecordError(ValueError):
    """A record that breaks the contract; ``field`` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


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
    if not _IMAGE_SHAPE.match(record["image_shape"]):
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
        if not _DEVICE.match(device):
            raise RecordError("devices", f"{device!r} is not of the form cpu:N or gpu:N")
    for name in ("started_at", "finished_at"):
        if not _TIMESTAMP.match(record[name]):
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
    _check_hostile(record)
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


# ---- limits against hostile or broken input (shared by the worker and the orchestrator) ------
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Longest text (UTF-8 bytes) of ``error`` and of every other string field ("names").
MAX_ERROR_BYTES = 64 * 1024
MAX_NAME_BYTES = 256
#: Fields whose text may hold line breaks and tabs (a traceback); every other string is a name.
_MULTILINE_FIELDS = frozenset({"error"})
#: Single-line fields longer than a name (``framework_build``: JSON of the build features).
MAX_BUILD_BYTES = 8 * 1024
_LONG_FIELDS = {"framework_build": MAX_BUILD_BYTES, "gpu_exclusive_note": MAX_BUILD_BYTES}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_text(name: str, value: str) -> None:
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate ("\ud800" in JSON) is no text
        raise RecordError(name, "holds a lone surrogate (not valid Unicode text)") from None
    multiline = name in _MULTILINE_FIELDS
    limit = MAX_ERROR_BYTES if multiline else _LONG_FIELDS.get(name, MAX_NAME_BYTES)
    if size > limit:
        raise RecordError(name, f"is {size} bytes long; at most {limit} allowed")
    if "\x00" in value:
        raise RecordError(name, "holds a NUL character")
    if not multiline and _CONTROL.search(value):
        raise RecordError(name, f"holds a control character (newline, tab, …): {value[:40]!r}")


def _parse_time(name: str, text: str) -> dt.datetime:
    """The timestamp, converted to UTC: a time whose UTC form leaves the calendar
    (0001-01-01T00:30:00+01:00, 9999-12-31T23:59:59-01:00) is refused here, not at ingest."""
    try:
        stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:  # 2026-02-30, hour 25: the pattern matched, the calendar did not
        raise RecordError(name, f"{text!r} is not a real date and time ({exc})") from None
    try:
        return stamp.astimezone(dt.timezone.utc)  # noqa: UP017  (Python 3.8 worker)
    except (OverflowError, ValueError):
        raise RecordError(name, f"{text!r} is outside years 1 to 9999 once converted to UTC") from None


def _check_hostile(record: dict[str, Any]) -> None:
    """What no measurement can produce: integers beyond int64, invalid Unicode, control
    characters in names, oversized text, impossible dates, a run that ends before it starts."""
    for f in FIELDS:
        value = record[f.name]
        if value is None:
            continue
        if f.kind == "int" and not INT64_MIN <= value <= INT64_MAX:
            raise RecordError(f.name, f"{value} does not fit a 64-bit integer")
        if f.kind == "float" and isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
            raise RecordError(f.name, f"{value} is out of range")
        if f.kind == "str":
            _check_text(f.name, value)
        elif f.kind == "str_list":
            for item in value:
                _check_text(f.name, item)
    started = _parse_time("started_at", record["started_at"])
    finished = _parse_time("finished_at", record["finished_at"])
    if finished < started:
        raise RecordError("finished_at",
                          f"{record['finished_at']} is before started_at {record['started_at']}")


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
    (``MIN_IMAGES_PER_SEC``)."""
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
        if value > ceiling:
            raise RecordError(name, f"{value:g} images/s is above the physical ceiling of "
                              f"{ceiling:g} for a {record['device_kind']} node (MAX_IMAGES_PER_SEC)")


# ---- reading one record from JSON text --------------------------------------------------------
#: Longest integer literal (characters, sign included): int64 has 19 digits. Longer literals are
#: refused before ``int()`` runs (Python refuses more than 4,300 digits with a ValueError, and
#: converting long ones costs quadratic time).
MAX_INT_CHARS = 20
#: Longest number literal with a fraction or exponent (a double needs 17 significant digits).
MAX_FLOAT_CHARS = 40


class _Refused:
    """A number literal refused while parsing; the object holding it names the field."""

    def __init__(self, message: str) -> None:
        self.message = message


def _parse_int(text: str) -> Any:
    if len(text) > MAX_INT_CHARS:
        return _Refused(f"integer literal of {len(text)} characters (at most {MAX_INT_CHARS}: "
                        f"a 64-bit integer): {text[:24]}…")
    return int(text)


def _parse_float(text: str) -> Any:
    if len(text) > MAX_FLOAT_CHARS:
        return _Refused(f"number literal of {len(text)} characters (at most {MAX_FLOAT_CHARS}): "
                        f"{text[:24]}…")
    value = float(text)
    if not math.isfinite(value):
        return _Refused(f"number {text[:24]} is out of range for a 64-bit float")
    return value


def _parse_constant(text: str) -> Any:
    return _Refused(f"{text} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise RecordError(key, "appears twice in the same JSON object (which value is meant?)")
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, _Refused):
                raise RecordError(key, item.message)
        result[key] = value
    return result


def loads_record(text: str) -> Any:
    """Parse one JSON record strictly: duplicate keys, NaN/Infinity and oversized number
    literals raise RecordError (before any conversion); invalid JSON raises ValueError.
    The result still goes through ``validate_record``."""
    value = json.loads(text, object_pairs_hook=_unique_keys, parse_int=_parse_int,
                       parse_float=_parse_float, parse_constant=_parse_constant)
    if isinstance(value, _Refused):
        raise RecordError("record", value.message)
    return value


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


def empty_record(**values: Any) -> dict[str, Any]:
    """A record with every field present (lists empty, the rest null), updated with values."""
    record: dict[str, Any] = {
        f.name: ([] if f.kind.endswith("_list") else None) for f in FIELDS
    }
    record["schema_version"] = SCHEMA_VERSION
    unknown = set(values) - set(FIELD_NAMES)
    if unknown:
        raise RecordError(sorted(unknown)[0], "unknown field")
    record.update(values)
    return record


def field(name: str) -> Field:
    """The definition of one field (used by the orchestrator to build its Arrow schema)."""
    return _BY_NAME[name]
