"""The fresh-venv wheel install of the system tests: copy the sources the build reads, run
docs/install.md's shell blocks verbatim (which build the wheel and install it into a fresh venv),
run commands with an environment free of the checkout's settings.

The guide runs once (the ``install_guide`` fixture of tests/system/test_install_guide.py), whose
tests check where it ends and the wheel and venv it installed (installing Airflow into a fresh
venv takes minutes: once, not twice).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO_ROOT

#: What the build reads (pyproject.toml maps these folders into the distribution).
SOURCES = ("pyproject.toml", "README.md", "plugins", "sql", "dags", "bench_tasks")
EXTRAS = "aws,ssh,celery,postgres"
GUIDE = REPO_ROOT / "docs" / "install.md"
#: a fenced block of shell commands: ```sh … ```
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL)


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


def guide_blocks(text: str) -> list[str]:
    """The guide's shell blocks, in the order of the page."""
    return [block.rstrip("\n") for block in SH_BLOCK.findall(text)]


def login_env(home: Path) -> dict[str, str]:
    """A login-like environment: no venv, no gpucompare/Airflow setting; pip's cache kept."""
    cache = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("GPUCOMPARE_", "AIRFLOW", "PYTHON", "VIRTUAL_ENV", "PYTEST"))}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p]
    env.update(HOME=str(home), PIP_CACHE_DIR=cache, PATH=os.pathsep.join(path))
    return env


@dataclass(frozen=True)
class GuideRun:
    """docs/install.md followed once: where, how it ended, what it printed."""

    checkout: Path
    home: Path
    blocks: int
    code: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def venv(self) -> Path:
        """The venv the guide's first block creates and installs the wheel into."""
        return self.home / "gpucompare" / "venv"

    @property
    def wheel(self) -> Path:
        """The wheel the guide builds (``pip wheel … -w dist`` in the checkout)."""
        (wheel,) = (self.checkout / "dist").glob("gpucompare-*.whl")
        return wheel


def run_install_guide(root: Path) -> GuideRun:
    """Every ``sh`` block of docs/install.md, in order and verbatim, in one bash session, from a
    fresh ``HOME`` inside a copy of the checkout (the guide builds its wheel there and pins with
    its ``constraints.txt``). Never raises on the guide's failure: the result says how it ended."""
    checkout = copy_sources(root / "checkout", also=("constraints.txt",))
    home = root / "home"
    home.mkdir()
    blocks = guide_blocks(GUIDE.read_text())
    script = "set -euo pipefail\n" + "\n".join(
        f"echo '>>> block {index + 1} at '$(date +%s)\n{block}" for index, block in enumerate(blocks))
    started = time.monotonic()
    log, errors = root / "guide.out", root / "guide.err"  # written as it goes: a slow step shows
    with log.open("w") as out, errors.open("w") as err:
        code = subprocess.run(["bash", "-c", script], cwd=checkout, env=login_env(home), stdout=out,
                              stderr=err, text=True, timeout=3400).returncode
    return GuideRun(checkout=checkout, home=home, blocks=len(blocks), code=code, stdout=log.read_text(),
                    stderr=errors.read_text(), seconds=time.monotonic() - started)
