"""The pipeline writes each task's phases into run_phases, teardown's last: real Airflow
(``dag.test()``, SQLite), the real local worker, moto's server for the ec2 refusal."""

from __future__ import annotations

import pytest

from gpucompare.lake.phases import read_phases
from gpucompare.lake.tables import open_lake
from gpucompare.reports.build import ReportInputs, build_reports

pytestmark = pytest.mark.dag

TINY = {"networks": ["alexnet"], "batch_sizes": [1], "modes": ["score", "train"], "warmup": 1,
        "batches": 1, "repeats": 1, "timeout_s": 120}


def test_a_night_records_every_phase_of_the_target_and_its_teardown_last(
        run_dag, write_fleet, gpucompare_dirs) -> None:
    write_fleet({"profiles": {"tiny": TINY}, "targets": [{
        "name": "local", "kind": "local", "provider": "local", "instance_type": "local-cpu",
        "profile": "tiny"}]})

    night = run_dag("gpucompare_nightly")

    assert night.state == "success", night.states
    lake = open_lake(str(gpucompare_dirs.lake))
    rows = sorted(read_phases(lake).to_pylist(), key=lambda r: r["started_at"])
    assert [r["phase"] for r in rows] == ["provision", "deploy", "sweep", "sweep", "teardown"]
    assert {(r["target"], r["kind"], r["dag_run_id"], r["status"]) for r in rows} == {
        ("local", "local", night.run_id, "ok")}
    assert len({r["run_id"] for r in rows}) == 1
    teardown = rows[-1]
    assert teardown["ingested_at"] >= max(r["ingested_at"] for r in rows[:-1])  # its own, last append
    report = build_reports(ReportInputs.from_lake(str(gpucompare_dirs.lake)))
    (campaign,) = report.tables["campaign"].to_pylist()
    results = lake.results_table().to_pylist()
    assert campaign["configurations"] == len(results) == 2
    assert campaign["timed_seconds"] == pytest.approx(sum(r["timed_seconds"] for r in results))
    assert campaign["billed_seconds"] == pytest.approx(rows[2]["seconds"] + rows[3]["seconds"])
    assert campaign["torn_down"] is True


def test_a_run_refused_in_provisioning_still_records_its_provision_phase(
        run_dag, write_fleet, gpucompare_dirs, moto_account) -> None:
    write_fleet({"defaults": {"ec2": moto_account}, "profiles": {"nightly": {**TINY, "modes": ["score"]}},
                 "targets": [{"name": "local", "kind": "local", "provider": "local",
                              "instance_type": "local-cpu", "profile": "nightly"}]})

    result = run_dag("gpucompare_manual", {
        "kind": "ec2", "provider": "aws", "instance_type": "p4d.24xlarge", "region": "us-east-1",
        "gpu_count": 8, "networks": ["resnet-50"], "batch_sizes": [32], "modes": ["score"],
        "budget_cap": 0.5, "budget_currency": "USD"})

    assert result.task_states("target.prepare") == ["failed"]
    rows = {r["phase"]: r for r in read_phases(open_lake(str(gpucompare_dirs.lake))).to_pylist()}
    assert set(rows) == {"provision", "teardown"}
    provision = rows["provision"]
    assert (provision["status"], provision["billed"], provision["kind"]) == ("failed", False, "ec2")
    assert "budget cap refused the run" in provision["error"]
    assert provision["dag_run_id"] == result.run_id
    assert rows["teardown"]["status"] == "ok"
