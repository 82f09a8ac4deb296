"""The value types of the pydantic models (``gpucompare.config.models``): what one field may hold.

Each type is a marker used as ``Annotated[<python type>, <marker>]``. The marker validates the
value the way a user means it (``"1, 8"`` and ``[1, 8]`` are the same batch sizes; ``2.0`` is
the whole number 2; ``true`` is never the number 1) and, when it refuses, raises a pydantic
error carrying the value and what is allowed, which ``gpucompare.config.validation`` turns into
the project's one message style::

    targets[2].instance_type: 'p3.2xlarge; rm -rf /' is not allowed; allowed: an EC2 type
    family.size such as p3.2xlarge, matching ^(?:[a-z][a-z0-9-]*\\.[a-z0-9]+)$

The same marker writes the field's JSON schema (``pattern``, ``enum``, ``minimum``…), so the
trigger form's schema and the checks come from one definition. Patterns are those of
``gpucompare.config.patterns``, used with ``fullmatch`` only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import PydanticCustomError, core_schema

from gpucompare.config import patterns

#: the error type of every refusal raised here (``validation`` reads its context)
NOT_ALLOWED = "not_allowed"
_SHOWN_MAX = 80


def shown(value: Any) -> str:
    """A value as an error message shows it: its repr, cut when long, and with non-ASCII
    characters escaped (a Cyrillic 'р' in ``р3.2xlarge`` must not look like a Latin 'p')."""
    text = repr(value) if not isinstance(value, str) or value.isascii() else ascii(value)
    if len(text) > _SHOWN_MAX:
        text = f"{text[:_SHOWN_MAX - 10]}…{text[-8:]} ({len(str(value))} characters)"
    if isinstance(value, str) and not value.isascii():
        text += " (non-ASCII characters)"
    return text


def refuse(value: Any, allowed: str, reason: str = "", index: int | None = None) -> PydanticCustomError:
    """The one refusal: ``<value> is not allowed`` (+ why) with the allowed values; ``index``
    names the item of a list (``batch_sizes[1]``)."""
    message = f"{shown(value)} is not allowed" + (f" ({reason})" if reason else "")
    at = "" if index is None else f"[{index}]"
    return PydanticCustomError(NOT_ALLOWED, "{message}", {"message": message, "allowed": allowed, "at": at})


def _each(items: list[Any], check: Callable[[Any], Any]) -> list[Any]:
    """``check`` of every item; a refusal names the item's index."""
    checked = []
    for index, item in enumerate(items):
        try:
            checked.append(check(item))
        except PydanticCustomError as exc:
            ctx = dict(exc.context or {})
            raise PydanticCustomError(exc.type, exc.message_template, {**ctx, "at": f"[{index}]"}) from None
    return checked


class _Marker:
    """Base of the markers: a plain validator (``check``) and a JSON schema (``schema``)."""

    def check(self, value: Any) -> Any:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        return core_schema.no_info_plain_validator_function(self.check)

    def __get_pydantic_json_schema__(self, schema: Any, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        return self.schema()


@dataclass(frozen=True)
class Matching(_Marker):
    """Text that fully matches one of ``config.patterns`` (``what`` says it for humans); ``also``
    is a further rule (e.g. no ``..`` segment) that the pattern cannot say."""

    pattern: re.Pattern[str]
    what: str
    also: Callable[[str], bool] | None = None

    @property
    def allowed(self) -> str:
        return f"{self.what}, matching {patterns.anchored(self.pattern)}"

    def check(self, value: Any) -> str:
        if not isinstance(value, str):
            raise refuse(value, self.allowed, f"expected text, got {type(value).__name__}")
        if not self.pattern.fullmatch(value) or (self.also is not None and not self.also(value)):
            raise refuse(value, self.allowed)
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "pattern": patterns.schema_pattern(self.pattern), "description": self.what}


@dataclass(frozen=True)
class Predicate(_Marker):
    """Text for which ``test`` holds (a rule no pattern says, e.g. an absolute local path)."""

    test: Callable[[str], bool]
    what: str

    def check(self, value: Any) -> str:
        if not isinstance(value, str) or not self.test(value):
            raise refuse(value, self.what)
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "description": self.what}


@dataclass(frozen=True)
class OneOf(_Marker):
    """One value of a fixed list (case-sensitive: ``on_demand``, not ``On_Demand``)."""

    values: tuple[str, ...]

    def check(self, value: Any) -> str:
        if not isinstance(value, str) or value not in self.values:
            raise refuse(value, ", ".join(self.values))
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.values)}


def _whole(value: Any) -> int | None:
    """``value`` as a whole number, or None: YAML/JSON ``2.0`` and form text ``"2"`` count, a
    bool never does (``True`` is not the number 1 to a user)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]{1,9}", value.strip()):
        return int(value)
    return value if isinstance(value, int) else None


@dataclass(frozen=True)
class Whole(_Marker):
    """A whole number in [low, high]."""

    low: int
    high: int

    @property
    def allowed(self) -> str:
        return f"whole numbers from {self.low} to {self.high}"

    def check(self, value: Any) -> int:
        number = _whole(value)
        if number is None:
            raise refuse(value, self.allowed, "not a whole number")
        if not self.low <= number <= self.high:
            raise refuse(value, self.allowed, "out of range")
        return number

    def schema(self) -> dict[str, Any]:
        return {"type": "integer", "minimum": self.low, "maximum": self.high}


@dataclass(frozen=True)
class Number(_Marker):
    """A finite number in [low, high] (numeric text from a form is accepted)."""

    low: float
    high: float = math.inf

    @property
    def allowed(self) -> str:
        upper = "" if self.high == math.inf else f" and <= {self.high:g}"
        return f"a number >= {self.low:g}{upper}"

    def check(self, value: Any) -> float:
        number = value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                pass
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
            raise refuse(value, self.allowed, "not a finite number")
        if not self.low <= number <= self.high:
            raise refuse(value, self.allowed, "out of range")
        return float(number)

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "number", "minimum": self.low}
        if self.high != math.inf:
            schema["maximum"] = self.high
        return schema


class Flag(_Marker):
    """``true`` or ``false``, nothing else (``"yes"`` is a typo here, not a truth)."""

    def check(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise refuse(value, "true, false")
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


def _as_items(value: Any, allowed: str) -> list[Any]:
    """A non-empty list from a list or from comma-separated text (the form may send either)."""
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)):
        raise refuse(value, allowed, "expected a list")
    if not value:
        raise refuse([], allowed, "the list is empty")
    return list(value)


def _distinct(items: list[Any], allowed: str) -> tuple[Any, ...]:
    for index, item in enumerate(items):
        if item in items[:index]:
            raise refuse(item, allowed, "listed twice", index)
    return tuple(items)


@dataclass(frozen=True)
class Subset(_Marker):
    """A non-empty list of distinct values of ``values`` (case-insensitive, in the order given);
    ``everything`` (e.g. ``all``) stands for all of them."""

    values: tuple[str, ...]
    everything: str | None = None

    @property
    def allowed(self) -> str:
        return ", ".join(self.values) + (f" (or {self.everything})" if self.everything else "")

    def check(self, value: Any) -> tuple[str, ...]:
        if self.everything is not None and value in (self.everything, [self.everything]):
            return self.values
        names = []
        for index, item in enumerate(_as_items(value, self.allowed)):
            name = item.strip().lower() if isinstance(item, str) else item
            if name not in self.values:
                raise refuse(item, self.allowed, index=index)
            names.append(name)
        return _distinct(names, self.allowed)

    def schema(self) -> dict[str, Any]:
        return {"type": "array", "minItems": 1, "uniqueItems": True,
                "items": {"type": "string", "enum": list(self.values)}, "examples": list(self.values)}


@dataclass(frozen=True)
class WholeList(_Marker):
    """A non-empty list of distinct whole numbers in [low, high] (text ``"1, 8"`` too);
    ``sort`` returns them sorted."""

    low: int
    high: int
    sort: bool = False

    def check(self, value: Any) -> tuple[int, ...]:
        item = Whole(self.low, self.high)
        items = _each(_as_items(value if not isinstance(value, int) else [value], item.allowed), item.check)
        return tuple(sorted(set(items))) if self.sort else _distinct(items, item.allowed)

    def schema(self) -> dict[str, Any]:
        return {"type": "array", "minItems": 1, "uniqueItems": True,
                "items": {"type": "integer", "minimum": self.low, "maximum": self.high}}


@dataclass(frozen=True)
class TextList(_Marker):
    """A non-empty list of distinct texts each matching ``item`` (one text alone is a list of one)."""

    item: Matching

    def check(self, value: Any) -> tuple[str, ...]:
        items = [value] if isinstance(value, str) else _as_items(value, self.item.allowed)
        return _distinct(_each(items, self.item.check), self.item.allowed)

    def schema(self) -> dict[str, Any]:
        return {"type": "array", "minItems": 1, "uniqueItems": True, "items": self.item.schema()}
