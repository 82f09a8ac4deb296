"""Failure classification against MXNet's recorded error texts (tests/support/data/mxnet_errors/).

Each recorded file's name starts with the status it must get, so adding a newly seen MXNet
wording is adding a file. Runs in the orchestrator's environment: bench_tasks.errors is
standard-library only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_tasks.constants import STATUSES
from bench_tasks.errors import MAX_ERROR_CHARS, classify_failure, summarize_error
from tests.conftest import DATA_DIR

ERRORS_DIR = DATA_DIR / "mxnet_errors"
RECORDED = sorted(ERRORS_DIR.glob("*.txt"))


def expected_status(path: Path) -> str:
    return next(s for s in sorted(STATUSES, key=len, reverse=True) if path.name.startswith(s + "_"))


def test_every_status_of_a_failure_has_recorded_text() -> None:
    statuses = {expected_status(p) for p in RECORDED}
    assert statuses == {"oom", "batch_smaller_than_devices", "unsupported", "error"}
    assert sum(expected_status(p) == "oom" for p in RECORDED) >= 6  # one per MXNet wording


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_recorded_error_is_classified_by_its_status(path: Path) -> None:
    assert classify_failure(path.read_text()) == expected_status(path)


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_summary_drops_the_backtrace_and_keeps_the_message(path: Path) -> None:
    text = path.read_text()
    summary = summarize_error(text)
    assert "[bt]" not in summary
    assert len(summary) <= MAX_ERROR_CHARS
    # The summary alone must still be classified the same way (records keep only the summary).
    assert classify_failure(summary) == expected_status(path)


def test_summary_puts_the_failing_line_first_and_truncates() -> None:
    text = "Traceback (most recent call last):\n  File \"x.py\", line 3\n" + "noise\n" * 600 + \
        "MXNetError: Memory allocation failed out of memory\n"
    summary = summarize_error(text)
    assert summary.startswith("MXNetError: Memory allocation failed out of memory")
    assert summary.endswith("...") and len(summary) == MAX_ERROR_CHARS


def test_an_unknown_failure_is_an_error_not_oom() -> None:
    assert classify_failure("RuntimeError: something else broke") == "error"
    assert classify_failure("CUDA: an illegal memory access was encountered") == "error"
    assert summarize_error("") == "unknown failure (no message)"
