"""What vermin cannot see of the worker's Python 3.8 rule: PEP 604 unions and PEP 585 generics
evaluated at run time (a module-level alias), ``str.removeprefix`` on an untyped value; and the
3.8 stand-ins of ``bench_tasks.compat``. (The vermin run is tests/integration/worker/test_worker_py38.py.)
"""

from __future__ import annotations

import pytest

from bench_tasks.compat import remove_prefix, zip_strict
from tests.conftest import REPO_ROOT
from tests.support.py38_check import folder_problems, runtime_typing_problems


def test_no_runtime_typing_of_python_3_9_or_later_in_the_worker() -> None:
    assert folder_problems(REPO_ROOT / "bench_tasks") == []


def test_the_syntax_check_finds_each_construct() -> None:
    """Mutants: each line below broke the worker on 3.8 before this issue (layers.py,
    gpumemory.py, cli.py)."""
    source = ("from collections.abc import Callable\nSize = int | tuple[int, int]\n"
              "Probe = Callable[[str], int]\nkey = where.removeprefix('flags.')\n"
              "def f(a: int | None) -> dict[str, int]:\n    return a | 2\n")
    problems = runtime_typing_problems(source)
    lines = sorted(p.split(": ", 1)[0] for p in problems)
    assert lines == ["<source>:2", "<source>:2", "<source>:3", "<source>:4"]


def test_zip_strict_and_remove_prefix_behave_as_the_3_10_builtins() -> None:
    assert list(zip_strict([1, 2], "ab")) == [(1, "a"), (2, "b")]
    with pytest.raises(ValueError, match="argument 2 is shorter"):
        list(zip_strict([1, 2], "a"))
    with pytest.raises(ValueError, match="argument 1 is shorter"):
        list(zip_strict([1], "ab"))
    assert list(zip_strict()) == []
    assert remove_prefix("flags.batch", "flags.") == "batch" and remove_prefix("x", "flags.") == "x"
    assert remove_prefix("abc", "") == "abc"
