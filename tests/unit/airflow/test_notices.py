"""Our dependencies' known notices are silenced by their exact text only: the Starlette/httpx2 notice
is dropped, the same words inside a longer message and any other warning still show."""

from __future__ import annotations

import warnings
from pathlib import Path

import starlette.testclient

from gpucompare.airflow import notices, provider_info

STARLETTE = "Using `httpx` with `starlette.testclient` is deprecated; install `httpx2` instead."


class StarletteLikeWarning(UserWarning):
    """Stands in for starlette.exceptions.StarletteDeprecationWarning (a UserWarning)."""


def _shown(*messages: str) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        notices.silence_dependency_notices()
        for message in messages:
            warnings.warn(message, StarletteLikeWarning, stacklevel=1)
    return [str(w.message) for w in caught]


def test_the_exact_starlette_notice_is_silenced_and_nothing_wider() -> None:
    longer = STARLETTE + " Also something new."
    other = "Using `httpx` with `starlette.testclient` is removed."
    assert _shown(STARLETTE, longer, other) == [longer, other]


def test_the_notice_text_is_the_one_the_installed_starlette_prints() -> None:
    source = Path(starlette.testclient.__file__).read_text(encoding="utf-8")
    assert [text for text, _ in notices.DEPENDENCY_NOTICES] == [STARLETTE]
    assert f'"{STARLETTE}"' in source


def test_the_provider_entry_point_installs_the_filter() -> None:
    """Airflow calls get_provider_info in every process: that is where the filter comes from."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        provider_info.get_provider_info()
        warnings.warn(STARLETTE, StarletteLikeWarning, stacklevel=1)
    assert caught == []
