"""Worker-slot seconds of a long sweep, waited in the task (before) or deferred (after), and
the triggerer's CPU for many deferred sweeps.

    .venv/bin/python scripts/bench_deferrable.py [--sweep-s 120] [--triggers 50] [--cpu-s 60]
                                                  [--skip-ec2] [--skip-ssh]

* ssh: a throwaway OpenSSH server on 127.0.0.1 (``tests/support/fixtures_sshd.py``); the
  worker is a stand-in interpreter that sleeps ``--sweep-s`` seconds and writes one record.
  Before: ``run_sweep`` waits in the task, so a worker slot is held for the whole sweep.
  After: ``start_sweep`` (the task's first part), its trigger waits (in the triggerer,
  no worker slot), ``finish_sweep`` (the resumed task); held = the two task parts.
* ec2: moto's server (``tests/support/fixtures_aws.py``) behind the fault proxy with the
  stand-in SSM agent (``tests/support/ssm_agent.py``, in a process of its own): the sweep's
  command really runs, on this machine, with the same sleeping stand-in worker. Same
  before/after split.
* triggerer: ``--triggers`` ssh sweeps started at once (workers sleeping longer than the
  measurement), their triggers run in one asyncio loop as the triggerer would, for
  ``--cpu-s`` seconds; CPU seconds of this process (all threads; sshd, moto, the proxy and the
  agent run in other processes) per minute. Then the same with ``--triggers`` ec2 sweeps.

The poll intervals are the targets' defaults (ssh 2 s, ec2 15 s) unless ``--poll`` is given.

``--dag-targets N [--dag-pool P] [--dag-ec2 K]`` instead runs the nightly DAG with ``dag.test()``
on N targets, K of them (default N // 2) ec2 instances on moto whose commands the stand-in SSM
agent runs, the others ssh hosts on the loopback sshd (the real worker, deferred sweeps), and a
pool of P slots: the system test ``tests/system/test_dags_deferrable.py`` at that size (CI runs
it with 4 targets, 2 of them ec2, and 2 slots); prints its wall time and each target's
worker-slot seconds (its tasks' worker parts).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
for path in (REPO_ROOT, REPO_ROOT / "plugins"):
    sys.path.insert(0, str(path))

from gpucompare.airflow.operators import handle_json  # noqa: E402
from gpucompare.airflow.triggers import trigger_for  # noqa: E402
from gpucompare.targets.base import TargetSpec  # noqa: E402
from gpucompare.targets.ssh.target import SSHTarget  # noqa: E402
from tests.support.fixtures_sshd import start_sshd  # noqa: E402

SWEEP = {"warmup": 1, "batches": 1, "repeats": 1,
         "matrix": [{"modes": ["score"], "networks": ["alexnet"], "batch_sizes": [1], "devices": ["cpu"]}]}

FAKE_PYTHON = textwrap.dedent("""\
    #!/bin/sh
    # stands in for the worker's interpreter: `-c …` (the version probe), `-m bench_tasks sysinfo`
    # (the ec2 deploy's check), `-m bench_tasks sweep --config C --output O` (sleeps, one record)
    if [ "$1" = -c ]; then echo 1.9.1; exit 0; fi
    if [ "$3" = sysinfo ]; then echo '{{}}'; exit 0; fi
    echo "[1/1] score alexnet b1: started" >&2
    sleep {seconds}
    echo '{{"network": "alexnet"}}' > "$7"
    """)


def _drain(trigger: Any) -> dict[str, Any]:
    async def first() -> dict[str, Any]:
        events = trigger.run()
        event = await events.__anext__()
        await events.aclose()
        return event.payload
    return asyncio.run(first())


def _deferred(target: Any, state: Any, config: dict[str, Any], timeout_s: float,
              poll_interval_s: float) -> tuple[float, float]:
    """(seconds a worker slot is held, wall seconds) of one deferred sweep."""
    t0 = time.monotonic()
    started = target.start_sweep(state, config, timeout_s=timeout_s)
    started = handle_json(started)
    t1 = time.monotonic()
    payload = _drain(trigger_for({**target.sweep_wait(state, started), "poll_interval_s": poll_interval_s}))
    t2 = time.monotonic()
    target.finish_sweep(state, started, payload)
    t3 = time.monotonic()
    return (t1 - t0) + (t3 - t2), t3 - t0


def _fake_python(root: Path, seconds: float) -> Path:
    python = root / f"fake-python-{seconds:g}"
    python.write_text(FAKE_PYTHON.format(seconds=seconds))
    python.chmod(0o755)
    return python


def _ssh_target(server: Any, root: Path, seconds: float, poll: float | None) -> SSHTarget:
    options = {"ssh_conn_id": server.conn_id, "remote_dir": str(root / "remote"),
               "python": str(_fake_python(root, seconds))}
    if poll:
        options["poll_interval_s"] = poll
    return SSHTarget(TargetSpec(name="box", kind="ssh", provider="leadergpu", instance_type="cpu",
                                options=options), line_sink=lambda _: None)


def bench_ssh(server: Any, root: Path, seconds: float, poll: float | None) -> dict[str, float]:
    target = _ssh_target(server, root, seconds, poll)
    state = target.deploy(target.prepare("bench-ssh"))
    t0 = time.monotonic()
    target.run_sweep(state, {**SWEEP, "run_id": "before"}, timeout_s=seconds * 3)
    before = time.monotonic() - t0
    held, wall = _deferred(target, state, {**SWEEP, "run_id": "after"}, seconds * 3,
                           target.options.poll_interval_s)
    target.teardown(state)
    return {"before_held_s": before, "after_held_s": held, "after_wall_s": wall}


class AwsOnLoopback:
    """Moto's server, and in front of it, in a process of its own, the fault proxy with the
    stand-in SSM agent; the Airflow connection of the ec2 targets goes through the proxy."""

    def __init__(self, root: Path) -> None:
        import subprocess

        import boto3
        import pytest

        from tests.support.fixtures_aws import FAKE_AWS_ENV, _start_server, account_on

        self.root = root
        self.server, moto_url = _start_server()
        self.agent = subprocess.Popen([sys.executable, "-m", "tests.support.ssm_agent", moto_url,
                                       str(root / "instances")], cwd=REPO_ROOT, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
        proxy_url = self.agent.stdout.readline().strip()
        os.environ.update({**FAKE_AWS_ENV, "AWS_ENDPOINT_URL": moto_url})
        os.environ.setdefault("GPUCOMPARE_DEPLOYMENT", "bench")

        def client(service: str, region_name: str = "us-east-1") -> Any:
            return boto3.client(service, region_name=region_name, endpoint_url=moto_url)

        client("s3").create_bucket(Bucket="gpucompare-bench")
        # the tests' account (connection through the proxy, profile, AMI parameter); this process
        # ends with the benchmark, so the environment it sets is not undone
        self.profile = account_on(proxy_url, client, pytest.MonkeyPatch(), "gpucompare-bench")["profile"]

    def target(self, seconds: float, poll: float | None) -> Any:
        from gpucompare.targets.ec2.target import Ec2Target
        from tests.support import ec2_support

        spec = ec2_support.ec2_spec(self.profile, "gpucompare-bench", poll_interval_s=poll or 15.0,
                                    remote_root=str(self.root / f"instance-{seconds:g}"),
                                    bench_python=str(_fake_python(self.root, seconds)))
        return Ec2Target(spec, line_sink=lambda _: None)

    def stop(self) -> None:
        self.agent.stdin.close()
        self.agent.wait(timeout=60)
        self.server.stop()


def bench_ec2(aws: AwsOnLoopback, seconds: float, poll: float | None) -> dict[str, float]:
    target = aws.target(seconds, poll)
    state = target.deploy(target.prepare("bench-ec2"))
    try:
        t0 = time.monotonic()
        target.run_sweep(state, {**SWEEP, "run_id": "before"}, timeout_s=seconds * 3)
        before = time.monotonic() - t0
        held, wall = _deferred(target, state, {**SWEEP, "run_id": "after"}, seconds * 3,
                               target.options.poll_interval_s)
    finally:
        target.teardown(state)
    return {"before_held_s": before, "after_held_s": held, "after_wall_s": wall}


def bench_triggerer(target: Any, count: int, measure_s: float) -> dict[str, float]:
    """``count`` sweeps of ``target`` (its stand-in worker sleeps past the measurement) started
    at once, their triggers run in one asyncio loop for ``measure_s`` seconds: this process's CPU."""
    state = target.deploy(target.prepare("bench-triggerer"))
    triggers = []
    for index in range(count):
        started = target.start_sweep(state, {**SWEEP, "run_id": f"sweep-{index}"}, timeout_s=measure_s * 10)
        triggers.append(trigger_for(target.sweep_wait(state, started)))

    async def run_all() -> float:
        async def one(trigger: Any) -> None:
            async for _event in trigger.run():
                return

        tasks = [asyncio.ensure_future(one(trigger)) for trigger in triggers]
        await asyncio.sleep(min(10.0, measure_s / 4))  # connections opened: measure the steady state
        cpu0 = time.process_time()
        await asyncio.sleep(measure_s)
        used = time.process_time() - cpu0
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return used

    try:
        used = asyncio.run(run_all())
    finally:
        target.teardown(state)
    return {"triggers": count, "cpu_s": used, "measured_s": measure_s, "cpu_s_per_min": used * 60 / measure_s,
            "poll_interval_s": target.options.poll_interval_s}


def _report(kind: str, r: dict[str, float], sweep: float) -> None:
    print(f"{kind}: simulated sweep {sweep:.0f} s; worker slot held: before {r['before_held_s']:.2f} s "
          f"({100 * r['before_held_s'] / sweep:.1f} %), after {r['after_held_s']:.3f} s "
          f"({100 * r['after_held_s'] / sweep:.2f} %; of a 2-hour sweep "
          f"{100 * r['after_held_s'] / 7200:.3f} %), deferred sweep wall {r['after_wall_s']:.1f} s "
          f"{json.dumps(r)}", flush=True)


def bench_dag(targets: int, pool: int, ec2: int | None) -> int:
    """The deferrable DAG system test at ``targets`` targets and ``pool`` slots; its figures."""
    import subprocess

    with tempfile.TemporaryDirectory(prefix="bench-deferrable-dag-") as tmp:
        figures = Path(tmp) / "figures.json"
        env = {**os.environ, "GPUCOMPARE_DEFERRABLE_TARGETS": str(targets),
               "GPUCOMPARE_DEFERRABLE_POOL": str(pool), "GPUCOMPARE_DEFERRABLE_FIGURES": str(figures),
               "GPUCOMPARE_DEFERRABLE_EC2": str(targets // 2 if ec2 is None else ec2)}
        began = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                               "tests/system/test_dags_deferrable.py"], cwd=REPO_ROOT, env=env)
        elapsed = time.monotonic() - began
        if done.returncode != 0 or not figures.exists():
            print(f"dag: the run failed (exit {done.returncode}) after {elapsed:.0f} s", flush=True)
            return 1
        result = json.loads(figures.read_text())
    held = result["worker_slot_s_per_target"]
    print(f"dag: {targets} targets ({result['ec2_targets']} ec2), pool {pool}: DAG run "
          f"{result['dag_wall_s']:.0f} s (pytest {elapsed:.0f} s)", flush=True)
    for kind in sorted(set(result["kinds"])):
        mine = sorted(h for h, k in zip(held, result["kinds"], strict=True) if k == kind)
        print(f"  {kind}: worker-slot s per target: median {mine[len(mine) // 2]:.1f}, max {max(mine):.1f}",
              flush=True)
    print(json.dumps(result), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep-s", type=float, default=120.0)
    parser.add_argument("--triggers", type=int, default=50)
    parser.add_argument("--cpu-s", type=float, default=60.0)
    parser.add_argument("--poll", type=float, default=None)
    parser.add_argument("--skip-ec2", action="store_true")
    parser.add_argument("--skip-ssh", action="store_true")
    parser.add_argument("--dag-targets", type=int, default=0)
    parser.add_argument("--dag-pool", type=int, default=4)
    parser.add_argument("--dag-ec2", type=int, default=None)
    args = parser.parse_args()
    if args.dag_targets:
        return bench_dag(args.dag_targets, args.dag_pool, args.dag_ec2)
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="bench-deferrable-") as tmp:
        root = Path(tmp)
        server = start_sshd(root / "sshd")
        os.environ[server.conn_env_var] = server.connection_json()
        aws = None if args.skip_ec2 else AwsOnLoopback(root)
        try:
            if not args.skip_ssh:
                _report("ssh", bench_ssh(server, root, args.sweep_s, args.poll), args.sweep_s)
            if aws:
                _report("ec2", bench_ec2(aws, args.sweep_s, args.poll), args.sweep_s)
            if args.triggers:
                long_s = args.cpu_s * 3
                kinds = {"ssh": None if args.skip_ssh else _ssh_target(server, root, long_s, args.poll),
                         "ec2": aws.target(long_s, args.poll) if aws else None}
                for kind, target in kinds.items():
                    if target is None:
                        continue
                    t = bench_triggerer(target, args.triggers, args.cpu_s)
                    print(f"triggerer: {t['triggers']} deferred {kind} sweeps (poll every "
                          f"{t['poll_interval_s']:g} s) in one asyncio loop: {t['cpu_s']:.2f} CPU s in "
                          f"{t['measured_s']:.0f} s = {t['cpu_s_per_min']:.2f} CPU s per minute "
                          f"{json.dumps(t)}", flush=True)
        finally:
            if aws:
                aws.stop()
            server.stop()
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
