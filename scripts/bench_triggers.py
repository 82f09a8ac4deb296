"""Many deferred ssh sweep waits in one asyncio loop, half of them against a host that accepts TCP
and never answers: do the healthy ones still finish on time, and what does the loop cost?

    .venv/bin/python scripts/bench_triggers.py [--triggers 200] [--poll 2] [--call-timeout 5]
                                               [--deadline 30] [--warmup 15] [--stall ssh|aws]

* healthy half: ``SshSweepTrigger``s against a throwaway OpenSSH server on 127.0.0.1
  (``tests/support/fixtures_sshd.py``), each following a sweep folder of its own that has a live
  pid and three progress lines (the sweep stands in for a running worker). After ``--warmup``
  seconds every sweep gets its exit file at once; each trigger's latency is the time from then
  to its event (the poll interval plus the poll's own time is the bound to expect).
* stalled half: against a stand-in (a process of its own) that accepts TCP connections and never
  sends a byte, each with a deadline ``--deadline`` seconds from the start: ``--stall ssh`` the
  same ssh trigger (a host that never answers), ``--stall aws`` the ec2 sweep's trigger
  (``SsmSweepTrigger``, an AWS endpoint that stalls). Each must end with an error event at its
  deadline (at most one call timeout later).
* measured: this process's CPU seconds and its threads (``/proc/self/status``) sampled every
  0.5 s while the loop runs (sshd and the stand-in host are other processes).

Prints a table and the figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
for path in (REPO_ROOT, REPO_ROOT / "plugins"):
    sys.path.insert(0, str(path))

from gpucompare.airflow.ssh_trigger import SshSweepTrigger  # noqa: E402
from gpucompare.airflow.ssm_trigger import SsmSweepTrigger  # noqa: E402
from tests.support.fixtures_sshd import start_sshd  # noqa: E402

#: The stand-in for a host that accepts TCP and never answers (no SSH banner, no close).
STALLER = """
import socket, sys, time
server = socket.socket(); server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", 0)); server.listen(1024)
print(server.getsockname()[1], flush=True)
held = []
while True:
    connection, _ = server.accept()
    held.append(connection)
"""
FILES = {"exit_code": "exit_code", "progress": "progress.log", "pid": "pid", "claim": "claim",
         "offset": "trigger_offset"}


def _threads() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return -1


def _sweep_dirs(root: Path, count: int) -> list[Path]:
    """``count`` sweep folders with a live pid (this process) and three progress lines."""
    dirs = []
    for index in range(count):
        sweep = root / f"sweep-{index}"
        sweep.mkdir(parents=True)
        (sweep / "pid").write_text(str(os.getpid()))
        (sweep / "progress.log").write_text("".join(f"[{n}/3] sweep {index}: ok\n" for n in (1, 2, 3)))
        dirs.append(sweep)
    return dirs


async def _run(healthy: list[SshSweepTrigger], stalled: list[Any], dirs: list[Path],
               warmup_s: float, limit_s: float) -> dict[str, Any]:
    results: dict[int, tuple[float, dict[str, Any]]] = {}
    samples: list[int] = []

    async def one(index: int, trigger: Any) -> None:
        async for event in trigger.run():
            results[index] = (time.time(), event.payload)
            return

    async def sample() -> None:
        while True:
            samples.append(_threads())
            await asyncio.sleep(0.5)

    everyone = healthy + stalled
    cpu0, began = time.process_time(), time.time()
    sampler = asyncio.ensure_future(sample())
    tasks = [asyncio.ensure_future(one(i, t)) for i, t in enumerate(everyone)]
    await asyncio.sleep(warmup_s)
    released = time.time()
    for sweep in dirs:
        (sweep / "exit_code").write_text("0\n")
    await asyncio.wait(tasks, timeout=limit_s)
    cpu = time.process_time() - cpu0
    wall = time.time() - began
    sampler.cancel()
    for task in tasks:
        task.cancel()
    return {"results": results, "released": released, "began": began, "cpu_s": cpu, "wall_s": wall,
            "threads_max": max(samples), "threads_median": statistics.median(samples),
            "unfinished": sum(1 for t in tasks if not t.done() or t.cancelled())}


def _stalled(args: argparse.Namespace, index: int, known: str, deadline: float) -> Any:
    if args.stall == "ssh":
        return SshSweepTrigger(ssh_conn_id="bench_stall", known_host=known, sweep_dir=f"/nowhere/{index}",
                               files=FILES, deadline=deadline, poll_interval_s=args.poll,
                               call_timeout_s=args.call_timeout)
    return SsmSweepTrigger(aws_conn_id="bench_aws_stall", region="us-east-1", instance_id=f"i-{index:017x}",
                           command_id=f"00000000-0000-0000-0000-{index:012d}", bucket="bench",
                           progress_key=f"run/{index}/progress.log", deadline=deadline,
                           poll_interval_s=args.poll,
                           call_timeout_s=args.call_timeout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=200)
    parser.add_argument("--poll", type=float, default=2.0)
    parser.add_argument("--call-timeout", type=float, default=5.0)
    parser.add_argument("--deadline", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--stall", choices=("ssh", "aws"), default="ssh")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    half = args.triggers // 2
    with tempfile.TemporaryDirectory(prefix="gpucompare-bench-triggers-") as scratch:
        root = Path(scratch)
        server = start_sshd(root / "sshd", conn_id="bench_ok")
        staller = subprocess.Popen([sys.executable, "-c", STALLER], stdout=subprocess.PIPE, text=True)
        try:
            stall_port = int(staller.stdout.readline())
            os.environ[server.conn_env_var] = server.connection_json()
            stalled_conn = json.loads(server.connection_json())
            stalled_conn["port"] = stall_port
            os.environ["AIRFLOW_CONN_BENCH_STALL"] = json.dumps(stalled_conn)
            known = f"[{server.host}]:{server.port} {server.host_key_line}"
            dirs = _sweep_dirs(root / "remote", half)
            now = time.time()
            healthy = [SshSweepTrigger(ssh_conn_id="bench_ok", known_host=known, sweep_dir=str(d),
                                       files=FILES, deadline=now + 3600, poll_interval_s=args.poll,
                                       call_timeout_s=args.call_timeout) for d in dirs]
            os.environ["AIRFLOW_CONN_BENCH_AWS_STALL"] = json.dumps({
                "conn_type": "aws", "login": "stalled", "password": "stalled",
                "extra": {"endpoint_url": f"http://127.0.0.1:{stall_port}", "region_name": "us-east-1"}})
            stalled = [_stalled(args, i, known, now + args.deadline) for i in range(args.triggers - half)]
            limit = max(args.deadline, args.warmup) + args.call_timeout + args.poll + 60
            run = asyncio.run(_run(healthy, stalled, dirs, args.warmup, limit))
        finally:
            staller.kill()
            server.stop()
    _report(run, half, args, now)


def _report(run: dict[str, Any], half: int, args: argparse.Namespace, began: float) -> None:
    results = run["results"]
    ok = [(t - run["released"], e) for i, (t, e) in results.items() if i < half]
    stalled = [(t - (began + args.deadline), e) for i, (t, e) in results.items() if i >= half]
    ok_latency = [lag for lag, e in ok if e == {"exit_code": 0}]
    stalled_err = [lag for lag, e in stalled if e.get("timed_out") or e.get("cancel")]
    figures = {
        "triggers": args.triggers, "stalled_kind": args.stall, "poll_s": args.poll,
        "call_timeout_s": args.call_timeout,
        "healthy_events_exit_0": len(ok_latency), "healthy_expected": half,
        "healthy_latency_median_s": round(statistics.median(ok_latency), 2) if ok_latency else None,
        "healthy_latency_max_s": round(max(ok_latency), 2) if ok_latency else None,
        "stalled_error_events_at_deadline": len(stalled_err), "stalled_expected": args.triggers - half,
        "stalled_lag_after_deadline_max_s": round(max(stalled_err), 2) if stalled_err else None,
        "other_events": [e for _, e in ok + stalled
                         if e != {"exit_code": 0} and not (e.get("timed_out") or e.get("cancel"))][:3],
        "cpu_s": round(run["cpu_s"], 2), "wall_s": round(run["wall_s"], 1),
        "cpu_s_per_minute": round(60 * run["cpu_s"] / run["wall_s"], 2),
        "threads_max": run["threads_max"], "threads_median": run["threads_median"],
        "unfinished": run["unfinished"],
    }
    print("| figure | value |\n| --- | --- |")
    for key, value in figures.items():
        print(f"| {key} | {value} |")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
