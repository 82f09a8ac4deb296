"""The worker runs unchanged on Python 3.8 to 3.11 (NGC MXNet containers ship 3.8 or 3.10).

No Python 3.8 interpreter is installed here, so the check is static: vermin (pinned in
requirements.txt, run as a process as CI runs it) over ``bench_tasks/``, with a mutant that
proves the check fails when a 3.9+ construct is added.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.support.py38_check import run_vermin, vermin_problems


def test_every_worker_file_runs_on_python_3_8() -> None:
    result = run_vermin(REPO_ROOT / "bench_tasks")
    assert vermin_problems(result) == [], result.stdout + result.stderr
    assert "Minimum required versions: 3.8" in result.stdout


def _mutant(tmp_path: Path, name: str, source: str) -> Path:
    copy = tmp_path / "bench_tasks"
    shutil.copytree(REPO_ROOT / "bench_tasks", copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / name).write_text(source, encoding="utf-8")
    return copy


def test_a_python_3_11_construct_fails_the_check(tmp_path: Path) -> None:
    """Mutant: datetime.UTC (3.11), as the worker had before it was made 3.8-clean."""
    copy = _mutant(tmp_path, "mutant.py", "import datetime\nNOW = datetime.datetime.now(datetime.UTC)\n")
    problems = vermin_problems(run_vermin(copy))
    assert any("3.11" in p for p in problems), problems


def test_match_and_zip_strict_fail_the_check(tmp_path: Path) -> None:
    source = ("def f(x, a, b):\n    match x:\n        case 1:\n"
              "            return list(zip(a, b, strict=True))\n    return None\n")
    problems = vermin_problems(run_vermin(_mutant(tmp_path, "mutant.py", source)))
    assert any("3.10" in p for p in problems), problems


def test_a_file_vermin_cannot_parse_fails_the_check(tmp_path: Path) -> None:
    """vermin exits 0 for a syntax error (it prints ``~2, ~3``); the check must not pass it."""
    result = run_vermin(_mutant(tmp_path, "mutant.py", "for x in y  # a colon missing\n    pass\n"))
    assert result.returncode == 0  # vermin's own verdict, why the output is parsed
    assert any(p.startswith("~2, ~3") for p in vermin_problems(result))
