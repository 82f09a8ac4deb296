"""A scaling run on this machine: three sshd "hosts" on 127.0.0.2-4, a fleet scaling profile,
the real parameter-server launch, the lake and the scaling report, printed.

It is what ``tests/system/test_distributed_training.py`` does, at the size of a profile of the fleet
file (default ``cpu-check``: GoogleNet, 1 and 2 nodes × 1 and 2 CPU devices, weak and strong
scaling), to see the figures. The hosts share this machine's cores, so the figures say how
the launch and the report work, not how MXNet scales on real machines.

From the repository root (needs /usr/sbin/sshd; see scripts/install-system-deps.sh):

    .venv/bin/python scripts/scaling_loopback.py [--profile cpu-check] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "plugins")]

from gpucompare import settings  # noqa: E402
from gpucompare.config import fleet  # noqa: E402
from gpucompare.lake.ingest import RunContext  # noqa: E402
from gpucompare.scaling import launcher as distributed  # noqa: E402
from gpucompare.scaling import run as scaling_run  # noqa: E402
from gpucompare.targets import make_target  # noqa: E402
from gpucompare.targets.base import TargetSpec  # noqa: E402
from gpucompare.targets.ssh.channel import SSHChannel  # noqa: E402
from tests.support.fixtures_sshd import start_sshd  # noqa: E402

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="cpu-check", help="a scaling_profiles entry of the fleet file")
    parser.add_argument("--keep", help="keep the lake and logs in this directory")
    args = parser.parse_args()
    profile = fleet.load_fleet(REPO / "dags" / "config" / "fleet.yaml").scaling_profiles[args.profile]
    work = Path(args.keep or tempfile.mkdtemp(prefix="gpucompare-scaling-"))
    servers, targets, states = [], [], []
    run_id = f"scaling-loopback-{time.strftime('%Y%m%dT%H%M%S')}"
    try:
        for index, host in enumerate(HOSTS):
            server = start_sshd(work / f"sshd{index}", host=host, conn_id=f"loopback_node{index}")
            servers.append(server)
            os.environ[server.conn_env_var] = server.connection_json()
            options = {"ssh_conn_id": server.conn_id, "python": str(settings.bench_python()),
                       "remote_dir": str(work / f"host{index}")}
            spec = TargetSpec(name=f"node{index}", kind="ssh", provider="loopback",
                              instance_type="cpu-shared", options=options)
            target = make_target(spec, line_sink=lambda line: None)
            targets.append(target)
            states.append(target.deploy(target.prepare(run_id)))
        points = distributed.scaling_points(profile, host_count=len(HOSTS),
                                            devices_per_host=max(profile.devices_per_node), device_kind="cpu")
        launcher = distributed.ParameterServerLauncher(
            [SSHChannel(t, s) for t, s in zip(targets, states, strict=True)], run_id=run_id,
            poll_interval_s=0.5, line_sink=lambda line: print(line, file=sys.stderr, flush=True))
        started = time.monotonic()
        scaling_run.measure_and_ingest(
            launcher, points, results_path=str(work / "scaling.jsonl"), lake_uri=str(work / "lake"),
            context=RunContext(provider="loopback", instance_type="cpu-shared", target="ssh"))
        print(f"{len(points)} points in {time.monotonic() - started:.0f} s; lake: {work / 'lake'}")
    finally:
        for target, state in zip(targets, states, strict=False):
            target.teardown(state)
        for server in servers:
            server.stop()
    from gpucompare.reports.build import build_reports
    from gpucompare.reports.inputs import ReportInputs

    rows = build_reports(ReportInputs.from_lake(str(work / "lake"))).tables["scaling"].to_pylist()
    print(f"{'network':10} {'scaling':7} {'batch':>5} {'devices':>7} {'nodes':>5} {'img/s':>8} "
          f"{'speedup':>7} {'efficiency':>10}")
    for row in rows:
        if row["origin"] == "measured":
            print(f"{row['network']:10} {row['scaling']:7} {row['batch_size']:>5} {row['gpu_count']:>7} "
                  f"{row['num_nodes']:>5} {row['images_per_sec']:>8.2f} {row['speedup']:>7.2f} "
                  f"{row['efficiency']:>10.2f}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
