"""What a replacement machine still sweeps after a reclaim (``targets.resume``): the worker's own
parser (``bench_tasks.configs.parse_sweep``) reads the remaining sweep back, so the cells it gets
are compared whole (every field of each configuration, its ``config_id`` included)."""

from __future__ import annotations

from bench_tasks.configs import parse_sweep
from gpucompare.targets import resume

SWEEP = {
    "run_id": "prod.nightly-1.aws-g5", "warmup": 1, "batches": 2, "timeout_s": 300,
    "matrix": [
        {"modes": ["score"], "networks": ["alexnet", "vgg-16"], "batch_sizes": [1, 8],
         "devices": ["gpu:0", "gpu:0,gpu:1"], "dtypes": ["float32", "float16"]},
        {"modes": ["train"], "networks": ["alexnet"], "batch_sizes": [32], "devices": ["gpu:0"],
         "kvstore": "device", "methodology": "custom", "min_time_s": 5, "target_cv_pct": 3, "max_repeats": 7},
        {"modes": ["score"], "networks": ["alexnet"], "batch_sizes": [1], "devices": ["gpu:0"]},  # again
    ],
}


def test_every_point_of_the_sweep_resumes_with_exactly_the_cells_after_it() -> None:
    configs = parse_sweep(SWEEP).configs
    assert len(configs) == 17  # 16 score cells + 1 train cell; the repeated cell once
    for lost_at in range(len(configs)):
        done = {c.config_id for c in configs[:lost_at]}
        remaining = resume.remaining_sweep(SWEEP, done)
        assert remaining is not None and remaining["run_id"] == SWEEP["run_id"]
        assert parse_sweep(remaining).configs == configs[lost_at:], lost_at


def test_cells_done_out_of_order_are_skipped_and_nothing_is_left_when_all_are_done() -> None:
    configs = parse_sweep(SWEEP).configs
    done = {configs[3].config_id, configs[16].config_id}
    remaining = parse_sweep(resume.remaining_sweep(SWEEP, done)).configs
    assert remaining == [c for c in configs if c.config_id not in done]
    assert resume.remaining_sweep(SWEEP, {c.config_id for c in configs}) is None


def test_only_ok_records_stand_and_count_as_done() -> None:
    records = [{"config_id": "a", "status": "ok"}, {"config_id": "b", "status": "timeout"},
               {"config_id": "c", "status": "oom"}, {"config_id": "d", "status": "ok"}]
    assert resume.ok_config_ids(records) == {"a", "d"}
    assert [r["config_id"] for r in resume.kept_records(records)] == ["a", "d"]
