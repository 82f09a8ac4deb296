"""A spot reclaim mid-sweep (issue 32): a replacement within the night, the rest of the sweep on
it, every configuration's record exactly once (a configuration whose record reached S3 before
the reclaim is not measured again); past ``max_reclaims`` the night gives up. A reclaim during
the deploy: ``test_ec2_reclaim_deploy.py``.

Moto's server stands in for EC2, SSM and S3, behind the fault proxy with the stand-in SSM agent
(``working_instances``: the instances' commands, the real MXNet worker on CPU, run on this
machine). A reclaim is stood in for by TerminateInstances of the running instance while its
sweep command runs (the agent then reports the command ``Terminated``, as AWS does); the lost
instance's disk is stood in for by deleting its run folder (the instances share this machine's
file system, a replacement has a fresh disk).
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench_tasks.configs import parse_sweep
from gpucompare.targets import runs
from gpucompare.targets.base import TargetConfigError, TargetState
from gpucompare.targets.ec2 import target as ec2
from gpucompare.targets.ec2.reclaim import ReclaimLimitReached
from tests.conftest import BENCH_PYTHON
from tests.support.ec2_support import ec2_spec, live_instances, new_run_id
from tests.support.proc_helpers import children_of, command_line
from tests.support.target_helpers import held_worker, wait_for, worker_processes

FIRST = {"timeout_s": 120, "warmup": 1, "batches": 1, "repeats": 1,
         "matrix": [{"modes": ["score"], "networks": ["alexnet"], "batch_sizes": [1], "devices": ["cpu"]}]}
#: its first cell is FIRST's: measured on the lost instance, it is not measured again
SECOND = {**FIRST, "matrix": [{"modes": ["score"], "networks": ["alexnet"], "batch_sizes": [1, 2, 4],
                               "devices": ["cpu"]}]}


def _target(working: dict[str, Any], root: Path, **options: Any) -> ec2.Ec2Target:
    account = working["account"]
    # each sweep waits 3 s before the real worker starts, so a sweep is certainly still running when
    # the test reclaims its instance (however fast the tiny sweep on a quiet machine)
    python = held_worker(root.parent / f"{root.name}-python", BENCH_PYTHON, wait="sleep 3",
                         why="3 s (the reclaim lands mid-sweep)")
    return ec2.Ec2Target(ec2_spec(account["profile"], account["bucket"], market="spot", remote_root=str(root),
                                  bench_python=str(python), **options))


def _config_ids(*sweeps: dict[str, Any]) -> list[str]:
    return sorted({c.config_id for sweep in sweeps for c in parse_sweep(dict(sweep), where="s").configs})


def _reclaim_when_running(working: dict[str, Any], aws_client: Any, state: Any, sweep: dict[str, Any],
                          root: Path) -> threading.Thread:
    """Terminate the instance once the sweep's command runs on it, then drop its disk."""
    name = runs.sweep_dir_name(runs.with_run_id(sweep, state.run_id))

    def reclaim() -> None:
        wait_for(lambda: any(name in i.comment and i.instance_id == state.resource_id
                             for i in working["agent"].running()), 120, "the second sweep's command")
        aws_client("ec2").terminate_instances(InstanceIds=[state.resource_id])
        shutil.rmtree(root / "runs", ignore_errors=True)

    thread = threading.Thread(target=reclaim, daemon=True)
    thread.start()
    return thread


def test_a_reclaim_mid_sweep_is_replaced_and_every_configuration_is_recorded_once(
        working_instances: dict[str, Any], aws_client: Any, tmp_path: Path) -> None:
    """Before: the sweep failed with InstanceLost and the night was lost for that target."""
    proxy, root, run_id = working_instances["proxy"], tmp_path / "instance-root", new_run_id()
    target = _target(working_instances, root)
    state = target.deploy(target.prepare(run_id))
    first = state.resource_id
    try:
        state = target.run_sweep(state, FIRST, timeout_s=120)
        sends_before = proxy.count("SendCommand")
        thread = _reclaim_when_running(working_instances, aws_client, state, SECOND, root)
        state = target.run_sweep(state, SECOND, timeout_s=120)
        thread.join(5)
        collected = Path(target.collect(state, str(tmp_path / "results.jsonl")))
        records = [json.loads(line) for line in collected.read_text().splitlines()]
    finally:
        target.teardown(state)
    ids = [r["config_id"] for r in records]
    phases = [(r.phase, r.status, r.billed) for r in target.phases.records]
    print("\nphases of the night:",
          [(r.phase, r.status, round(r.seconds or 0, 1)) for r in target.phases.records])
    # the lost sweep and the replacement's launch and deploy are the reclaim, the rest what it was
    assert phases == [("provision", "ok", True), ("deploy", "ok", True), ("sweep", "ok", True),
                      ("reclaim", "lost", True), ("reclaim", "ok", True), ("reclaim", "ok", True),
                      ("sweep", "ok", True), ("teardown", "ok", True)]
    assert f"instance {first} is terminated" in (target.phases.records[3].error or "")
    (reclaim,) = state.extra["reclaims"]
    print(f"\nreclaim mid-sweep: launches {proxy.launches}, SendCommand after the first sweep "
          f"{proxy.count('SendCommand') - sends_before}, records {len(ids)}, lost {reclaim['lost_s']} s, "
          f"left running {len(live_instances(aws_client, run_id))}")
    assert sorted(ids) == _config_ids(FIRST, SECOND) and len(ids) == len(set(ids))  # each exactly once
    assert all(r["status"] == "ok" for r in records)
    assert reclaim["instance_id"] == first and reclaim["market"] == "spot" and reclaim["lost_s"] > 0
    assert state.resource_id != first and proxy.launches == 2
    assert live_instances(aws_client, run_id) == [] and working_instances["agent"].running() == []


def test_past_max_reclaims_the_night_gives_up_saying_so(working_instances: dict[str, Any],
                                                         aws_client: Any, tmp_path: Path) -> None:
    proxy, run_id = working_instances["proxy"], new_run_id()
    target = _target(working_instances, tmp_path / "instance-root", max_reclaims=0)
    state = target.prepare(run_id)
    try:
        aws_client("ec2").terminate_instances(InstanceIds=[state.resource_id])  # reclaimed before the sweep
        with pytest.raises(ReclaimLimitReached, match=r"more than ec2 option max_reclaims=0 allows"):
            target.run_sweep(state, FIRST, timeout_s=60)
    finally:
        target.teardown(state)
    print(f"\nreclaim past max_reclaims=0: launches {proxy.launches}, "
          f"SendCommand {proxy.count('SendCommand')}, left running {len(live_instances(aws_client, run_id))}")
    assert proxy.launches == 1 and proxy.count("SendCommand") == 0
    # the loss is counted even when no replacement follows
    assert [(r.phase, r.status) for r in target.phases.records] == [
        ("provision", "ok"), ("reclaim", "lost"), ("teardown", "ok")]
    assert live_instances(aws_client, run_id) == []


@pytest.mark.parametrize("value", [-1, 11, "two"])
def test_max_reclaims_out_of_range_is_refused_naming_the_field(value: Any) -> None:
    with pytest.raises(TargetConfigError, match="max_reclaims"):
        ec2.Ec2Target(ec2_spec("profile", "bucket", max_reclaims=value))


#: a stand-in spot price of the test's instance type (USD an hour), so the campaign prices the night
TEST_PRICE = 0.2


def _campaign_row(lake: Any, collected: Path, run_id: str) -> dict[str, Any]:
    """The night's campaign row, with the collected records ingested and a stand-in price."""
    import datetime as dt

    import pyarrow as pa

    from gpucompare.lake import schema
    from gpucompare.lake.ingest import RunContext, ingest_results
    from gpucompare.reports.build import build_reports
    from gpucompare.reports.inputs import ReportInputs

    context = RunContext(provider="aws", instance_type="g4dn.xlarge", region="us-east-1", market="spot",
                         target="ec2")
    ingest_results(lake, collected, context, run_id=run_id)
    price = {"provider": "aws", "instance_type": "g4dn.xlarge", "region": "us-east-1", "market": "spot",
             "gpu_model": "T4", "gpu_count": 1, "price": TEST_PRICE, "currency": "USD", "unit": "hour",
             "effective_from": dt.date(2020, 1, 1), "source": "test price"}
    lake.write_table("prices", "test", pa.Table.from_pylist([price], schema=schema.PRICES_SCHEMA))
    table = build_reports(ReportInputs.from_lake(lake.uri), currency="USD").tables["campaign"]
    (row,) = [r for r in table.to_pylist() if r["run_id"] == run_id]
    shown = ("reclaims", "reclaim_seconds", "reclaim_cost", "sweep_seconds", "billed_seconds", "billed_cost",
             "configurations")
    print("\ncampaign row of the reclaimed night:", {name: row[name] for name in shown})
    return row


def _sweep_step(working: dict[str, Any], root: Path, monkeypatch: pytest.MonkeyPatch,
                sweep: dict[str, Any]) -> tuple[ec2.Ec2Target, TargetState, Any]:
    """A prepared and deployed instance, and the DAG's sweep step (``SweepOperator``) of ``sweep`` on
    it, recording its phases in a lake beside ``root`` (GPUCOMPARE_LAKE)."""
    from gpucompare.airflow.operators import SweepOperator

    monkeypatch.setenv("GPUCOMPARE_LAKE", str(root.parent / "lake"))
    target = _target(working, root)
    state = target.deploy(target.prepare(new_run_id()))
    plan = {"spec": target.spec.to_dict(), "run_id": state.run_id, "profile": "tiny",
            "sweeps": {"score": {"config": sweep, "timeout_s": 120}}}
    return target, state, SweepOperator(task_id="score_sweep", plan=plan, state=state.to_dict(), mode="score")


def _lake_rows(path: Path) -> tuple[Any, list[dict[str, Any]]]:
    """The lake and its run_phases rows, in the order they started."""
    from gpucompare.lake.phases import read_phases
    from gpucompare.lake.tables import open_lake

    lake = open_lake(str(path))
    return lake, sorted(read_phases(lake).to_pylist(), key=lambda r: r["started_at"])


class _Ti:
    """The task instance's XCom, as a deferring operator uses it (one mapped task's)."""

    map_index = -1

    def __init__(self) -> None:
        self.kept: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.kept[key] = json.loads(json.dumps(value))

    def xcom_pull(self, task_ids: str, key: str, map_indexes: int) -> Any:
        return self.kept.get(key)


def test_the_deferred_sweep_step_replaces_a_reclaimed_instance(
        working_instances: dict[str, Any], aws_client: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The DAG's sweep step (``SweepOperator``): its first part sends the sweep and defers; the
    instance is reclaimed during the wait, whose poller runs here (standing in for the triggerer,
    which runs the same poller) until the error event; ``resume`` launches the replacement and
    runs the rest of the sweep on it. Before: the step failed and the night was lost."""
    from airflow.sdk.exceptions import TaskDeferred

    proxy, root = working_instances["proxy"], tmp_path / "instance-root"
    target, state, step = _sweep_step(working_instances, root, monkeypatch, SECOND)
    run_id = state.run_id
    context = {"ti": _Ti(), "dag_run": SimpleNamespace(run_id=run_id)}
    done: dict[str, Any] = {}
    try:
        thread = _reclaim_when_running(working_instances, aws_client, state, SECOND, root)
        with pytest.raises(TaskDeferred):
            step.execute(context)
        thread.join(120)
        kept = context["ti"].kept["gpucompare_wait"]
        poller = target.sweep_poller(state, kept["started"])
        while (event := poller.poll()) is None:  # the poller ends at the sweep's deadline itself
            time.sleep(0.2)
        done["event"] = event
        assert "error" in done["event"]
        done["state"] = step.resume(context, done["event"])
        final = TargetState.from_dict(done["state"])
        collected = Path(target.collect(final, str(tmp_path / "results.jsonl")))
    finally:
        target.teardown(TargetState.from_dict(done.get("state", state.to_dict())))
    ids = [json.loads(line)["config_id"] for line in collected.read_text().splitlines()]
    # the step's rows, written once when the resumed step ended: the failed sweep relabelled
    lake, rows = _lake_rows(tmp_path / "lake")
    print(f"\nreclaim in the deferred sweep step: launches {proxy.launches}, SendCommand "
          f"{proxy.count('SendCommand')}, records {len(ids)} of {len(_config_ids(SECOND))}, "
          f"left running {len(live_instances(aws_client, run_id))}")
    assert sorted(ids) == _config_ids(SECOND) and len(ids) == len(set(ids))
    assert done["state"]["resource_id"] != state.resource_id and proxy.launches == 2
    assert [(r["phase"], r["status"], r["billed"]) for r in rows] == [
        ("reclaim", "lost", True), ("reclaim", "ok", True), ("reclaim", "ok", True), ("sweep", "ok", True)]
    row = _campaign_row(lake, collected, run_id)
    reclaim_rows = sum(r["seconds"] for r in rows if r["phase"] == "reclaim")
    assert row["reclaims"] == 1 and row["configurations"] == len(ids)
    assert row["sweep_seconds"] == pytest.approx(rows[-1]["seconds"])  # the replacement's sweep only
    assert 0 < row["reclaim_seconds"] <= reclaim_rows
    assert row["reclaim_cost"] == pytest.approx(row["reclaim_seconds"] * TEST_PRICE / 3600)
    assert live_instances(aws_client, run_id) == [] and working_instances["agent"].running() == []


def test_a_sweep_step_that_finds_its_instance_gone_counts_the_reclaim_from_its_start(
        working_instances: dict[str, Any], aws_client: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep step's first part (``SweepOperator.execute``) finds the instance reclaimed before
    its sweep was sent: nothing was timed, so the loss is a ``reclaim``/``lost`` row from the
    step's start; the replacement's launch and deploy follow as ``reclaim`` rows, then the sweep.
    Before: the lost time was in no row at all."""
    proxy = working_instances["proxy"]
    target, state, step = _sweep_step(working_instances, tmp_path / "instance-root", monkeypatch, FIRST)
    run_id = state.run_id
    done: dict[str, Any] = {}
    try:
        aws_client("ec2").terminate_instances(InstanceIds=[state.resource_id])  # reclaimed between steps
        began = time.time()
        done["state"] = step.execute({"ti": _Ti(), "dag_run": SimpleNamespace(run_id=run_id)})
    finally:
        target.teardown(TargetState.from_dict(done.get("state", state.to_dict())))
    _, rows = _lake_rows(tmp_path / "lake")
    print(f"\nreclaim found by the sweep step's start: launches {proxy.launches}, rows "
          f"{[(r['phase'], r['status'], round(r['seconds'], 1)) for r in rows]}")
    assert [(r["phase"], r["status"]) for r in rows] == [
        ("reclaim", "lost"), ("reclaim", "ok"), ("reclaim", "ok"), ("sweep", "ok")]
    assert rows[0]["started_at"].timestamp() == pytest.approx(began, abs=1.0) and rows[0]["billed"]
    assert done["state"]["resource_id"] != state.resource_id and proxy.launches == 2
    assert live_instances(aws_client, run_id) == []


#: three cells; the reclaim lands once the first one's record is in S3
THREE = {**FIRST, "matrix": [{"modes": ["score"], "networks": ["alexnet"], "batch_sizes": [1, 8, 16],
                              "devices": ["cpu"]}]}


def _object_lines(aws_client: Any, bucket: str, key: str) -> list[str]:
    """The complete lines of an S3 object (none when it is absent)."""
    try:
        body = aws_client("s3").get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    except aws_client("s3").exceptions.NoSuchKey:
        return []
    return [line for line in body.splitlines(keepends=True) if line.endswith("\n")]


def _worker_tree(sweep_dir: str) -> list[int]:
    """The sweep's worker processes (``timeout``, the sweep, its runner), not the uploads."""
    found = [pid for pid in worker_processes(sweep_dir) if "bench_tasks" in command_line(pid)]
    for pid in list(found):
        found += [child for child in children_of(pid) if child not in found]
    return found


def _reclaim_after_first_record(aws_client: Any, target: ec2.Ec2Target, state: Any, sweep: dict[str, Any],
                                root: Path) -> tuple[threading.Thread, dict]:
    """Once the worker wrote its first record: freeze it (SIGSTOP: it stands in for cells that take
    minutes on a GPU and a fraction of a second here, so none ends before the reclaim lands),
    wait until the uploader copied that record to S3, terminate the instance, kill the frozen
    worker (its processes die with the instance) and drop its disk."""
    config = runs.with_run_id(sweep, state.run_id)
    paths = runs.SweepPaths(posixpath.join(target.run_dir(state), runs.sweep_dir_name(config)))
    bucket, key = target.options.results_bucket, target.storage.partial_key(state, config)
    seen: dict[str, Any] = {}

    def on_disk() -> int:
        try:
            return Path(paths.partial).read_text().count("\n")
        except FileNotFoundError:
            return 0

    def reclaim() -> None:
        deadline = time.monotonic() + 120
        while on_disk() < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        frozen = _worker_tree(paths.sweep_dir)
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        seen["on_disk"] = on_disk()
        wait_for(lambda: _object_lines(aws_client, bucket, key), 60, "the first record in S3")
        seen["in_s3"] = [json.loads(line)["config_id"] for line in _object_lines(aws_client, bucket, key)]
        aws_client("ec2").terminate_instances(InstanceIds=[state.resource_id])
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(root / "runs", ignore_errors=True)

    thread = threading.Thread(target=reclaim, daemon=True)
    thread.start()
    return thread, seen


def test_a_reclaim_after_a_record_reached_s3_measures_only_the_other_cells(
        working_instances: dict[str, Any], aws_client: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the records so far reached S3 only when a sweep ended, so the replacement measured
    the lost instance's finished cells again (3 of 3 here)."""
    from gpucompare.targets.ec2 import commands

    monkeypatch.setattr(commands, "PROGRESS_UPLOAD_S", 0.5)  # 20 s in production
    proxy, root, run_id = working_instances["proxy"], tmp_path / "instance-root", new_run_id()
    target = _target(working_instances, root)
    state = target.deploy(target.prepare(run_id))
    first, bucket = state.resource_id, target.options.results_bucket
    try:
        thread, seen = _reclaim_after_first_record(aws_client, target, state, THREE, root)
        state = target.run_sweep(state, THREE, timeout_s=120)
        thread.join(5)
        replaced = [json.loads(line)["config_id"]
                    for line in _object_lines(aws_client, bucket, target.storage.results_key(state))]
        ids = [json.loads(line)["config_id"] for line in
               Path(target.collect(state, str(tmp_path / "results.jsonl"))).read_text().splitlines()]
        deleted = target.delete_run_objects(run_id)
    finally:
        target.teardown(state)
    twice = set(seen["in_s3"]) & set(replaced)
    print(f"\nreclaim after a record reached S3: launches {proxy.launches}, SendCommand "
          f"{proxy.count('SendCommand')}, records in S3 at the reclaim {len(seen['in_s3'])}, on the "
          f"replacement {len(replaced)}, collected {len(ids)}, measured twice {len(twice)}, left running "
          f"{len(live_instances(aws_client, run_id))}, objects deleted {deleted}")
    assert seen["on_disk"] == 1 and len(seen["in_s3"]) == 1  # frozen after its first record
    assert sorted(replaced) == sorted(set(_config_ids(THREE)) - set(seen["in_s3"])) and not twice
    assert sorted(ids) == _config_ids(THREE) and len(ids) == len(set(ids))  # each exactly once
    assert state.resource_id != first and proxy.launches == 2
    left = aws_client("s3").list_objects_v2(Bucket=bucket, Prefix=target.storage.run_prefix(run_id))
    assert left["KeyCount"] == 0  # the partial objects too
    assert live_instances(aws_client, run_id) == [] and working_instances["agent"].running() == []
