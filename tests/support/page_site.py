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


def scaling_site(root: Path) -> Path:
    """A site whose scaling charts hold three runs of one machine (an 8-GPU p3.16xlarge): ResNet-50
    training, weak scaling at 32 and 64 images per GPU and strong scaling at a global batch of 256,
    on 1, 2, 4 and 8 GPUs (speedups of about 1.9, 3.6 and 6.7 at 8), plus the published figures.
    The page tests check that the three series are told apart and their end labels do not collide."""
    lake = open_lake(str(root / "lake"))
    runs = {("weak", 32): 0.84, ("weak", 64): 0.88, ("strong", 256): 0.80}
    records = []
    for n, ((rule, batch), efficiency) in enumerate(runs.items()):
        for gpus in (1, 2, 4, 8):
            global_batch = batch if rule == "strong" else batch * gpus
            speedup = gpus * efficiency ** (gpus.bit_length() - 1)
            records.append(record(mode="train", network="resnet-50", batch_size=global_batch, gpu_count=gpus,
                                  scaling=rule, images_per_sec=300.0 * speedup, gpu_model="Tesla V100",
                                  minute=n * 10 + gpus))
    ingest(lake, records, instance_type="p3.16xlarge")
    published.import_published(lake)
    site = root / "site"
    write_site(build_reports(ReportInputs.from_lake(str(root / "lake")), str(site)), str(site))
    return site
