"""The DAGs end to end with ``dag.test()``: real Airflow (SQLite), real targets, the real lake.

Each run goes through Airflow's own dependency logic (setup/teardown, trigger rules, mapped
task groups, retries, asset events) with every task executed in this process. The worker
runs for real (MXNet on the CPU, tiny sweeps). Stand-ins, where a test needs one, are named
in its docstring.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from gpucompare.lake.tables import open_lake
from tests.conftest import BENCH_PYTHON, REPO_ROOT

pytestmark = pytest.mark.dag

TINY = {"networks": ["alexnet"], "batch_sizes": [1], "modes": ["score", "train"], "warmup": 1,
        "batches": 1, "repeats": 1, "timeout_s": 120}
SCORE_ONLY = {**TINY, "modes": ["score"]}


def local_target(name: str, profile: str = "tiny", **options: Any) -> dict[str, Any]:
    return {"name": name, "kind": "local", "provider": "local", "instance_type": "local-cpu",
            "profile": profile, "options": options}


def lake_rows(lake: Path) -> list[dict[str, Any]]:
    if not (lake / "results").exists():
        return []
    return open_lake(str(lake)).results_table().to_pylist()


def asset_events(asset_name: str, run_id: str) -> list[Any]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        events = (session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                  .filter(AssetModel.name == asset_name, AssetEvent.source_run_id == run_id).all())
        return [(event.source_dag_id, dict(event.extra or {})) for event in events]


def clear_asset_queue(dag_id: str) -> None:
    """Forget the asset events queued for ``dag_id``, as its next run would consume them.

    The queue holds one row per (asset, DAG) and a later event leaves an existing row as it was
    (its ``created_at`` too): an earlier test's nightly run that queued the reports DAG would
    otherwise make this test's check pass or fail on that test's event, not on its own."""
    from airflow.models.asset import AssetDagRunQueue
    from airflow.utils.session import create_session

    with create_session() as session:
        session.query(AssetDagRunQueue).filter(AssetDagRunQueue.target_dag_id == dag_id).delete()


def asset_queue(dag_id: str) -> dict[str, Any]:
    """Whether an asset event queued ``dag_id`` and the scheduler's own query
    (``DagModel.dags_needing_dagruns``) now counts it among the asset-triggered DAGs to run
    (``ready``), with what the scheduler looks at, so a failure says why."""
    from airflow.models.asset import AssetDagRunQueue
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        queued = session.query(AssetDagRunQueue).filter(AssetDagRunQueue.target_dag_id == dag_id).count()
        _, triggered_by_assets = DagModel.dags_needing_dagruns(session)
        model = session.query(DagModel).filter(DagModel.dag_id == dag_id).one_or_none()
        unfinished = session.query(DagRun).filter(DagRun.dag_id == dag_id,
                                                  DagRun.state.in_(("queued", "running"))).count()
        return {"ready": queued >= 1 and dag_id in triggered_by_assets, "queued": queued,
                "triggered_by_assets": sorted(triggered_by_assets), "unfinished_runs": unfinished,
                "dag_model": model and {"paused": model.is_paused, "stale": model.is_stale,
                                        "import_errors": model.has_import_errors,
                                        "asset_expression": model.asset_expression}}


def test_nightly_on_the_local_target_fills_the_lake_and_the_reports_follow(
        run_dag, write_fleet, gpucompare_dirs) -> None:
    write_fleet({"profiles": {"tiny": TINY}, "targets": [local_target("local")]})
    clear_asset_queue("gpucompare_reports")

    night = run_dag("gpucompare_nightly")

    assert night.state == "success", night.states
    for task_id in ("target.prepare", "target.score_sweep", "target.train_sweep", "target.ingest",
                    "target.terminate"):
        assert night.task_states(task_id) == ["success"], (task_id, night.states)
    rows = lake_rows(gpucompare_dirs.lake)
    assert sorted(r["mode"] for r in rows) == ["score", "train"]
    assert {(r["provider"], r["instance_type"], r["target"], r["dag_run_id"]) for r in rows} == {
        ("local", "local-cpu", "local", night.run_id)}
    assert all(r["status"] == "ok" and r["images_per_sec"] > 0 for r in rows)
    assert not list(gpucompare_dirs.staging.rglob("*.jsonl"))  # the staged file went into the lake
    # one results event for the whole run, and the reports DAG is queued on it
    events = asset_events("gpucompare_results", night.run_id)
    assert events == [("gpucompare_nightly", {"targets": ["local"], "records": 2,
                                              "dag_run_id": night.run_id})]
    queue = asset_queue("gpucompare_reports")
    assert queue["ready"], queue

    reports = run_dag("gpucompare_reports")

    assert reports.state == "success", reports.states
    latest = gpucompare_dirs.reports / "latest"
    assert latest.is_symlink() and (latest / "index.html").is_file()
    assert latest.resolve().parent == gpucompare_dirs.reports.resolve()
    cost = (latest / "cost_per_million.csv").read_text()
    assert cost.count('"local-cpu"') == 2
    assert len(asset_events("gpucompare_reports", reports.run_id)) == 1


def test_staging_on_s3_lets_collect_and_ingest_run_on_different_workers(
        run_dag, write_fleet, gpucompare_dirs, aws_endpoint, aws_client, s3_bucket, monkeypatch) -> None:
    """Staging on object storage (moto's S3 on 127.0.0.1 standing in for S3), as a Celery or
    Kubernetes deployment needs: collect leaves the results there, ingest takes them from there
    into the lake and removes them."""
    monkeypatch.setenv("GPUCOMPARE_STAGING", f"s3://{s3_bucket}/staging")
    write_fleet({"profiles": {"tiny": SCORE_ONLY}, "targets": [local_target("local")]})

    night = run_dag("gpucompare_nightly")

    assert night.state == "success", night.states
    collected = night.xcom("target.collect", 0)
    assert collected["path"].startswith(f"s3://{s3_bucket}/staging/") and collected["records"] == 1
    rows = lake_rows(gpucompare_dirs.lake)
    assert [(r["mode"], r["dag_run_id"]) for r in rows] == [("score", night.run_id)]
    keys = [o["Key"] for o in aws_client("s3").list_objects_v2(Bucket=s3_bucket).get("Contents", [])]
    assert not [key for key in keys if key.endswith(".jsonl")], keys  # ingested, then removed
    assert not gpucompare_dirs.staging.exists()  # nothing went to the local folder


def test_a_failing_sweep_still_tears_down_and_spares_the_other_target(
        run_dag, write_fleet, gpucompare_dirs, tmp_path) -> None:
    """Stand-in: the broken target's worker interpreter is a shell script that passes the
    deploy check (it runs the real interpreter for ``-c``) and dies when asked to sweep."""
    crashing = tmp_path / "crashing-python"
    crashing.write_text(
        "#!/bin/sh\n"
        'case "$*" in *"bench_tasks sweep"*) echo "worker crashed (test stand-in)" >&2; exit 3;; esac\n'
        f'exec {BENCH_PYTHON} "$@"\n')
    crashing.chmod(crashing.stat().st_mode | stat.S_IXUSR)
    write_fleet({"profiles": {"tiny": SCORE_ONLY}, "targets": [
        local_target("good", remove_run_dir=True),
        local_target("broken", python=str(crashing), remove_run_dir=True),
    ]})

    night = run_dag("gpucompare_nightly")

    assert night.state == "failed"
    # map index 0 = good, 1 = broken
    assert night.task_states("target.score_sweep") == ["success", "failed"]
    assert night.task_states("target.collect") == ["success", "upstream_failed"]
    assert night.task_states("target.ingest") == ["success", "upstream_failed"]
    assert night.task_states("target.terminate") == ["success", "success"]
    assert [night.labels[("target.terminate", i)] for i in (0, 1)] == ["good", "broken"]
    assert night.task_states("results_ready") == ["success"]
    assert night.task_states("check_targets") == ["failed"]
    # teardown ran for both (remove_run_dir: their run directories are gone)
    assert gpucompare_dirs.work.is_dir() and list(gpucompare_dirs.work.iterdir()) == []
    # the good target's results are in the lake, nothing of the broken one
    rows = lake_rows(gpucompare_dirs.lake)
    assert [r["run_id"].rsplit(".", 1)[1] for r in rows] == ["good"]


@pytest.mark.parametrize(("conf", "field"), [
    ({"instance_type": "p3.2xlarge; rm -rf /"}, "instance_type"),
    ({"networks": ["resnet-50", "lenet"]}, "networks"),
    ({"batch_sizes": [8, 0]}, "batch_sizes"),
    ({"batch_sizes": [-1]}, "batch_sizes"),
    ({"ssh_conn_id": "x; id"}, "ssh_conn_id"),
])
def test_manual_form_refuses_bad_params_before_a_run_exists(run_dag, conf, field) -> None:
    from airflow.models.dagrun import DagRun
    from airflow.sdk.exceptions import ParamValidationError
    from airflow.utils.session import create_session

    def runs() -> int:
        with create_session() as session:
            return session.query(DagRun).filter(DagRun.dag_id == "gpucompare_manual").count()

    before = runs()
    with pytest.raises(ParamValidationError, match=field):
        run_dag("gpucompare_manual", conf)
    assert runs() == before


@pytest.mark.parametrize(("conf", "field"), [
    # the form takes a plain label (rented hosts have such names); ec2 needs family.size
    ({"kind": "ec2", "provider": "aws", "instance_type": "mybox"}, "instance_type"),
    ({"kind": "ssh", "provider": "leadergpu", "instance_type": "ltbv14", "region": None}, "ssh_conn_id"),
])
def test_manual_run_fails_in_its_first_task_and_provisions_nothing(
        run_dag, write_fleet, gpucompare_dirs, capfd, conf, field) -> None:
    result = run_dag("gpucompare_manual", conf)

    assert result.state == "failed"
    assert result.task_states("validate_request") == ["failed"]
    ran = {task_id for (task_id, _), state in result.states.items()
           if task_id.startswith("target.") and state in ("success", "failed", "running")}
    assert ran == set(), result.states
    assert result.task_states("results_ready") == ["skipped"]
    assert result.task_states("check_targets") == ["failed"]  # says that no plan was made
    output = capfd.readouterr()
    assert f"{field}:" in output.out + output.err
    assert lake_rows(gpucompare_dirs.lake) == []


@pytest.mark.slow
def test_nightly_on_an_ssh_target(run_dag, write_fleet, gpucompare_dirs, sshd, tmp_path) -> None:
    """A rented host as the ssh target sees it: a real OpenSSH server on 127.0.0.1 (this
    machine stands in for the remote host; the worker environment is .venv-bench)."""
    write_fleet({"profiles": {"tiny": SCORE_ONLY}, "targets": [{
        "name": "rented", "kind": "ssh", "provider": "leadergpu", "instance_type": "ltbv14",
        "profile": "tiny", "options": {"ssh_conn_id": sshd.conn_id, "remote_dir": str(tmp_path / "remote"),
                                       "python": str(BENCH_PYTHON), "poll_interval_s": 0.3,
                                       "remove_run_dir": True}}]})

    night = run_dag("gpucompare_nightly")

    assert night.state == "success", night.states
    rows = lake_rows(gpucompare_dirs.lake)
    assert [(r["provider"], r["instance_type"], r["target"], r["mode"]) for r in rows] == [
        ("leadergpu", "ltbv14", "ssh", "score")]
    assert night.task_states("target.terminate") == ["success"]
    assert list((tmp_path / "remote" / "runs").iterdir()) == []  # teardown removed the run


def run_instances(aws_client, dag_run_id: str) -> list[dict[str, Any]]:
    reservations = aws_client("ec2").describe_instances(Filters=[
        {"Name": "tag:gpucompare:run-id", "Values": [f"*{dag_run_id}*"]}])["Reservations"]
    return [instance for reservation in reservations for instance in reservation["Instances"]]


def test_ec2_instance_is_terminated_when_the_run_fails_after_provisioning(
        run_dag, write_fleet, gpucompare_dirs, moto_account, aws_client) -> None:
    """Moto stands in for AWS: it creates and describes instances but runs no command, so no
    results reach S3 and ``collect`` fails after provisioning — the case teardown exists for."""
    write_fleet({"defaults": {"ec2": moto_account}, "profiles": {"tiny": SCORE_ONLY}, "targets": [{
        "name": "aws-g4dn", "kind": "ec2", "provider": "aws", "instance_type": "g4dn.xlarge",
        "region": "us-east-1", "gpu_count": 1, "profile": "tiny", "options": {"budget_cap": 20}}]})

    night = run_dag("gpucompare_nightly")

    assert night.state == "failed"
    assert night.task_states("target.prepare") == ["success"]
    assert night.task_states("target.collect") == ["failed"]
    assert night.task_states("target.terminate") == ["success"]
    instances = run_instances(aws_client, night.run_id)
    assert len(instances) == 1
    assert instances[0]["State"]["Name"] == "terminated"
    assert lake_rows(gpucompare_dirs.lake) == []


def test_manual_ec2_run_over_budget_creates_nothing(
        run_dag, write_fleet, gpucompare_dirs, moto_account, aws_client) -> None:
    fleet = {"defaults": {"ec2": moto_account}, "profiles": {"nightly": SCORE_ONLY},
             "targets": [local_target("local", "nightly")]}
    write_fleet(fleet)

    result = run_dag("gpucompare_manual", {
        "kind": "ec2", "provider": "aws", "instance_type": "p4d.24xlarge", "region": "us-east-1",
        "gpu_count": 8, "networks": ["resnet-50"], "batch_sizes": [32], "modes": ["score"],
        "budget_cap": 0.5, "budget_currency": "USD"})

    assert result.state == "failed"
    assert result.task_states("validate_request") == ["success"]
    assert result.task_states("target.prepare") == ["failed"]  # the cost guard, no retry
    assert result.task_states("target.deploy") == ["upstream_failed"]
    assert result.task_states("target.terminate") == ["success"]
    assert run_instances(aws_client, result.run_id) == []


def test_env_of_the_session_is_isolated() -> None:
    """The tests never touch the developer's Airflow home."""
    home = Path(os.environ["AIRFLOW_HOME"])
    assert home.name.startswith("gpucompare-airflow-")
    assert not str(home).startswith(str(REPO_ROOT))


def _launch_tagged(aws_client, region: str, expires_at: str, deployment: str | None = None) -> str:
    from gpucompare import settings

    ec2 = aws_client("ec2", region_name=region)
    image_id = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = [{"Key": "gpucompare:expires-at", "Value": expires_at},
            {"Key": "gpucompare:deployment", "Value": deployment or settings.deployment()},
            {"Key": "gpucompare:run-id", "Value": f"sweeper-dag-test-{expires_at}"}]
    return ec2.run_instances(ImageId=image_id, MinCount=1, MaxCount=1, InstanceType="g4dn.xlarge",
                             TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
                             )["Instances"][0]["InstanceId"]


def test_sweeper_dag_terminates_expired_instances_only(
        run_dag, write_fleet, gpucompare_dirs, moto_account, aws_client, monkeypatch) -> None:
    """Instances launched straight into moto stand in for ones a crashed run left behind."""
    from datetime import UTC, datetime, timedelta

    def iso(moment: datetime) -> str:
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    now = datetime.now(UTC)
    expired = _launch_tagged(aws_client, "eu-west-1", iso(now - timedelta(hours=1)))
    fresh = _launch_tagged(aws_client, "eu-west-1", iso(now + timedelta(hours=3)))
    foreign = _launch_tagged(aws_client, "eu-west-1", iso(now - timedelta(hours=1)), deployment="elsewhere")
    write_fleet({"defaults": {"ec2": moto_account}, "profiles": {"tiny": SCORE_ONLY},
                 "targets": [local_target("local")]})
    monkeypatch.setenv("GPUCOMPARE_SWEEPER_REGIONS", "eu-west-1")

    result = run_dag("gpucompare_sweeper")

    assert result.state == "success", result.states
    states = {i["InstanceId"]: i["State"]["Name"] for r in aws_client("ec2", region_name="eu-west-1")
              .describe_instances(InstanceIds=[expired, fresh, foreign])["Reservations"]
              for i in r["Instances"]}
    assert states[expired] in ("shutting-down", "terminated")
    assert states[fresh] == "running" and states[foreign] == "running"  # another deployment's


def test_sweeper_dag_sweeps_past_a_missing_marker_bucket_and_then_fails_naming_it(
        run_dag, write_fleet, gpucompare_dirs, moto_account, aws_client, monkeypatch) -> None:
    """Issue 19: the fleet's ec2 defaults name a results bucket that does not exist (NoSuchBucket
    when the sweeper lists its region markers). The expired instance in the fleet's region is
    still terminated; then the task fails (SweepIncomplete naming the bucket) and so does the run."""
    from datetime import UTC, datetime, timedelta

    expired = _launch_tagged(aws_client, "eu-west-1", (datetime.now(UTC) - timedelta(hours=1))
                             .strftime("%Y-%m-%dT%H:%M:%SZ"))
    missing = {**moto_account, "results_bucket": "no-such-bucket-for-the-sweeper"}
    ec2_target = {"name": "aws-west", "kind": "ec2", "provider": "aws", "instance_type": "g4dn.xlarge",
                  "region": "eu-west-1", "gpu_count": 1, "profile": "tiny", "enabled": False}
    write_fleet({"defaults": {"ec2": missing}, "profiles": {"tiny": SCORE_ONLY},
                 "targets": [local_target("local"), ec2_target]})
    monkeypatch.delenv("GPUCOMPARE_SWEEPER_REGIONS", raising=False)

    result = run_dag("gpucompare_sweeper")

    assert result.state == "failed" and result.task_states("sweep_expired") == ["failed"], result.states
    state = aws_client("ec2", region_name="eu-west-1").describe_instances(
        InstanceIds=[expired])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state in ("shutting-down", "terminated")


def test_sweeper_dag_skips_without_ec2_regions(run_dag, write_fleet, gpucompare_dirs, monkeypatch) -> None:
    write_fleet({"profiles": {"tiny": SCORE_ONLY}, "targets": [local_target("local")]})
    monkeypatch.delenv("GPUCOMPARE_SWEEPER_REGIONS", raising=False)
    result = run_dag("gpucompare_sweeper")
    assert result.state == "success" and result.task_states("sweep_expired") == ["skipped"]


def test_two_nights_keep_both_and_duplicate_nothing(run_dag, write_fleet, gpucompare_dirs) -> None:
    """What ``make demo`` twice does: two DAG runs (two run ids, both today), the published
    figures imported twice, and one run's results ingested again."""
    import importlib.util

    from gpucompare.lake.ingest import RunContext, ingest_results
    from gpucompare.prices.published import import_published
    from gpucompare.targets.bundle import local_code_hash
    from tests.conftest import REPO_ROOT

    write_fleet({"profiles": {"tiny": SCORE_ONLY}, "targets": [local_target("local")]})
    lake = open_lake(str(gpucompare_dirs.lake))
    first = run_dag("gpucompare_nightly")
    import_published(lake)
    second = run_dag("gpucompare_nightly")
    import_published(lake)
    assert first.state == second.state == "success"

    rows = lake.results_table().to_pylist()
    measured = [r for r in rows if r["target"] != "published"]
    assert sorted(r["dag_run_id"] for r in measured) == sorted([first.run_id, second.run_id])
    published = len(rows) - len(measured)
    keys = {(r["run_id"], r["config_id"], r["source"], r["network"], r["batch_size"], r["mode"],
             r["instance_type"]) for r in rows}
    assert len(keys) == len(rows)

    # the second night's worker output, ingested once more, replaces its own files
    second_run = next(r["run_id"] for r in measured if r["dag_run_id"] == second.run_id)
    results_file = next(path for path in gpucompare_dirs.work.rglob("results.jsonl")
                        if json.loads(path.read_text().splitlines()[0])["run_id"] == second_run)
    version = lake.version("results")
    summary = ingest_results(lake, results_file, RunContext(provider="local", instance_type="local-cpu",
                                                            market="on_demand", target="local",
                                                            dag_run_id=second.run_id),
                             run_id=second_run, code_hash=local_code_hash())
    again = lake.results_table().to_pylist()
    assert len(again) == len(rows) and len(again) - published == 2
    assert lake.version("results") == version and not summary.changed  # the same data: no new version

    # and the demo script says so
    spec = importlib.util.spec_from_file_location("demo", REPO_ROOT / "scripts" / "demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    summary = demo.lake_summary(str(gpucompare_dirs.lake))
    assert "2 measured results from 2 nightly run(s)" in summary and summary.endswith("0 duplicates")


def test_reports_dag_publishes_to_s3(run_dag, gpucompare_dirs, aws_endpoint, aws_client, s3_bucket,
                                     monkeypatch) -> None:
    """Reports on object storage (moto's S3 on 127.0.0.1): the dated set, then latest/ as a copy."""
    from gpucompare.prices.published import import_published

    import_published(open_lake(str(gpucompare_dirs.lake)))
    monkeypatch.setenv("GPUCOMPARE_REPORTS", f"s3://{s3_bucket}/reports")

    result = run_dag("gpucompare_reports")

    assert result.state == "success", result.states
    keys = {o["Key"] for o in aws_client("s3").list_objects_v2(Bucket=s3_bucket)["Contents"]}
    dated = result.dag_run.run_after.date().isoformat()
    for name in ("index.html", "cost_per_million.csv", "scaling.csv"):
        assert f"reports/{dated}/{name}" in keys
        assert f"reports/latest/{name}" in keys
    # the day's copy of each report for BI over time, beside the dated sets
    assert f"reports/report_history/cost_per_million/report_date={dated}/cost_per_million.parquet" in keys
    latest = aws_client("s3").get_object(Bucket=s3_bucket, Key="reports/latest/cost_per_million.csv")
    assert b"ltbv14" in latest["Body"].read()  # the published LeaderGPU rows, costed


def test_nightly_in_its_own_process_exits_0_after_delta_writes(
        airflow_db, write_fleet, gpucompare_dirs) -> None:
    """The trap of the Delta lake (a process that wrote a Delta table and then started child
    processes aborted at interpreter exit, code 134): the nightly DAG run by ``dag.test`` in a
    process of its own, two local targets (the second one's worker starts after the first one's
    ingest wrote the table); the process must exit 0 and both runs be in the lake."""
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    write_fleet({"profiles": {"tiny": SCORE_ONLY}, "targets": [local_target("one"), local_target("two")]})
    script = ("import sys; from airflow.dag_processing.dagbag import DagBag; "
              f"dag = DagBag({str(REPO_ROOT / 'dags')!r}).dags['gpucompare_nightly']; "
              "run = dag.test(); sys.exit(0 if str(run.state) == 'success' else 3)")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = lake_rows(gpucompare_dirs.lake)
    assert len({r["run_id"] for r in rows}) == 2 and len(rows) == 2
    assert {r["code_hash"] is not None for r in rows} == {True}
