"""Small real score and train runs on the CPU with MXNet 1.9.1 (.venv-bench): valid records,
the batch split over devices, repeats with median and CV, and throughput figures that agree
with the wall clock."""

from __future__ import annotations

import json
import statistics
from datetime import datetime
from pathlib import Path

from tests.support.bench_helpers import run_bench_python
from tests.support.worker_support import read_records, timed_seconds


def wall_seconds(record: dict) -> float:
    return (datetime.fromisoformat(record["finished_at"])
            - datetime.fromisoformat(record["started_at"])).total_seconds()


def test_score_records_for_networks_and_batch_sizes(tmp_path: Path) -> None:
    output = tmp_path / "results.jsonl"
    output.write_text(json.dumps({"earlier": "line"}) + "\n")  # appended to, never truncated
    result = run_bench_python(
        ["-m", "bench_tasks", "score", "--networks", "alexnet,resnet-50", "--batch-sizes", "1,2",
         "--devices", "cpu", "--warmup", "1", "--batches", "1", "--repeats", "2",
         "--run-id", "score-test", "--output", str(output)], timeout=600)
    assert result.returncode == 0, result.stderr
    lines = output.read_text().splitlines()
    assert json.loads(lines[0]) == {"earlier": "line"}
    output.write_text("\n".join(lines[1:]) + "\n")
    records = read_records(output)
    assert [(r["network"], r["batch_size"]) for r in records] == [
        ("alexnet", 1), ("alexnet", 2), ("resnet-50", 1), ("resnet-50", 2)]
    for record in records:
        assert record["status"] == "ok", record["error"]
        assert record["run_id"] == "score-test" and record["mode"] == "score"
        assert record["kvstore"] is None and record["devices"] == ["cpu:0"]
        assert record["per_device_batch"] == record["batch_size"] and record["gpu_count"] == 1
        # timed_batches counts every timed batch: 2 repeats of 1
        assert (record["warmup_batches"], record["timed_batches"], record["repeats"]) == (1, 2, 2)
        assert (record["methodology"], record["stop_rule"]) == ("official", "fixed_batches")
        assert abs(record["timed_seconds"] - timed_seconds(record)) < 1e-5
        samples = record["images_per_sec_samples"]
        assert len(samples) == 2 and record["images_per_sec"] == statistics.median(samples)
        assert record["cv"] == statistics.stdev(samples) / statistics.mean(samples)
        assert record["image_shape"] == "3,224,224" and record["mxnet_version"] == "1.9.1"
        # the timed batches happened inside this configuration's wall time
        assert 0 < timed_seconds(record) < wall_seconds(record)
    assert records[0]["parameters"] == records[1]["parameters"] != records[2]["parameters"]
    assert len({r["config_id"] for r in records}) == 4
    progress = [line for line in result.stderr.splitlines() if line.startswith("[")]
    assert [line.split("]")[0] for line in progress] == ["[1/4", "[2/4", "[3/4", "[4/4"]
    assert all("ETA" in line for line in progress)


def test_train_data_parallel_on_two_cpu_devices(tmp_path: Path) -> None:
    output = tmp_path / "results.jsonl"
    result = run_bench_python(
        ["-m", "bench_tasks", "train", "--networks", "alexnet", "--batch-sizes", "2",
         "--devices", "cpu:0,cpu:1", "--devices", "cpu", "--warmup", "1", "--batches", "1",
         "--repeats", "1", "--output", str(output)], timeout=600)
    assert result.returncode == 0, result.stderr
    two, one = read_records(output)
    for record in (two, one):
        assert record["status"] == "ok", record["error"]
        assert record["mode"] == "train" and record["kvstore"] == "device"
        assert record["batch_size"] == 2 and record["images_per_sec"] > 0
        assert record["cv"] is None and len(record["images_per_sec_samples"]) == 1
        assert 0 < timed_seconds(record) < wall_seconds(record)
    assert two["devices"] == ["cpu:0", "cpu:1"] and two["gpu_count"] == 2 and two["per_device_batch"] == 1
    assert one["devices"] == ["cpu:0"] and one["gpu_count"] == 1 and one["per_device_batch"] == 2
    assert two["device_kind"] == "cpu" and two["num_nodes"] == 1 and two["per_worker_images_per_sec"] == []


def test_score_and_train_loops_directly_on_a_tiny_network() -> None:
    """measure.score/train on a 2-layer symbol: the loops' contract without a big network."""
    code = """
import json, mxnet as mx
from bench_tasks import measure
from bench_tasks.methodology import StopPolicy
data = mx.sym.Variable('data')
net = mx.sym.FullyConnected(mx.sym.flatten(mx.sym.Convolution(data, num_filter=4, kernel=(3, 3))),
                            num_hidden=10)
sym = mx.sym.SoftmaxOutput(net, name='softmax')
s = measure.score(sym, (3, 8, 8), 4, ('cpu:0',), warmup=2, policy=StopPolicy(batches=3, repeats=4))
t = measure.train(sym, (3, 8, 8), 4, ('cpu:0', 'cpu:1'), kvstore=measure.create_kvstore('local'),
                  dtype='float32', warmup=1, policy=StopPolicy(batches=2, repeats=2))
print(json.dumps({'score': s.images_per_sec, 'score_timed': s.timed_s, 'train': t.images_per_sec,
                  'train_timed': t.timed_s, 'workers': t.num_workers}))
"""
    result = run_bench_python(code, timeout=120)
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(figures["score"]) == 4 and len(figures["train"]) == 2
    # images/s = batches × batch / elapsed: the timed seconds are recovered from the samples
    assert abs(sum(3 * 4 / s for s in figures["score"]) - figures["score_timed"]) < 1e-6
    assert abs(sum(2 * 4 / s for s in figures["train"]) - figures["train_timed"]) < 1e-6
    assert figures["workers"] == 1
