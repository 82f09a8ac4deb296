"""The campaign report (sql/campaign.sql over sql/run_phases_all.sql) on a real lake and DuckDB.

Three nights are written as a run would leave them: the run-level phases in ``run_phases``
(``lake.phases.write_phases``) and the records, with their setup, warm-up and timed seconds, in
``results`` (``lake.ingest``). Every phase has its own distinct figure, so a phase dropped or
counted twice anywhere (the view, the billed span, a cost) changes an asserted number.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from gpucompare.lake import schema
from gpucompare.lake.ingest import RunContext, ingest_results
from gpucompare.lake.phases import write_phases
from gpucompare.lake.tables import Lake, open_lake
from gpucompare.reports.build import build_reports
from gpucompare.reports.inputs import ReportInputs
from gpucompare.reports.report_set import column_doc
from tests.support.lake_support import run_records, write_records
from tests.support.page_site import GENERATED_AT

T0 = dt.datetime(2026, 11, 30, 2, 0, tzinfo=dt.UTC)
#: fictional machines, so that no shipped price row can match them: 3.6 USD/h = 0.001 USD/s
EC2 = {"kind": "ec2", "provider": "aws", "instance_type": "x9.test", "region": "us-east-1",
       "market": "on_demand", "target": "aws-x9"}
SSH = {"kind": "ssh", "provider": "rentco", "instance_type": "box1", "region": "eu-nl",
       "market": "on_demand", "target": "rented-box"}
LOCAL = {"kind": "local", "provider": "local", "instance_type": "local-cpu", "region": None,
         "market": "on_demand", "target": "local"}


def phase(machine: dict[str, Any], run_id: str, name: str, start: float, seconds: float, *, billed: bool,
          status: str = "ok") -> dict[str, Any]:
    return {**machine, "run_id": run_id, "dag_run_id": "scheduled__2026-11-30T02:00:00+00:00",
            "phase": name, "started_at": T0 + dt.timedelta(seconds=start),
            "finished_at": T0 + dt.timedelta(seconds=start + seconds), "seconds": float(seconds),
            "billed": billed, "status": status, "error": None if status == "ok" else "TargetError: boom",
            "code_hash": None}


def ingest_run(lake: Lake, tmp_path: Path, machine: dict[str, Any], run_id: str,
               seconds: list[tuple[float, float, float]]) -> None:
    """One ok record per (setup, warm-up, timed) seconds, ingested as the run's results."""
    records = run_records(run_id, len(seconds))
    for record, (setup, warmup, timed) in zip(records, seconds, strict=True):
        record.update(setup_seconds=setup, warmup_seconds=warmup, timed_seconds=timed)
    path = write_records(tmp_path / f"{run_id}.jsonl", records)
    context = RunContext(provider=machine["provider"], instance_type=machine["instance_type"],
                         region=machine["region"], market=machine["market"], target=machine["kind"])
    ingest_results(lake, path, context, run_id=run_id)


def load_prices(lake: Lake) -> None:
    rows = [{"provider": "aws", "instance_type": "x9.test", "region": "us-east-1", "market": "on_demand",
             "gpu_model": "V100", "gpu_count": 1, "price": 3.6, "currency": "USD", "unit": "hour",
             "effective_from": dt.date(2026, 1, 1), "source": "test price"},
            {"provider": "rentco", "instance_type": "box1", "region": None, "market": "on_demand",
             "gpu_model": "GTX 1080", "gpu_count": 1, "price": 0.03, "currency": "USD", "unit": "minute",
             "effective_from": dt.date(2026, 1, 1), "source": "test price per minute"}]
    lake.write_table("prices", "test", pa.Table.from_pylist(rows, schema=schema.PRICES_SCHEMA))


def ec2_phases() -> list[dict[str, Any]]:
    return [
        # a first attempt refused before RunInstances: slow, failed, not billed
        phase(EC2, "run-ec2", "provision", 0, 50, billed=False, status="failed"),
        phase(EC2, "run-ec2", "provision", 60, 100, billed=True),
        phase(EC2, "run-ec2", "deploy", 170, 300, billed=True),
        phase(EC2, "run-ec2", "sweep", 500, 1000, billed=True),
        phase(EC2, "run-ec2", "teardown", 1600, 60, billed=True),
    ]


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    lake = open_lake(str(tmp_path / "lake"))
    load_prices(lake)
    write_phases(lake, ec2_phases())
    ingest_run(lake, tmp_path, EC2, "run-ec2", [(10, 20, 200), (10, 20, 200)])
    write_phases(lake, [phase(SSH, "run-ssh", "provision", 0, 2, billed=False),
                        phase(SSH, "run-ssh", "deploy", 2, 30, billed=False),
                        phase(SSH, "run-ssh", "sweep", 40, 600, billed=True),
                        phase(SSH, "run-ssh", "teardown", 650, 1, billed=False)])
    ingest_run(lake, tmp_path, SSH, "run-ssh", [(30, 30, 300)])
    write_phases(lake, [phase(LOCAL, "run-local", "provision", 0, 0.5, billed=False),
                        phase(LOCAL, "run-local", "deploy", 1, 4, billed=False),
                        phase(LOCAL, "run-local", "sweep", 5, 20, billed=True),
                        phase(LOCAL, "run-local", "teardown", 25, 0.5, billed=False)])
    ingest_run(lake, tmp_path, LOCAL, "run-local", [(2, 1, 12)])
    return lake


def campaign(lake: Lake) -> dict[str, dict[str, Any]]:
    table = build_reports(ReportInputs.from_lake(lake.uri), currency="USD").tables["campaign"]
    return {row["run_id"]: row for row in table.to_pylist()}


def test_ec2_night_is_billed_from_launch_to_termination_and_priced_phase_by_phase(lake: Lake) -> None:
    row = campaign(lake)["run-ec2"]
    assert (row["night"], row["target"], row["kind"], row["configurations"]) == (
        dt.date(2026, 11, 30), "aws-x9", "ec2", 2)
    # launch (the billed attempt's start, 60 s) to terminated (1660 s)
    assert row["billed_seconds"] == pytest.approx(1600)
    assert row["provision_seconds"] == pytest.approx(150)  # both attempts took time
    assert (row["deploy_seconds"], row["sweep_seconds"], row["teardown_seconds"]) == pytest.approx(
        (300, 1000, 60))
    assert (row["setup_seconds"], row["warmup_seconds"], row["timed_seconds"]) == pytest.approx((20, 40, 400))
    assert row["sweep_other_seconds"] == pytest.approx(1000 - 460)
    assert row["idle_seconds"] == pytest.approx(1600 - (100 + 300 + 1000 + 60))
    assert row["timed_share"] == pytest.approx(0.4)
    assert row["overhead_ratio"] == pytest.approx(4.0)
    assert (row["failed_phases"], row["torn_down"]) == (1, True)
    assert (row["price_per_hour"], row["currency"], row["price_source"]) == (pytest.approx(3.6), "USD",
                                                                             "test price")
    costs = {name: row[f"{name}_cost"] for name in ("provision", "deploy", "setup", "warmup", "timed",
                                                    "sweep_other", "teardown", "idle")}
    assert costs == pytest.approx({"provision": 0.1, "deploy": 0.3, "setup": 0.02, "warmup": 0.04,
                                   "timed": 0.4, "sweep_other": 0.54, "teardown": 0.06, "idle": 0.14})
    assert row["billed_cost"] == pytest.approx(1.6) == pytest.approx(sum(costs.values()))


def test_ssh_night_is_billed_for_its_sweep_only(lake: Lake) -> None:
    row = campaign(lake)["run-ssh"]
    assert row["billed_seconds"] == pytest.approx(600)
    assert row["overhead_ratio"] == pytest.approx(2.0)
    assert row["timed_share"] == pytest.approx(0.5)
    assert row["price_per_hour"] == pytest.approx(1.8)  # 0.03 USD a minute
    assert (row["provision_cost"], row["deploy_cost"], row["teardown_cost"], row["idle_cost"]) == (0, 0, 0, 0)
    assert row["timed_cost"] == pytest.approx(0.15)
    assert row["sweep_other_cost"] == pytest.approx(240 * 0.0005)
    assert row["billed_cost"] == pytest.approx(0.3)


def test_unpriced_local_night_has_empty_costs_not_zero(lake: Lake) -> None:
    row = campaign(lake)["run-local"]
    assert row["billed_seconds"] == pytest.approx(20)
    assert row["timed_share"] == pytest.approx(12 / 20)
    assert row["price_source"] == "missing"
    assert row["price_per_hour"] is None and row["currency"] is None
    assert all(row[f"{name}_cost"] is None for name in ("provision", "setup", "timed", "billed"))


def test_a_dropped_teardown_changes_the_ec2_bill(tmp_path: Path) -> None:
    """Without the teardown row (e.g. a teardown that never recorded itself) the night ends at
    the sweep: the report must show the smaller figure, not the same one."""
    lake = open_lake(str(tmp_path / "lake"))
    load_prices(lake)
    write_phases(lake, ec2_phases()[:-1])
    ingest_run(lake, tmp_path, EC2, "run-ec2", [(10, 20, 200), (10, 20, 200)])
    row = campaign(lake)["run-ec2"]
    assert row["billed_seconds"] == pytest.approx(1500 - 60)
    assert (row["torn_down"], row["teardown_cost"]) == (False, 0)


def test_rewriting_phases_and_reingesting_results_changes_nothing(lake: Lake, tmp_path: Path) -> None:
    before = campaign(lake)
    version = lake.version("run_phases")
    summary = write_phases(lake, list(reversed(ec2_phases())))
    ingest_run(lake, tmp_path, EC2, "run-ec2", [(10, 20, 200), (10, 20, 200)])
    assert not summary.changed and lake.version("run_phases") == version
    assert campaign(lake) == before


def test_every_campaign_column_is_documented(lake: Lake) -> None:
    table = build_reports(ReportInputs.from_lake(lake.uri), currency="USD").tables["campaign"]
    assert [name for name in table.column_names if column_doc(name) is None] == []
    assert table.schema.field("billed_cost").metadata[b"doc"].startswith(b"cost of billed_seconds")


def test_a_lake_without_phases_gives_an_empty_campaign(tmp_path: Path) -> None:
    lake = open_lake(str(tmp_path / "lake"))
    ingest_run(lake, tmp_path, EC2, "run-old", [(1, 1, 1)])  # results from before run_phases existed
    table = build_reports(ReportInputs.from_lake(lake.uri), currency="USD").tables["campaign"]
    assert table.num_rows == 0
    assert "overhead_ratio" in table.column_names


def test_the_page_shows_each_night_and_where_its_money_went(lake: Lake) -> None:
    """The page section renders the campaign rows: the ec2 night's cost split largest phase first,
    the ssh night's, and the unpriced local night with its time and no money (never 0)."""
    from gpucompare.reports.page import render_page
    from gpucompare.reports.page_campaign import KEY

    page = render_page(build_reports(ReportInputs.from_lake(lake.uri), currency="USD"), GENERATED_AT)
    start = page.index(f"<section id=\"{KEY}\"")
    section = page[start:page.index("</section>", start)]
    body = section[section.index("<tbody>"):]
    rows = {cells[0]: cells for cells in (re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)
                                          for row in body.split("<tr")[1:])}
    ec2 = rows["aws-x9"]
    assert ec2[1:6] == ["2026-11-30", "ec2: aws x9.test", "2", "–", "26 min 40 s"]  # no reclaims
    assert ec2[7:10] == ["40.0 %", "4.0", "$1.60"]
    # sweep_other 0.54 > timed 0.40 > deploy 0.30 > idle 0.14 > provision 0.10 > teardown 0.06 > warm-up 0.04
    assert ec2[10] == ("other sweep $0.54 · timed $0.40 · deploy $0.30 · idle $0.14 · provision $0.10 · "
                       "teardown $0.06 · warm-up $0.04 · setup $0.02")
    assert rows["rented-box"][9] == "$0.30"
    local = rows["local"]
    assert local[5] == "20 s" and local[9] == "–" and local[10] == "no price (missing)"
    assert "spot reclaim" not in section  # no night lost a machine: no line about it


SPOT = {**EC2, "target": "aws-x9-spot"}


def reclaimed_night(lake: Lake, tmp_path: Path) -> None:
    """An ec2 night that lost its instance mid-sweep, as ``targets.ec2.reclaim`` leaves it: the
    interrupted sweep (500-900 s) a ``reclaim``/``lost`` row, in which one configuration finished
    and was kept (its record starts at 600 s: 10 + 20 + 100 s); the replacement's launch and deploy
    ``reclaim`` rows (80 + 200 s); the rest of the sweep on it (500 s, one configuration of
    10 + 20 + 200 s), then the teardown. 3.6 USD/h = 0.001 USD/s."""
    write_phases(lake, [
        phase(SPOT, "run-spot", "provision", 0, 100, billed=True),
        phase(SPOT, "run-spot", "deploy", 100, 300, billed=True),
        phase(SPOT, "run-spot", "reclaim", 500, 400, billed=True, status="lost"),
        phase(SPOT, "run-spot", "reclaim", 920, 80, billed=True),
        phase(SPOT, "run-spot", "reclaim", 1000, 200, billed=True),
        phase(SPOT, "run-spot", "sweep", 1200, 500, billed=True),
        phase(SPOT, "run-spot", "teardown", 1750, 50, billed=True),
    ])
    records = run_records("run-spot", 2)
    for record, (start, timed) in zip(records, ((600, 100), (1250, 200)), strict=True):
        began = T0 + dt.timedelta(seconds=start)
        record.update(setup_seconds=10, warmup_seconds=20, timed_seconds=timed, started_at=began.isoformat(),
                      finished_at=(began + dt.timedelta(seconds=30 + timed)).isoformat())
    context = RunContext(provider="aws", instance_type="x9.test", region="us-east-1", market="on_demand",
                         target="ec2")
    ingest_results(lake, write_records(tmp_path / "run-spot.jsonl", records), context, run_id="run-spot")


def test_a_reclaimed_night_counts_the_loss_once_and_apart_from_the_sweeps(lake: Lake, tmp_path: Path) -> None:
    """Before: no reclaim phase, status or columns (the lost sweep was a failed sweep row)."""
    reclaimed_night(lake, tmp_path)
    row = campaign(lake)["run-spot"]
    shown = ("reclaims", "reclaim_seconds", "reclaim_cost", "sweep_seconds", "sweep_other_seconds",
             "billed_seconds", "billed_cost", "timed_share")
    print("\nreclaimed night:", {name: row[name] for name in shown})
    assert (row["reclaims"], row["failed_phases"], row["configurations"]) == (1, 0, 2)
    # 400 + 80 + 200 s of reclaim rows, less the 130 s of the configuration the lost machine finished
    assert row["reclaim_seconds"] == pytest.approx(550)
    assert row["reclaim_cost"] == pytest.approx(0.55)
    assert row["sweep_seconds"] == pytest.approx(500)  # the sweep that ran to its end only
    assert (row["setup_seconds"], row["warmup_seconds"], row["timed_seconds"]) == pytest.approx((20, 40, 300))
    assert row["sweep_other_seconds"] == pytest.approx(500 - 230)  # the replacement's sweep less its own
    assert row["billed_seconds"] == pytest.approx(1800)
    assert row["idle_seconds"] == pytest.approx(1800 - (100 + 300 + 680 + 500 + 50))
    assert row["timed_share"] == pytest.approx(300 / (500 + 130))
    costs = [row[f"{name}_cost"] for name in ("provision", "deploy", "setup", "warmup", "timed",
                                              "sweep_other", "reclaim", "teardown", "idle")]
    assert row["billed_cost"] == pytest.approx(1.8) == pytest.approx(sum(costs))  # nothing counted twice
    assert campaign(lake)["run-ec2"]["reclaims"] == 0 and campaign(lake)["run-ec2"]["reclaim_cost"] == 0


def test_the_page_shows_the_reclaims_and_what_they_cost(lake: Lake, tmp_path: Path) -> None:
    from gpucompare.reports.page import render_page
    from gpucompare.reports.page_campaign import KEY

    reclaimed_night(lake, tmp_path)
    page = render_page(build_reports(ReportInputs.from_lake(lake.uri), currency="USD"), GENERATED_AT)
    start = page.index(f"<section id=\"{KEY}\"")
    section = page[start:page.index("</section>", start)]
    line = re.search(r'<p class="reclaims">(.*?)</p>', section)
    print(f"\npage line: {line and line.group(1)}")
    # the ec2 night's $1.60 and the reclaimed night's $1.80 are the priced runs' billed cost with $0.30 (ssh)
    assert line is not None and line.group(1) == "1 spot reclaim cost $0.55 of $3.70 billed"
    rows = {cells[0]: cells for cells in (re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)
                                          for row in section[section.index("<tbody>"):].split("<tr")[1:])}
    spot = rows["aws-x9-spot"]
    assert spot[4] == "1 · $0.55" and spot[9] == "$1.80"
    assert spot[10].startswith("reclaims $0.55 · timed $0.30 · deploy $0.30 · other sweep $0.27")


def test_the_reclaims_line_adds_up_the_runs_listed_and_shows_time_when_unpriced(lake: Lake,
                                                                               tmp_path: Path) -> None:
    from gpucompare.reports.page_rows import campaign_cells, campaign_reclaims_line

    reclaimed_night(lake, tmp_path)
    rows = campaign(lake)
    twice = [rows["run-spot"], {**rows["run-spot"], "run_id": "run-spot-2"}, rows["run-ec2"]]
    assert campaign_reclaims_line(twice) == "2 spot reclaims cost $1.10 of $5.20 billed"
    unpriced = [{**row, "currency": None, "price_per_hour": None, "price_source": "missing",
                 "reclaim_cost": None, "billed_cost": None} for row in twice[:2]]
    assert campaign_reclaims_line(unpriced) == "2 spot reclaims cost 18 min 20 s of 1 h 00 min billed"
    assert campaign_cells(unpriced[0])[4] == "1 · 9 min 10 s"
    assert campaign_reclaims_line([rows["run-ec2"], rows["run-local"]]) == ""
