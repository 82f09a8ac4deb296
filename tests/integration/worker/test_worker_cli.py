"""The worker's command line: bad flags exit 2 naming the flag and the allowed values, and
nothing is written; ``describe`` prints the network's JSON. Runs ``python -m bench_tasks`` in
.venv-bench, as the orchestrator does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench_tasks.record import validate_record
from tests.support.bench_helpers import run_bench_python

BAD_SWEEP = "matrix:\n  - modes: [score]\n    networks: [resnet-51]\n    batch_sizes: [1]\n"


@pytest.mark.parametrize(("args", "needles"), [
    (["score", "--networks", "resnet-51", "--batch-sizes", "1"], ["--networks", "resnet-50, resnet-152"]),
    (["score", "--networks", "alexnet", "--batch-sizes", "0"], ["--batch-sizes", "positive integers"]),
    (["score", "--networks", "alexnet", "--batch-sizes", "1,x"], ["--batch-sizes", "positive integers"]),
    (["score", "--networks", "alexnet", "--batch-sizes", "1", "--devices", "gpu0"], ["--devices", "gpu:N"]),
    (["train", "--networks", "alexnet", "--batch-sizes", "1", "--devices", "gpu:0,cpu:1"],
     ["--devices", "mixes cpu and gpu"]),
    (["score", "--networks", "alexnet", "--batch-sizes", "1", "--dtype", "float64"],
     ["--dtype", "float32, float16"]),
    (["train", "--networks", "alexnet", "--batch-sizes", "1", "--kvstore", "ring"],
     ["--kvstore", "dist_device_sync"]),
    (["train", "--networks", "alexnet", "--batch-sizes", "1", "--scaling", "linear"], ["--scaling", "weak"]),
    (["score", "--networks", "alexnet", "--batch-sizes", "1", "--warmup", "-1"], ["--warmup", "[0, 1000]"]),
    (["score", "--networks", "alexnet", "--batch-sizes", "1", "--timeout", "0"], ["--timeout", "(0, 86400]"]),
    (["score", "--networks", "alexnet", "--batch-sizes", "1", "--run-id", "bad\tid"],
     ["--run-id", "letters, digits and . _ : + -"]),
    (["train", "--networks", "alexnet", "--batch-sizes", "1", "--kvstore", "dist_sync"],
     ["--kvstore", "DMLC_ROLE"]),
    (["sweep", "--modes", "score,infer", "--networks", "alexnet", "--batch-sizes", "1"],
     ["--modes", "score, train"]),
    (["sweep"], ["--config", "--modes"]),
    (["sweep", "--config", "sweep.yaml", "--networks", "alexnet"], ["--networks", "either --config"]),
    (["sweep", "--config", "missing.yaml"], ["--config", "cannot read"]),
    (["sweep", "--config", "bad.yaml"], ["matrix[0].networks", "resnet-50"]),
    (["describe", "--network", "lenet"], ["--network", "alexnet"]),
])
def test_bad_flags_exit_2_naming_the_flag_and_allowed_values(tmp_path: Path, args: list[str],
                                                            needles: list[str]) -> None:
    (tmp_path / "bad.yaml").write_text(BAD_SWEEP)
    (tmp_path / "sweep.yaml").write_text(BAD_SWEEP.replace("resnet-51", "alexnet"))
    args = [str(tmp_path / a) if a.endswith(".yaml") else a for a in args]
    output = tmp_path / "out.jsonl"
    result = run_bench_python(["-m", "bench_tasks", *args, *(["--output", str(output)]
                                                             if args[0] != "describe" else [])],
                              env={"DMLC_ROLE": ""}, timeout=120)
    assert result.returncode == 2, result.stderr
    for needle in needles:
        assert needle in result.stderr
    assert not output.exists()


def test_describe_prints_the_networks_json() -> None:
    result = run_bench_python(["-m", "bench_tasks", "describe", "--network", "inception-v3"],
                              check=True, timeout=120)
    described = json.loads(result.stdout)
    assert described["network"] == "inception-v3"
    assert described["image_shape"] == "3,299,299"
    assert described["parameters"] > 20_000_000


def test_an_output_that_cannot_be_written_is_a_usage_error() -> None:
    result = run_bench_python(["-m", "bench_tasks", "score", "--networks", "alexnet", "--batch-sizes", "1",
                               "--output", "/proc/no-such-dir/out.jsonl"], timeout=120)
    assert result.returncode == 2
    assert "--output" in result.stderr and "cannot append" in result.stderr


def test_a_dist_kvstore_runs_only_as_a_worker_and_one_configuration_per_launch() -> None:
    dmlc = {"DMLC_ROLE": "server", "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9",
            "DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": "1"}
    base = ["-m", "bench_tasks", "train", "--networks", "alexnet", "--kvstore", "dist_sync"]
    as_server = run_bench_python([*base, "--batch-sizes", "1"], env=dmlc, timeout=60)
    assert as_server.returncode == 2 and "DMLC_ROLE is 'server'" in as_server.stderr
    two = run_bench_python([*base, "--batch-sizes", "1,2"], env={**dmlc, "DMLC_ROLE": "worker"}, timeout=60)
    assert two.returncode == 2 and "exactly one configuration per launch" in two.stderr


def test_output_dash_writes_records_to_stdout_and_progress_to_stderr() -> None:
    """A cell decided before running: no measuring process, so this is fast."""
    result = run_bench_python(["-m", "bench_tasks", "train", "--networks", "alexnet", "--batch-sizes", "1",
                               "--devices", "cpu:0,cpu:1", "--run-id", "stdout-test", "--output", "-"],
                              timeout=120)
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.splitlines()
    record = validate_record(json.loads(line))
    assert (record["status"], record["run_id"]) == ("batch_smaller_than_devices", "stdout-test")
    assert "[1/1]" in result.stderr
    assert "1 records (1 batch_smaller_than_devices) written to stdout" in result.stderr
