"""Multi-node training with MXNet's parameter server, for real, on three loopback "hosts".

Three OpenSSH servers on 127.0.0.2, 127.0.0.3 and 127.0.0.4 (``fixtures_sshd``) stand for
three rented machines: each is an ``ssh`` target with its own remote directory, reached
through its own Airflow connection with a verified host key, and the parameter-server roles
(scheduler, server, workers) are started over those connections with ``DMLC_NODE_HOST`` set
to the host's address, so MXNet's ps-lite really talks between the three addresses. What
stands in: the three hosts share this machine's two cores and file system, and the devices
are CPU contexts (``cpu:0``, ``cpu:1``) instead of GPUs. The network is GoogleNet at one
image per device and one timed batch (the published scaling curve's network, and on the CPU
the quickest to go through dist_sync here: 7 M parameters to push and pull).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from gpucompare.lake.ingest import RunContext
from gpucompare.lake.tables import open_lake
from gpucompare.scaling import launcher as distributed
from gpucompare.scaling import run as scaling_run
from gpucompare.scaling.launcher import (
    DistributedRunError,
    ParameterServerLauncher,
    ScalingPoint,
    marker_for,
)
from gpucompare.scaling.run import measure_and_ingest
from gpucompare.targets import make_target
from gpucompare.targets.base import TargetSpec
from gpucompare.targets.ec2.channel import SSMChannel
from gpucompare.targets.ec2.ssm import SsmRunner
from gpucompare.targets.ssh.channel import SSHChannel
from tests.conftest import BENCH_PYTHON
from tests.support.fixtures_airflow import parse_again
from tests.support.proc_helpers import command_line, process_ids
from tests.support.target_helpers import processes_end

pytestmark = pytest.mark.slow

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
TINY = {"network": "googlenet", "scaling": "weak", "batch_size": 1, "warmup": 1, "batches": 1, "repeats": 1,
        "servers": 1, "kvstore": "dist_sync", "timeout_s": 150.0}


def marked_processes(marker: str) -> list[tuple[int, str]]:
    """(pid, command line) of every process on this machine whose environment carries the
    point's marker: every host of the test is this machine, so this sees all three."""
    wanted = f"{distributed.MARKER_VARIABLE}={marker}/".encode()
    found = []
    for pid in process_ids():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(v.startswith(wanted) for v in environ):
            found.append((pid, command_line(pid)))
    return found


def new_run_id() -> str:
    return f"scaling-{os.getpid()}-{time.time_ns() % 10**10}"


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """Three ssh targets, prepared and deployed (the worker code uploaded to each host); shared
    by the tests of this module that launch points on them, each under a run id of its own."""
    from tests.support.fixtures_sshd import start_sshd

    base = tmp_path_factory.mktemp("scaling-hosts")
    servers, targets, states = [], [], []
    with pytest.MonkeyPatch.context() as patch:
        try:
            for index, host in enumerate(HOSTS):
                server = start_sshd(base / f"sshd{index}", host=host, conn_id=f"dist_node{index}")
                servers.append(server)
                patch.setenv(server.conn_env_var, server.connection_json())
                options = {"ssh_conn_id": server.conn_id, "remote_dir": str(base / f"host{index}"),
                           "python": str(BENCH_PYTHON), "poll_interval_s": 0.2, "retry_backoff_s": 0.2,
                           "kill_grace_s": 3}
                spec = TargetSpec(name=f"node{index}", kind="ssh", provider="loopback",
                                  instance_type="cpu-shared", options=options)
                target = make_target(spec, line_sink=lambda line: None)
                targets.append(target)
                states.append(target.deploy(target.prepare(new_run_id())))
            yield [SSHChannel(t, s) for t, s in zip(targets, states, strict=True)]
        finally:
            for target, state in zip(targets, states, strict=False):
                target.teardown(state)
            for server in servers:
                server.stop()


def test_scaling_run_over_three_hosts_reaches_the_scaling_report(group, tmp_path):
    channels = group
    run_id = new_run_id()
    assert [c.address for c in channels] == list(HOSTS)
    lines: list[str] = []
    launcher = ParameterServerLauncher(channels, run_id=run_id, poll_interval_s=0.5, kill_grace_s=3,
                                       line_sink=lines.append)
    points = [
        ScalingPoint(nodes=1, devices=("cpu:0",), **TINY),               # the 1-device baseline
        ScalingPoint(nodes=2, devices=("cpu:0",), **TINY),               # 2 devices on 2 hosts
        ScalingPoint(nodes=2, devices=("cpu:0", "cpu:1"), **TINY),       # 4 devices on 2 hosts
    ]
    lake_uri = str(tmp_path / "lake")
    context = RunContext(provider="loopback", instance_type="cpu-shared", target="ssh", dag_run_id=run_id)
    started = time.monotonic()
    written = measure_and_ingest(launcher, points, results_path=str(tmp_path / "scaling.jsonl"),
                                 lake_uri=lake_uri, context=context)
    assert written
    assert time.monotonic() - started < 240

    records = [json.loads(line) for line in (tmp_path / "scaling.jsonl").read_text().splitlines()]
    single, two, four = records
    assert (single["num_nodes"], single["gpu_count"], single["kvstore"]) == (1, 1, "device")
    assert single["per_worker_images_per_sec"] == []
    for record, devices in ((two, 2), (four, 4)):
        assert record["kvstore"] == "dist_sync"
        assert (record["num_nodes"], record["gpu_count"]) == (2, devices)
        assert record["batch_size"] == devices  # weak: one image per device held
        assert record["scaling"] == "weak"
        assert len(record["per_worker_images_per_sec"]) == 2
        assert record["images_per_sec"] == pytest.approx(sum(record["per_worker_images_per_sec"]))
    # the scheduler ran on the third host, the workers on the first two
    assert any(f"scheduler {HOSTS[2]}:" in line for line in lines), lines

    # nothing of any point is left on any host
    for point in points:
        assert marked_processes(marker_for(run_id, point)) == []

    # the real lake → report path: rows for 1, 2 and 4 devices with speedup and efficiency
    from gpucompare.reports.build import build_reports
    from gpucompare.reports.inputs import ReportInputs

    report = build_reports(ReportInputs.from_lake(lake_uri)).tables["scaling"].to_pylist()
    ours = {r["gpu_count"]: r for r in report
            if r["origin"] == "measured" and r["network"] == "googlenet" and r["scaling"] == "weak"}
    assert sorted(ours) == [1, 2, 4]
    baseline = single["images_per_sec"]
    assert ours[1]["speedup"] == pytest.approx(1.0)
    for record in (two, four):
        row = ours[record["gpu_count"]]
        assert row["num_nodes"] == 2
        assert row["speedup"] == pytest.approx(record["images_per_sec"] / baseline)
        assert row["efficiency"] == pytest.approx(row["speedup"] / record["gpu_count"])
    # and the report page draws them: speedup and efficiency against devices, with the ideal line
    from gpucompare.reports import formatting
    from gpucompare.reports.page import render_chart
    from gpucompare.reports.page_rows import chart_rows
    from gpucompare.reports.page_scaling import scaling_figures

    scaling = chart_rows(report, ("speedup", "efficiency"))
    figures = scaling_figures(scaling, formatting.Colours(), "efficiency")
    charts = [render_chart(figure.chart) for figure in figures]
    [efficiency_chart] = [c for c in charts if "googlenet" in c and "efficiency" in c]
    assert "ideal (linear)" in efficiency_chart
    assert f"4 → {ours[4]['efficiency']:,.4g}</title>" in efficiency_chart


def _kill_worker_when_training(marker: str, host: str, killed: list[int], stop: threading.Event) -> None:
    """SIGKILL the worker process on ``host`` (``bench_tasks train``) once its measuring
    process runs: the way a host crash or an OOM kill ends a worker mid-run."""
    while not stop.is_set():
        procs = marked_processes(marker)
        runner_up = any("_runner" in cmd for _pid, cmd in procs)
        for pid, cmd in procs:
            environ = Path(f"/proc/{pid}/environ").read_bytes() if Path(f"/proc/{pid}").exists() else b""
            if (runner_up and "bench_tasks train" in cmd and f"DMLC_NODE_HOST={host}".encode() in environ):
                time.sleep(3)  # let it get into the parameter-server steps
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
        time.sleep(0.3)


def test_a_worker_killed_mid_run_fails_clearly_and_leaves_nothing(group, tmp_path):
    channels = group
    run_id = new_run_id()
    from gpucompare.prices.published import import_published

    lake_uri = str(tmp_path / "lake")
    import_published(open_lake(lake_uri))  # the lake holds something before the run

    def snapshot() -> dict[str, bytes]:
        files = (p for p in Path(lake_uri).rglob("*") if p.is_file())
        return {str(p.relative_to(lake_uri)): p.read_bytes() for p in files}

    before = snapshot()
    point = ScalingPoint(nodes=2, devices=("cpu:0",), **{**TINY, "batches": 500, "timeout_s": 120.0})
    marker = marker_for(run_id, point)
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_worker_when_training, args=(marker, HOSTS[1], killed, stop))
    killer.start()
    launcher = ParameterServerLauncher(channels, run_id=run_id, poll_interval_s=0.5, kill_grace_s=3)
    context = RunContext(provider="loopback", instance_type="cpu-shared", target="ssh", dag_run_id=run_id)
    started = time.monotonic()
    try:
        with pytest.raises(DistributedRunError) as failure:
            measure_and_ingest(launcher, [point], results_path=str(tmp_path / "scaling.jsonl"),
                               lake_uri=lake_uri, context=context)
    finally:
        stop.set()
        killer.join()
    elapsed = time.monotonic() - started
    assert killed, "the worker was never seen running"
    message = str(failure.value)
    assert "worker-1" in message and HOSTS[1] in message and "137" in message, message
    assert elapsed < point.timeout_s
    assert marked_processes(marker) == []
    processes_end(marker)  # the role scripts (their paths name the marker) too
    assert not (tmp_path / "scaling.jsonl").exists()
    assert snapshot() == before


@pytest.mark.dag
def test_the_nightly_dag_runs_a_scaling_group_of_three_hosts_into_the_lake(
        sshd_factory, tmp_path, write_fleet, gpucompare_dirs, run_dag, dagbag, monkeypatch):
    """The fleet file's scaling group through the real nightly DAG (``dag.test``): hosts
    prepared and deployed, a 2-node dist_sync point, ingest, every host torn down."""
    targets = []
    for index, host in enumerate(HOSTS):
        server = sshd_factory(host=host, conn_id=f"dag_node{index}")
        options = {"ssh_conn_id": server.conn_id, "remote_dir": str(tmp_path / f"host{index}"),
                   "python": str(BENCH_PYTHON), "poll_interval_s": 0.2}
        targets.append({"name": f"node{index}", "kind": "ssh", "provider": "loopback",
                        "instance_type": "cpu-shared", "profile": "tiny", "enabled": False,
                        "options": options})
    write_fleet({
        "max_instances": 3,  # the group takes a pool slot per host
        "profiles": {"tiny": {"networks": ["alexnet"], "batch_sizes": [1], "modes": ["score"]}},
        "targets": targets,
        "scaling_profiles": {"loopback": {
            "networks": ["googlenet"], "scaling": ["weak"], "per_device_batch": 1, "servers": 1,
            "points": [{"nodes": 2, "devices_per_node": 1}], "warmup": 1, "batches": 1, "repeats": 1,
            "timeout_s": 150}},
        "scaling_groups": [{"name": "loopback-trio", "targets": ["node0", "node1", "node2"],
                            "profile": "loopback"}],
    })
    parse_again(dagbag, "gpucompare_nightly", monkeypatch)  # the group's pool slots: one per host
    assert dagbag.dags["gpucompare_nightly"].get_task("scaling_group").pool_slots == 3
    result = run_dag("gpucompare_nightly")
    assert result.task_states("scaling_group") == ["success"], result.states
    rows = open_lake(str(gpucompare_dirs.lake)).results_table().to_pylist()
    assert [(r["num_nodes"], r["gpu_count"], r["kvstore"], r["target"]) for r in rows] == [
        (2, 2, "dist_sync", "ssh")]
    assert rows[0]["source"] == "gpucompare scaling group loopback-trio"
    assert len(rows[0]["per_worker_images_per_sec"]) == 2
    run_dirs = [p for p in tmp_path.glob("host*/runs/*") if p.is_dir()]
    assert run_dirs  # the hosts were used …
    point = next(p for p in tmp_path.glob("host*/runs/*/dist-*"))
    assert marked_processes(point.name.removeprefix("dist-")) == []  # … and left clean


# -- EC2 hosts: the same job through SSM Run Command ---------------------------------------------

def _ssm_hosts(aws_client, tmp_path, addresses=None):
    """Three instances in moto's EC2 and a channel to each through moto's SSM. Moto records
    what is sent but runs nothing; the tests read the recorded commands back."""
    ec2 = aws_client("ec2")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    instances = ec2.run_instances(ImageId=image, MinCount=3, MaxCount=3,
                                  InstanceType="g4dn.xlarge")["Instances"]
    channels = []
    for index, instance in enumerate(instances):
        address = addresses[index] if addresses else instance["PrivateIpAddress"]
        channels.append(SSMChannel(
            runner=SsmRunner(aws_client("ssm"), instance["InstanceId"], poll_interval_s=0.05),
            address=address, python=str(BENCH_PYTHON),
            code_dir=str(Path(distributed.__file__).resolve().parents[3]),
            run_dir=str(tmp_path / f"instance{index}")))
    return channels


def _sent(aws_client, channel) -> list[list[str]]:
    # by the comment: moto's list_commands also lists a command under instances it was not sent to
    commands = [c for c in aws_client("ssm").list_commands()["Commands"]
                if c["Comment"].endswith(f" on {channel.instance_id}")]
    return [c["Parameters"]["commands"] for c in sorted(commands, key=lambda c: c["RequestedDateTime"])]


def test_an_ssm_probe_that_fails_still_stops_the_point_on_every_instance(aws_client, tmp_path):
    hosts = _ssm_hosts(aws_client, tmp_path)
    point = ScalingPoint(nodes=2, devices=("gpu:0",), **{**TINY, "kvstore": "dist_device_sync"})
    launcher = ParameterServerLauncher(hosts, run_id="ssm-run", poll_interval_s=0.05, kill_grace_s=1)
    with pytest.raises(DistributedRunError, match=f"{hosts[2].instance_id}.*no free port"):
        launcher.run_point(point)
    marker = marker_for("ssm-run", point)
    for index, host in enumerate(hosts):
        sent = _sent(aws_client, host)
        stops = [c for c in sent if any(f"GPUCOMPARE_DIST={marker}/" in line for line in c)]
        assert len(stops) == 2  # before the point (leftovers of an earlier attempt) and in the finally
        probes = [c for c in sent if any("socket" in line for line in c)]
        assert len(probes) == (1 if index == 2 else 0)  # the scheduler's host only
        if probes:
            assert host.address in probes[0][0]


@pytest.mark.slow
def test_the_commands_sent_through_ssm_run_a_real_dist_sync_job(aws_client, tmp_path):
    """What each instance is sent, run as AWS-RunShellScript would (one bash script per
    command list), here on 127.0.0.2-4: scheduler, server and two workers really train."""
    import subprocess

    from bench_tasks.aggregate import merge_worker_records

    hosts = _ssm_hosts(aws_client, tmp_path, addresses=HOSTS)
    point = ScalingPoint(nodes=2, devices=("cpu:0",), **TINY)
    marker = marker_for("ssm-real", point)
    start = distributed.scheduler_port_start("ssm-real", point)
    probe = subprocess.run(distributed.port_probe_command(str(BENCH_PYTHON), HOSTS[2], start),
                           shell=True, capture_output=True, text=True, check=True)
    roles = distributed.build_roles(point, hosts, run_id="ssm-real", marker=marker,
                                    scheduler_port=int(probe.stdout), ps_verbose=0)
    for role in roles:
        hosts[role.host_index].launch(role, marker, kill_grace_s=2)
    scripts = {}
    for host in hosts:
        for commands in _sent(aws_client, host):
            name = next(line.split("/")[-1].split(".")[0] for line in commands if line.startswith("sh "))
            scripts[name] = "\n".join(commands)
    assert sorted(scripts) == ["scheduler-0", "server-0", "worker-0", "worker-1"]
    running = {name: subprocess.Popen(["bash", "-c", text], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True) for name, text in scripts.items()}
    try:
        outputs = {name: process.communicate(timeout=180) for name, process in running.items()}
    finally:
        for process in running.values():
            if process.poll() is None:
                process.kill()
    assert {name: p.returncode for name, p in running.items()} == dict.fromkeys(scripts, 0), outputs
    records = [json.loads(outputs[f"worker-{i}"][0]) for i in range(2)]
    merged = merge_worker_records(records)
    assert (merged["num_nodes"], merged["gpu_count"], merged["kvstore"]) == (2, 2, "dist_sync")
    assert merged["images_per_sec"] == pytest.approx(sum(r["images_per_sec"] for r in records))
    assert marked_processes(marker) == []


def test_an_ec2_scaling_group_gets_an_instance_per_host_and_all_are_terminated_after_a_failure(
        aws_account, aws_client, tmp_path):
    """A scaling group of three ec2 targets on moto's server: one instance each (their own run
    ids), deployed through SSM, then the first point fails (moto runs no command, so the
    scheduler-port probe answers nothing): the run says so and every instance is terminated."""
    from gpucompare.targets.ec2.options import RUN_ID_TAG
    from tests.support.ec2_support import ec2_spec

    specs = []
    for index in range(3):
        spec = ec2_spec(aws_account["profile"], aws_account["bucket"], budget_cap=50.0).to_dict()
        specs.append({**spec, "name": f"aws-node{index}"})
    group = distributed.ScalingGroup(name="aws-trio", targets=tuple(s["name"] for s in specs), profile="p")
    scaling_profile = distributed.parse_scaling_profile(
        "p", {"networks": ["googlenet"], "per_device_batch": 32, "nodes": [2], "devices_per_node": [1]})
    run_id = f"scaling-ec2-{time.time_ns() % 10**9}"
    plan = distributed.plan_scaling_group(group, specs, scaling_profile, run_id)
    # each instance's cost guard and TTL see the whole run it is held for
    assert all(s["options"]["sweep_configs"] == [distributed.points_as_sweep(
        distributed.group_points(group, specs, scaling_profile))] for s in plan["specs"])
    lake_uri = str(tmp_path / "lake")
    with pytest.raises(DistributedRunError, match="no free port"):
        scaling_run.run_scaling_plan(plan, lake_uri=lake_uri, results_path=str(tmp_path / "r.jsonl"),
                                     poll_interval_s=0.05)
    reservations = aws_client("ec2").describe_instances(
        Filters=[{"Name": f"tag:{RUN_ID_TAG}", "Values": [f"{run_id}.aws-node{i}" for i in range(3)]}]
    )["Reservations"]
    instances = [i for r in reservations for i in r["Instances"]]
    assert len(instances) == 3  # one per host, not one shared by the group's run id
    assert {i["State"]["Name"] for i in instances} == {"terminated"}
    # no result is written, but what the failed run cost is: every host's phases, all billed
    # (an instance existed through each), the points' wall time as each host's failed sweep
    from gpucompare.lake.phases import read_phases

    lake = open_lake(lake_uri)
    assert not lake.has_table("results")
    rows = read_phases(lake).to_pylist()
    assert {r["run_id"] for r in rows} == {run_id}
    for index in range(3):
        host = sorted((r["phase"], r["status"]) for r in rows if r["target"] == f"aws-node{index}")
        assert host == [("deploy", "ok"), ("provision", "ok"), ("sweep", "failed"), ("teardown", "ok")], host
    assert all(r["billed"] and r["kind"] == "ec2" and r["seconds"] >= 0 for r in rows)


def test_a_point_past_its_time_limit_is_stopped_on_every_host(group):
    channels = group
    run_id = new_run_id()
    point = ScalingPoint(nodes=2, devices=("cpu:0",), **{**TINY, "batches": 500, "timeout_s": 12.0})
    launcher = ParameterServerLauncher(channels, run_id=run_id, poll_interval_s=0.5, kill_grace_s=2)
    started = time.monotonic()
    expected = r"time limit of 12s exceeded; worker-0, worker-1 still running"
    with pytest.raises(DistributedRunError, match=expected):
        launcher.run_point(point)
    assert time.monotonic() - started < 12 + 45  # the limit, then one stop per host
    assert marked_processes(marker_for(run_id, point)) == []
