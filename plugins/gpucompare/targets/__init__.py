"""Execution targets: where ``python -m bench_tasks sweep`` runs (see ``base`` for the interface).

``make_target(spec)`` builds the target for a spec's ``kind``. Each kind's module is imported
only when it is asked for, so a local run never imports boto3 and the SSH provider is only
loaded for ssh targets.
"""

from __future__ import annotations

import importlib
from typing import Any

from gpucompare.targets.base import LineSink, Target, TargetError, TargetSpec, TargetState

#: kind → the module that implements it (the class is the Target subclass with that kind).
TARGET_MODULES: dict[str, str] = {
    "local": "gpucompare.targets.local",
    "ssh": "gpucompare.targets.ssh.target",
    "ec2": "gpucompare.targets.ec2.target",
}
KINDS: tuple[str, ...] = tuple(TARGET_MODULES)


def target_class(kind: str) -> type[Target]:
    """The class implementing ``kind``; a clear error for a kind that does not exist."""
    if kind not in TARGET_MODULES:
        raise TargetError(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
    module = importlib.import_module(TARGET_MODULES[kind])
    for value in vars(module).values():
        if (isinstance(value, type) and issubclass(value, Target) and value is not Target
                and getattr(value, "kind", None) == kind):
            return value
    raise TargetError(f"kind: module {module.__name__} defines no Target with kind {kind!r}")


def make_target(spec: TargetSpec | dict[str, Any], *, line_sink: LineSink | None = None,
                **kwargs: Any) -> Target:
    """Build the target for ``spec`` (a TargetSpec or its dict form, e.g. from XCom)."""
    if isinstance(spec, dict):
        spec = TargetSpec.from_dict(spec)
    return target_class(spec.kind)(spec, line_sink=line_sink, **kwargs)


__all__ = ["KINDS", "LineSink", "Target", "TargetError", "TargetSpec", "TargetState",
           "make_target", "target_class"]
