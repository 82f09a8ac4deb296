"""Sweep files and command-line matrices: expansion, batch semantics, and errors that name
the key and the allowed values. bench_tasks.configs is standard-library only (+ PyYAML)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench_tasks.configs import ConfigError, expand_matrix, load_sweep_file, parse_devices, parse_sweep
from tests.conftest import REPO_ROOT

WORKER_DOC = REPO_ROOT / "docs" / "worker.md"


def documented_sweep_example() -> str:
    """The sweep file shown in docs/worker.md's "The worker's command line" (the contract)."""
    text = WORKER_DOC.read_text()
    section = text[text.index("## The worker's command line"):]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


def test_readme_sweep_file_expands_to_every_cell(tmp_path: Path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(documented_sweep_example())
    spec = load_sweep_file(path)
    assert spec.run_id == "nightly-2026-11-30T0200"
    score = [c for c in spec.configs if c.mode == "score"]
    train = [c for c in spec.configs if c.mode == "train"]
    assert {(c.network, c.batch_size, c.methodology) for c in score} == {
        ("resnet-50", 1, "official"), ("resnet-50", 4, "official"), ("alexnet", 1, "official"),
        ("alexnet", 4, "official"), ("alexnet", 32, "custom")}
    assert all(c.kvstore is None and c.devices == ("cpu:0",) and c.train_loop is None for c in score)
    assert [c.devices for c in train] == [("cpu:0",), ("cpu:0", "cpu:1")]
    assert all(c.kvstore == "device" and c.scaling == "strong" and c.batch_size == 8 for c in train)
    assert all(c.train_loop == "official" for c in train)
    (custom,) = [c for c in score if c.methodology == "custom"]
    assert (custom.min_time_s, custom.target_cv, custom.max_repeats) == (5.0, 0.02, 20)
    # top-level defaults reach every matrix
    assert all((c.timeout_s, c.warmup, c.batches, c.repeats) == (900, 5, 10, 3) for c in spec.configs)
    assert len({c.config_id for c in spec.configs}) == len(spec.configs) == 7


def test_json_sweep_file_and_matrix_overrides(tmp_path: Path) -> None:
    path = tmp_path / "sweep.json"
    path.write_text('{"repeats": 2, "matrix": [{"modes": ["train"], "networks": ["alexnet"], '
                    '"batch_sizes": [2], "repeats": 1, "kvstore": "local", "dtypes": ["float16"]}]}')
    (config,) = load_sweep_file(path).configs
    assert (config.repeats, config.kvstore, config.dtype) == (1, "local", "float16")


def test_weak_scaling_holds_the_per_device_batch() -> None:
    strong, weak = (expand_matrix({"modes": ["train"], "networks": ["alexnet"], "batch_sizes": [4],
                                   "devices": ["cpu:0,cpu:1"], "scaling": kind})[0]
                    for kind in ("strong", "weak"))
    assert strong.worker_batch == 4
    assert weak.worker_batch == 8


def test_repeated_cells_are_run_once() -> None:
    spec = parse_sweep({"matrix": [
        {"modes": ["score"], "networks": ["alexnet"], "batch_sizes": [1, 1]},
        {"modes": ["score"], "networks": ["alexnet"], "batch_sizes": [1]}]})
    assert len(spec.configs) == 1


@pytest.mark.parametrize(("text", "expected"), [
    ("cpu", ("cpu:0",)), ("gpu", ("gpu:0",)), ("gpu:0,gpu:1", ("gpu:0", "gpu:1")),
    ("cpu:0, cpu:1", ("cpu:0", "cpu:1")),
])
def test_device_lists(text: str, expected: tuple[str, ...]) -> None:
    assert parse_devices(text) == expected


@pytest.mark.parametrize("text", ["tpu:0", "gpu0", "gpu:0,cpu:1", "gpu:0,gpu:0", "gpu:-1", ""])
def test_malformed_device_lists_name_the_allowed_forms(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_devices(text)
    assert caught.value.where == "--devices"
    assert "gpu:N" in caught.value.message


@pytest.mark.parametrize(("document", "where", "needle"), [
    ({"matrix": [{"modes": ["score"], "networks": ["resnet-51"], "batch_sizes": [1]}]},
     "matrix[0].networks", "resnet-50"),
    ({"matrix": [{"modes": ["score"], "networks": ["alexnet"], "batch_sizes": [0]}]},
     "matrix[0].batch_sizes", "[1, 4096]"),
    ({"matrix": [{"modes": ["infer"], "networks": ["alexnet"], "batch_sizes": [1]}]},
     "matrix[0].modes", "score, train"),
    ({"matrix": [{"modes": ["train"], "networks": ["alexnet"], "batch_sizes": [1], "kvstore": "ring"}]},
     "matrix[0].kvstore", "dist_sync"),
    ({"matrix": [{"modes": ["train"], "networks": ["alexnet"], "batch_sizes": [1], "gpus": 2}]},
     "matrix[0].gpus", "batch_sizes"),
    ({"matrix": [{"modes": ["train"], "networks": ["alexnet"]}]}, "matrix[0].batch_sizes", "missing"),
    ({"timeout": 5, "matrix": []}, "timeout", "timeout_s"),
    ({"run_id": "line\nbreak", "matrix": [{"modes": ["score"], "networks": ["alexnet"],
                                           "batch_sizes": [1]}]}, "run_id", "letters, digits and . _ : + -"),
])
def test_bad_sweep_files_name_the_key_and_allowed_values(document: dict, where: str, needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_sweep(document)
    assert where in caught.value.where
    assert needle in caught.value.message
