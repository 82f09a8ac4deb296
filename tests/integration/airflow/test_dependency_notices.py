"""Real ``airflow`` commands (the venv's executable, in subprocesses, on the session's migrated
metadata database) print no Starlette/httpx2 notice with the pinned constraints.

``airflow dag-processor --num-runs 1`` is the command that shows it: parsing builds Airflow's
in-process execution API, which imports ``fastapi.testclient``. A control run proves the pinned
starlette still emits the notice on that import, so its absence comes from our filter
(``gpucompare.airflow.notices``, installed by the provider entry point), not from luck.
Airflow's logging prints warnings to stdout, so both streams are checked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.fixtures_airflow import AIRFLOW_BIN, AIRFLOW_ENV

NOTICE = "install `httpx2` instead"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(args), env={**os.environ, **AIRFLOW_ENV}, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done


def test_the_pinned_starlette_still_emits_the_notice_without_airflow() -> None:
    done = _run(sys.executable, "-W", "default", "-c", "import fastapi.testclient")
    assert NOTICE in done.stderr


def test_airflow_commands_print_no_starlette_notice(airflow_db: Path) -> None:
    for command in (["version"], ["dag-processor", "--num-runs", "1"], ["dags", "list"]):
        done = _run(str(AIRFLOW_BIN), *command)
        assert NOTICE not in done.stderr, (command, done.stderr[-2000:])
        assert NOTICE not in done.stdout, (command, done.stdout[-2000:])
    # the processor did parse (and so built the execution API): the DAGs are in the database now
    assert "gpucompare_nightly" in done.stdout
