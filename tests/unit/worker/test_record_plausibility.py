"""Plausibility of a result record and strict JSON parsing (bench_tasks.record, issue 23).

The worker and the orchestrator share these checks, so a worker never writes what ingest
refuses. Each case here was accepted (or crashed with a traceback) before: the record was
committed, or ``json.loads`` / ``fromisoformat`` raised an exception no caller handled.
"""

from __future__ import annotations

import copy
import json

import pytest

from bench_tasks.record import MAX_IMAGES_PER_SEC, MIN_IMAGES_PER_SEC, validate_record
from bench_tasks.record_fields import RecordError, empty_record
from bench_tasks.record_text import loads_record
from tests.support.worker_support import PLAUSIBLE_RECORD


def good(**overrides: object) -> dict:
    values = copy.deepcopy(PLAUSIBLE_RECORD)
    values.update(overrides)
    return empty_record(**values)


def test_the_base_record_is_valid() -> None:
    assert validate_record(good())["images_per_sec"] == 120.0


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"images_per_sec_samples": [-1.0, 120.0, 121.0]}, "images_per_sec_samples"),
        ({"per_worker_images_per_sec": [-5.0]}, "per_worker_images_per_sec"),
        ({"cv": -0.01}, "cv"),
        ({"gpu_memory_mib": -1}, "gpu_memory_mib"),
        ({"parameters": -50}, "parameters"),
        ({"parameters": 0}, "parameters"),
        ({"per_device_batch": 0}, "per_device_batch"),
        ({"images_per_sec": 1e300, "images_per_sec_samples": [1e300]}, "images_per_sec"),
        ({"images_per_sec": 1e13, "images_per_sec_samples": [1e13]}, "images_per_sec"),
        ({"images_per_sec": 1e-100, "images_per_sec_samples": [1e-100]}, "images_per_sec"),
        ({"images_per_sec": 120.0, "images_per_sec_samples": [120.0, 2e7]}, "images_per_sec_samples"),
        ({"started_at": "0001-01-01T00:30:00+01:00"}, "started_at"),
        ({"finished_at": "9999-12-31T23:59:59-01:00"}, "finished_at"),
    ],
    ids=["negative sample", "negative worker figure", "negative cv", "memory -1", "parameters -50",
         "parameters 0", "per-device batch 0", "1e300 images/s", "1e13 images/s", "1e-100 images/s",
         "sample above ceiling", "start before year 1 in UTC", "finish after 9999 in UTC"],
)
def test_implausible_records_are_refused_naming_the_field(overrides: dict, field: str) -> None:
    """Before: all accepted (and committed by ingest), the two timestamps crashed ingest (exit 1)."""
    with pytest.raises(RecordError) as refused:
        validate_record(good(**overrides))
    assert refused.value.field == field, refused.value


def test_the_ceiling_is_per_device_kind_and_documented() -> None:
    cpu = good(device_kind="cpu", devices=["cpu:0"], images_per_sec=MAX_IMAGES_PER_SEC["cpu"] * 2,
               images_per_sec_samples=[MAX_IMAGES_PER_SEC["cpu"] * 2])
    with pytest.raises(RecordError, match="ceiling"):
        validate_record(cpu)
    fast = MAX_IMAGES_PER_SEC["cpu"] * 2
    gpu = good(images_per_sec=fast, images_per_sec_samples=[fast])
    assert validate_record(gpu)["images_per_sec"] == MAX_IMAGES_PER_SEC["cpu"] * 2
    assert validate_record(good(images_per_sec=MIN_IMAGES_PER_SEC))["images_per_sec"] == MIN_IMAGES_PER_SEC


def _text(record: dict) -> str:
    return json.dumps(record)


def _batch(literal: str) -> str:
    return _text(good()).replace('"batch_size": 4', '"batch_size": ' + literal)


@pytest.mark.parametrize(
    ("text", "field", "needle"),
    [
        (_text(good()).replace('"host": "h"', '"host": "h", "host": "other"'), "host", "twice"),
        (_batch("9" * 300), "batch_size", "300 characters"),
        (_batch("9" * 5000), "batch_size", "5000 characters"),
        (_text(good()).replace('"cv": 0.01', '"cv": 0.' + "1" * 5000), "cv", "characters"),
        (_text(good()).replace('"cv": 0.01', '"cv": NaN'), "cv", "not a JSON number"),
        (_text(good()).replace('"cv": 0.01', '"cv": 1e999'), "cv", "out of range"),
        (_text(good()).replace('[119.0, 120.0, 121.0]', "[119.0, 1" + "0" * 400 + "]"),
         "images_per_sec_samples", "characters"),
    ],
    ids=["duplicate key", "300-digit int", "5000-digit int", "5000-digit float", "NaN", "1e999",
         "long literal in a list"],
)
def test_strict_json_names_the_field_before_converting(text: str, field: str, needle: str) -> None:
    """Before: the duplicate's last value silently won; 5000 digits raised ValueError (exit 1);
    NaN and 1e999 became non-finite floats."""
    with pytest.raises(RecordError) as refused:
        validate_record(loads_record(text))
    assert refused.value.field == field and needle in refused.value.message, refused.value


def test_a_valid_line_parses_to_the_same_record() -> None:
    record = validate_record(good())
    assert validate_record(loads_record(_text(record))) == record


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"devices": ["gpu:0\n"]}, "devices"),
        ({"started_at": PLAUSIBLE_RECORD["started_at"] + "\n"}, "started_at"),
        ({"image_shape": "3,224,224\n"}, "image_shape"),
        ({"devices": ["gpu:\u0663"]}, "devices"),  # ARABIC-INDIC DIGIT THREE: a digit to \d, not to [0-9]
    ],
    ids=["device", "timestamp", "image shape", "non-ASCII digit"],
)
def test_a_trailing_newline_or_a_foreign_digit_is_refused(overrides: dict, field: str) -> None:
    """Before: ``^…$`` with ``match`` let ``gpu:0\\n`` through (``$`` matches before a final
    newline); the rules are now ``fullmatch`` of the one definition (constants.DEVICE_PATTERN)."""
    with pytest.raises(RecordError) as refused:
        validate_record(good(**overrides))
    assert refused.value.field == field, refused.value
