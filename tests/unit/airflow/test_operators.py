"""The deferral arithmetic and contracts of the deferring steps (``gpucompare.airflow.operators``)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpucompare.airflow.operators import deferral_timeout, handle_json
from gpucompare.targets.base import DeferrableDeploy, DeferrablePrepare, DeferrableTarget, TargetSpec
from gpucompare.targets.ec2.sweeps import SweepStart
from gpucompare.targets.ec2.target import Ec2Target
from gpucompare.targets.local import LocalTarget
from gpucompare.targets.ssh.target import SSHTarget


def test_the_deferral_timeout_is_the_waits_deadline_plus_the_stated_margin(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUCOMPARE_DEFERRAL_MARGIN_S", raising=False)
    assert deferral_timeout(1_000_100.0, now=1_000_000.0) == timedelta(seconds=400)
    # a deadline already past (or disabled: 0) still leaves Airflow the margin, never a negative
    assert deferral_timeout(999_000.0, now=1_000_000.0) == timedelta(seconds=300)
    assert deferral_timeout(0.0, now=1_000_000.0) == timedelta(seconds=300)
    monkeypatch.setenv("GPUCOMPARE_DEFERRAL_MARGIN_S", "12.5")  # the setting, read when the task defers
    assert deferral_timeout(1_000_100.0, now=1_000_000.0) == timedelta(seconds=112.5)


def test_a_handle_is_json_whether_a_target_returns_a_dataclass_or_a_dict() -> None:
    start = SweepStart(command_id="c", decision="start", sweep="s", progress_key="k", limit_s=1.0,
                       deadline=2.0)
    assert handle_json(start) == {"command_id": "c", "decision": "start", "sweep": "s", "progress_key": "k",
                                  "limit_s": 1.0, "deadline": 2.0}
    assert handle_json({"sweep_dir": "/x", "deadline": 3.0}) == {"sweep_dir": "/x", "deadline": 3.0}


def test_which_targets_can_defer_is_declared_by_the_classes() -> None:
    """ssh and ec2 declare the protocols; local (the sweep is the task's own child) does not."""
    assert issubclass(SSHTarget, DeferrableTarget) and issubclass(SSHTarget, DeferrableDeploy)
    assert issubclass(Ec2Target, DeferrableTarget) and issubclass(Ec2Target, DeferrablePrepare)
    assert DeferrableTarget in SSHTarget.__mro__ and DeferrablePrepare in Ec2Target.__mro__  # declared
    local = LocalTarget(TargetSpec(name="l", kind="local", provider="local", instance_type="local-cpu"))
    assert not isinstance(local, DeferrableTarget | DeferrablePrepare | DeferrableDeploy)
    assert not issubclass(SSHTarget, DeferrablePrepare)
