"""DAG integrity: every DAG file imports, has its manners (tags, owner, retries, timeouts) and parses fast."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT

DAG_IDS = {"gpucompare_nightly", "gpucompare_manual", "gpucompare_reports", "gpucompare_prices",
           "gpucompare_sweeper"}
#: Steps that talk to a network (a machine, AWS, the lake that may be S3): they retry with backoff.
NETWORK_STEPS = {"target.prepare", "target.deploy", "target.score_sweep", "target.train_sweep",
                 "target.collect", "target.ingest", "target.terminate", "build_reports", "refresh_region",
                 "sweep_expired", "compact_lake"}
HEAVY_MODULES = ("pandas", "pyarrow", "boto3", "botocore", "duckdb", "mxnet", "matplotlib", "numpy")


@pytest.fixture(scope="module")
def dags(dagbag: Any) -> dict[str, Any]:
    assert dagbag.import_errors == {}
    return dagbag.dags


def test_every_dag_file_imports(dags: dict[str, Any]) -> None:
    assert set(dags) == DAG_IDS
    files = {Path(dag.fileloc).name for dag in dags.values()}
    assert files == {f"{dag_id}.py" for dag_id in DAG_IDS}


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_dag_manners(dags: dict[str, Any], dag_id: str) -> None:
    dag = dags[dag_id]
    assert "gpucompare" in dag.tags and len(dag.tags) >= 2
    assert dag.doc_md and dag_id in dag.doc_md
    assert dag.catchup is False
    for task in dag.tasks:
        assert task.owner == "gpucompare", task.task_id
        assert task.execution_timeout is not None and task.execution_timeout > timedelta(0), task.task_id
        if task.task_id in NETWORK_STEPS:
            assert task.retries >= 1, task.task_id
            assert task.retry_exponential_backoff >= 2, task.task_id
            assert task.max_retry_delay is not None, task.task_id


@pytest.mark.parametrize("dag_id", ["gpucompare_nightly", "gpucompare_manual"])
def test_steps_holding_an_idle_machine_retry_briefly(dags: dict[str, Any], dag_id: str) -> None:
    """deploy, collect and terminate: Airflow's whole retry schedule (every delay at its largest,
    as backoff allows) stays within a few minutes, so a finished instance is not paid for
    idling through a long backoff; collect's own time limit is bounded too."""
    tasks = dags[dag_id].task_dict
    for step in ("target.deploy", "target.collect", "target.terminate"):
        task = tasks[step]
        delays, delay = [], task.retry_delay
        for _ in range(task.retries):
            delays.append(min(delay, task.max_retry_delay))
            delay = delay * task.retry_exponential_backoff
        assert task.retry_delay <= timedelta(seconds=30), step
        assert task.max_retry_delay <= timedelta(minutes=1), step
        if step != "target.terminate":
            # Airflow may add up to one more delay of jitter to each: at most the cap each time
            assert task.retries * task.max_retry_delay <= timedelta(minutes=2), (step, delays)
            assert sum(delays, timedelta(0)) <= timedelta(minutes=2), (step, delays)
    assert tasks["target.collect"].execution_timeout <= timedelta(minutes=10)


def test_permanent_errors_fail_at_once_and_others_are_retried() -> None:
    """The retry policy by error class (policy.is_permanent / bad_input_fails)."""
    from airflow.sdk.exceptions import AirflowFailException

    from bench_tasks.configs import ConfigError
    from gpucompare.airflow import policy
    from gpucompare.config.validation import ValidationError
    from gpucompare.errors import PermanentError, TransientError
    from gpucompare.targets.base import BudgetExceeded, TargetConfigError, TargetError

    for permanent in (PermanentError("x"), ValidationError("f", "bad"), BudgetExceeded("over"),
                      TargetConfigError("refused sweep"), ConfigError("networks", "unknown")):
        assert policy.is_permanent(permanent), permanent
        with pytest.raises(AirflowFailException), policy.bad_input_fails():
            raise permanent
    for transient in (TargetError("SSM timed out"), TransientError("throttled"), ValueError("a bug"),
                      OSError("connection reset")):
        assert not policy.is_permanent(transient), transient
        with pytest.raises(type(transient)), policy.bad_input_fails():
            raise transient


@pytest.mark.parametrize("dag_id", ["gpucompare_nightly", "gpucompare_manual"])
def test_target_group_brackets_the_machine_with_setup_and_teardown(dags: dict[str, Any], dag_id: str) -> None:
    from airflow.sdk import TriggerRule

    tasks = dags[dag_id].task_dict
    prepare, terminate = tasks["target.prepare"], tasks["target.terminate"]
    assert prepare.is_setup and terminate.is_teardown
    # runs whatever happened upstream, even after a failed prepare; its failure fails the run
    assert terminate.trigger_rule == TriggerRule.ALL_DONE
    assert terminate.on_failure_fail_dagrun is True
    assert "target.prepare" in terminate.upstream_task_ids
    assert "target.collect" in terminate.upstream_task_ids
    chain = ["target.prepare", "target.deploy", "target.score_sweep", "target.train_sweep",
             "target.collect", "target.ingest"]
    for upstream, downstream in zip(chain, chain[1:], strict=False):
        assert upstream in tasks[downstream].upstream_task_ids, (upstream, downstream)
    for step in chain[:-1]:
        assert tasks[step].pool == "gpucompare_instances", step
    # one target per mapped index; a failed target fails the run at the very end
    assert tasks["target.prepare"].get_closest_mapped_task_group() is not None
    assert tasks["check_targets"].downstream_task_ids == set()


def test_results_and_reports_assets_link_the_dags(dags: dict[str, Any]) -> None:
    from airflow.sdk import AssetOrTimeSchedule

    from gpucompare.airflow import assets

    for dag_id in ("gpucompare_nightly", "gpucompare_manual"):
        assert assets.RESULTS in dags[dag_id].task_dict["results_ready"].outlets
    reports = dags["gpucompare_reports"]
    assert isinstance(reports.timetable, AssetOrTimeSchedule)
    assert assets.RESULTS in reports.timetable.asset_condition.objects
    assert assets.REPORTS in reports.task_dict["build_reports"].outlets
    assert reports.task_dict["build_reports"].upstream_task_ids == {"compact_lake"}  # compacted first
    assert reports.timetable.timetable.expression == "30 6 * * *"


def test_schedules(dags: dict[str, Any]) -> None:
    assert not dags["gpucompare_manual"].timetable.can_be_scheduled
    assert dags["gpucompare_nightly"].timetable.expression == "0 2 * * *"
    assert dags["gpucompare_sweeper"].timetable.expression in ("@hourly", "0 * * * *")
    assert dags["gpucompare_prices"].timetable.expression == "0 5 * * *"


def test_manual_form_refuses_bad_values_before_a_run_exists(dags: dict[str, Any]) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    dag = dags["gpucompare_manual"]
    params = dag.params
    expected = {"kind", "provider", "instance_type", "region", "market", "gpu_count", "networks",
                "batch_sizes", "modes", "dtypes", "worker_runtime", "profile", "ssh_conn_id", "budget_cap",
                "budget_currency"}
    assert set(params.keys()) == expected
    params.validate()  # the defaults are valid
    for name, value in [("instance_type", "p3.2xlarge; rm -rf /"), ("networks", ["resnet-50", "lenet"]),
                        ("batch_sizes", [0]), ("market", "cheap"), ("budget_cap", -1)]:
        candidate = copy.deepcopy(params)
        with pytest.raises(ParamValidationError, match=name):
            candidate[name] = value
            candidate.validate()


def test_manual_form_is_generated_from_the_trigger_model(dags: dict[str, Any]) -> None:
    """Each Param of the parsed DAG (as the DAG processor serialises it for the form) holds the
    schema, title, description and default that TriggerParams generates, and nothing else; a
    value the model refuses is refused by the form too where a schema can say it."""
    from airflow.sdk.exceptions import ParamValidationError

    from gpucompare.config.models import TriggerParams, form_fields

    params = dags["gpucompare_manual"].params
    generated = form_fields()
    assert set(params.keys()) == set(generated) == set(TriggerParams.model_fields)
    for name, field in generated.items():
        param = params.get_param(name).serialize()
        assert param["schema"] == {"title": field["title"], **field["schema"]}, name
        assert param["description"] == field["description"] and param["value"] == field["default"], name
        json.dumps(param)  # what the form receives is plain JSON
    assert "anyOf" not in json.dumps(generated)  # the form has no widget for anyOf
    assert params.get_param("region").schema["type"] == ["string", "null"]
    assert params.get_param("worker_runtime").schema["enum"] == ["auto", "pip-cu112", "ngc-24.06", "cpu"]
    for name, value in [("region", "us-east-1\n"), ("ssh_conn_id", "x; rm -rf /"), ("provider", "AWS"),
                        ("batch_sizes", [8, 8]), ("gpu_count", 65), ("budget_currency", "GBP"),
                        ("worker_runtime", "ngc-99.99")]:
        candidate = copy.deepcopy(params)
        with pytest.raises(ParamValidationError, match=name):
            candidate[name] = value
            candidate.validate()


def test_all_dag_files_parse_fast_without_heavy_imports() -> None:
    """In a fresh interpreter with Airflow loaded (as in the DAG processor), parse every DAG file.

    The limit is on the parse's CPU time: parsing is single-threaded and CPU-bound, so on an
    idle machine that is its wall time, and it does not change when other work shares the
    cores (the wall time is reported in the message too)."""
    script = textwrap.dedent(f"""
        import json, sys, time
        from airflow.dag_processing.dagbag import DagBag
        from airflow.sdk import dag, task, task_group, Param, Asset, AssetOrTimeSchedule  # noqa: F401
        started, cpu_started = time.perf_counter(), time.process_time()
        bag = DagBag({str(REPO_ROOT / "dags")!r})
        cpu, wall = time.process_time() - cpu_started, time.perf_counter() - started
        print(json.dumps({{"cpu": cpu, "wall": wall, "dags": sorted(bag.dags),
                          "errors": list(bag.import_errors),
                          "heavy": [m for m in {HEAVY_MODULES!r} if m in sys.modules]}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ), cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["errors"] == [] and set(result["dags"]) == DAG_IDS
    assert result["heavy"] == [], "a DAG file pulls in heavy modules at parse time"
    took = f"{result['cpu']:.2f} s CPU ({result['wall']:.2f} s wall)"
    assert result["cpu"] < 2.0, f"parsing all DAG files took {took}"
