"""The night estimate with worker runtimes: a container runtime's pull is a phase of its own
(billed on ec2, a constant until recorded), a venv runtime has none; and the cost guard's
throughput guess for a GPU with no measurement (an H100, an unknown GPU) errs high on cost."""

from __future__ import annotations

import csv

from gpucompare import resources
from gpucompare.targets import cost, night

SWEEP = {"warmup": 1, "batches": 2, "repeats": 1,
         "matrix": [{"modes": ["score"], "networks": ["resnet-50"], "batch_sizes": [8],
                     "devices": ["gpu:0"]}]}


def _phases(kind: str, pulls_image: bool) -> dict[str, night.PhaseEstimate]:
    plan = night.estimate_phases(kind, [SWEEP], night.PhaseHistory(), pulls_image=pulls_image)
    return {p.phase: p for p in plan.phases}


def test_a_container_runtime_pulls_as_its_own_phase_billed_on_ec2() -> None:
    ec2 = _phases("ec2", pulls_image=True)
    assert ec2["pull"].seconds == night.PULL_S and ec2["pull"].billed and "constant" in ec2["pull"].source
    ssh = _phases("ssh", pulls_image=True)
    assert ssh["pull"].seconds == night.PULL_S and not ssh["pull"].billed  # a rented host is paid anyway
    assert "pull" not in _phases("ec2", pulls_image=False)  # pip-cu112: a venv, no image


def test_a_recorded_pull_replaces_the_constant() -> None:
    history = night.PhaseHistory()
    history.run_level["pull"] = (4.0, 3)  # the image was on the host: seconds
    plan = night.estimate_phases("ec2", [SWEEP], history, pulls_image=True)
    (pull,) = [p for p in plan.phases if p.phase == "pull"]
    assert pull.seconds == 4.0 and "median of 3" in pull.source


def test_the_unmeasured_guess_is_the_slowest_published_figure_so_cost_errs_high() -> None:
    """Where nothing was measured the guard assumes images/s no higher than the slowest published
    single-GPU figure of that network and mode: more seconds, so more cost, never less."""
    slowest: dict[tuple[str, str], float] = {}
    path = resources.data_dir("published") / "published_results.csv"
    with path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["status"] == "ok" and row["gpu_count"] == "1" and row["images_per_sec"]:
                key = (row["network"], row["mode"])
                slowest[key] = min(slowest.get(key, float("inf")), float(row["images_per_sec"]))
    compared = 0
    for key, guess in cost.DEFAULT_IMAGES_PER_SEC.items():
        if key in slowest:
            assert guess <= slowest[key] * 1.0001, key
            compared += 1
    assert compared >= 6


def test_a_reclaimed_night_is_left_out_of_the_sweep_overhead() -> None:
    """A night that lost its machine keeps the lost machine's records, whose seconds are in no
    sweep row: counted, its overhead per configuration came out 0 (50 s of sweep, 80 s of
    records) and pulled the median down. Before: median of (10, 0) = 5 s."""
    import datetime as dt

    import pyarrow as pa

    t0 = dt.datetime(2026, 11, 30, 2, tzinfo=dt.UTC)

    def phase(run: str, name: str, start: int, seconds: float, status: str = "ok") -> dict:
        return {"run_id": run, "kind": "ec2", "provider": "aws", "instance_type": "g5.xlarge", "phase": name,
                "started_at": t0 + dt.timedelta(seconds=start),
                "finished_at": t0 + dt.timedelta(seconds=start + seconds), "seconds": seconds,
                "billed": True, "status": status}

    def record(run: str) -> dict:
        return {"run_id": run, "provider": "aws", "instance_type": "g5.xlarge", "target": "ec2",
                "status": "ok", "num_nodes": 1, "setup_seconds": 10.0, "warmup_seconds": 10.0,
                "timed_seconds": 20.0, "warmup_batches": 1, "timed_batches": 2, "mode": "score",
                "network": "resnet-50", "batch_size": 8, "dtype": "float32", "devices": ["gpu:0"],
                "started_at": t0}

    phases = pa.Table.from_pylist([
        phase("plain", "sweep", 0, 100.0), phase("plain", "teardown", 100, 5.0),
        phase("lost", "reclaim", 0, 60.0, status="lost"), phase("lost", "reclaim", 60, 30.0),
        phase("lost", "sweep", 90, 50.0), phase("lost", "teardown", 140, 5.0)])
    results = pa.Table.from_pylist([record("plain"), record("plain"), record("lost"), record("lost")])
    history = night.phase_history(phases, results, kind="ec2", provider="aws", instance_type="g5.xlarge")
    assert history.run_level["sweep_other"] == (10.0, 1)  # (100 - 2 × 40) / 2, the plain night alone
