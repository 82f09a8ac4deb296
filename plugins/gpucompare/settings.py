"""Where the DAGs find things and how they behave: every ``GPUCOMPARE_*`` setting, as one typed model.

:class:`Settings` declares each setting once: its type, its default, its one-line description and
its validation. A value is read one way: the environment variable ``GPUCOMPARE_<NAME>`` if set and
not empty, else ``[gpucompare] <name>`` in the Airflow configuration (so
``AIRFLOW__GPUCOMPARE__<NAME>`` and ``airflow.cfg`` work too), else the default; then the model
checks it, and a bad value raises :class:`SettingError` naming the variable, the value and what is
allowed. Nothing is read at import time and nothing is cached: call the accessor functions below
(``settings.lake_uri()``, ``settings.pool()``…) where the value is needed. Nothing else in the
library reads ``os.environ`` for a setting or calls ``conf.get`` (tests/unit/test_settings.py
greps for it).

The provider's ``[gpucompare]`` config section (what ``airflow config list`` shows,
``gpucompare.airflow.provider_info``) is generated from the model's fields. Defaults never point
into the installed package's folder (a virtualenv is no place for data): the lake and the reports
live under ``$AIRFLOW_HOME/gpucompare/`` (``{AIRFLOW_HOME}`` in a value is expanded as Airflow
expands it in its own defaults: ``$AIRFLOW_HOME``, else ``~/airflow``); ``make demo`` sets
``./lake`` and ``./reports``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

import gpucompare.config.patterns as patterns  # the leaf module only (tests/unit/test_layout.py)
from gpucompare.errors import PermanentError

#: The placeholder Airflow itself expands in configuration defaults.
AIRFLOW_HOME_PLACEHOLDER = "{AIRFLOW_HOME}"
ENV_PREFIX = "GPUCOMPARE_"
SECTION = "gpucompare"


class SettingError(PermanentError):
    """A setting's value is not allowed; ``field`` is its environment variable's name."""

    def __init__(self, field: str, value: str, reason: str, allowed: str) -> None:
        super().__init__(f"{field} {value!r} is not allowed: {reason}; allowed: {allowed}")
        self.field = field


def expand_home(value: str) -> str:
    """``{AIRFLOW_HOME}`` → Airflow's home, as Airflow expands its own defaults."""
    if AIRFLOW_HOME_PLACEHOLDER not in value:
        return value
    home = os.path.expanduser(os.path.expandvars(os.environ.get("AIRFLOW_HOME") or "~/airflow"))
    return value.replace(AIRFLOW_HOME_PLACEHOLDER, home)


def _fullmatch(pattern: Any, *, empty_ok: bool = False) -> AfterValidator:
    def check(value: str) -> str:
        if (empty_ok and value == "") or pattern.fullmatch(value):
            return value
        raise ValueError(f"does not match {patterns.anchored(pattern)}")

    return AfterValidator(check)


def _regions(value: str) -> str:
    for region in (r.strip() for r in value.split(",")):
        if region and not patterns.AWS_REGION.fullmatch(region):
            raise ValueError(f"{region!r} is not an AWS region")
    return value


def _deployment_names(value: str) -> str:
    for name in (n.strip() for n in value.split(",")):
        if name and not patterns.DEPLOYMENT.fullmatch(name):
            raise ValueError(f"{name!r} does not match {patterns.anchored(patterns.DEPLOYMENT)}")
    return value


def _one_of(choices: tuple[str, ...], *, upper: bool = False) -> AfterValidator:
    def check(value: str) -> str:
        value = value.strip().upper() if upper else value.strip()
        if value not in choices:
            raise ValueError(f"not one of {', '.join(choices)}")
        return value

    return AfterValidator(check)


Location = Annotated[str, AfterValidator(expand_home)]
#: The oldest published figures best_value can be told to rank (``ReportOptions`` checks the same).
MAX_PUBLISHED_AGE_YEARS = 100
#: The widest practical margin of the verdicts (GPUCOMPARE_PRACTICAL_MARGIN): 50 %.
MAX_PRACTICAL_MARGIN = 0.5


def _field(default: Any, description: str, allowed: str) -> Any:
    return Field(default=default, description=description, json_schema_extra={"allowed": allowed})


class Settings(BaseModel):
    """Every gpucompare setting: name (lower case; the variable is ``GPUCOMPARE_<NAME>``), type,
    default, description and allowed values. The order is the order ``airflow config list`` shows."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    lake: Location = _field(
        "{AIRFLOW_HOME}/gpucompare/lake", "The results lake: a local folder or s3://bucket/prefix.",
        "a local folder or s3://bucket/prefix")
    reports: Location = _field(
        "{AIRFLOW_HOME}/gpucompare/reports",
        "Where the reports are written (CSV, Parquet, HTML): a local folder or s3://bucket/prefix.",
        "a local folder or s3://bucket/prefix")
    fleet: Location = _field(
        "", "The fleet file (targets, sweeps, scaling groups). Empty: the example shipped in the "
        "package, gpucompare/dags/config/fleet.yaml.", "a path, or empty")
    staging: Location = _field(
        str(Path(tempfile.gettempdir()) / "gpucompare-staging"),
        "Where collected results wait for ingest: a local folder, or s3://bucket/prefix when "
        "Celery or Kubernetes workers share no disk.", "a local folder or s3://bucket/prefix")
    currency: Annotated[str, _one_of(patterns.CURRENCIES, upper=True)] = _field(
        "EUR", "The reports' currency (EUR or USD).", ", ".join(patterns.CURRENCIES))
    nightly_schedule: Annotated[str, _fullmatch(patterns.CRON, empty_ok=True)] = _field(
        "", "Cron schedule of gpucompare_nightly. Empty: the fleet file's schedule, else 0 2 * * *.",
        "a five-field cron expression or @daily, @hourly …, or empty")
    pool: Annotated[str, Field(min_length=1, max_length=256)] = _field(
        "gpucompare_instances", "The Airflow pool that caps how many instances work at once "
        "(slots = the fleet's max_instances).", "a pool name")
    retry_delay_s: Annotated[float, Field(ge=0.0, le=3600.0)] = _field(
        60.0, "First retry delay of the network steps in seconds; it doubles on each retry.",
        "a number of seconds from 0 to 3600")
    deferral_margin_s: Annotated[float, Field(ge=5.0, le=3600.0)] = _field(
        300.0, "Seconds Airflow waits past a deferred wait's own deadline (a sweep's time limit, an "
        "instance's launch and agent timeouts) before it fails the task itself (TaskDeferralTimeout): "
        "the backstop for a trigger that cannot end the wait, e.g. a triggerer that is down.",
        "a number of seconds from 5 to 3600")
    sweeper_regions: Annotated[str, AfterValidator(_regions)] = _field(
        "", "Extra AWS regions the sweeper checks for expired instances, comma-separated.",
        "AWS regions such as us-east-1, comma-separated")
    deployment: Annotated[str, _fullmatch(patterns.DEPLOYMENT, empty_ok=True)] = _field(
        "", "This deployment's name in the tags, run ids and S3 keys of paid machines "
        "(1-20 of a-z 0-9 -, starting with a letter or digit); required as soon as the fleet has an ec2 "
        "target, and each Airflow deployment sharing an AWS account needs its own.",
        "1-20 lower-case letters, digits and '-' (empty only until a paid machine is used)")
    former_deployments: Annotated[str, AfterValidator(_deployment_names)] = _field(
        "", "Names this deployment had before (comma-separated, e.g. the d + 10 hex digits an older "
        "release derived): the sweeper also terminates their expired instances.",
        "deployment names, comma-separated, or empty")
    compact_after_days: Annotated[int, Field(ge=0)] = _field(
        2, "The reports DAG compacts results partitions older than this many days.",
        "a whole number of days >= 0")
    published_max_age_years: Annotated[int, Field(ge=0, le=MAX_PUBLISHED_AGE_YEARS)] = _field(
        3, "best_value: published figures older than this many years are shown but not ranked.",
        f"a whole number of years from 0 to {MAX_PUBLISHED_AGE_YEARS}")
    rank_old_published: bool = _field(
        False, "best_value: true ranks those old published figures anyway.", "true, false")
    rank_flagged: bool = _field(
        False, "best_value: true ranks figures that the published import flagged too.", "true, false")
    practical_margin: Annotated[float, Field(ge=0.0, le=MAX_PRACTICAL_MARGIN)] = _field(
        0.03, "best_value: the practical margin of the verdicts, a fraction (0.03 = 3 %): a machine is "
        "dearer than the best only when its cost is surely more than this much higher, equivalent when "
        "surely within it.", f"a number from 0 to {MAX_PRACTICAL_MARGIN}")
    best_value_with_projections: bool = _field(
        False, "true also writes best_value_with_projections: the best_value ranking with projected "
        "machines (other providers' prices) added and labelled.", "true, false")
    bench_python: Location = _field(
        "", "The worker interpreter of the local target (a venv with MXNet). Empty: "
        ".venv-bench/bin/python in the current directory (what make envs creates).", "a path, or empty")
    lake_s3_commit: Literal["conditional_put", "unsafe"] = _field(
        "conditional_put", "How commits to an s3:// lake are made safe: conditional_put (S3 "
        "conditional writes, If-None-Match; needs a store that honours them) or unsafe (one writer only).",
        "conditional_put, unsafe")
    lake_conn_id: Annotated[str, Field(max_length=250)] = _field(
        "aws_default", "The Airflow AWS connection every S3 access of the lake, staging, reports and "
        "prices goes through (the same as the ec2 targets' aws_conn_id by default, so machines and data "
        "run under one identity; its role_arn, session token and endpoint_url are used). When no such "
        "connection exists (the command line outside Airflow), or the value is empty: the process "
        "environment (AWS_* variables, profile, instance role).", "a connection id, or empty")
    worker_envs_kept: Annotated[int, Field(ge=0, le=100)] = _field(
        2, "How many worker environments an ssh host keeps besides the one in use (each is named by "
        "the hash of its requirements file; the least recently used beyond this number are removed "
        "at deploy, never one a sweep is running in). 0 to 100.", "a whole number from 0 to 100")
    local_work_dir: Location = _field(
        str(Path(tempfile.gettempdir()) / "gpucompare-local"),
        "The local target's run folders (a target's work_dir option wins).", "a local folder")
    cache_dir: Location = _field(
        str(Path(tempfile.gettempdir()) / "gpucompare-cache"),
        "Where the content-hashed worker bundles are cached on this machine.", "a local folder")


#: Every setting's name, in the model's order.
NAMES: tuple[str, ...] = tuple(Settings.model_fields)


def env_name(name: str) -> str:
    """``lake`` → ``GPUCOMPARE_LAKE``."""
    return f"{ENV_PREFIX}{name.upper()}"


def default_text(name: str) -> str:
    """A setting's default as text (what airflow.cfg would hold), before ``{AIRFLOW_HOME}`` expansion."""
    value = Settings.model_fields[name].default
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def description(name: str) -> str:
    return Settings.model_fields[name].description or ""


#: Each setting's default and description as text, generated from the model (read-only views for
#: callers that list settings, e.g. the wheel test and the deployment's pool).
DEFAULTS: dict[str, str] = {}
DESCRIPTIONS: dict[str, str] = {}


def allowed(name: str) -> str:
    extra = Settings.model_fields[name].json_schema_extra
    return str(extra["allowed"]) if isinstance(extra, dict) else ""


DEFAULTS.update({name: default_text(name) for name in NAMES})
DESCRIPTIONS.update({name: description(name) for name in NAMES})


def option_type(name: str) -> str:
    """The Airflow config option type of a setting (provider_info.schema.json's enum)."""
    annotation = Settings.model_fields[name].annotation
    return {bool: "boolean", int: "integer", float: "float"}.get(annotation, "string")  # type: ignore[arg-type]


def _raw(name: str) -> str | None:
    """The text of a setting from the environment, then Airflow's configuration; None: unset."""
    from_env = os.environ.get(env_name(name))
    if from_env:
        return from_env
    try:
        from airflow.sdk import conf
    except ImportError:  # the library also runs without Airflow (python -m gpucompare)
        return None
    value = conf.get(SECTION, name, fallback=None)
    # Airflow answers with the provider's declared default when nothing sets the option: that
    # is unset here (so {AIRFLOW_HOME} expands against today's $AIRFLOW_HOME, not Airflow's at load).
    if not value or value == conf.get_default_value(SECTION, name, fallback=None):
        return None
    return value


def origin(name: str) -> str:
    """Where a setting's value comes from: its environment variable, ``[gpucompare] <name>`` (the
    Airflow configuration) or the default (what commands print beside the lake they use)."""
    if os.environ.get(env_name(name)):
        return env_name(name)
    return f"[gpucompare] {name} setting" if _raw(name) is not None else f"[gpucompare] {name} default"


def _validated(raw: dict[str, str]) -> Settings:
    try:
        return Settings.model_validate(raw)
    except PydanticValidationError as exc:
        error = exc.errors()[0]
        name = str(error["loc"][0])
        reason = str(error["msg"]).removeprefix("Value error, ")
        raise SettingError(env_name(name), raw.get(name, default_text(name)), reason, allowed(name)) from None


def load() -> Settings:
    """Every setting, read now and checked (the first bad one raises :class:`SettingError`)."""
    return _validated({name: text for name in NAMES if (text := _raw(name)) is not None})


def get(name: str) -> Any:
    """One setting, typed and checked; a bad value of another setting does not matter here."""
    if name not in Settings.model_fields:
        raise KeyError(f"unknown gpucompare setting {name!r} (known: {', '.join(sorted(NAMES))})")
    text = _raw(name)
    return getattr(_validated({} if text is None else {name: text}), name)


def setting(name: str) -> str:
    """One setting as text (``true``/``false`` for flags), checked. Prefer the typed accessors."""
    value = get(name)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# -- the accessors: the API the rest of the library calls ------------------------------------
def lake_uri() -> str:
    return get("lake")


def reports_uri() -> str:
    return get("reports")


#: Short names (``settings.lake()``, ``settings.reports()``) for the same two locations.
lake = lake_uri
reports = reports_uri


def fleet_path() -> Path:
    """The fleet file: the setting, else the example shipped in the package."""
    configured = get("fleet")
    if configured:
        return Path(configured)
    from gpucompare import resources

    return resources.fleet_file()


def bench_python() -> Path:
    """The local target's worker interpreter: the setting, else ``./.venv-bench/bin/python``."""
    configured = get("bench_python")
    return Path(configured) if configured else Path.cwd() / ".venv-bench" / "bin" / "python"


def staging_uri() -> str:
    """Where collect leaves results for ingest: a local folder, or ``s3://bucket/prefix`` for a
    deployment whose Celery or Kubernetes workers share no disk."""
    return get("staging")


def currency() -> str:
    return get("currency")


def nightly_schedule() -> str:
    """The configured cron of the nightly DAG, or ``""`` (then the fleet file decides)."""
    return get("nightly_schedule")


def pool() -> str:
    return get("pool")


def retry_delay_s() -> float:
    return get("retry_delay_s")


def deferral_margin_s() -> float:
    return get("deferral_margin_s")


def sweeper_regions() -> list[str]:
    return [r.strip() for r in get("sweeper_regions").split(",") if r.strip()]


def compact_after_days() -> int:
    return get("compact_after_days")


def published_max_age_years() -> int:
    return get("published_max_age_years")


def rank_old_published() -> bool:
    return get("rank_old_published")


def rank_flagged() -> bool:
    return get("rank_flagged")


def practical_margin() -> float:
    return get("practical_margin")


def best_value_with_projections() -> bool:
    return get("best_value_with_projections")


def lake_s3_commit() -> str:
    return get("lake_s3_commit")


def lake_conn_id() -> str:
    return get("lake_conn_id")


def worker_envs_kept() -> int:
    return get("worker_envs_kept")


def local_work_dir() -> Path:
    return Path(get("local_work_dir"))


def cache_dir() -> Path:
    return Path(get("cache_dir"))


def is_remote(uri: str) -> bool:
    """True for object-store URIs (``s3://…``), False for local paths."""
    return "://" in uri and not uri.startswith("file://")



def deployment() -> str:
    """This Airflow deployment's name (``GPUCOMPARE_DEPLOYMENT`` or ``[gpucompare] deployment``):
    required, stated by whoever runs the deployment, never derived.

    Two deployments in one AWS account (staging and production) must have different names, so
    each reuses, terminates and sweeps only its own instances; every process of a deployment
    (scheduler, workers, triggerer) must see the same value. Raises ``SettingError`` naming
    the setting and how to set it when it is missing or malformed.
    """
    configured = get("deployment")
    if not configured:
        raise SettingError(
            env_name("deployment"), "", "the gpucompare setting 'deployment' is not set: every Airflow "
            "deployment that runs gpucompare needs its own name (tags, run ids and S3 keys of paid machines "
            "carry it). Set GPUCOMPARE_DEPLOYMENT=<name> in the environment of every Airflow process, or "
            "'deployment = <name>' under [gpucompare] in airflow.cfg (AIRFLOW__GPUCOMPARE__DEPLOYMENT). "
            "Upgrading from a release that derived it: see docs/targets-ec2.md, 'Deployment identity'",
            f"1-20 of a-z 0-9 - ({patterns.anchored(patterns.DEPLOYMENT)})")
    return configured


def former_deployments() -> tuple[str, ...]:
    """``GPUCOMPARE_FORMER_DEPLOYMENTS``: names this deployment had before (its instances still
    running under them are swept once expired); each checked like ``deployment``."""
    return tuple(name.strip() for name in get("former_deployments").split(",") if name.strip())
