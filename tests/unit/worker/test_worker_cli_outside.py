"""``bench-tasks`` where the worker's packages are not (Airflow's environment): it says what it
needs instead of a ModuleNotFoundError, and its help lists only the public commands."""

from __future__ import annotations

import pytest

from bench_tasks import cli


def test_help_lists_no_internal_command(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    shown = capsys.readouterr().out
    assert "_runner" not in shown and "SUPPRESS" not in shown
    assert all(name in shown for name in ("describe", "score", "train", "sweep", "sysinfo"))


def test_a_command_needing_mxnet_says_what_it_needs(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(cli, "missing_worker_packages", lambda: ["mxnet"])
    assert cli.main(["describe", "--network", "alexnet"]) == cli.EXIT_USAGE
    said = capsys.readouterr().err
    assert "has no mxnet" in said and "MXNet 1.9.1" in said and "GPUCOMPARE_BENCH_PYTHON" in said
    assert "Traceback" not in said
