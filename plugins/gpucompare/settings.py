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

import hashlib
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
    "deployment": "This deployment's name in the tags, run ids and S3 keys of paid machines (1-20 of "
                  "a-z 0-9 -). Empty: d + 10 hex digits of the SHA-256 of the Airflow metadata DB URI.",
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


def deployment() -> str:
    """This Airflow deployment's name: ``GPUCOMPARE_DEPLOYMENT``, else ``d`` + 10 hex digits of
    the SHA-256 of the Airflow metadata database URI.

    Two deployments in one AWS account (staging and production) get different names, so each
    reuses, terminates and sweeps only its own instances. Every process of one deployment reads
    the same configuration, so they all derive the same name; set it explicitly where workers
    do not see the database URI (and to keep the name when the database moves).
    """
    from gpucompare.errors import PermanentError

    configured = setting("deployment")
    if configured:
        if not re.fullmatch(DEPLOYMENT_PATTERN, configured):
            raise PermanentError(f"GPUCOMPARE_DEPLOYMENT: {configured!r} is not valid (allowed: 1-20 "
                                 f"lower-case letters, digits and '-', matching {DEPLOYMENT_PATTERN})")
        return configured
    try:
        from airflow.configuration import conf

        uri = conf.get("database", "sql_alchemy_conn", fallback="") or ""
    except ImportError:  # the library without Airflow: one implicit deployment
        uri = ""
    return "d" + hashlib.sha256(uri.encode()).hexdigest()[:10]
