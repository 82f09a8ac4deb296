"""The record as text from outside the process: strict JSON reading (``loads_record``: duplicate
keys, NaN/Infinity and oversized number literals refused before any conversion) and the limits
against hostile or broken input (``check_hostile``: integers beyond int64, invalid Unicode,
control characters in names, oversized text, impossible dates). Shared by the worker and the
orchestrator; standard library only (Python 3.8).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from typing import Any

from bench_tasks.record_fields import FIELDS, RecordError

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


def check_hostile(record: dict[str, Any]) -> None:
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
