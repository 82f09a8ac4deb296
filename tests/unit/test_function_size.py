"""Small functions: no function or method outside tests is longer than 60 lines (issue 21).

Runs the measure of ``scripts/code_size.py`` (the script that prints the largest modules and
functions for closing notes) over the library, the worker, the DAG files and the scripts, so the
figure the notes quote and the rule the tests enforce are the same count (decorators included).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from tests.conftest import REPO_ROOT

LIMIT = 60


def _code_size() -> ModuleType:
    spec = importlib.util.spec_from_file_location("code_size", REPO_ROOT / "scripts" / "code_size.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_function_outside_tests_is_longer_than_sixty_lines() -> None:
    code_size = _code_size()
    files = code_size.python_files(REPO_ROOT)
    assert {f.relative_to(REPO_ROOT).parts[0] for f in files} == set(code_size.FOLDERS)
    too_long = sorted((f for path in files for f in code_size.long_functions(path, LIMIT)), reverse=True)
    assert not too_long, "split these into functions that name what they do:\n" + "\n".join(
        f"{lines} lines: {where}" for lines, where in too_long)


def test_the_measure_sees_a_long_function_or_method_and_counts_its_decorators(tmp_path: Path) -> None:
    def body(lines: int, indent: str = "    ") -> str:
        return "\n".join(f"{indent}x{i} = {i}" for i in range(lines))

    source = tmp_path / "m.py"
    source.write_text(
        f"def exactly_sixty():\n{body(59)}\n\n\n"
        f"@decorator\ndef sixty_one_with_its_decorator():\n{body(59)}\n\n\n"
        f"class C:\n    def sixty_one(self):\n{body(60, '        ')}\n",
        encoding="utf-8")
    found = _code_size().long_functions(source, LIMIT)
    assert sorted((lines, where.rsplit(" ", 1)[1]) for lines, where in found) == [
        (61, "sixty_one"), (61, "sixty_one_with_its_decorator")]
