"""What the worker needs from Python versions newer than 3.8, written for 3.8.

The worker runs unchanged on Python 3.8 to 3.11 (NVIDIA's MXNet containers ship 3.8 or 3.10,
the project's own image 3.11); ``tests/integration/worker/test_worker_py38.py`` checks every
file of ``bench_tasks`` with vermin. Standard library only.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator


def zip_strict(*iterables: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """``zip(..., strict=True)`` (3.10+): the tuples of ``zip``, and a ValueError when the
    iterables are not all of the same length."""
    iterators = [iter(i) for i in iterables]
    if not iterators:
        return
    done = object()
    while True:
        values = [next(i, done) for i in iterators]
        ended = [v is done for v in values]
        if all(ended):
            return
        if any(ended):
            raise ValueError(f"zip_strict: argument {ended.index(True) + 1} is shorter than the others")
        yield tuple(values)


def remove_prefix(text: str, prefix: str) -> str:
    """``str.removeprefix`` (3.9+)."""
    return text[len(prefix):] if prefix and text.startswith(prefix) else text
