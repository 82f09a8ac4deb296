"""The local target without a worker environment: a permanent error (no retry can make one),
naming the ``bench_python`` setting and the commands for the install at hand (a checkout's
``make envs``, or a venv from the wheel's shipped requirements).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucompare.errors import PermanentError
from gpucompare.targets import local
from gpucompare.targets.base import TargetSpec


def _target(tmp_path: Path) -> local.LocalTarget:
    spec = TargetSpec(name="local", kind="local", provider="local", instance_type="local-cpu",
                      options={"python": str(tmp_path / "no-such-venv" / "bin" / "python"),
                               "work_dir": str(tmp_path / "runs")})
    return local.LocalTarget(spec)


def test_a_missing_worker_interpreter_is_permanent_and_says_how_in_a_checkout(tmp_path: Path) -> None:
    target = _target(tmp_path)
    with pytest.raises(local.WorkerEnvironmentError) as caught:
        target.deploy(target.prepare("run-1"))
    assert isinstance(caught.value, PermanentError)  # the pipeline fails it at once, no retry
    text = str(caught.value)
    assert "bench_python (GPUCOMPARE_BENCH_PYTHON or [gpucompare] bench_python" in text
    assert "envs`" in text and ".venv-bench/bin/python" in text  # the tests run from a checkout


def test_from_a_wheel_the_advice_is_a_venv_from_the_shipped_requirements(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "checkout_root", lambda: None)
    target = _target(tmp_path)
    with pytest.raises(local.WorkerEnvironmentError) as caught:
        target.deploy(target.prepare("run-1"))
    text = str(caught.value)
    assert "make" not in text
    assert "python3.11 -m venv" in text and "requirements-cpu.txt" in text and "bench_python" in text
