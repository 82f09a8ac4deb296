"""The ssh target's options and its checks of a state brought back through XCom: refused before
any shell, any connection (split from tests/integration/targets/test_target_ssh.py).
"""

from __future__ import annotations

import pytest

from gpucompare.targets import make_target
from gpucompare.targets.base import TargetError, TargetSpec, TargetState
from gpucompare.targets.ssh.options import SSHOptions
from tests.support.target_helpers import TINY_SWEEP


@pytest.mark.parametrize(("options", "named"), [
    ({"ssh_conn_id": "box; reboot"}, "'ssh_conn_id'"),
    ({"ssh_conn_id": None}, "'ssh_conn_id'"),
    ({"remote_dir": "/tmp/x; rm -rf /"}, "'remote_dir'"),
    ({"remote_dir": "/tmp/../etc"}, "'remote_dir'"),
    ({"remote_dir": "gpucompare"}, "'remote_dir'"),
    ({"remote_dir": "/tmp/$(id)"}, "'remote_dir'"),
    ({"python": "/usr/bin/python3 -c 'import os'"}, "'python'"),
    ({"base_python": "python3; id"}, "'base_python'"),
    ({"image": "worker;reboot"}, "'image'"),
    ({"image": "worker latest"}, "'image'"),
    ({"docker_gpus": "all --privileged"}, "'docker_gpus'"),
    ({"requirements": "tpu"}, "'requirements'"),
    ({"use_docker": "yes"}, "'use_docker'"),
    ({"connect_retries": 0}, "'connect_retries'"),
    ({"connect_retries": 2.5}, "'connect_retries'"),
    ({"poll_interval_s": True}, "'poll_interval_s'"),
    ({"known_hosts_file": "known_hosts"}, "'known_hosts_file'"),
    ({"port": 22}, "'port'"),
    # a trailing newline (what "$" lets through in re.match) is refused everywhere
    ({"ssh_conn_id": "box\n"}, "'ssh_conn_id'"),
    ({"remote_dir": "/tmp/gpucompare\n"}, "'remote_dir'"),
    ({"python": "/usr/bin/python3\n"}, "'python'"),
    ({"base_python": "python3\n"}, "'base_python'"),
    ({"image": "worker:latest\n"}, "'image'"),
    ({"docker_gpus": "all\n"}, "'docker_gpus'"),
])
def test_bad_options_are_refused_before_any_shell(options: dict, named: str) -> None:
    spec = TargetSpec(name="b", kind="ssh", provider="p", instance_type="t",
                      options={"ssh_conn_id": "box", **options})
    # the option is named with its place, then the value and what is allowed
    with pytest.raises(TargetError, match=rf"options\.{named.strip(chr(39))}: .* is not allowed|"
                       rf"options\.{named.strip(chr(39))}: unknown key; allowed: ssh_conn_id, "):
        make_target(spec)


def test_option_defaults_follow_the_spec() -> None:
    assert SSHOptions.parse({"ssh_conn_id": "box"}, gpu_count=4).requirements == "gpu"
    cpu = SSHOptions.parse({"ssh_conn_id": "box"}, gpu_count=0)
    assert (cpu.requirements, cpu.use_docker, cpu.remote_dir, cpu.docker_gpus) == ("cpu", False, None, "all")
    trailing_slash = SSHOptions.parse({"ssh_conn_id": "b", "remote_dir": "/srv/gpucompare/"})
    assert trailing_slash.remote_dir == "/srv/gpucompare"


@pytest.mark.parametrize("workdir", ["/", "/etc", "/srv/gpucompare/runs/../..", "/srv/other/runs/x"])
def test_a_tampered_state_never_reaches_rm_or_kill(workdir: str) -> None:
    """The state comes back through XCom: only <remote_base>/runs/<run> is ever removed or killed.

    The connection id names no connection: the check must refuse before connecting.
    """
    target = make_target(TargetSpec(name="b", kind="ssh", provider="p", instance_type="t",
                                    options={"ssh_conn_id": "no_such_connection", "remove_run_dir": True}))
    state = TargetState(spec=target.spec.to_dict(), run_id="r", workdir=workdir,
                        extra={"remote_base": "/srv/gpucompare", "code_dir": "/srv/gpucompare/bench-1",
                               "python": "/usr/bin/python3"})
    with pytest.raises(TargetError, match="is not <remote_base>/runs/<run>"):
        target.teardown(state)
    with pytest.raises(TargetError, match="is not <remote_base>/runs/<run>"):
        target.run_sweep(state, TINY_SWEEP, timeout_s=60)
    state.extra["result_files"] = ["/etc/shadow"]
    with pytest.raises(TargetError, match="is not <remote_base>/runs/<run>"):
        target.collect(state, "/tmp/never-written.jsonl")
    state.workdir = "/srv/gpucompare/runs/r"
    with pytest.raises(TargetError, match="outside the run directory"):
        target.collect(state, "/tmp/never-written.jsonl")
