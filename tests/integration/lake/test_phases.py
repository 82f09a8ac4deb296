"""Phase timing (targets.phases) and the run_phases table (lake.phases) on a real Delta lake.

The adversarial cases use real processes: writers SIGKILLed at several moments of a write, and
writers racing on one table; hostile values are refused with the field named before any write.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpucompare.lake.phases import check_row, read_phases, write_phases
from gpucompare.lake.rows import IngestError
from gpucompare.lake.tables import open_lake
from gpucompare.targets.phases import PhaseContext, PhaseLog, phase_rows, write_recorded
from tests.conftest import REPO_ROOT

T0 = dt.datetime(2026, 11, 30, 2, 0, tzinfo=dt.UTC)


def row(**changes: Any) -> dict[str, Any]:
    base = {"run_id": "dep.scheduled__2026-11-30.aws-x9", "dag_run_id": "scheduled__2026-11-30",
            "target": "aws-x9", "kind": "ec2", "provider": "aws", "instance_type": "x9.test",
            "region": "us-east-1", "market": "on_demand", "phase": "provision", "started_at": T0,
            "finished_at": T0 + dt.timedelta(seconds=90), "seconds": 90.0, "billed": True, "status": "ok",
            "error": None, "code_hash": "ab12cd34"}
    return base | changes


def test_a_phase_is_timed_whether_its_step_returns_or_raises() -> None:
    log = PhaseLog("ec2")
    with log.timed("deploy"):
        time.sleep(0.05)
    with pytest.raises(RuntimeError), log.timed("sweep"):
        raise RuntimeError("worker exited with 1")
    deploy, sweep = log.records
    assert (deploy.status, deploy.billed, deploy.error) == ("ok", True, None)
    assert deploy.seconds >= 0.05  # at least the step's own sleep (no upper bound: load varies)
    assert dt.datetime.fromisoformat(deploy.finished_at) >= dt.datetime.fromisoformat(deploy.started_at)
    assert (sweep.status, sweep.error) == ("failed", "RuntimeError: worker exited with 1")


def test_a_part_the_machine_timed_is_its_own_phase_and_not_counted_twice() -> None:
    """An ec2 deploy's one command pulls the image too: the instance's start and end of the pull
    become a ``pull`` record, and the ``deploy`` around it keeps only the rest of its seconds."""
    log = PhaseLog("ec2")
    with log.timed("deploy"):
        time.sleep(0.3)
        ended = time.time()
        log.split("pull", ended - 0.2, ended)  # 0.2 s of the 0.3 s were the pull
    deploy, pull = log.records
    assert (pull.phase, pull.status, pull.billed) == ("pull", "ok", True)
    assert pull.seconds == pytest.approx(0.2)
    assert dt.datetime.fromisoformat(pull.finished_at).timestamp() == pytest.approx(ended)
    wall = (dt.datetime.fromisoformat(deploy.finished_at) - dt.datetime.fromisoformat(deploy.started_at))
    assert deploy.seconds == pytest.approx(wall.total_seconds() - 0.2, abs=0.02)  # its span less the pull


def test_billing_follows_the_kind_and_ec2_provisioning_bills_from_the_launch() -> None:
    local, ssh, ec2 = PhaseLog("local"), PhaseLog("ssh"), PhaseLog("ec2")
    for log in (local, ssh):
        for name in ("provision", "deploy", "sweep", "teardown"):
            with log.timed(name):
                pass
        assert [r.billed for r in log.records] == [False, False, True, False]
    with ec2.timed("provision"):
        pass  # refused before RunInstances
    with ec2.timed("provision"):
        ec2.mark_billed()  # an instance exists
    assert [r.billed for r in ec2.records] == [False, True]


def test_a_machine_lost_mid_sweep_makes_its_sweep_and_the_replacement_a_reclaim() -> None:
    """The failed sweep that ended with the machine lost becomes ``reclaim``/``lost``; the
    replacement's provision, deploy and pull become ``reclaim`` with their own status; the rest of
    the sweep on it and a teardown stay what they are. Before: no such phase or status existed."""
    log = PhaseLog("ec2")
    with log.timed("deploy"):
        pass
    began = time.time()
    with pytest.raises(RuntimeError), log.timed("sweep"):
        raise RuntimeError("instance i-1 is terminated")
    lost = log.lost(began)
    with log.reclaiming():
        with log.timed("provision"):
            log.mark_billed()
        with pytest.raises(RuntimeError), log.timed("deploy"):
            raise RuntimeError("deploy command failed")  # a retried deploy: still the reclaim's
        with log.timed("deploy"):
            log.split("pull", time.time() - 0.01, time.time())
        with log.timed("teardown"):
            pass  # not a phase of the replacement: left alone
    with log.timed("sweep"):
        pass
    got = [(r.phase, r.status, r.billed) for r in log.records]
    assert got == [("deploy", "ok", True), ("reclaim", "lost", True), ("reclaim", "ok", True),
                   ("reclaim", "failed", True), ("reclaim", "ok", True), ("reclaim", "ok", True),
                   ("teardown", "ok", True), ("sweep", "ok", True)]
    assert lost is log.records[1] and lost.error == "RuntimeError: instance i-1 is terminated"
    assert all(check_row(row(phase=r.phase, status=r.status)) for r in log.records)  # the lake takes them


def test_a_machine_found_dead_before_its_sweep_was_timed_is_a_reclaim_from_the_step_start() -> None:
    """A sweep step whose start found the instance gone timed nothing: the reclaim record spans
    from the step's start to now; a failed sweep of an earlier step is not relabelled."""
    log = PhaseLog("ec2")
    with pytest.raises(RuntimeError), log.timed("sweep"):
        raise RuntimeError("an earlier step's own failure")
    log.records[0].started_at = dt.datetime.fromtimestamp(time.time() - 60, dt.UTC).isoformat()
    began = time.time() - 0.5
    added = log.lost(began)
    assert [(r.phase, r.status) for r in log.records] == [("sweep", "failed"), ("reclaim", "lost")]
    assert added is log.records[1] and added.billed and added.error is None
    assert dt.datetime.fromisoformat(added.started_at).timestamp() == pytest.approx(began)
    assert added.seconds >= 0.5 and added.finished_at is not None
    assert PhaseLog("ssh").lost(time.time()).billed is False  # billing follows the kind

    def failed_deploy() -> PhaseLog:
        log = PhaseLog("ec2")
        with pytest.raises(RuntimeError), log.timed("deploy"):
            raise RuntimeError("instance i-2 is terminated")
        return log

    other = failed_deploy()  # a failed deploy is not the sweep step that lost the machine
    assert other.lost(time.time() - 5).phase == "reclaim" and other.records[0].phase == "deploy"
    deploy = failed_deploy()  # the machine lost during a deploy step: that deploy is the reclaim
    assert deploy.lost(time.time() - 5, step="deploy") is deploy.records[0] and len(deploy.records) == 1
    assert (deploy.records[0].phase, deploy.records[0].status) == ("reclaim", "lost")


def test_rows_of_the_log_land_in_the_lake_once(tmp_path: Path) -> None:
    lake = open_lake(str(tmp_path / "lake"))
    log = PhaseLog("local")
    with log.timed("sweep"):
        pass
    context = PhaseContext.of({"name": "here", "kind": "local", "provider": "local",
                               "instance_type": "local-cpu", "market": "on_demand"}, "run-1",
                              dag_run_id="manual__1", code_hash="ab12cd34")
    first = write_recorded(lake.uri, log, context)
    assert first.changed and log.records == []  # taken out: a second write has nothing to repeat
    assert not write_recorded(lake.uri, log, context).changed
    (stored,) = read_phases(lake).to_pylist()
    assert (stored["target"], stored["kind"], stored["phase"], stored["billed"], stored["dag_run_id"],
            stored["config_id"], stored["date"]) == ("here", "local", "sweep", True, "manual__1", None,
                                                     stored["started_at"].date())


def test_the_same_phases_written_again_commit_nothing(tmp_path: Path) -> None:
    lake = open_lake(str(tmp_path / "lake"))
    rows = [row(), row(phase="deploy", started_at=T0 + dt.timedelta(seconds=100),
                       finished_at=T0 + dt.timedelta(seconds=400), seconds=300.0)]
    assert write_phases(lake, rows).changed
    version = lake.version("run_phases")
    again = write_phases(lake, list(reversed(rows)))
    assert not again.changed and lake.version("run_phases") == version
    # a new phase of the run (its teardown) is an append next to them
    assert write_phases(lake, [*rows, row(phase="teardown", seconds=30.0,
                                          finished_at=T0 + dt.timedelta(seconds=30))]).changed
    assert sorted(read_phases(lake).column("phase").to_pylist()) == ["deploy", "provision", "teardown"]


@pytest.mark.parametrize(("changes", "field"), [
    ({"run_id": "x' OR '1'='1"}, "run_id"),
    ({"kind": "published"}, "kind"),
    ({"phase": "timed"}, "phase"),  # per-configuration phases come from the records
    ({"phase": "coffee"}, "phase"),
    ({"status": "running"}, "status"),
    ({"status": "lost"}, "status"),  # only the reclaim of a machine lost during the step
    ({"market": "reserved"}, "market"),
    ({"provider": "AWS; DROP TABLE"}, "provider"),
    ({"instance_type": "../../etc"}, "instance_type"),
    ({"seconds": float("nan")}, "seconds"),
    ({"seconds": -1.0}, "seconds"),
    ({"seconds": True}, "seconds"),
    ({"billed": "yes"}, "billed"),
    ({"finished_at": T0 - dt.timedelta(seconds=1)}, "finished_at"),
    ({"started_at": "yesterday"}, "started_at"),
    ({"started_at": dt.datetime(2026, 11, 30, 2, 0)}, "started_at"),  # no zone
    ({"target": "a\nb"}, "target"),
    ({"code_hash": "not-hex"}, "code_hash"),
])
def test_hostile_rows_are_refused_with_the_field_named_and_nothing_written(
        tmp_path: Path, changes: dict[str, Any], field: str) -> None:
    lake = open_lake(str(tmp_path / "lake"))
    write_phases(lake, [row()])
    version = lake.version("run_phases")
    with pytest.raises(IngestError) as caught:
        write_phases(lake, [row(phase="deploy"), row(**changes)])
    assert caught.value.field == field
    assert lake.version("run_phases") == version and read_phases(lake).num_rows == 1


def test_a_long_error_is_cut_not_refused() -> None:
    checked = check_row(row(status="failed", error="x" * 10_000))
    assert len(checked["error"]) == 500


WRITER = """
import datetime as dt, sys
from gpucompare.lake.phases import write_phases
from gpucompare.lake.tables import open_lake
lake = open_lake(sys.argv[1])
t0 = dt.datetime(2026, 11, 30, 2, tzinfo=dt.UTC)
for i in range(int(sys.argv[3])):
    start = t0 + dt.timedelta(seconds=i)
    write_phases(lake, [{"run_id": sys.argv[2], "target": "t", "kind": "local", "provider": "local",
                         "instance_type": "local-cpu", "phase": name, "started_at": start,
                         "finished_at": start + dt.timedelta(seconds=1), "seconds": 1.0,
                         "billed": name == "sweep", "status": "ok"} for name in ("deploy", "sweep")])
    print(i, flush=True)
"""


def start_writer(lake: str, run_id: str, count: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT / 'plugins'}{os.pathsep}{REPO_ROOT}"}
    return subprocess.Popen([sys.executable, "-c", WRITER, lake, run_id, str(count)], stdout=subprocess.PIPE,
                            text=True, env=env)


def test_writers_killed_mid_write_leave_whole_rows_only(tmp_path: Path) -> None:
    """SIGKILL a writer after 0, 1 and 3 of its commits (and mid-way through the next one): the
    table stays readable, holds only whole commits (both rows of a write or neither) and no
    duplicate, and a later writer carries on."""
    lake = open_lake(str(tmp_path / "lake"))
    for run, after in (("kill-0", 0), ("kill-1", 1), ("kill-3", 3)):
        writer = start_writer(lake.uri, run, 50)
        assert writer.stdout is not None
        for _ in range(after):
            writer.stdout.readline()
        time.sleep(0.05 * after)  # somewhere inside the next write
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    stored = read_phases(lake).to_pylist()
    keys = [r["ingest_key"] for r in stored]
    assert len(keys) == len(set(keys))
    by_write: dict[tuple[str, Any], set[str]] = {}
    for r in stored:
        by_write.setdefault((r["run_id"], r["started_at"]), set()).add(r["phase"])
    assert all(phases == {"deploy", "sweep"} for phases in by_write.values()), by_write
    assert sum(1 for run, _ in by_write if run == "kill-3") >= 3
    assert write_phases(lake, [row()]).changed


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    lake = open_lake(str(tmp_path / "lake"))
    writers = [start_writer(lake.uri, f"racer-{n}", 4) for n in range(3)]
    for writer in writers:
        assert writer.wait(timeout=120) == 0
    stored = read_phases(lake).to_pylist()
    assert len(stored) == 3 * 4 * 2
    assert {r["run_id"] for r in stored} == {"racer-0", "racer-1", "racer-2"}


def test_phase_rows_skip_a_step_still_running() -> None:
    log = PhaseLog("ssh")
    context = PhaseContext(run_id="r", target="t", kind="ssh", provider="p", instance_type="i")
    with log.timed("sweep"):
        assert phase_rows(log.records, context) == []
    assert [r["phase"] for r in phase_rows(log.records, context)] == ["sweep"]
    assert json.dumps(phase_rows(log.records, context))  # plain data
