"""Every target times its own steps (targets.phases): local with the real worker, ssh through a
real sshd on 127.0.0.1 (``fixtures_sshd``), ec2 against moto's server (``fixtures_aws``).

Moto stands in for AWS: it launches, describes and terminates instances but runs no command, so
the ec2 sweep "succeeds" at once; what is checked there is which phases are recorded, billed and
failed, not their length.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from gpucompare.lake.ingest import RunContext, ingest_results
from gpucompare.lake.phases import read_phases
from gpucompare.lake.tables import open_lake
from gpucompare.reports.build import ReportInputs, build_reports
from gpucompare.targets import make_target
from gpucompare.targets.base import TargetError, TargetSpec
from gpucompare.targets.bundle import local_code_hash
from gpucompare.targets.ec2 import target as ec2
from gpucompare.targets.phases import PhaseContext, write_recorded
from tests.conftest import BENCH_PYTHON
from tests.support.ec2_support import (
    TINY_SWEEP as EC2_SWEEP,
)
from tests.support.ec2_support import (
    ec2_spec,
    live_instances,
    new_run_id,
)
from tests.support.fixtures_sshd import SshdServer
from tests.support.target_helpers import TINY_SWEEP, read_records

RUN_ID = "manual__2026-11-30T02:00:00+00:00.here"


def outline(target: Any) -> list[tuple[str, str, bool]]:
    return [(r.phase, r.status, r.billed) for r in target.phases.records]


def full_run(target: Any, tmp_path: Path) -> tuple[Any, list[dict[str, Any]]]:
    state = target.prepare(RUN_ID)
    state = target.deploy(state)
    state = target.run_sweep(state, TINY_SWEEP, timeout_s=600)
    out = target.collect(state, str(tmp_path / "collected" / "results.jsonl"))
    target.teardown(state)
    return state, read_records(out)


def test_a_local_run_records_its_phases_and_the_campaign_reads_them(tmp_path: Path) -> None:
    spec = TargetSpec(name="here", kind="local", provider="local", instance_type="local-cpu",
                      options={"work_dir": str(tmp_path / "runs"), "python": str(BENCH_PYTHON)})
    target = make_target(spec)
    state, records = full_run(target, tmp_path)
    assert outline(target) == [("provision", "ok", False), ("deploy", "ok", False), ("sweep", "ok", True),
                               ("teardown", "ok", False)]
    sweep = target.phases.records[2]
    (record,) = records
    assert 0 < record["timed_seconds"] < record["setup_seconds"] + record["timed_seconds"] <= sweep.seconds

    lake = open_lake(str(tmp_path / "lake"))
    write_recorded(lake.uri, target.phases, PhaseContext.of(spec.to_dict(), RUN_ID, market=state.market,
                                                            code_hash=local_code_hash()))
    ingest_results(lake, str(tmp_path / "collected" / "results.jsonl"),
                   RunContext(provider="local", instance_type="local-cpu", target="local"), run_id=RUN_ID)
    stored = sorted(read_phases(lake).column("phase").to_pylist())
    assert stored == ["deploy", "provision", "sweep", "teardown"]
    (row,) = build_reports(ReportInputs.from_lake(lake.uri)).tables["campaign"].to_pylist()
    assert row["billed_seconds"] == pytest.approx(sweep.seconds)
    assert row["timed_seconds"] == pytest.approx(record["timed_seconds"])
    assert row["timed_share"] == pytest.approx(record["timed_seconds"] / sweep.seconds)
    assert row["billed_cost"] is None  # local is unpriced


def test_a_failed_local_deploy_is_recorded_as_failed(tmp_path: Path) -> None:
    target = make_target(TargetSpec(name="here", kind="local", provider="local", instance_type="local-cpu",
                                    options={"work_dir": str(tmp_path / "runs"),
                                             "python": str(tmp_path / "no" / "python")}))
    state = target.prepare(RUN_ID)
    with pytest.raises(TargetError):
        target.deploy(state)
    assert outline(target) == [("provision", "ok", False), ("deploy", "failed", False)]
    assert "does not exist" in target.phases.records[1].error


def test_an_ssh_run_records_its_phases(sshd: SshdServer, tmp_path: Path) -> None:
    target = make_target(TargetSpec(
        name="rented-box", kind="ssh", provider="leadergpu", instance_type="cpu-test",
        options={"ssh_conn_id": sshd.conn_id, "remote_dir": str(tmp_path / "remote"),
                 "python": str(BENCH_PYTHON), "poll_interval_s": 0.3, "retry_backoff_s": 0.3,
                 "connect_retries": 6, "kill_grace_s": 2}))
    _, records = full_run(target, tmp_path)
    assert outline(target) == [("provision", "ok", False), ("deploy", "ok", False), ("sweep", "ok", True),
                               ("teardown", "ok", False)]
    assert target.phases.records[2].seconds >= records[0]["timed_seconds"] > 0


def test_an_ec2_run_is_billed_in_every_phase(aws_account: dict[str, Any]) -> None:
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"]))
    state = target.prepare(new_run_id())
    try:
        state = target.deploy(state)
        state = target.run_sweep(state, EC2_SWEEP, timeout_s=60)
    finally:
        target.teardown(state)
    assert outline(target) == [("provision", "ok", True), ("deploy", "ok", True), ("sweep", "ok", True),
                               ("teardown", "ok", True)]


def test_a_provisioning_failure_still_records_the_provision_phase(aws_account: dict[str, Any],
                                                                  aws_client: Any,
                                                                  tmp_path: Path) -> None:
    """The SSM agent check is refused after RunInstances (AccessDenied injected, standing in for
    an orchestrator role without ssm:DescribeInstanceInformation): the instance was paid for, so
    the failed provisioning is billed, and prepare's own teardown is recorded inside it."""
    spec = ec2_spec(aws_account["profile"], aws_account["bucket"])
    target = ec2.Ec2Target(spec)

    def deny(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "injected"}},
                          "DescribeInstanceInformation")

    target.ssm_hook.conn.meta.events.register("before-call.ssm.DescribeInstanceInformation", deny)
    run_id = new_run_id()
    with pytest.raises(TargetError, match="AccessDenied"):
        target.prepare(run_id)
    assert live_instances(aws_client, run_id) == []
    assert outline(target) == [("provision", "failed", True), ("teardown", "ok", True)]

    lake = open_lake(str(tmp_path / "lake"))
    write_recorded(lake.uri, target.phases, PhaseContext.of(spec.to_dict(), run_id))
    stored = {r["phase"]: r for r in read_phases(lake).to_pylist()}
    assert stored["provision"]["status"] == "failed" and "AccessDenied" in stored["provision"]["error"]
    assert stored["provision"]["billed"] and stored["teardown"]["billed"]
