"""docs/install.md, followed to the letter: every ``sh`` block of the page, in order and verbatim,
in one bash session, from a fresh ``HOME`` (so ``~`` is empty) inside a copy of the checkout
(the guide builds its wheel there and pins with its ``constraints.txt``), with no gpucompare or
Airflow setting inherited. It must end with a report that ranks a measured machine.

Stands in for a new operator with nothing but the checkout and Python 3.11: the fresh venv, the
wheel build and install (the same copy-the-sources step as tests/system/test_wheel.py), pip
installs from the package index (pip's cache is kept), a real ``airflow dags test`` of the
nightly DAG on the local target with the worker environment the guide creates, the reports DAG,
and the unpause/trigger commands against the SQLite metadata database. Slow: pip installs
Airflow and MXNet.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.wheel_support import copy_sources

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

GUIDE = REPO_ROOT / "docs" / "install.md"
#: a fenced block of shell commands: ```sh … ```
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def guide_blocks(text: str) -> list[str]:
    """The guide's shell blocks, in the order of the page."""
    return [block.rstrip("\n") for block in SH_BLOCK.findall(text)]


def _environment(home: Path) -> dict[str, str]:
    """A login-like environment: no venv, no gpucompare/Airflow setting; pip's cache kept."""
    cache = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("GPUCOMPARE_", "AIRFLOW", "PYTHON", "VIRTUAL_ENV", "PYTEST"))}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p]
    env.update(HOME=str(home), PIP_CACHE_DIR=cache, PATH=os.pathsep.join(path))
    return env


def test_the_guide_has_every_step_in_order() -> None:
    """The steps the issue lists, in the order a fresh install needs them."""
    script = "\n".join(guide_blocks(GUIDE.read_text()))
    steps = ["pip install", "GPUCOMPARE_DEPLOYMENT=", "airflow db migrate", "airflow pools set",
             "gpucompare load-prices", "gpucompare import-catalog --shipped", "gpucompare import-published",
             "GPUCOMPARE_BENCH_PYTHON=", "gpucompare add-price", "gpucompare dags install",
             "airflow dags test gpucompare_nightly", "airflow dags test gpucompare_reports",
             "airflow dags unpause", "airflow dags trigger"]
    places = [script.find(step) for step in steps]
    assert -1 not in places, [s for s, p in zip(steps, places, strict=True) if p == -1]
    assert places == sorted(places), steps


def test_the_install_guide_reaches_a_ranked_table(tmp_path: Path) -> None:
    checkout = copy_sources(tmp_path / "checkout", also=("constraints.txt",))
    home = tmp_path / "home"
    home.mkdir()
    blocks = guide_blocks(GUIDE.read_text())
    script = "set -euo pipefail\n" + "\n".join(
        f"echo '>>> block {index + 1} at '$(date +%s)\n{block}" for index, block in enumerate(blocks))
    started = time.monotonic()
    log, errors = tmp_path / "guide.out", tmp_path / "guide.err"  # written as it goes: a slow step shows
    with log.open("w") as out, errors.open("w") as err:
        code = subprocess.run(["bash", "-c", script], cwd=checkout, env=_environment(home), stdout=out,
                              stderr=err, text=True, timeout=3400).returncode
    stdout, stderr = log.read_text(), errors.read_text()
    print(f"{len(blocks)} blocks of {GUIDE.name} in {time.monotonic() - started:.0f} s")
    print(stdout[-6000:])
    assert code == 0, f"exit {code}:\n{stdout[-8000:]}\n{stderr[-8000:]}"
    assert f">>> block {len(blocks)} " in stdout

    reports = home / "airflow" / "gpucompare" / "reports" / "latest"
    with (reports / "best_value.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    ours = [r for r in rows if r["provider"] == "local" and r["ranked"] == "true"]
    assert ours, rows[:3]
    assert {r["price_source"] for r in ours} == {"declared"}
    assert all(r["price_note"].startswith("declared: example price") for r in ours)
    assert (reports / "index.html").is_file()
    # the lake the commands filled is the one the DAGs read: one lake, under AIRFLOW_HOME
    assert (home / "airflow" / "gpucompare" / "lake" / "results" / "_delta_log").is_dir()
    assert not (checkout / "lake").exists()
    assert "no lake at" not in stderr
    # every airflow and gpucompare command ran without a warning of a dependency
    assert "DeprecationWarning" not in stderr, stderr[-4000:]
