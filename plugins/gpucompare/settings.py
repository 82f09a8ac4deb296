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
| ``GPUCOMPARE_COMPACT_AFTER_DAYS`` | ``2`` (the reports DAG compacts results partitions older than this) |
| ``GPUCOMPARE_LAKE_S3_COMMIT`` | ``conditional_put`` (S3 lake commits: ``conditional_put`` or ``unsafe``) |
"""

from __future__ import annotations

import os
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
    "compact_after_days": "2",
    # how commits to an s3:// lake are made safe: conditional_put (S3 If-None-Match) | unsafe (one writer)
    "lake_s3_commit": "conditional_put",
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
