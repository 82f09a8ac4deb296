"""Worker-slot seconds of a long sweep, waited in the task (before) or deferred (after), and
the triggerer's CPU for many deferred sweeps.

    .venv/bin/python scripts/bench_deferrable.py [--sweep-s 120] [--triggers 50] [--cpu-s 60]
                                                  [--skip-ec2] [--skip-ssh]

* ssh: a throwaway OpenSSH server on 127.0.0.1 (``tests/support/fixtures_sshd.py``); the
  worker is a stand-in interpreter that sleeps ``--sweep-s`` seconds and writes one record.
  Before: ``run_sweep`` waits in the task, so a worker slot is held for the whole sweep.
  After: ``start_sweep`` (the task's first part), ``SweepTrigger`` waits (in the triggerer,
  no worker slot), ``finish_sweep`` (the resumed task); held = the two task parts.
* ec2: moto's server (``tests/support/fixtures_aws.py``); moto ends every command at once,
  so the sweep's invocation is answered ``InProgress`` until ``--sweep-s`` seconds have
  passed (a client event), then ``Success``. Same before/after split.
* triggerer: ``--triggers`` ssh sweeps started at once (workers sleeping longer than the
  measurement), their ``SweepTrigger``s run in one asyncio loop as the triggerer would, for
  ``--cpu-s`` seconds; CPU seconds of this process (all threads) per minute.

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

from gpucompare.airflow.triggers import SweepTrigger  # noqa: E402
from gpucompare.targets.base import TargetSpec  # noqa: E402
from gpucompare.targets.ssh.target import SSHTarget  # noqa: E402
from tests.support.fixtures_sshd import start_sshd  # noqa: E402

SWEEP = {"warmup": 1, "batches": 1, "repeats": 1,
         "matrix": [{"modes": ["score"], "networks": ["alexnet"], "batch_sizes": [1], "devices": ["cpu"]}]}

FAKE_PYTHON = textwrap.dedent("""\
    #!/bin/sh
    if [ "$1" = -c ]; then echo 1.9.1; exit 0; fi
    echo "[1/1] score alexnet b1: started" >&2
    sleep {seconds}
    echo '{{"network": "alexnet"}}' > "$7"
    """)


def _drain(trigger: SweepTrigger) -> dict[str, Any]:
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
    started = started.to_dict() if hasattr(started, "to_dict") else started
    t1 = time.monotonic()
    payload = _drain(SweepTrigger(spec=target.spec.to_dict(), state=state.to_dict(), started=started,
                                  poll_interval_s=poll_interval_s))
    t2 = time.monotonic()
    target.finish_sweep(state, started, payload)
    t3 = time.monotonic()
    return (t1 - t0) + (t3 - t2), t3 - t0


def _ssh_target(server: Any, root: Path, seconds: float, poll: float | None) -> SSHTarget:
    python = root / f"fake-python-{seconds:g}"
    python.write_text(FAKE_PYTHON.format(seconds=seconds))
    python.chmod(0o755)
    options = {"ssh_conn_id": server.conn_id, "remote_dir": str(root / "remote"), "python": str(python)}
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


def bench_ec2(seconds: float, poll: float | None) -> dict[str, float]:
    import boto3

    from gpucompare.targets.ec2.target import Ec2Target
    from tests.support import ec2_support
    from tests.support.fixtures_aws import FAKE_AWS_ENV, _start_server

    server, url = _start_server()
    try:
        os.environ.update(FAKE_AWS_ENV)
        os.environ["AWS_ENDPOINT_URL"] = url
        os.environ[f"AIRFLOW_CONN_{ec2_support.CONN_ID.upper()}"] = json.dumps({
            "conn_type": "aws", "login": "testing", "password": "testing",
            "extra": {"endpoint_url": url, "region_name": "us-east-1"}})
        def client(service: str, region_name: str = "us-east-1") -> Any:
            return boto3.client(service, region_name=region_name, endpoint_url=url)

        client("s3").create_bucket(Bucket="gpucompare-bench")
        ec2_support.publish_ami_parameter(client)
        spec = ec2_support.ec2_spec(ec2_support.create_instance_profile(client), "gpucompare-bench",
                                    **({"poll_interval_s": poll} if poll else {"poll_interval_s": 15.0}))
        target = Ec2Target(spec, line_sink=lambda _: None)
        state = target.deploy(target.prepare("bench-ec2"))
        ends = {"at": 0.0}

        def long_command(parsed: dict[str, Any], **_: Any) -> None:
            if time.monotonic() < ends["at"]:
                parsed.update({"Status": "InProgress"})

        target.ssm_hook.conn.meta.events.register("after-call.ssm.GetCommandInvocation", long_command)
        ends["at"] = time.monotonic() + seconds
        t0 = time.monotonic()
        target.run_sweep(state, {**SWEEP, "run_id": "before"}, timeout_s=seconds * 3)
        before = time.monotonic() - t0
        # the trigger builds its own target (own clients): the same event on every new client
        import botocore.session

        original = botocore.session.Session.create_client

        def create_client(self: Any, service_name: str, *args: Any, **kwargs: Any) -> Any:
            made = original(self, service_name, *args, **kwargs)
            if service_name == "ssm":
                made.meta.events.register("after-call.ssm.GetCommandInvocation", long_command)
            return made

        botocore.session.Session.create_client = create_client
        ends["at"] = time.monotonic() + seconds
        held, wall = _deferred(target, state, {**SWEEP, "run_id": "after"}, seconds * 3,
                               target.options.poll_interval_s)
        botocore.session.Session.create_client = original
        target.teardown(state)
        return {"before_held_s": before, "after_held_s": held, "after_wall_s": wall}
    finally:
        server.stop()


def bench_triggerer(server: Any, root: Path, count: int, measure_s: float,
                    poll: float | None) -> dict[str, float]:
    target = _ssh_target(server, root, measure_s * 3, poll)
    state = target.deploy(target.prepare("bench-triggerer"))
    triggers = []
    for index in range(count):
        started = target.start_sweep(state, {**SWEEP, "run_id": f"sweep-{index}"}, timeout_s=measure_s * 10)
        triggers.append(SweepTrigger(spec=target.spec.to_dict(), state=state.to_dict(), started=started,
                                     poll_interval_s=target.options.poll_interval_s))

    async def run_all() -> float:
        async def one(trigger: SweepTrigger) -> None:
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

    used = asyncio.run(run_all())
    target.teardown(state)
    return {"triggers": count, "cpu_s": used, "measured_s": measure_s, "cpu_s_per_min": used * 60 / measure_s}


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
        try:
            if not args.skip_ssh:
                _report("ssh", bench_ssh(server, root, args.sweep_s, args.poll), args.sweep_s)
            if not args.skip_ec2:
                _report("ec2", bench_ec2(args.sweep_s, args.poll), args.sweep_s)
            if args.triggers:
                t = bench_triggerer(server, root, args.triggers, args.cpu_s, args.poll)
                print(f"triggerer: {t['triggers']} deferred ssh sweeps in one asyncio loop: {t['cpu_s']:.2f} "
                      f"CPU s in {t['measured_s']:.0f} s = {t['cpu_s_per_min']:.2f} CPU s per minute "
                      f"{json.dumps(t)}", flush=True)
        finally:
            server.stop()
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
