"""Paid machines under faults: the ec2 target driven as the DAG drives it, through a proxy that
injects throttling, 500s, lost responses and timeouts between the client and moto's server.

The real step sequence of ``gpucompare.airflow.pipeline`` (``run_like_the_dag``): a new target built
from the plan's JSON for every step and every try, the state carried as JSON, each step
retried as its task is (``policy.is_permanent`` decides: a permanent error fails at once),
and then the ``all_done`` teardown with the newest state, retried as ``terminate`` is. The
plan comes from ``fleet.plan_target`` (TTL, deployment, budget as in production). Moto stands
in for AWS (``fixtures_aws``); ``tests/support/fault_proxy.py`` stands in for the network and for
two things moto lacks (RunInstances' ``ClientToken`` idempotency, the SSM agent's Online
state). A SIGKILL kills a real worker process (``tests/support/ec2_step_worker.py``).

After every scenario: zero instances of the run pending or running, and every instance
that reached moto (counted by the proxy) carries the run's tags and is terminated.

Scenarios (id: fault → expected launches):

* clean: no fault, the whole sequence → 1
* prepare_throttled_and_500s: RunInstances throttled twice, then HTTP 500 once; the running
  waiter's DescribeInstances answers 500 twice (botocore retries each) → 1
* run_instances_response_lost: RunInstances reaches moto, its answer is lost; botocore
  retries with the same ClientToken → 1
* run_instances_timeout: RunInstances reaches moto, the answer comes after the read timeout → 1
* run_instances_lost_every_try: every botocore attempt of the first prepare loses its answer
  (MAX_ATTEMPTS = botocore's total attempts); the task's retry (try 2) finds the instance by
  its tags → 1
* lookup_fails_on_retry: as run_instances_lost_every_try, and the retry's tag lookup then
  fails on every botocore attempt (HTTP 500): that try refuses to launch (InstanceLookupFailed,
  a transient error), the next try finds the instance → 1, RunInstances sent only by try 1
* lookup_misses_on_retry: as run_instances_lost_every_try, and the retry's tag lookup answers
  "none" (DescribeInstances is eventually consistent: a just-launched instance may not show
  yet); the retry's RunInstances carries the run's token (the same on every try) and gets
  try 1's instance back → 1
* permanent_<code>: RunInstances answered with an AWS error code no retry can fix
  (UnauthorizedOperation, InvalidAMIID.NotFound, Unsupported, OptInRequired,
  InvalidParameterValue): prepare fails on its first try, botocore sends it once → 0
* sweeper_region_refused / sweeper_region_not_opted_in: DescribeInstances refused in one
  region (403 UnauthorizedOperation, 401 OptInRequired): the other region's expired instance
  is terminated, then SweepIncomplete names the refused region
* agent_check_refused: the SSM agent check answers UnauthorizedOperation (a permanent code):
  prepare fails on its first try and terminates what it launched → 1
* agent_check_failing: the agent check fails on two prepare tries with a code that is neither
  permanent nor retried by botocore (400 InternalFailure); each try terminates what it
  launched, the third try's instance is torn down at the end → 3
* send_command_lost: the deploy's SendCommand reaches moto, its answer is lost → 1
* poll_throttled_download_500: the sweep's GetCommandInvocation throttled twice, the
  results download answers 500 twice → 1
* terminate_refused_lost_timeout: TerminateInstances refused on the first teardown try;
  on the second its answer is lost, then comes after the read timeout (botocore retries) → 1
* sweep_config_refused: the sweep configuration is refused (a PermanentError): run_sweep is
  tried once, not retried; teardown → 1
* control_without_client_token: as run_instances_response_lost with no token at all → 2,
  both terminated (the proxy and moto catch a missing token)
* sigkill_in_launch_then_teardown: the worker is SIGKILLed after RunInstances reached moto
  and before it heard back; the all_done teardown has no state but the run id → 1
* sigkill_in_launch_then_sweeper: the same, but no teardown ever runs; the sweeper after
  the TTL terminates it → 1
* sigkill_in_sweep_then_teardown: the worker is SIGKILLed while polling its sweep command;
  teardown from the last recorded state → 1
* two_deployments: two deployments, one account, the same schedule and target name: each
  prepare launches its own instance, a teardown (even handed the other's id) and a sweeper
  pass of one never touch the other's → staging 2 (a retried prepare), production 1

Run with ``-s`` to print the table (scenario → launched → left running).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpucompare.airflow import pipeline, policy
from gpucompare.config import fleet
from gpucompare.targets import make_target, sweeper
from gpucompare.targets.base import TargetState
from gpucompare.targets.ec2.launch import Ec2Launcher
from gpucompare.targets.ec2.options import DEPLOYMENT_TAG, EXPIRES_AT_TAG
from tests.conftest import REPO_ROOT
from tests.support.ec2_support import CONN_ID, create_instance_profile, ec2_spec, publish_ami_parameter
from tests.support.fault_proxy import FaultProxy

READ_TIMEOUT_S = 2.0
#: botocore's attempts per call, the first included (``total_max_attempts``; botocore's own
#: ``max_attempts`` counts retries only, so ``max_attempts: 4`` made 5 attempts)
MAX_ATTEMPTS = 4
DEPLOYMENT = "ci-faults"
#: (step, retries) in the order the task group runs them (pipeline.target_run).
STEPS = (("prepare", 3), ("deploy", policy.HOLDING_RETRIES), ("score_sweep", 1),
         ("collect", policy.HOLDING_RETRIES))
TEARDOWN_RETRIES = 4
PROFILE = fleet.SweepProfile(name="tiny", networks=("alexnet",), batch_sizes=(1,), modes=("score",),
                             devices=("cpu",), warmup=1, batches=1, repeats=1, timeout_s=60)
ROOT = REPO_ROOT


@dataclass
class Rig:
    proxy: FaultProxy
    aws_client: Any
    bucket: str
    profile: str
    tmp: Path

    def plan(self, name: str, dag_run_id: str, **options: Any) -> dict[str, Any]:
        spec = ec2_spec(self.profile, self.bucket, **options).to_dict()
        spec["name"] = name
        return fleet.plan_target(spec, PROFILE, dag_run_id)


@pytest.fixture
def rig(aws_endpoint: str, aws_client: Any, monkeypatch: pytest.MonkeyPatch, s3_bucket: str,
        tmp_path: Path) -> Any:
    """The account (profile, AMI parameter, bucket) and the Airflow connection aimed at a fresh
    proxy in front of moto, with short client timeouts and botocore's standard retries."""
    proxy = FaultProxy(aws_endpoint, read_timeout_s=READ_TIMEOUT_S)
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps({
        "conn_type": "aws", "login": "testing", "password": "testing",
        "extra": {"endpoint_url": proxy.url, "region_name": "us-east-1",
                  "config_kwargs": {"read_timeout": READ_TIMEOUT_S, "connect_timeout": READ_TIMEOUT_S,
                                    "retries": {"mode": "standard", "total_max_attempts": MAX_ATTEMPTS}}},
    }))
    monkeypatch.setenv("GPUCOMPARE_DEPLOYMENT", DEPLOYMENT)
    try:
        yield Rig(proxy, aws_client, s3_bucket, create_instance_profile(aws_client),
                  tmp_path)
    finally:
        proxy.close()


@pytest.fixture(autouse=True, scope="module")
def _ami(aws_endpoint: str) -> None:
    import boto3

    publish_ami_parameter(lambda service, region_name="us-east-1": boto3.client(
        service, region_name=region_name, endpoint_url=aws_endpoint))


@dataclass
class Outcome:
    failed_step: str | None = None
    tries: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    teardown_tries: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


def _json(data: Any) -> Any:
    return json.loads(json.dumps(data))


def _newest_state(plan: dict[str, Any], xcom: dict[str, Any]) -> TargetState:
    for step in pipeline.STATE_STEPS:
        if xcom.get(step):
            return TargetState.from_dict(_json(xcom[step]))
    return TargetState(spec=plan["spec"], run_id=plan["run_id"])


def teardown_like_the_dag(plan: dict[str, Any], xcom: dict[str, Any], outcome: Outcome) -> None:
    """``terminate``: all_done, the newest state (or a bare one), retried as the task is."""
    for try_number in range(1, TEARDOWN_RETRIES + 2):
        outcome.teardown_tries = try_number
        try:
            make_target(_json(plan["spec"])).teardown(_newest_state(plan, xcom))
            return
        except Exception as exc:
            outcome.errors.append(f"teardown try {try_number}: {type(exc).__name__}: {exc}"[:300])
    raise AssertionError(f"teardown failed on every try: {outcome.errors}")


def run_like_the_dag(rig: Rig, plan: dict[str, Any], until: str = "collect") -> Outcome:
    """prepare → deploy → score_sweep → collect (→ delete_run_objects, as ingest does), each try a new
    target from JSON, then the all_done teardown (see the module docstring). ``until`` ends
    the sequence early (a scenario about launching needs no sweep: it keeps the module fast)."""
    xcom: dict[str, Any] = {}
    outcome = Outcome()
    upstream = {"deploy": "prepare", "score_sweep": "deploy", "collect": "score_sweep"}
    for step, retries in STEPS:
        for try_number in range(1, retries + 2):
            outcome.tries[step] = try_number
            started = time.monotonic()
            target = make_target(_json(plan["spec"]))
            state = TargetState.from_dict(_json(xcom[upstream[step]])) if step in upstream else None
            try:
                if step == "prepare":
                    done = target.prepare(plan["run_id"])
                elif step == "deploy":
                    done = target.deploy(state)
                elif step == "score_sweep":
                    sweep = plan["sweeps"]["score"]
                    done = target.run_sweep(state, sweep["config"], timeout_s=sweep["timeout_s"])
                    # what the instance's `aws s3 cp` leaves (moto runs no command)
                    bucket, key = done.remote_results[len("s3://"):].split("/", 1)
                    rig.aws_client("s3").put_object(Bucket=bucket, Key=key, Body=b'{"ok": 1}\n')
                else:
                    target.collect(state, str(rig.tmp / f"{plan['run_id'][-8:]}.jsonl"))
                    target.delete_run_objects(plan["run_id"])
                    done = state
                xcom[step] = _json(done.to_dict())
                outcome.seconds[step] = round(time.monotonic() - started, 2)
                break
            except Exception as exc:
                outcome.errors.append(f"{step} try {try_number}: {type(exc).__name__}: {exc}"[:300])
                if policy.is_permanent(exc) or try_number == retries + 1:
                    outcome.failed_step = step
                    break
        if outcome.failed_step or step == until:
            break
    started = time.monotonic()
    teardown_like_the_dag(plan, xcom, outcome)
    outcome.seconds["teardown"] = round(time.monotonic() - started, 2)
    print(f"\nSTEP SECONDS {outcome.seconds}")
    return outcome


def instances_of(rig: Rig, run_id: str) -> list[dict[str, Any]]:
    """Every instance moto holds for the run (any state, terminated included)."""
    reservations = rig.aws_client("ec2").describe_instances(
        Filters=[{"Name": "tag:gpucompare:run-id", "Values": [run_id]}])["Reservations"]
    return [instance for reservation in reservations for instance in reservation["Instances"]]


def account(rig: Rig, run_id: str, scenario: str, launches_before: int = 0) -> tuple[int, int]:
    """(launched, left running) of the run; every launch the proxy saw must be one of them."""
    instances = instances_of(rig, run_id)
    launched = len(instances)
    alive = [i["InstanceId"] for i in instances if i["State"]["Name"] in ("pending", "running", "stopping",
                                                                          "stopped")]
    assert rig.proxy.launches - launches_before == launched, (scenario, rig.proxy.launches, launched)
    for instance in instances:
        tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
        assert tags[DEPLOYMENT_TAG] == DEPLOYMENT and tags[EXPIRES_AT_TAG]
    print(f"\nTABLE | {scenario} | launched {launched} | left running {len(alive)}")
    return launched, len(alive)


# scenario id → (faults as (operation, kind, kwargs), expected launches, last step before teardown)
SCENARIOS: dict[str, tuple[list[tuple[str, str, dict[str, Any]]], int, str]] = {
    "clean": ([], 1, "collect"),
    "prepare_throttled_and_500s": ([("RunInstances", "throttle", {"times": 2}),
                                    ("RunInstances", "error500", {"after": 2}),
                                    ("DescribeInstances", "error500", {"times": 2, "after": 1})],
                                   1, "prepare"),
    "run_instances_response_lost": ([("RunInstances", "lose", {})], 1, "prepare"),
    "run_instances_timeout": ([("RunInstances", "timeout", {})], 1, "prepare"),
    "run_instances_lost_every_try": ([("RunInstances", "lose", {"times": MAX_ATTEMPTS})], 1, "prepare"),
    # DescribeInstances #1 is try 1's lookup; #2..#5 are try 2's (each botocore attempt)
    "lookup_fails_on_retry": ([("RunInstances", "lose", {"times": MAX_ATTEMPTS}),
                               ("DescribeInstances", "error500", {"times": MAX_ATTEMPTS, "after": 1})],
                              1, "prepare"),
    # a code no retry can fix fails prepare at once (issue 19); a 400 botocore does not retry and
    # that is not permanent is retried by the task, each try terminating what it launched
    # DescribeInstances #2 (try 2's lookup) does not see the instance try 1 launched yet (an
    # eventually consistent read): try 2 sends RunInstances with the run's token and gets it back
    "lookup_misses_on_retry": ([("RunInstances", "lose", {"times": MAX_ATTEMPTS}),
                                ("DescribeInstances", "empty", {"after": 1})], 1, "prepare"),
    "agent_check_refused": ([("DescribeInstanceInformation", "refuse", {"times": 2})], 1, "prepare"),
    "agent_check_failing": ([("DescribeInstanceInformation", "refuse",
                              {"times": 2, "code": "InternalFailure", "status": 400})], 3, "prepare"),
    "send_command_lost": ([("SendCommand", "lose", {})], 1, "deploy"),
    "poll_throttled_download_500": ([("GetCommandInvocation", "throttle", {"times": 2, "after": 1}),
                                     ("S3:GET", "error500", {"times": 2, "after": 2})], 1, "collect"),
    "terminate_refused_lost_timeout": ([("TerminateInstances", "refuse", {}),
                                        ("TerminateInstances", "lose", {"after": 1}),
                                        ("TerminateInstances", "timeout", {"after": 2})], 1, "prepare"),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_launched_instance_is_terminated_whatever_the_network_does(rig: Rig, scenario: str) -> None:
    faults, expected, until = SCENARIOS[scenario]
    plan = rig.plan("aws-test", f"scheduled__2026-11-30T02:00:00+00:00-{scenario}")
    for operation, kind, kwargs in faults:
        rig.proxy.add(operation, kind, **kwargs)
    outcome = run_like_the_dag(rig, plan, until)
    launched, left = account(rig, plan["run_id"], scenario)
    assert (launched, left) == (expected, 0), (scenario, outcome)
    if scenario == "agent_check_refused":
        assert outcome.failed_step == "prepare" and outcome.tries["prepare"] == 1, outcome.errors
    elif scenario == "agent_check_failing":
        assert outcome.failed_step is None and outcome.tries["prepare"] == 3
    elif scenario == "run_instances_lost_every_try":
        # the first try lost every attempt's answer: the Airflow retry (try 2) found the instance
        assert outcome.failed_step is None and outcome.tries["prepare"] == 2, outcome.errors
        assert rig.proxy.count("RunInstances") == MAX_ATTEMPTS
    elif scenario == "lookup_fails_on_retry":
        assert outcome.failed_step is None and outcome.tries["prepare"] == 3, outcome.errors
        assert outcome.errors[1].startswith("prepare try 2: InstanceLookupFailed: cannot tell whether run")
        assert rig.proxy.count("RunInstances") == MAX_ATTEMPTS  # try 2 and 3 sent none
    elif scenario == "lookup_misses_on_retry":
        assert outcome.failed_step is None and outcome.tries["prepare"] == 2, outcome.errors
        assert rig.proxy.count("RunInstances") == MAX_ATTEMPTS + 1  # try 2 sent one …
        assert rig.proxy.launches == 1  # … with try 1's token: the same instance came back
    elif scenario == "terminate_refused_lost_timeout":
        assert outcome.failed_step is None and outcome.teardown_tries == 2
    else:
        assert outcome.failed_step is None, outcome.errors
    if scenario == "run_instances_response_lost":
        # the retried call carried the first one's token: the proxy (as AWS) replayed the answer
        assert rig.proxy.count("RunInstances") == 2 and rig.proxy.launches == 1


def test_a_refused_sweep_config_fails_at_once_and_the_instance_goes(rig: Rig) -> None:
    """A PermanentError (the worker's parser refuses the config) is not retried: the paid
    instance is not kept idle for a retry that would fail the same way."""
    plan = rig.plan("aws-test", "scheduled__2026-11-30T02:00:00+00:00-refused")
    # the plan's own copy of the sweep (the cost guard's copy in the options stays valid, so
    # prepare passes and the refusal happens where a bad sweep would meet the instance)
    config = json.loads(json.dumps(plan["sweeps"]["score"]["config"]))
    config["matrix"][0]["networks"] = ["alexnet; rm -rf /"]
    plan["sweeps"]["score"]["config"] = config
    outcome = run_like_the_dag(rig, plan)
    assert outcome.failed_step == "score_sweep" and outcome.tries["score_sweep"] == 1
    assert "networks" in outcome.errors[-1]
    assert account(rig, plan["run_id"], "sweep_config_refused") == (1, 0)
    assert rig.proxy.count("SendCommand") == 1  # the deploy's only: the sweep was never sent


def test_without_a_client_token_a_lost_answer_launches_twice(rig: Rig,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The control of run_instances_response_lost: the same fault with no token at all (ours
    removed, and botocore's own per-call token generator left out of the new sessions)
    launches a second paid instance, so the proxy and moto do catch a missing token; teardown
    still finds both by their tags."""
    import botocore.handlers

    monkeypatch.setattr(botocore.handlers, "BUILTIN_HANDLERS", [
        entry for entry in botocore.handlers.BUILTIN_HANDLERS
        if entry[1] is not botocore.handlers.generate_idempotent_uuid])
    original = Ec2Launcher.run_instances_request

    def without_token(self: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        request = original(self, *args, **kwargs)
        request.pop("ClientToken")
        return request

    monkeypatch.setattr(Ec2Launcher, "run_instances_request", without_token)
    plan = rig.plan("aws-test", "scheduled__2026-11-30T02:00:00+00:00-no-token")
    rig.proxy.add("RunInstances", "lose")
    run_like_the_dag(rig, plan, "prepare")
    assert account(rig, plan["run_id"], "control_without_client_token") == (2, 0)
    assert rig.proxy.count("RunInstances") == 2


def _worker(rig: Rig, plan: dict[str, Any], state_file: Path, *steps: str) -> subprocess.Popen:
    plan_file = rig.tmp / "plan.json"
    plan_file.write_text(json.dumps(plan))
    env = {**os.environ, "PYTHONPATH": ""}
    step_worker = ROOT / "tests" / "support" / "ec2_step_worker.py"
    return subprocess.Popen([sys.executable, str(step_worker), str(plan_file),
                             str(state_file), *steps], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def _wait_for(condition: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def _sigkill(process: subprocess.Popen) -> None:
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL


@pytest.mark.parametrize("after", ["teardown", "sweeper"])
def test_a_worker_killed_mid_launch_leaves_nothing_running(rig: Rig, after: str) -> None:
    """SIGKILL after RunInstances reached moto and before the answer came back: the run id is
    all that is left. Either the all_done teardown finds the instance by its tags, or (no
    teardown at all) the sweeper does once the TTL has passed."""
    plan = rig.plan("aws-test", f"scheduled__2026-11-30T02:00:00+00:00-kill-launch-{after}")
    rig.proxy.add("RunInstances", "slow", seconds=30)
    state_file = rig.tmp / "state.json"
    worker = _worker(rig, plan, state_file, "prepare")
    _wait_for(lambda: rig.proxy.launches >= 1)
    _sigkill(worker)
    assert not state_file.exists()
    instances = instances_of(rig, plan["run_id"])
    assert len(instances) == 1 and instances[0]["State"]["Name"] in ("pending", "running")
    if after == "teardown":
        teardown_like_the_dag(plan, {}, Outcome())
    else:
        expires = datetime.fromisoformat(
            {t["Key"]: t["Value"] for t in instances[0]["Tags"]}[EXPIRES_AT_TAG].replace("Z", "+00:00"))
        assert expires - datetime.now(UTC) >= timedelta(minutes=plan["spec"]["options"]["ttl_minutes"] - 2)
        early = sweeper.sweep_expired_instances(["us-east-1"], aws_conn_id=CONN_ID)
        assert instances[0]["InstanceId"] not in {item.instance_id for item in early}
        swept = sweeper.sweep_expired_instances(["us-east-1"], aws_conn_id=CONN_ID,
                                                now=expires + timedelta(minutes=1), wait=True,
                                                poll_interval_s=0.2)
        assert instances[0]["InstanceId"] in {item.instance_id for item in swept}
    assert account(rig, plan["run_id"], f"sigkill_in_launch_then_{after}") == (1, 0)


def test_a_worker_killed_mid_sweep_is_torn_down_from_its_last_state(rig: Rig) -> None:
    """SIGKILL while the worker polls its sweep command (the answer held by the proxy): the
    teardown reads the state the last finished step recorded (deploy's) and terminates."""
    plan = rig.plan("aws-test", "scheduled__2026-11-30T02:00:00+00:00-kill-sweep")
    state_file = rig.tmp / "state.json"
    rig.proxy.add("GetCommandInvocation", "hold", seconds=60, after=1)  # deploy's poll passes
    worker = _worker(rig, plan, state_file, "prepare", "deploy", "score_sweep")
    _wait_for(lambda: rig.proxy.count("GetCommandInvocation") >= 2 and state_file.exists())
    _sigkill(worker)
    state = json.loads(state_file.read_text())
    assert state["workdir"] and state["resource_id"]
    teardown_like_the_dag(plan, {"deploy": state}, Outcome())
    assert account(rig, plan["run_id"], "sigkill_in_sweep_then_teardown") == (1, 0)


def test_two_deployments_on_one_schedule_never_touch_each_other(rig: Rig,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Staging and production in one account, same DAG run id and target name: distinct run
    ids and instances; one's teardown and sweeper leave the other's instance running. The
    names are stated (GPUCOMPARE_DEPLOYMENT, required): the same database URI in both (the
    shipped compose file differed only by the password) no longer makes them one deployment,
    and without a name nothing is planned."""
    from gpucompare.errors import PermanentError

    dag_run_id = "scheduled__2026-11-30T02:00:00+00:00"
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://airflow:same@postgres/airflow")
    monkeypatch.delenv("GPUCOMPARE_DEPLOYMENT")
    with pytest.raises(PermanentError, match="GPUCOMPARE_DEPLOYMENT"):
        rig.plan("aws-test", dag_run_id)
    plans = {}
    for deployment in ("staging", "production"):
        monkeypatch.setenv("GPUCOMPARE_DEPLOYMENT", deployment)
        plans[deployment] = rig.plan("aws-test", dag_run_id)
    assert plans["staging"]["run_id"] != plans["production"]["run_id"]
    states = {name: make_target(_json(plan["spec"])).prepare(plan["run_id"])
              for name, plan in plans.items()}
    assert states["staging"].resource_id != states["production"].resource_id

    def alive(name: str) -> bool:
        described = rig.aws_client("ec2").describe_instances(InstanceIds=[states[name].resource_id])
        return described["Reservations"][0]["Instances"][0]["State"]["Name"] in ("pending", "running")

    # staging's teardown, even handed production's instance id in a confused state
    confused = TargetState(spec=plans["staging"]["spec"], run_id=plans["staging"]["run_id"],
                           resource_id=states["production"].resource_id)
    make_target(_json(plans["staging"]["spec"])).teardown(confused)
    assert not alive("staging") and alive("production")
    # staging's sweeper, long after every TTL: production's instance is not its own
    later = datetime.now(UTC) + timedelta(days=2)
    swept = sweeper.sweep_expired_instances(["us-east-1"], aws_conn_id=CONN_ID, deployment="staging",
                                            now=later)
    assert states["production"].resource_id not in {item.instance_id for item in swept}
    assert alive("production")
    # a retried prepare of staging launches its own, never reuses production's
    again = make_target(_json(plans["staging"]["spec"])).prepare(plans["staging"]["run_id"])
    assert again.resource_id not in (states["production"].resource_id, states["staging"].resource_id)
    make_target(_json(plans["staging"]["spec"])).teardown(again)
    make_target(_json(plans["production"]["spec"])).teardown(states["production"])
    for name, plan in plans.items():
        monkeypatch.setenv("GPUCOMPARE_DEPLOYMENT", name)
        instances = instances_of(rig, plan["run_id"])
        left = [i for i in instances if i["State"]["Name"] in ("pending", "running")]
        print(f"\nTABLE | two_deployments ({name}) | launched {len(instances)} | left running {len(left)}")
        assert left == []


#: (error code, HTTP status) AWS answers RunInstances with when no retry can fix the request
PERMANENT_REFUSALS = [("UnauthorizedOperation", 403), ("InvalidAMIID.NotFound", 400), ("Unsupported", 400),
                      ("OptInRequired", 401), ("InvalidParameterValue", 400)]


@pytest.mark.parametrize(("code", "status"), PERMANENT_REFUSALS, ids=[c for c, _ in PERMANENT_REFUSALS])
def test_a_permanent_aws_error_fails_prepare_on_its_first_try(rig: Rig, code: str, status: int) -> None:
    """An error code of ``aws_errors.PERMANENT_ERROR_CODES`` (classified by code, never by
    message text): the task is not retried, botocore sends the call once, nothing launches."""
    plan = rig.plan("aws-test", f"scheduled__2026-11-30T02:00:00+00:00-permanent-{code}")
    rig.proxy.add("RunInstances", "refuse", times=100, code=code, status=status)
    outcome = run_like_the_dag(rig, plan, "prepare")
    assert outcome.failed_step == "prepare" and outcome.tries["prepare"] == 1, outcome.errors
    assert code in outcome.errors[0]
    assert rig.proxy.count("RunInstances") == 1
    assert account(rig, plan["run_id"], f"permanent_{code}") == (0, 0)


def test_a_missing_ami_fails_at_once(rig: Rig) -> None:
    """DescribeImages answers InvalidAMIID.NotFound (the AMI was deregistered): no retry."""
    plan = rig.plan("aws-test", "scheduled__2026-11-30T02:00:00+00:00-no-ami")
    rig.proxy.add("DescribeImages", "refuse", times=100, code="InvalidAMIID.NotFound", status=400)
    outcome = run_like_the_dag(rig, plan, "prepare")
    assert outcome.failed_step == "prepare" and outcome.tries["prepare"] == 1, outcome.errors
    assert rig.proxy.count("RunInstances") == 0


def _tagged(rig: Rig, region: str, expires_at: datetime) -> str:
    client = rig.aws_client("ec2", region_name=region)
    image_id = client.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = [{"Key": DEPLOYMENT_TAG, "Value": DEPLOYMENT},
            {"Key": "gpucompare:run-id", "Value": f"left-{region}"},
            {"Key": EXPIRES_AT_TAG, "Value": expires_at.strftime("%Y-%m-%dT%H:%M:%SZ")}]
    return client.run_instances(ImageId=image_id, MinCount=1, MaxCount=1, InstanceType="g4dn.xlarge",
                                TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
                                )["Instances"][0]["InstanceId"]


def _state_of(rig: Rig, region: str, instance_id: str) -> str:
    described = rig.aws_client("ec2", region_name=region).describe_instances(InstanceIds=[instance_id])
    return described["Reservations"][0]["Instances"][0]["State"]["Name"]


@pytest.mark.parametrize(("code", "status"), [("UnauthorizedOperation", 403), ("OptInRequired", 401)],
                         ids=["sweeper_region_refused", "sweeper_region_not_opted_in"])
def test_a_region_the_sweeper_cannot_read_does_not_stop_the_others(rig: Rig, code: str, status: int) -> None:
    """DescribeInstances refused in eu-west-3 (an SCP deny, or a region not opted in), listed
    first: us-east-1's expired instance is still terminated, then the sweep fails naming
    eu-west-3 and the code."""
    expired = datetime.now(UTC) - timedelta(minutes=10)
    good = _tagged(rig, "us-east-1", expired)
    refused = _tagged(rig, "eu-west-3", expired)
    rig.proxy.add("DescribeInstances", "refuse", times=100, region="eu-west-3", code=code, status=status)
    with pytest.raises(sweeper.SweepIncomplete) as incomplete:
        sweeper.sweep_expired_instances(["eu-west-3", "us-east-1"], aws_conn_id=CONN_ID, wait=True,
                                        poll_interval_s=0.2)
    assert [item.instance_id for item in incomplete.value.swept] == [good]
    assert _state_of(rig, "us-east-1", good) == "terminated"
    assert _state_of(rig, "eu-west-3", refused) == "running"  # never swept: someone must look
    assert len(incomplete.value.unreadable) == 1 and "region eu-west-3" in incomplete.value.unreadable[0]
    assert code in str(incomplete.value) and incomplete.value.failures == []
    print(f"\nTABLE | sweeper {code} in eu-west-3 | swept {len(incomplete.value.swept)} in us-east-1 | "
          f"DescribeInstances sent {rig.proxy.count('DescribeInstances')}")
    rig.aws_client("ec2", region_name="eu-west-3").terminate_instances(InstanceIds=[refused])
