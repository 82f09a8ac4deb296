"""The projections report over the shipped catalog samples (gcp, azure, lambda, runpod, nebius) and
price lists, imported into a real lake the way ``import-catalog`` stores them.

The measured results stand in for benchmark nights on each GPU (no GPU here): records through the
lake's real ingest path, each naming its GPU as nvidia-smi does (the GPU table's longest alias, e.g.
``Tesla V100-SXM2-16GB``), so the projection has to resolve that name to the catalogs' canonical one.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys

import pyarrow.csv as pacsv
import pytest

from gpucompare.config import gpus
from gpucompare.lake.tables import open_lake
from gpucompare.prices.catalogs import importer
from gpucompare.reports import build as reports
from gpucompare.reports.projections import BEST_VALUE_WITH_PROJECTIONS
from gpucompare.reports.report_set import ReportOptions
from tests.conftest import REPO_ROOT
from tests.support.reports_data import ingest, record, rows

TODAY = dt.date(2026, 11, 30)


@pytest.fixture(scope="module")
def shipped():
    """Every shipped sample parsed (what import-catalog --shipped stores)."""
    return importer.shipped_catalogs()


def _smi_name(model: str) -> str:
    """How nvidia-smi would name the model: the table's longest alias (vendor prefix, form factor)."""
    found = gpus.lookup(model)
    assert found is not None, model
    return max((*found.aliases, found.name), key=len)


def test_a_projection_row_for_each_gpu_model_of_the_samples(tmp_path, shipped):
    lake = open_lake(str(tmp_path / "lake"))
    importer.import_shipped(lake)
    configurations = sorted({(m, n) for s in shipped
                             for m, n in zip(s.rows["gpu_model"].to_pylist(), s.rows["gpu_count"].to_pylist(),
                                             strict=True) if m})
    # one measured result per GPU model, on the smallest GPU count a sample offers for it
    smallest: dict[str, int] = {}
    for model, count in configurations:
        smallest[model] = min(count, smallest.get(model, count))
    for model, count in smallest.items():
        ingest(lake, [record(gpu_model=_smi_name(model), gpu_count=count, batch_size=32 * count,
                             images_per_sec=100.0 * count)],
               provider="lab", instance_type="host-" + re.sub(r"[^A-Za-z0-9._-]", "-", model), region=None,
               target="ssh")
    built = reports.build_reports(reports.ReportInputs.from_lake(str(tmp_path / "lake")),
                                  options=ReportOptions(report_date=TODAY, with_projections=True))
    table = built.tables["projections"]
    sample_providers = {s.provider for s in shipped}
    projected = {(r["gpu_model"], r["provider"]) for r in table.to_pylist()}
    assert len(smallest) == len({m for s in shipped for m in s.gpu_models()}) >= 15
    for model, count in smallest.items():
        got = {p for m, p in projected if m == model} & sample_providers
        assert got, f"no projection of the measured {model} x {count} onto a sample"
    for row in table.to_pylist():  # always onto the measured GPU count, with the measured figure
        assert row["gpu_count"] == smallest[row["gpu_model"]]
        assert row["images_per_sec"] == 100.0 * row["gpu_count"]
        assert row["measured_gpu_model"] == _smi_name(row["gpu_model"])
        assert row["price_effective_from"] <= TODAY and row["basis"] == "projected"
    # GCP's GPU-only rows are marked and stay out of the ranking view
    gcp = rows(table, provider="gcp")
    assert gcp and {r["price_covers"] for r in gcp} == {"gpus_only"}
    assert {r["price_covers"] for r in rows(table, provider="azure")} == {"instance"}
    view = built.tables[BEST_VALUE_WITH_PROJECTIONS]
    assert "gcp" not in set(view["provider"].to_pylist())
    assert {"azure", "lambda", "runpod", "nebius"} <= set(view["provider"].to_pylist())
    assert set(built.tables["best_value"]["provider"].to_pylist()) <= {"lab", "aws", "leadergpu"}


def test_a_t4_measured_on_aws_projected_onto_azure_worked_by_hand(tmp_path):
    """A T4 measured on aws g4dn.xlarge (nvidia-smi: "Tesla T4", 1 GPU): resnet-50 scoring at
    1,250.00 images/s and training at 95.00 images/s. The shipped Azure sample prices
    Standard_NC4as_T4_v3 (T4 x 1) in eastus at $0.526 an hour on demand and $0.062699 spot:
    score: 10^6 / 1,250 = 800 s = 0.22222 h; x $0.526 = $0.116889 → $0.12 per million images;
           spot: 0.22222 h x $0.062699 = $0.013933 → $0.01.
    train: 90 epochs = 90 x 1,281,167 = 115,305,030 images / 95 = 1,213,737.16 s = 337.1492 h;
           x $0.526 = $177.34 on demand; x $0.062699 = $21.14 spot."""
    lake = open_lake(str(tmp_path / "lake"))
    importer.import_shipped(lake)
    ingest(lake, [record(gpu_model="Tesla T4", images_per_sec=1250.0),
                  record(gpu_model="Tesla T4", mode="train", batch_size=64, images_per_sec=95.0)],
           instance_type="g4dn.xlarge")
    built = reports.build_reports(reports.ReportInputs.from_lake(str(tmp_path / "lake")), currency="USD",
                                  options=ReportOptions(report_date=TODAY))
    table = built.tables["projections"]
    where = dict(provider="azure", instance_type="Standard_NC4as_T4_v3", region="eastus")
    [score] = rows(table, mode="score", market="on_demand", **where)
    [score_spot] = rows(table, mode="score", market="spot", **where)
    [train] = rows(table, mode="train", market="on_demand", **where)
    [train_spot] = rows(table, mode="train", market="spot", **where)
    assert score["price_per_hour"] == pytest.approx(0.526) and score["gpu_model"] == "T4"
    assert round(score["cost_per_million"], 2) == 0.12 and round(score["cost_per_million"], 6) == 0.116889
    assert round(score_spot["cost_per_million"], 2) == 0.01
    assert round(score_spot["cost_per_million"], 6) == 0.013933
    assert round(train["epochs90_hours"], 4) == 337.1492
    assert round(train["epochs90_cost"], 2) == 177.34 and round(train_spot["epochs90_cost"], 2) == 21.14
    assert score["price_effective_from"] == dt.date(2026, 11, 30) and "SkyPilot" in score["price_source"]
    # the measured machine's own list price (shipped aws.csv, "Tesla T4" there) is projected and marked
    [own] = rows(table, mode="score", provider="aws", instance_type="g4dn.xlarge")
    assert own["measured_machine"] and not score["measured_machine"]
    # the 4 x T4 instances of the samples are not given this 1-GPU result
    assert not rows(table, instance_type="Standard_NC64as_T4_v3")


def test_report_command_with_projections_end_to_end(tmp_path):
    """``import-catalog --shipped`` then ``report`` and ``report --with-projections`` as a user runs them
    (real processes): the projections files always, best_value_with_projections only when asked."""

    def gpucompare(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gpucompare", *args], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=300, env=dict(os.environ))

    lake_dir = tmp_path / "lake"
    ingest(open_lake(str(lake_dir)), [record(gpu_model="Tesla T4", images_per_sec=1250.0)],
           instance_type="g4dn.xlarge")
    done = gpucompare("import-catalog", "--shipped", "--lake", str(lake_dir))
    assert done.returncode == 0, done.stderr
    plain, asked = tmp_path / "plain", tmp_path / "asked"
    done = gpucompare("report", "--lake", str(lake_dir), "--out", str(plain))
    assert done.returncode == 0, done.stderr
    projections = pacsv.read_csv(plain / "projections.csv")
    assert projections.num_rows > 0 and (plain / "projections" / "projections.parquet").is_file()
    assert set(projections["basis"].to_pylist()) == {"projected"}
    assert not (plain / f"{BEST_VALUE_WITH_PROJECTIONS}.csv").exists()
    assert "Where else could this run?" in (plain / "index.html").read_text(encoding="utf-8")
    done = gpucompare("report", "--lake", str(lake_dir), "--out", str(asked), "--with-projections")
    assert done.returncode == 0, done.stderr
    view = pacsv.read_csv(asked / f"{BEST_VALUE_WITH_PROJECTIONS}.csv")
    assert {"measured", "projected"} <= set(view["origin"].to_pylist())
    assert pacsv.read_csv(asked / "best_value.csv").equals(pacsv.read_csv(plain / "best_value.csv"))
