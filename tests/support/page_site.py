"""A demo-like report site for the page tests and the page's measurement script.

What ``make demo`` leaves behind, built without Airflow: two nights of the ``local`` target
(a CPU, no price: AlexNet scoring at batch 1 and 2 and training at batch 2, about 60 images/s)
plus the shipped published figures and the shipped catalog samples, through the real ingest,
import and report code. ``measured=False`` gives a fresh install's site (the reference data
loaded, nothing measured yet).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from bench_tasks.record import validate_record
from gpucompare.lake.tables import open_lake
from gpucompare.prices import published
from gpucompare.prices.catalogs.importer import import_shipped
from gpucompare.reports.build import build_reports
from gpucompare.reports.inputs import ReportInputs
from gpucompare.reports.publish import write_site
from gpucompare.reports.report_set import ReportSet
from tests.support.reports_data import ingest, record

NIGHTS = (dt.date(2026, 11, 30), dt.date(2026, 12, 1))


def cpu_record(**kwargs) -> dict:
    """A record of the local CPU (no GPU model, device kind cpu)."""
    rec = record(gpu_model=None, **kwargs)
    return validate_record({**rec, "device_kind": "cpu", "devices": ["cpu:0"]})


def demo_lake(lake_dir: Path, *, measured: bool = True) -> None:
    """The demo's lake; ``measured=False``: a fresh install's (reference data only, nothing run yet)."""
    lake = open_lake(str(lake_dir))
    for n, night in enumerate(NIGHTS if measured else ()):
        ingest(
            lake,
            [
                cpu_record(network="alexnet", batch_size=1, images_per_sec=38.0 + n, night=night, minute=0),
                cpu_record(network="alexnet", batch_size=2, images_per_sec=61.0 + n, night=night, minute=1),
                cpu_record(network="alexnet", mode="train", batch_size=2, images_per_sec=9.5 + n, night=night,
                           minute=2),
            ],
            provider="local",
            instance_type="local-cpu",
            region=None,
            target="local",
        )
    published.import_published(lake)
    import_shipped(lake)


def demo_site(root: Path, *, measured: bool = True) -> tuple[ReportSet, Path]:
    """The demo-like lake under ``root/lake`` and its report site under ``root/site``."""
    demo_lake(root / "lake", measured=measured)
    site = root / "site"
    report_set = build_reports(ReportInputs.from_lake(str(root / "lake")), str(site))
    write_site(report_set, str(site))
    return report_set, site


#: The time a test page states (the page reads no clock).
GENERATED_AT = dt.datetime(2026, 12, 1, 23, 0, tzinfo=dt.UTC)
