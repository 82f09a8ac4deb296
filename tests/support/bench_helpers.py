"""Run code in the worker environment (``.venv-bench``: MXNet) from tests that run in the orchestrator's.

MXNet needs numpy < 1.24 and the orchestrator's pyarrow needs numpy >= 2, so tests never
import mxnet themselves: they run the worker's interpreter as a subprocess, from the
repository root (so ``bench_tasks`` is importable exactly as the orchestrator calls it).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

from tests.conftest import BENCH_PYTHON, REPO_ROOT


def run_bench_python(
    code_or_args: str | Sequence[str],
    *,
    timeout: float = 300,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``.venv-bench/bin/python -c CODE`` (a string) or ``.venv-bench/bin/python ARGS…`` (a sequence).

    ``run_bench_python("import mxnet")`` or ``run_bench_python(["-m", "bench_tasks", "describe",
    "--network", "alexnet"])``. Standard output and error are captured as text; ``env``
    entries are added to (not substituted for) the current environment. With ``check`` a
    non-zero exit raises ``CalledProcessError`` (its ``stderr`` holds the traceback).
    """
    if not BENCH_PYTHON.exists():
        raise FileNotFoundError(f"worker interpreter {BENCH_PYTHON} is missing: run `make test` to create it")
    args = ["-c", code_or_args] if isinstance(code_or_args, str) else list(code_or_args)
    return subprocess.run(
        [str(BENCH_PYTHON), *args],
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )
