"""The fresh-venv wheel install of the system tests: copy the sources the build reads, build the
wheel, run commands with an environment free of the checkout's settings.

Shared by tests/system/test_wheel.py (the wheel outside the checkout) and
tests/system/test_install_guide.py (docs/install.md's shell blocks, verbatim).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO_ROOT

#: What the build reads (pyproject.toml maps these folders into the distribution).
SOURCES = ("pyproject.toml", "README.md", "plugins", "sql", "dags", "bench_tasks")
EXTRAS = "aws,ssh,celery,postgres"


def run(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    # each step's time, for keeping the test within its budget (pytest -s shows them)
    shown = " ".join(Path(c).name if "/" in c else c for c in command).replace("\n", " ")[:90]
    print(f"  {time.monotonic() - started:6.1f}s  {shown}")
    assert done.returncode == 0, (f"{' '.join(command)} exited {done.returncode}:\n"
                                  f"{done.stdout}\n{done.stderr}")
    return done.stdout


def clean_env(venv: Path, airflow_home: Path) -> dict[str, str]:
    """This environment minus every gpucompare/Airflow setting and path the checkout adds."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("GPUCOMPARE_", "AIRFLOW", "PYTHON", "VIRTUAL_ENV", "PYTEST"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", AIRFLOW_HOME=str(airflow_home),
               AIRFLOW__CORE__LOAD_EXAMPLES="False")
    return env


def copy_sources(destination: Path, also: tuple[str, ...] = ()) -> Path:
    """The files the build reads (and ``also``), copied from the checkout into ``destination``."""
    destination.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in (*SOURCES, *also):
        origin = REPO_ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, destination / name, ignore=ignore)
        else:
            shutil.copy2(origin, destination / name)
    return destination


def build_wheel(tmp_path: Path) -> Path:
    source = copy_sources(tmp_path / "src")
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", str(source), "-w", str(dist)],
        cwd=tmp_path, env=dict(os.environ))
    (wheel,) = dist.glob("gpucompare-*.whl")
    return wheel


