"""The one error style of everything a user types, and the one way to check it: a pydantic model.

Every value from the fleet file, the trigger form, a target's options or a setting is checked
by a model of ``gpucompare.config.models`` (or one field type of ``config.fields``) through
:func:`validate` / :func:`check`, which turn pydantic's error into :class:`ValidationError`,
whose message names the field (with its place: ``targets[2].options.ami``), the value and what
is allowed::

    targets[2].instance_type: 'p3.2xlarge; rm -rf /' is not allowed; allowed: an EC2 type
    family.size such as p3.2xlarge, matching ^(?:[a-z][a-z0-9-]*\\.[a-z0-9]+)$
    targets[0].colour: unknown key; allowed: name, kind, provider, …

Nothing here touches a shell, a cloud API or a database; the patterns are strict enough that a
value that passes can be put on a command line or in an API call as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import pydantic
from pydantic import TypeAdapter

from gpucompare.config import patterns
from gpucompare.config.fields import NOT_ALLOWED, shown
from gpucompare.errors import PermanentError

#: error types the models raise themselves (``models.Strict`` and the rules between fields)
UNKNOWN_KEY = "unknown_key"
RULE = "rule"
# the tags of the target union (``models.Target``): pydantic puts the tag into an error's
#: location (``targets.0.ec2.region``); the message leaves it out (``targets[0].region``)

M = TypeVar("M")


class ValidationError(PermanentError):
    """A value a user typed is not allowed; ``field`` names it, the message says what is.
    Permanent: a task that raises it fails at once (a retry would type the same value)."""

    def __init__(self, field: str, message: str, allowed: str | None = None, more: int = 0) -> None:
        text = f"{field}: {message}" if field else message
        if allowed:
            text += f"; allowed: {allowed}"
        if more:
            text += f" ({more} more error(s) after this one)"
        super().__init__(text)
        self.more = more
        self.field = field
        self.message = message
        self.allowed = allowed


def qualify(prefix: str, error: ValidationError) -> ValidationError:
    """The same error, its field name qualified by where it sits (``targets[2].region``)."""
    return type(error)(join(prefix, error.field), error.message, error.allowed, error.more)


def join(prefix: str, field: str) -> str:
    if not prefix:
        return field
    if not field:
        return prefix
    return f"{prefix}{field}" if field.startswith("[") else f"{prefix}.{field}"


def field_path(location: tuple[Any, ...]) -> str:
    """``('targets', 0, 'ec2', 'options', 'ami')`` -> ``targets[0].options.ami``."""
    path = ""
    for index, part in enumerate(location):
        after_item = index == 0 or isinstance(location[index - 1], int)
        if part in patterns.TARGET_KINDS and after_item and isinstance(part, str):
            continue  # the union's tag, not a key the user wrote
        if part == "[key]":
            continue  # pydantic's mark of a mapping's key: the key itself is the place
        path = path + f"[{part}]" if isinstance(part, int) else join(path, str(part))
    return path


def from_pydantic(exc: pydantic.ValidationError, prefix: str = "",
                  error_class: type[ValidationError] = ValidationError) -> ValidationError:
    """The first error of ``exc`` in the project's style (the first is the one earliest in the
    document: pydantic checks fields in their order); how many more there are is said."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    ctx = first.get("ctx") or {}
    field = field_path(tuple(first["loc"]))
    kind = first["type"]
    allowed: str | None = None
    if kind == NOT_ALLOWED:
        field, message, allowed = join(field, ctx.get("at", "")), ctx["message"], ctx["allowed"]
    elif kind == UNKNOWN_KEY:
        field, message, allowed = join(field, ctx["key"]), "unknown key", ctx["allowed"]
    elif kind == RULE:
        field, message, allowed = join(field, ctx["field"]), ctx["message"], ctx.get("allowed") or None
    elif kind == "missing":
        message = "missing"
        allowed = ctx.get("allowed")
    elif kind in ("union_tag_invalid", "union_tag_not_found"):
        field = join(field, str(ctx.get("discriminator", "kind")).strip("'"))
        message = (f"{shown(ctx['tag'])} is not allowed" if kind == "union_tag_invalid" else "missing")
        allowed = ", ".join(patterns.TARGET_KINDS)
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        message = f"{shown(first['input'])} is not allowed (expected a mapping)"
    else:  # a type pydantic checks itself (none of the models' fields: kept as a safety net)
        message = f"{shown(first['input'])} is not allowed ({first['msg']})"
    return error_class(join(prefix, field), message, allowed, len(errors) - 1)


def validate(model: type[M], data: Any, *, prefix: str = "", context: Mapping[str, Any] | None = None,
             error_class: type[ValidationError] = ValidationError) -> M:
    """``data`` as an instance of the pydantic ``model`` (or raise the project's error, its
    field qualified by ``prefix``)."""
    try:
        return model.model_validate(data, context=dict(context or {}))  # type: ignore[attr-defined]
    except pydantic.ValidationError as exc:
        raise from_pydantic(exc, prefix, error_class) from None


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def check(field: str, annotation: Any, value: Any, *, context: Mapping[str, Any] | None = None) -> Any:
    """One value against one type (a ``models`` field type or a union such as ``models.Target``),
    e.g. a setting: ``check("GPUCOMPARE_NIGHTLY_SCHEDULE", models.Cron, "0 2 * * *")``."""
    adapter = _ADAPTERS.get(annotation)
    if adapter is None:
        adapter = _ADAPTERS[annotation] = TypeAdapter(annotation)
    try:
        return adapter.validate_python(value, context=dict(context or {}))
    except pydantic.ValidationError as exc:
        raise from_pydantic(exc, field) from None
