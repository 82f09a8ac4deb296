"""A three-machine priced lake for the page's first screen (a helper module, not a fixture module).

Stands in for one night of a nightly GPU sweep on three AWS machines (no GPU here): the repeats
are chosen, so what the first screen must say is known. ResNet-50 scoring at batch 32, 3 repeats
at CV about 1 %: g5.xlarge cheapest, g4dn.xlarge within 1 % of its cost, p3.2xlarge about twice as
dear; AlexNet scoring with one repeat on g5.xlarge (the "1 run" caveat) and three on g4dn.xlarge;
energy measured on g5.xlarge (the device-energy caveat). Written through the real ingest path.
"""

from __future__ import annotations

import datetime as dt
import statistics
from pathlib import Path

import numpy as np

from bench_tasks.record import validate_record
from gpucompare.lake.tables import open_lake
from gpucompare.reports.build import build_reports
from gpucompare.reports.publish import write_site
from gpucompare.reports.report_set import ReportSet
from tests.support.reports_data import fx, ingest, inputs, price, record

NIGHT = dt.date(2026, 11, 30)
PRICES = {"g5.xlarge": 1.006, "g4dn.xlarge": 0.526, "p3.2xlarge": 3.06}
#: machine -> network -> repeats
REPEATS = {
    "g5.xlarge": {"resnet-50": [1000.0, 1010.0, 990.0], "alexnet": [4000.0]},
    "g4dn.xlarge": {"resnet-50": [522.0, 527.0, 517.0], "alexnet": [1500.0, 1515.0, 1490.0]},
    "p3.2xlarge": {"resnet-50": [1520.0, 1535.0, 1505.0]},
}


def _measured(network: str, samples: list[float], energy: float | None, minute: int) -> dict:
    base = record(network=network, images_per_sec=statistics.median(samples), night=NIGHT, minute=minute)
    base.update(images_per_sec_samples=list(samples), repeats=len(samples), timed_batches=10 * len(samples),
                cv=float(np.std(samples) / np.mean(samples)) if len(samples) > 1 else 0.0)
    if energy is not None:
        base.update(energy_joules=energy, energy_method="nvml_energy_counter", avg_power_watts=150.0)
    return validate_record(base)


def answer_site(root: Path) -> tuple[ReportSet, Path]:
    """The lake under ``root/lake`` and its report site under ``root/site``."""
    lake = open_lake(str(root / "lake"))
    for machine, networks in REPEATS.items():
        energy = 320.0 * 3 if machine == "g5.xlarge" else None
        ingest(lake, [_measured(network, samples, energy, minute)
                      for minute, (network, samples) in enumerate(networks.items())], instance_type=machine)
    report_inputs = inputs(lake, [price(m, p) for m, p in PRICES.items()], [fx(1.0, dt.date(2025, 1, 1))])
    site = root / "site"
    report_set = build_reports(report_inputs, str(site))
    write_site(report_set, str(site))
    return report_set, site
