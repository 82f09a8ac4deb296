"""Where the DAGs find things: the lake, the reports, the fleet file, staging, retry timing.

Each setting is read one way: the environment variable ``GPUCOMPARE_<NAME>`` if set, else
``[gpucompare] <name>`` in the Airflow configuration (so ``AIRFLOW__GPUCOMPARE__<NAME>`` works
too), else a default under the repository. Nothing here is read from Airflow Variables, and
nothing is read at import time: call the functions where the value is needed.

| setting | default |
| --- | --- |
| ``GPUCOMPARE_LAKE`` | ``<repo>/lake`` (or ``s3://bucket/prefix``) |
| ``GPUCOMPARE_REPORTS`` | ``<repo>/reports`` (or ``s3://bucket/prefix``) |
| ``GPUCOMPARE_FLEET`` | ``<repo>/dags/config/fleet.yaml`` |
| ``GPUCOMPARE_STAGING`` | ``<tmp>/gpucompare-staging`` (collected results before ingest; or ``s3://…``) |
| ``GPUCOMPARE_CURRENCY`` | ``EUR`` (the reports' currency) |
| ``GPUCOMPARE_NIGHTLY_SCHEDULE`` | the fleet file's ``schedule``, else ``0 2 * * *`` |
| ``GPUCOMPARE_POOL`` | ``gpucompare_instances`` (caps concurrently working instances) |
| ``GPUCOMPARE_RETRY_DELAY_S`` | ``60`` (first retry delay of network steps; doubles each time) |
| ``GPUCOMPARE_SWEEPER_REGIONS`` | empty (extra AWS regions for the sweeper, comma-separated) |
| ``GPUCOMPARE_DEPLOYMENT`` | ``d`` + a hash of the Airflow metadata DB URI (names paid machines) |
| ``GPUCOMPARE_COMPACT_AFTER_DAYS`` | ``2`` (the reports DAG compacts results partitions older than this) |
| ``GPUCOMPARE_PUBLISHED_MAX_AGE_YEARS`` | ``3`` (older published figures are shown but not ranked) |
| ``GPUCOMPARE_RANK_OLD_PUBLISHED`` | ``false`` (``true``: rank them anyway) |
| ``GPUCOMPARE_RANK_FLAGGED`` | ``false`` (``true``: rank figures carrying flags too) |
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

#: The repository (or image directory) that holds ``dags/`` and ``plugins/``.
REPO_ROOT = Path(__file__).resolve().parents[2]

DEFAULTS: dict[str, str] = {
    "lake": str(REPO_ROOT / "lake"),
    "reports": str(REPO_ROOT / "reports"),
    "fleet": str(REPO_ROOT / "dags" / "config" / "fleet.yaml"),
    "staging": str(Path(tempfile.gettempdir()) / "gpucompare-staging"),
    "currency": "EUR",
    "nightly_schedule": "",
    "pool": "gpucompare_instances",
    "retry_delay_s": "60",
    "sweeper_regions": "",
    # this deployment's name in every tag, run id and S3 key of a paid machine (see deployment())
    "deployment": "",
    "compact_after_days": "2",
    "published_max_age_years": "3",  # best_value: older published figures are shown, not ranked
    "rank_old_published": "false",  # best_value: true = rank those old published figures anyway
    "rank_flagged": "false",  # best_value: true = rank figures the published import flagged
}


def setting(name: str) -> str:
    """The value of one setting: environment, then Airflow configuration, then the default."""
    if name not in DEFAULTS:
        raise KeyError(f"unknown gpucompare setting {name!r} (known: {', '.join(sorted(DEFAULTS))})")
    from_env = os.environ.get(f"GPUCOMPARE_{name.upper()}")
    if from_env:
        return from_env
    try:
        from airflow.sdk import conf
    except ImportError:  # the library also runs without Airflow (python -m gpucompare)
        return DEFAULTS[name]
    return conf.get("gpucompare", name, fallback=DEFAULTS[name]) or DEFAULTS[name]


def lake_uri() -> str:
    return setting("lake")


def reports_uri() -> str:
    return setting("reports")


def fleet_path() -> Path:
    return Path(setting("fleet"))


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
