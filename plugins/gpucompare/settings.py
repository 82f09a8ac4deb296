"""Where the DAGs find things: the lake, the reports, the fleet file, staging, retry timing.

Each setting is read one way: the environment variable ``GPUCOMPARE_<NAME>`` if set, else
``[gpucompare] <name>`` in the Airflow configuration (so ``AIRFLOW__GPUCOMPARE__<NAME>`` works
too), else its default. Nothing here is read from Airflow Variables, and nothing is read at
import time: call the functions where the value is needed.

Every setting is one entry of :data:`DEFAULTS` with a one-line description in
:data:`DESCRIPTIONS`; the provider's ``[gpucompare]`` config section (what ``airflow config
list`` shows, ``gpucompare.airflow.provider_info``) is generated from the two. Whoever adds a setting
adds both lines. Defaults never point into the installed package's folder (a virtualenv is
no place for data): the lake and the reports live under ``$AIRFLOW_HOME/gpucompare/``
(``{AIRFLOW_HOME}`` in a default is expanded as Airflow expands it in its own defaults:
``$AIRFLOW_HOME``, else ``~/airflow``); ``make demo`` sets ``./lake`` and ``./reports``.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

#: The placeholder Airflow itself expands in configuration defaults.
AIRFLOW_HOME_PLACEHOLDER = "{AIRFLOW_HOME}"

DEFAULTS: dict[str, str] = {
    "lake": "{AIRFLOW_HOME}/gpucompare/lake",
    "reports": "{AIRFLOW_HOME}/gpucompare/reports",
    "fleet": "",
    "staging": str(Path(tempfile.gettempdir()) / "gpucompare-staging"),
    "currency": "EUR",
    "nightly_schedule": "",
    "pool": "gpucompare_instances",
    "retry_delay_s": "60",
    "sweeper_regions": "",
    "deployment": "",
    "former_deployments": "",
    "compact_after_days": "2",
    "published_max_age_years": "3",
    "rank_old_published": "false",
    "rank_flagged": "false",
    "best_value_with_projections": "false",
    "bench_python": "",
    "lake_s3_commit": "conditional_put",
    "worker_envs_kept": "2",
}

#: One line per setting (shown by ``airflow config list`` and in the provider's metadata).
DESCRIPTIONS: dict[str, str] = {
    "lake": "The results lake: a local folder or s3://bucket/prefix.",
    "reports": "Where the reports are written (CSV, Parquet, HTML): a local folder or s3://bucket/prefix.",
    "fleet": "The fleet file (targets, sweeps, scaling groups). Empty: the example shipped in the "
             "package, gpucompare/dags/config/fleet.yaml.",
    "staging": "Where collected results wait for ingest: a local folder, or s3://bucket/prefix when "
               "Celery or Kubernetes workers share no disk.",
    "currency": "The reports' currency (EUR or USD).",
    "nightly_schedule": "Cron schedule of gpucompare_nightly. Empty: the fleet file's schedule, "
                        "else 0 2 * * *.",
    "pool": "The Airflow pool that caps how many instances work at once (slots = the fleet's "
            "max_instances).",
    "retry_delay_s": "First retry delay of the network steps in seconds; it doubles on each retry.",
    "sweeper_regions": "Extra AWS regions the sweeper checks for expired instances, comma-separated.",
    "compact_after_days": "The reports DAG compacts results partitions older than this many days.",
    "deployment": "Required: this deployment's name in the tags, run ids and S3 keys of paid machines "
                  "(1-20 of a-z 0-9 -, starting with a letter or digit); each Airflow deployment sharing "
                  "an AWS account needs its own. No default.",
    "former_deployments": "Names this deployment had before (comma-separated, e.g. the d + 10 hex digits "
                          "an older release derived): the sweeper also terminates their expired instances.",
    "published_max_age_years": "best_value: published figures older than this many years are shown "
                               "but not ranked.",
    "rank_old_published": "best_value: true ranks those old published figures anyway.",
    "rank_flagged": "best_value: true ranks figures that the published import flagged too.",
    "best_value_with_projections": "true also writes best_value_with_projections: the best_value ranking "
                                   "with projected machines (other providers' prices) added and labelled.",
    "lake_s3_commit": "How commits to an s3:// lake are made safe: conditional_put (S3 conditional "
                      "writes, If-None-Match; needs a store that honours them) or unsafe (one writer only).",
    "worker_envs_kept": "How many worker environments an ssh host keeps besides the one in use "
                        "(each is named by the hash of its requirements file; the least recently "
                        "used beyond this number are removed at deploy, never one a sweep is "
                        "running in). 0 to 100.",
    "bench_python": "The worker interpreter of the local target (a venv with MXNet). Empty: "
                    ".venv-bench/bin/python in the current directory (what make envs creates).",
}


def _expand(value: str) -> str:
    """``{AIRFLOW_HOME}`` → Airflow's home, as Airflow expands its own defaults."""
    if AIRFLOW_HOME_PLACEHOLDER not in value:
        return value
    home = os.path.expanduser(os.path.expandvars(os.environ.get("AIRFLOW_HOME") or "~/airflow"))
    return value.replace(AIRFLOW_HOME_PLACEHOLDER, home)


def setting(name: str) -> str:
    """The value of one setting: environment, then Airflow configuration, then the default."""
    if name not in DEFAULTS:
        raise KeyError(f"unknown gpucompare setting {name!r} (known: {', '.join(sorted(DEFAULTS))})")
    from_env = os.environ.get(f"GPUCOMPARE_{name.upper()}")
    if from_env:
        return _expand(from_env)
    try:
        from airflow.sdk import conf
    except ImportError:  # the library also runs without Airflow (python -m gpucompare)
        return _expand(DEFAULTS[name])
    return _expand(conf.get("gpucompare", name, fallback=DEFAULTS[name]) or DEFAULTS[name])


def lake_uri() -> str:
    return setting("lake")


def reports_uri() -> str:
    return setting("reports")


def fleet_path() -> Path:
    """The fleet file: the setting, else the example shipped in the package."""
    configured = setting("fleet")
    if configured:
        return Path(configured)
    from gpucompare import resources

    return resources.fleet_file()


def bench_python() -> Path:
    """The local target's worker interpreter: the setting, else ``./.venv-bench/bin/python``."""
    configured = setting("bench_python")
    return Path(configured) if configured else Path.cwd() / ".venv-bench" / "bin" / "python"


def staging_uri() -> str:
    """Where collect leaves results for ingest: a local folder, or ``s3://bucket/prefix`` for a
    deployment whose Celery or Kubernetes workers share no disk."""
    return setting("staging")


def is_remote(uri: str) -> bool:
    """True for object-store URIs (``s3://…``), False for local paths."""
    return "://" in uri and not uri.startswith("file://")


#: What a deployment name may be: short, lower-case, usable in a tag, a run id and an S3 key.
DEPLOYMENT_PATTERN = r"[a-z0-9][a-z0-9-]{0,19}"


def _deployment_name(name: str, value: str) -> str:
    from gpucompare.errors import PermanentError

    if not re.fullmatch(DEPLOYMENT_PATTERN, value):
        raise PermanentError(f"{name}: {value!r} is not valid (allowed: 1-20 lower-case letters, digits "
                             f"and '-', starting with a letter or digit: {DEPLOYMENT_PATTERN})")
    return value


def deployment() -> str:
    """This Airflow deployment's name (``GPUCOMPARE_DEPLOYMENT`` or ``[gpucompare] deployment``):
    required, stated by whoever runs the deployment, never derived.

    Two deployments in one AWS account (staging and production) must have different names, so
    each reuses, terminates and sweeps only its own instances; every process of a deployment
    (scheduler, workers, triggerer) must see the same value. Raises ``PermanentError`` naming
    the setting and how to set it when it is missing or malformed.
    """
    from gpucompare.errors import PermanentError

    configured = setting("deployment")
    if not configured:
        raise PermanentError(
            "the gpucompare setting 'deployment' is not set: every Airflow deployment that runs "
            "gpucompare needs its own name (tags, run ids and S3 keys of paid machines carry it). "
            "Set GPUCOMPARE_DEPLOYMENT=<name> in the environment of every Airflow process, or "
            "'deployment = <name>' under [gpucompare] in airflow.cfg (AIRFLOW__GPUCOMPARE__DEPLOYMENT); "
            f"allowed: 1-20 of a-z 0-9 - ({DEPLOYMENT_PATTERN}). Upgrading from a release that derived "
            "it: see docs/targets-ec2.md, 'Deployment identity'.")
    return _deployment_name("GPUCOMPARE_DEPLOYMENT", configured)


def former_deployments() -> tuple[str, ...]:
    """``GPUCOMPARE_FORMER_DEPLOYMENTS``: names this deployment had before (its instances still
    running under them are swept once expired); each checked like ``deployment``."""
    names = [name.strip() for name in setting("former_deployments").split(",") if name.strip()]
    return tuple(_deployment_name("GPUCOMPARE_FORMER_DEPLOYMENTS", name) for name in names)
