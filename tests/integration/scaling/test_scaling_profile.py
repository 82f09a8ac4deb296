"""The scaling profile of the fleet file and what a scaling run is made of before it starts.

The fleet file's ``scaling_profiles`` / ``scaling_groups`` (parsed with the rest of the fleet),
the points a group can run, the roles of a parameter-server job with their ``DMLC_*``
environment, the scheduler port choice and the marker-based stop script — the stop script and
the port probe run for real in a shell here.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import time

import pytest
import yaml

from gpucompare.config import fleet
from gpucompare.config.validation import ValidationError
from gpucompare.scaling import launcher as distributed
from gpucompare.scaling.launcher import (
    SCHEDULER_PORT_LOW,
    SCHEDULER_PORT_SPAN,
    ScalingPoint,
    build_roles,
    kill_marked_script,
    marker_for,
    placement,
    port_probe_command,
    scheduler_port_start,
)
from gpucompare.targets.channel import stopped_count
from gpucompare.targets.ec2.channel import SSMChannel
from gpucompare.targets.ec2.ssm import SsmRunner
from tests.conftest import REPO_ROOT

REPO = REPO_ROOT
FLEET_FILE = REPO / "dags" / "config" / "fleet.yaml"


def shipped_document() -> dict:
    return yaml.safe_load(FLEET_FILE.read_text())


def cpu_group_document(hosts: int = 3, profile: str = "cpu-check") -> dict:
    """The shipped fleet plus a group of ``hosts`` CPU ssh hosts on the CPU profile."""
    document = shipped_document()
    for index in range(hosts):
        document["targets"].append({
            "name": f"cpu-node{index}", "kind": "ssh", "provider": "loopback", "instance_type": "cpu-shared",
            "profile": "demo", "enabled": False, "options": {"ssh_conn_id": f"cpu_node{index}"}})
    document["scaling_groups"].append({"name": "cpu-trio", "targets": [f"cpu-node{i}" for i in range(hosts)],
                                       "profile": profile})
    return document


def test_the_shipped_fleet_has_a_scaling_profile_and_a_group():
    parsed = fleet.load_fleet(FLEET_FILE)
    study = parsed.scaling_profiles["p100-study"]
    assert study.kvstore == "dist_device_sync" and study.scaling == ("weak",)
    assert [n * d for n, d in study.pairs()] == [1, 2, 4, 8, 12, 16]
    group = parsed.scaling_groups[0]
    assert group.profile == "p100-study" and not group.enabled
    assert fleet.plan_scaling(parsed, "nightly") == []  # disabled: nothing planned


def test_a_group_plans_the_points_its_hosts_can_hold():
    parsed = fleet.parse_fleet(cpu_group_document(hosts=3))
    [plan] = fleet.plan_scaling(parsed, "scheduled__2026-11-30T02:00:00+00:00")
    json.dumps(plan)  # travels through XCom
    assert plan["run_id"] == fleet.target_run_id("scheduled__2026-11-30T02:00:00+00:00", "scaling-cpu-trio")
    assert [s["name"] for s in plan["specs"]] == ["cpu-node0", "cpu-node1", "cpu-node2"]
    got = [(p["scaling"], p["nodes"], len(p["devices"]), p["batch_size"]) for p in plan["points"]]
    # device counts 1, 2, 2, 4 (by devices, then nodes), weak (per device 1) then strong (global 4)
    assert got == [("weak", 1, 1, 1), ("weak", 1, 2, 1), ("weak", 2, 1, 1), ("weak", 2, 2, 1),
                   ("strong", 1, 1, 4), ("strong", 1, 2, 4), ("strong", 2, 1, 4), ("strong", 2, 2, 4)]
    assert all(p["devices"][0] == "cpu:0" for p in plan["points"])
    assert plan["timeout_s"] == 8 * 300 + distributed.GROUP_SLACK_S


def test_points_a_group_cannot_hold_are_skipped_and_gpu_hosts_use_gpus():
    profile = fleet.load_fleet(FLEET_FILE).scaling_profiles["p100-study"]
    points = distributed.scaling_points(profile, host_count=2, devices_per_host=4, device_kind="gpu")
    assert {(p.nodes, p.devices) for p in points} == {
        (1, ("gpu:0",)), (1, ("gpu:0", "gpu:1")), (1, ("gpu:0", "gpu:1", "gpu:2", "gpu:3")),
        (2, ("gpu:0", "gpu:1", "gpu:2", "gpu:3"))}
    with pytest.raises(ValidationError, match="nodes: no .* fits a group of 1 host"):
        distributed.scaling_points(
            distributed.parse_scaling_profile("x", {"networks": ["alexnet"], "per_device_batch": 8,
                                                     "nodes": [2]}),
            host_count=1, devices_per_host=1, device_kind="gpu")


def test_strong_scaling_splits_the_global_batch_and_skips_what_does_not_split():
    profile = distributed.parse_scaling_profile(
        "s", {"networks": ["googlenet"], "scaling": "strong", "global_batch": 6, "nodes": [1, 2, 4],
              "devices_per_node": [1, 2]})
    points = distributed.scaling_points(profile, host_count=4, devices_per_host=2, device_kind="gpu")
    # 6 over 4 nodes does not split; 6 over 2 nodes is 3 per worker (split over its devices)
    assert {(p.nodes, len(p.devices)) for p in points} == {(1, 1), (1, 2), (2, 1), (2, 2)}
    two_nodes = next(p for p in points if p.nodes == 2 and len(p.devices) == 2)
    assert two_nodes.worker_batch_flag == 3
    weak = ScalingPoint(network="googlenet", scaling="weak", batch_size=8, nodes=2,
                        devices=("gpu:0", "gpu:1"))
    assert weak.worker_batch_flag == 8 and weak.device_count == 4


@pytest.mark.parametrize(("change", "field", "words"), [
    (lambda d: d["scaling_profiles"]["cpu-check"].update(colour="red"), "scaling_profiles.cpu-check.colour",
     "unknown key"),
    (lambda d: d["scaling_profiles"]["cpu-check"].pop("global_batch"),
     "scaling_profiles.cpu-check.global_batch", "strong scaling"),
    (lambda d: d["scaling_profiles"]["cpu-check"].update(kvstore="nccl"),
     "scaling_profiles.cpu-check.kvstore", "dist_sync, dist_device_sync"),
    (lambda d: d["scaling_profiles"]["cpu-check"].update(scaling=["linear"]),
     "scaling_profiles.cpu-check.scaling[0]", "'linear' is not allowed; allowed: weak, strong"),
    (lambda d: d["scaling_profiles"]["cpu-check"].update(nodes=[0]), "scaling_profiles.cpu-check.nodes[0]",
     "0 is not allowed (out of range); allowed: whole numbers from 1"),
    (lambda d: d["scaling_groups"][-1].update(targets=["cpu-node0", "nowhere"]), "scaling_groups[1].targets",
     "'nowhere' is not allowed; allowed: local, "),
    (lambda d: d["scaling_groups"][-1].update(targets=["cpu-node0", "local"]), "scaling_groups[1].targets",
     "all ssh or all ec2"),
    (lambda d: d["scaling_groups"][-1].update(targets=["cpu-node0", "leadergpu-4xp100-a"]),
     "scaling_groups[1].targets", "differ in provider"),
    (lambda d: d["scaling_groups"][-1].update(profile="nightly"), "scaling_groups[1].profile", "not allowed"),
    (lambda d: d["scaling_groups"][-1].update(interface="eth0; rm -rf /"), "scaling_groups[1].interface",
     "'eth0; rm -rf /' is not allowed; allowed: a network interface name"),
    (lambda d: d["scaling_groups"].append(copy.deepcopy(d["scaling_groups"][-1])), "scaling_groups[2].name",
     "used twice"),
])
def test_bad_scaling_configuration_is_refused_with_the_field_named(change, field, words):
    document = cpu_group_document()
    change(document)
    with pytest.raises(ValidationError) as error:
        fleet.parse_fleet(document)
    assert error.value.field == field, str(error.value)
    assert words in str(error.value)


# -- the job's roles ---------------------------------------------------------------------------

def _hosts(count: int) -> list[SSMChannel]:
    # SSM channels hold only addresses and paths until they send something: no client needed here
    return [SSMChannel(runner=SsmRunner(None, f"i-{i:017x}"), address=f"10.0.0.{10 + i}",
                       python="/opt/gpucompare/venv/bin/python", code_dir="/opt/gpucompare/bench-abc",
                       run_dir="/opt/gpucompare/runs/r1") for i in range(count)]


def test_roles_carry_the_dmlc_environment_of_mxnets_launcher():
    point = ScalingPoint(network="inception-bn", scaling="weak", batch_size=32, nodes=2,
                         devices=("gpu:0", "gpu:1"), kvstore="dist_device_sync")
    hosts = _hosts(3)
    marker = marker_for("r1", point)
    roles = {r.name: r for r in build_roles(point, hosts, run_id="r1", marker=marker, scheduler_port=23456,
                                            ps_verbose=1)}
    assert sorted(roles) == ["scheduler-0", "server-0", "server-1", "worker-0", "worker-1"]
    assert placement(point, 3) == {"worker-0": 0, "worker-1": 1, "scheduler-0": 2, "server-0": 0,
                                   "server-1": 1}
    for name, role in roles.items():
        env = role.env
        assert env["DMLC_ROLE"] == name.split("-")[0]
        assert (env["DMLC_PS_ROOT_URI"], env["DMLC_PS_ROOT_PORT"]) == ("10.0.0.12", "23456")
        assert (env["DMLC_NUM_SERVER"], env["DMLC_NUM_WORKER"], env["PS_VERBOSE"]) == ("2", "2", "1")
        assert env["DMLC_NODE_HOST"] == hosts[role.host_index].address
        assert env[distributed.MARKER_VARIABLE] == f"{marker}/{name}"
    worker = roles["worker-1"].argv
    assert worker[:4] == ("/opt/gpucompare/venv/bin/python", "-m", "bench_tasks", "train")
    flags = dict(zip(worker[4::2], worker[5::2], strict=False))
    assert flags["--kvstore"] == "dist_device_sync" and flags["--devices"] == "gpu:0,gpu:1"
    assert flags["--batch-sizes"] == "32" and flags["--scaling"] == "weak" and flags["--run-id"] == "r1"
    assert marker in flags["--output"]  # so pgrep -f <marker> finds the worker
    assert roles["scheduler-0"].argv[-1] == marker

    with_nic = build_roles(point, hosts, run_id="r1", marker=marker, scheduler_port=23456, interface="ens5")
    assert all(r.env["DMLC_INTERFACE"] == "ens5" and "DMLC_NODE_HOST" not in r.env for r in with_nic)

    single = ScalingPoint(network="inception-bn", scaling="weak", batch_size=32, nodes=1, devices=("gpu:0",))
    [alone] = build_roles(single, hosts, run_id="r1", marker="gcd-x", scheduler_port=None)
    assert not any(k.startswith("DMLC_") for k in alone.env)
    assert "device" in alone.argv


def test_scheduler_ports_start_apart_for_different_runs_and_the_probe_skips_a_taken_port():
    point = ScalingPoint(network="googlenet", scaling="weak", batch_size=1, nodes=2, devices=("cpu:0",))
    starts = {scheduler_port_start(f"run-{i}", point) for i in range(50)}
    assert len(starts) > 45  # spread out, so concurrent runs do not probe the same ports
    assert all(SCHEDULER_PORT_LOW <= s < SCHEDULER_PORT_LOW + SCHEDULER_PORT_SPAN for s in starts)
    assert scheduler_port_start("run-1", point) == scheduler_port_start("run-1", point)

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        probe = subprocess.run(port_probe_command(sys.executable, "127.0.0.1", port), shell=True,
                               capture_output=True, text=True, check=True)
    assert int(probe.stdout) > port


def _marked_sleeper(tag: str) -> subprocess.Popen:
    env = {**os.environ, distributed.MARKER_VARIABLE: tag}
    return subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)


def test_the_stop_script_kills_what_carries_the_marker_in_any_session_and_nothing_else():
    marker = f"gcd-{os.getpid():x}test"
    victims = [_marked_sleeper(f"{marker}/worker-0"), _marked_sleeper(f"{marker}/server-0")]
    bystander = _marked_sleeper(f"{marker}x/worker-0")  # another point's marker, a prefix apart
    try:
        out = subprocess.run(["sh", "-c", kill_marked_script(f"{marker}/", grace_s=2)],
                             capture_output=True, text=True, check=True, timeout=30).stdout
        assert stopped_count(out) == 2
        for victim in victims:
            assert victim.wait(timeout=10) is not None
        time.sleep(0.2)
        assert bystander.poll() is None
        exact = kill_marked_script(f"{marker}x/worker-0", grace_s=1, exact=True)
        assert stopped_count(subprocess.run(["sh", "-c", exact], capture_output=True, text=True,
                                            check=True, timeout=30).stdout) == 1
        assert bystander.wait(timeout=10) is not None
    finally:
        for process in (*victims, bystander):
            if process.poll() is None:
                process.kill()
                process.wait()


def test_a_marker_with_shell_characters_is_refused():
    with pytest.raises(distributed.DistributedRunError, match="marker"):
        kill_marked_script("gcd-1; reboot", grace_s=1)


def test_the_scaling_run_command_refuses_an_unknown_group_naming_the_flag(tmp_path):
    result = subprocess.run([sys.executable, "-m", "gpucompare", "scaling-run", "--group", "nowhere",
                             "--fleet", str(FLEET_FILE), "--lake", str(tmp_path / "lake")],
                            capture_output=True, text=True, check=False, cwd=REPO)
    assert result.returncode == 2
    assert "--group: 'nowhere' is not a scaling group" in result.stderr
    assert "leadergpu-p100-pair" in result.stderr  # the allowed values
    assert not (tmp_path / "lake").exists()
