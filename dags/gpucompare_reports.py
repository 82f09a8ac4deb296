"""
### gpucompare_reports — build and publish every report

Runs when **gpucompare_results** is updated (a nightly or manual run ingested results) and
daily at 06:30 UTC as a fallback (`AssetOrTimeSchedule`), so price changes reach the
reports even on a night without runs.

`build_reports` runs the report set of `gpucompare.reports.build` (DuckDB over the lake: cost per
million images, scaling, throughput, best value, regressions; Parquet + CSV, `index.html`,
`summary.md`) into `<reports>/<date>/` (`GPUCOMPARE_REPORTS`, default `./reports`, or
`s3://bucket/prefix`) and keeps the day's copy of each report under
`<reports>/report_history/<report>/report_date=<date>/` (BI charts a report over time from
it), then points `<reports>/latest` at it. Its outlet, the
**gpucompare_reports** Asset, is what BI refreshes can schedule on. The Airflow UI links
to `latest/index.html` (plugin `gpucompare`, menu "GPU cost reports").

`compact_lake` runs first: it merges every results partition (mode, date) older than
`GPUCOMPARE_COMPACT_AFTER_DAYS` (default 2) days into one file (`Lake.compact`), so the
reports open one file per partition, not one per run; tonight's partitions are left to ingest.

Settings: `GPUCOMPARE_LAKE`, `GPUCOMPARE_REPORTS`, `GPUCOMPARE_CURRENCY` (EUR),
`GPUCOMPARE_COMPACT_AFTER_DAYS` (2), `GPUCOMPARE_PUBLISHED_MAX_AGE_YEARS` (3),
`GPUCOMPARE_RANK_OLD_PUBLISHED`, `GPUCOMPARE_RANK_FLAGGED`, `GPUCOMPARE_BEST_VALUE_WITH_PROJECTIONS`
(false).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable, dag, get_current_context, task

from gpucompare import settings
from gpucompare.airflow import assets, policy

log = logging.getLogger(__name__)


@task(execution_timeout=timedelta(minutes=30), **policy.network_retries())
def compact_lake() -> dict[str, Any]:
    """Delta optimize (compact) of the results partitions older than GPUCOMPARE_COMPACT_AFTER_DAYS,
    then vacuum of files removed more than 7 days ago (time travel keeps working that far)."""
    from gpucompare.lake.tables import compaction_cutoff, open_lake

    run_day = get_current_context()["dag_run"].run_after.date()
    with policy.bad_input_fails():
        before = compaction_cutoff(settings.compact_after_days(), today=run_day)
        lake = open_lake(settings.lake_uri())
        if not lake.has_table("results"):
            log.info("No results table in %s yet: nothing to compact", lake.uri)
            return {"before": before.isoformat(), "version": None}
        summary = lake.compact(before=before)
    log.info("Compaction of partitions before %s: %s", before, summary.describe())
    return {"before": before.isoformat(), "version": summary.version, "files_before": summary.files_before,
            "files_after": summary.files_after, "vacuumed": summary.vacuumed}


@task(outlets=[assets.REPORTS], execution_timeout=timedelta(minutes=30), **policy.network_retries())
def build_reports() -> dict[str, Any]:
    """Every report for the lake, written to <reports>/<date>/ and published as latest."""
    from gpucompare.reports.build import run_reports
    from gpucompare.reports.publish import publish_latest

    context = get_current_context()
    for asset, events in (context.get("triggering_asset_events") or {}).items():
        for event in events:
            log.info("Triggered by %s from %s: %s", asset, event.source_run_id, event.extra)
    run_day = context["dag_run"].run_after.date()
    dated = run_day.isoformat()
    reports_root = settings.reports_uri()
    out = f"{reports_root.rstrip('/')}/{dated}"
    with policy.bad_input_fails():
        report_set = run_reports(
            settings.lake_uri(),
            out,
            currency=settings.currency(),
            history=reports_root,
            report_date=run_day,
        )
    latest = publish_latest(reports_root, dated)
    rows = {name: table.num_rows for name, table in report_set.tables.items()}
    log.info("Reports in %s (latest: %s): %s", out, latest, rows)
    assets.declared_outlet_events().extra = {"date": dated, "rows": rows}
    return {"out": out, "latest": latest, "rows": rows,
            "missing_prices": report_set.missing_prices.num_rows}


@dag(
    dag_id="gpucompare_reports",
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("30 6 * * *", timezone="UTC"), assets=[assets.RESULTS]),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["gpucompare", "reports"],
    default_args=policy.default_args(),
)
def gpucompare_reports() -> None:
    compact_lake() >> build_reports()


gpucompare_reports()
