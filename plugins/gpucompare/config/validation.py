"""Checks of everything a user types: trigger params of the DAGs and the fleet configuration.

One module, so a value is judged the same way wherever it comes from (the manual DAG's
trigger form, ``dags/config/fleet.yaml``, a test). Each check returns the value in its
normal form (a comma-separated string becomes a list, names are lower-cased where the
field is case-insensitive) or raises :class:`ValidationError`, whose message names the
field and what it allows, e.g.::

    instance_type: 'p3.2xlarge; rm -rf /' is not a valid EC2 instance type
    (allowed: family.size such as p3.2xlarge, matching ^[a-z0-9]+\\.[a-z0-9]+$)

Nothing here touches a shell, a cloud API or a database; the patterns are strict enough
that a value that passes can be put on a command line or in an API call as it is. The
JSON-schema fragments the trigger form uses (``param_schemas``) come from the same
constants, so the form and the checks cannot drift apart.

Standard library, ``bench_tasks.constants`` and ``gpucompare.errors`` only: the DAG files import this
at parse time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from bench_tasks.constants import (
    DEFAULT_CONFIG_TIMEOUT_S,
    DTYPES,
    MAX_CONFIG_TIMEOUT_S,
    MAX_TIMED_BATCHES,
    MAX_WARMUP_BATCHES,
    MODES,
    NETWORKS,
)
from bench_tasks.constants import MAX_BATCH_SIZE as MAX_BATCH_SIZE
from bench_tasks.constants import MAX_REPEATS as MAX_REPEATS
from gpucompare.config import patterns
from gpucompare.errors import PermanentError

#: Where a sweep runs: ``gpucompare.targets.make_target`` knows these kinds.
TARGET_KINDS: tuple[str, ...] = ("local", "ssh", "ec2")
MARKETS: tuple[str, ...] = ("on_demand", "spot")
CURRENCIES: tuple[str, ...] = ("EUR", "USD")
#: Providers with a price table in the project; any other lower-case name may rent hosts over SSH.
KNOWN_PROVIDERS: tuple[str, ...] = ("local", "aws", "leadergpu")


# The measurement limits are the worker's own (bench_tasks.constants), so what a fleet allows runs.
MAX_GPU_COUNT = 64
MAX_TIMEOUT_S = int(MAX_CONFIG_TIMEOUT_S)


class ValidationError(PermanentError):
    """A value a user typed is not allowed; ``field`` names it, the message says what is.
    Permanent: a task that raises it fails at once (a retry would type the same value)."""

    def __init__(self, field: str, message: str, allowed: str | None = None) -> None:
        text = f"{field}: {message}"
        if allowed:
            text += f" (allowed: {allowed})"
        super().__init__(text)
        self.field = field
        self.message = message
        self.allowed = allowed


def qualify(prefix: str, error: ValidationError) -> ValidationError:
    """The same error, its field name qualified by where it sits (``targets[2].region``)."""
    return ValidationError(f"{prefix}.{error.field}", error.message, error.allowed)


# -- scalars -----------------------------------------------------------------------------
def check_keys(body: Any, allowed: Iterable[str], *, prefix: str = "",
               required: Iterable[str] = ()) -> Mapping[str, Any]:
    """A mapping of a config file whose keys are all among ``allowed`` and include ``required``;
    errors name the key (after ``prefix``, e.g. ``score.``) and list the allowed ones."""
    allowed = tuple(allowed)
    if not isinstance(body, Mapping):
        raise ValidationError(prefix.rstrip("."), "expected a mapping", ", ".join(allowed))
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise ValidationError(f"{prefix}{unknown[0]}", "unknown key", ", ".join(allowed))
    for key in required:
        if key not in body:
            raise ValidationError(f"{prefix}{key}", "missing")
    return body


def check_pattern(field: str, value: Any, pattern: re.Pattern[str], what: str) -> str:
    """``value`` as a string that fully matches ``pattern`` (one of ``config.patterns``);
    ``what`` describes it for humans."""
    if not isinstance(value, str):
        raise ValidationError(field, f"expected text, got {type(value).__name__} {value!r}", what)
    if not pattern.fullmatch(value):
        raise ValidationError(field, f"{value!r} is not valid",
                              f"{what}, matching {patterns.anchored(pattern)}")
    return value


def check_choice(field: str, value: Any, allowed: Iterable[str]) -> str:
    allowed = tuple(allowed)
    if not isinstance(value, str) or value not in allowed:
        raise ValidationError(field, f"{value!r} is not allowed", ", ".join(allowed))
    return value


def check_measurement(body: Mapping[str, Any]) -> dict[str, int]:
    """``warmup``, ``batches``, ``repeats`` and ``timeout_s`` of a sweep or scaling profile,
    each checked against the worker's limits (defaults: MXNet's harness, 5 + 10 batches x 3)."""
    return {
        "warmup": check_int("warmup", body.get("warmup", 5), minimum=0, maximum=MAX_WARMUP_BATCHES),
        "batches": check_int("batches", body.get("batches", 10), minimum=1, maximum=MAX_TIMED_BATCHES),
        "repeats": check_int("repeats", body.get("repeats", 3), minimum=1, maximum=MAX_REPEATS),
        "timeout_s": check_int("timeout_s", body.get("timeout_s", DEFAULT_CONFIG_TIMEOUT_S), minimum=1,
                               maximum=MAX_TIMEOUT_S),
    }


def check_int(field: str, value: Any, *, minimum: int, maximum: int) -> int:
    """An integer in [minimum, maximum]; integral floats from YAML/JSON (``2.0``) are accepted."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]{1,9}", value.strip()):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, f"expected a whole number, got {value!r}",
                              f"integers from {minimum} to {maximum}")
    if not minimum <= value <= maximum:
        raise ValidationError(field, f"{value} is out of range", f"integers from {minimum} to {maximum}")
    return value


def check_number(field: str, value: Any, *, minimum: float, maximum: float = math.inf) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValidationError(field, f"expected a number, got {value!r}", f"a number >= {minimum}")
    if not minimum <= value <= maximum:
        upper = "" if maximum == math.inf else f" and <= {maximum}"
        raise ValidationError(field, f"{value} is out of range", f"a number >= {minimum}{upper}")
    return float(value)


def check_bool(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(field, f"expected true or false, got {value!r}", "true, false")
    return value


# -- lists -------------------------------------------------------------------------------
def _as_list(field: str, value: Any) -> list[Any]:
    """A list from a list or from comma-separated text (the trigger form may send either)."""
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)):
        raise ValidationError(field, f"expected a list, got {type(value).__name__} {value!r}")
    if not value:
        raise ValidationError(field, "must not be empty")
    return list(value)


def _unique(field: str, values: list[Any]) -> list[Any]:
    seen: list[Any] = []
    for value in values:
        if value in seen:
            raise ValidationError(field, f"{value!r} is listed twice")
        seen.append(value)
    return seen


def check_subset(field: str, value: Any, allowed: Iterable[str]) -> list[str]:
    """A non-empty list of distinct names, each one of ``allowed`` (case-insensitive)."""
    allowed = tuple(allowed)
    items = _as_list(field, value)
    names = []
    for item in items:
        name = item.strip().lower() if isinstance(item, str) else item
        if name not in allowed:
            raise ValidationError(field, f"{item!r} is not known", ", ".join(allowed))
        names.append(name)
    return _unique(field, names)


def check_networks(value: Any, field: str = "networks") -> list[str]:
    """``all`` or a list of networks from ``bench_tasks.constants.NETWORKS``."""
    if value == "all" or value == ["all"]:
        return list(NETWORKS)
    return check_subset(field, value, NETWORKS)


def check_modes(value: Any, field: str = "modes") -> list[str]:
    return check_subset(field, value, MODES)


def check_dtypes(value: Any, field: str = "dtypes") -> list[str]:
    return check_subset(field, value, DTYPES)


def check_batch_sizes(value: Any, field: str = "batch_sizes") -> list[int]:
    """Distinct whole numbers from 1 to MAX_BATCH_SIZE, in the order given."""
    items = _as_list(field, value)
    sizes = [check_int(f"{field}[{i}]", item, minimum=1, maximum=MAX_BATCH_SIZE)
             for i, item in enumerate(items)]
    return _unique(field, sizes)


def check_devices(value: Any, field: str = "devices") -> list[str]:
    """Device lists as the worker takes them: ``cpu``, ``gpu:0``, ``gpu:0,gpu:1`` …"""
    items = _as_list(field, value) if not isinstance(value, str) else [value]
    lists = [check_pattern(f"{field}[{i}]", item, patterns.DEVICES,
                           "cpu, gpu:N or a comma-separated list such as gpu:0,gpu:1")
             for i, item in enumerate(items)]
    return _unique(field, lists)


# -- target fields -----------------------------------------------------------------------
def check_kind(value: Any, field: str = "kind") -> str:
    return check_choice(field, value, TARGET_KINDS)


def check_provider(value: Any, field: str = "provider") -> str:
    return check_pattern(field, value, patterns.PROVIDER,
                         f"a lower-case name such as {', '.join(KNOWN_PROVIDERS)}")


def check_instance_type(value: Any, kind: str, field: str = "instance_type") -> str:
    """EC2 types are ``family.size``; rented or local machines take a plain label."""
    if kind == "ec2":
        return check_pattern(field, value, patterns.EC2_INSTANCE_TYPE,
                             "an EC2 type family.size such as p3.2xlarge")
    return check_pattern(field, value, patterns.INSTANCE_TYPE,
                         "a lower-case label of letters, digits, '.', '_' and '-' such as ltbv14")


def check_region(value: Any, kind: str, field: str = "region") -> str | None:
    """An AWS region for ec2 (required); an optional lower-case label otherwise."""
    if kind == "ec2":
        if value in (None, ""):
            raise ValidationError(field, "an ec2 target needs a region", "an AWS region such as us-east-1")
        return check_pattern(field, value, patterns.AWS_REGION, "an AWS region such as us-east-1")
    if value in (None, ""):
        return None
    return check_pattern(field, value, patterns.REGION, "a lower-case label such as eu-nl")


def check_market(value: Any, kind: str, field: str = "market") -> str:
    market = check_choice(field, value, MARKETS)
    if market == "spot" and kind != "ec2":
        raise ValidationError(field, f"spot is only available for ec2 targets, not {kind}", "on_demand")
    return market


def check_conn_id(value: Any, field: str = "ssh_conn_id") -> str:
    return check_pattern(field, value, patterns.CONN_ID,
                         "an Airflow connection id of letters, digits, '_', '.' and '-'")


def check_budget_cap(value: Any, field: str = "budget_cap") -> float:
    """A cost cap in the run's currency; 0 refuses every paid run."""
    return check_number(field, value, minimum=0.0)


def check_gpu_count(value: Any, field: str = "gpu_count") -> int:
    return check_int(field, value, minimum=0, maximum=MAX_GPU_COUNT)


def check_schedule(value: Any, field: str = "schedule") -> str:
    return check_pattern(field, value, patterns.CRON, "a five-field cron expression or @daily, @hourly …")


# The options a user most often types, checked here; each target class checks the rest of its
# own options (and refuses unknown ones) when it is built, which the DAGs do before any step.
_OPTION_CHECKS: dict[str, Any] = {
    "ssh_conn_id": lambda field, value: check_conn_id(value, field),
    "aws_conn_id": lambda field, value: check_conn_id(value, field),
    "budget_cap": lambda field, value: check_budget_cap(value, field),
    "budget_currency": lambda field, value: check_choice(field, value, CURRENCIES),
}
_OPTIONS_OF_KIND: dict[str, tuple[str, ...]] = {
    "local": (),
    "ssh": ("ssh_conn_id",),
    "ec2": ("aws_conn_id", "budget_cap", "budget_currency"),
}


def check_options(kind: str, options: Any, field: str = "options", *,
                  complete: bool = True) -> dict[str, Any]:
    """The kind's own settings: connection ids, budget cap; an option of another kind is refused.

    ``complete=False`` checks a partial set (the fleet's per-kind defaults), so nothing is required.
    """
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise ValidationError(field, f"expected a mapping, got {type(options).__name__}")
    checked: dict[str, Any] = dict(options)
    for name, value in options.items():
        if not isinstance(name, str):
            raise ValidationError(field, f"option names are text, got {name!r}")
        if name in _OPTION_CHECKS:
            if name not in _OPTIONS_OF_KIND[kind]:
                raise ValidationError(f"{field}.{name}", f"not an option of a {kind} target",
                                      ", ".join(_OPTIONS_OF_KIND[kind]) or "the target's own options")
            checked[name] = _OPTION_CHECKS[name](f"{field}.{name}", value)
    if complete and kind == "ssh" and "ssh_conn_id" not in checked:
        raise ValidationError(f"{field}.ssh_conn_id", "an ssh target needs an Airflow SSH connection",
                              "an Airflow connection id of letters, digits, '_', '.' and '-'")
    return checked


def check_target_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """One target as the fleet file or the trigger form states it, checked and normalised.

    Returns the keyword arguments of ``gpucompare.targets.base.TargetSpec``.
    """
    kind = check_kind(data.get("kind"))
    provider = check_provider(data.get("provider"))
    if kind == "ec2" and provider != "aws":
        raise ValidationError("provider", f"an ec2 target is rented from aws, not {provider!r}", "aws")
    if kind == "local" and provider != "local":
        raise ValidationError("provider", f"a local target has provider 'local', not {provider!r}", "local")
    return {
        "name": check_pattern("name", data.get("name"), patterns.NAME,
                              "a lower-case name of letters, digits, '_' and '-'"),
        "kind": kind,
        "provider": provider,
        "instance_type": check_instance_type(data.get("instance_type"), kind),
        "region": check_region(data.get("region"), kind),
        "market": check_market(data.get("market", "on_demand"), kind),
        "gpu_count": check_gpu_count(data.get("gpu_count", 0)),
        "options": check_options(kind, data.get("options")),
    }


# -- the trigger form ----------------------------------------------------------------------
def param_schemas() -> dict[str, dict[str, Any]]:
    """JSON-schema fragments for the manual DAG's ``Param``s, from the constants above.

    The form rejects what it can (types, enums, patterns, minimums) before a run exists;
    ``check_manual_request`` then checks the rules between fields in the run's first task.
    """
    return {
        "kind": {"type": "string", "enum": list(TARGET_KINDS)},
        "provider": {"type": "string", "pattern": patterns.anchored(patterns.PROVIDER),
                     "examples": list(KNOWN_PROVIDERS)},
        # the looser of the two instance-type patterns; ec2's stricter one is checked in the run
        "instance_type": {"type": "string", "pattern": patterns.anchored(patterns.INSTANCE_TYPE)},
        "region": {"type": ["string", "null"],
                   "pattern": patterns.anchored(patterns.AWS_REGION, patterns.REGION)},
        "market": {"type": "string", "enum": list(MARKETS)},
        "gpu_count": {"type": "integer", "minimum": 0, "maximum": MAX_GPU_COUNT},
        "networks": {"type": "array", "minItems": 1, "uniqueItems": True,
                     "items": {"type": "string", "enum": list(NETWORKS)}, "examples": list(NETWORKS)},
        "batch_sizes": {"type": "array", "minItems": 1, "uniqueItems": True,
                        "items": {"type": "integer", "minimum": 1, "maximum": MAX_BATCH_SIZE}},
        "modes": {"type": "array", "minItems": 1, "uniqueItems": True,
                  "items": {"type": "string", "enum": list(MODES)}, "examples": list(MODES)},
        "dtypes": {"type": "array", "minItems": 1, "uniqueItems": True,
                   "items": {"type": "string", "enum": list(DTYPES)}, "examples": list(DTYPES)},
        "ssh_conn_id": {"type": ["string", "null"], "pattern": patterns.anchored(patterns.CONN_ID)},
        "budget_cap": {"type": "number", "minimum": 0},
        "budget_currency": {"type": "string", "enum": list(CURRENCIES)},
        "profile": {"type": "string", "pattern": patterns.anchored(patterns.NAME)},
    }


def check_manual_request(params: Mapping[str, Any]) -> dict[str, Any]:
    """All fields of a manual run, checked together; returns the normalised request.

    Keys: the ``TargetSpec`` fields (name is derived from provider and instance type),
    ``networks``, ``batch_sizes``, ``modes``, ``dtypes``, ``profile``.
    """
    unknown = sorted(set(params) - set(param_schemas()))
    if unknown:
        raise ValidationError(unknown[0], "unknown parameter", ", ".join(sorted(param_schemas())))
    kind = check_kind(params.get("kind"))
    options: dict[str, Any] = {}
    conn_id = params.get("ssh_conn_id") or None
    if kind == "ssh":
        if conn_id is None:
            raise ValidationError("ssh_conn_id", "a rented host (kind ssh) is reached through an "
                                  "Airflow SSH connection; name it", "an Airflow connection id")
        options["ssh_conn_id"] = check_conn_id(conn_id)
    elif conn_id is not None:
        raise ValidationError("ssh_conn_id", f"only used by ssh targets, not {kind}", "empty")
    budget_cap = check_budget_cap(params.get("budget_cap", 0.0))
    currency = check_choice("budget_currency", params.get("budget_currency", "USD"), CURRENCIES)
    if kind == "ec2":
        options.update(budget_cap=budget_cap, budget_currency=currency)
    instance_type = params.get("instance_type")
    provider = params.get("provider")
    target = check_target_fields({
        "name": "manual",
        "kind": kind,
        "provider": provider,
        "instance_type": instance_type,
        "region": params.get("region"),
        "market": params.get("market", "on_demand"),
        "gpu_count": params.get("gpu_count", 0),
        "options": options,
    })
    # a readable, unique-enough target name for logs and lake rows: provider-instance type
    target["name"] = re.sub(r"[^a-z0-9_-]", "-", f"{target['provider']}-{target['instance_type']}")[:40]
    return {
        "target": target,
        "networks": check_networks(params.get("networks")),
        "batch_sizes": check_batch_sizes(params.get("batch_sizes")),
        "modes": check_modes(params.get("modes")),
        "dtypes": check_dtypes(params.get("dtypes", ["float32"])),
        "profile": check_pattern("profile", params.get("profile", "nightly"), patterns.NAME,
                                 "the name of a sweep profile in the fleet configuration"),
        "budget_cap": budget_cap,
        "budget_currency": currency,
    }
