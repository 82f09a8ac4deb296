"""What a test does when a system part it needs (Chromium, sshd, PostgreSQL, Redis) is missing:
under CI (``CI=true``) the run FAILS, naming the part, so a CI image that lost a package cannot
turn tests into silent skips; on a developer's machine the test is skipped with the same message."""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def require_part(name: str, present: object, hint: str = "run scripts/install-system-deps.sh") -> None:
    """Fail (CI) or skip (elsewhere) unless ``present`` is truthy."""
    if present:
        return
    message = f"{name} is not installed ({hint})"
    if in_ci():
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message)
