"""One lake for every command: each ``gpucompare`` subcommand, run as a process of its own from a
folder that is neither the checkout nor the lake's, with only ``GPUCOMPARE_LAKE`` set (no
``--lake``), reads and writes that lake, says so, and a reading command facing no lake there
ends with exit 2 naming where it looked and how to make one.

Stands in for an operator's shell after installing the wheel: the lake the DAGs use is the one
the settings name, and no command falls back to a ``./lake`` of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.lake_support import run_records, write_records

pytestmark = pytest.mark.timeout(2400)


def _env(lake: Path, airflow_home: Path) -> dict[str, str]:
    """This environment without any gpucompare or Airflow setting, plus GPUCOMPARE_LAKE only
    (and an AIRFLOW_HOME of the test's own, so nothing defaults into the user's ~/airflow; and
    the deployment's name, a required setting that plan's run ids carry)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUCOMPARE_", "AIRFLOW"))}
    env.update(GPUCOMPARE_LAKE=str(lake), GPUCOMPARE_DEPLOYMENT="lake-test", AIRFLOW_HOME=str(airflow_home),
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "plugins")]))
    return env


def _run(*args: str, cwd: Path, env: dict[str, str], code: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "gpucompare", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == code, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def _gpucompare(*args: str, cwd: Path, env: dict[str, str], code: int = 0) -> str:
    done = _run(*args, cwd=cwd, env=env, code=code)
    return done.stdout + done.stderr


def test_every_subcommand_uses_the_lake_setting(tmp_path: Path) -> None:
    lake, elsewhere, home = tmp_path / "configured-lake", tmp_path / "elsewhere", tmp_path / "airflow"
    elsewhere.mkdir()
    env = _env(lake, home)
    said = f"lake {lake} (from GPUCOMPARE_LAKE)"

    # reading commands before any lake exists: exit 2, where they looked and how to make one
    for command in (["lake-info"], ["compact"], ["report"]):
        out = _gpucompare(*command, cwd=elsewhere, env=env, code=2)
        assert f"no lake at {lake} (from GPUCOMPARE_LAKE)" in out, out
        assert "gpucompare load-prices" in out and "gpucompare import-published" in out, out
    # plan can estimate from constants (the cost guard before a first night), and says it does
    out = _gpucompare("plan", cwd=elsewhere, env=env)
    assert f"no lake at {lake} (from GPUCOMPARE_LAKE)" in out and "going on without one" in out, out
    assert not lake.exists()

    # the writing commands create and fill the configured lake, never ./lake
    outputs = {
        "load-prices": _gpucompare("load-prices", cwd=elsewhere, env=env),
        "import-published": _gpucompare("import-published", cwd=elsewhere, env=env),
        "import-catalog": _gpucompare("import-catalog", "--shipped", cwd=elsewhere, env=env),
        "add-price": _gpucompare("add-price", "--provider", "local", "--instance-type", "cpu",
                                 "--per-hour", "0.5", "--currency", "EUR", "--from", "2026-01-01",
                                 "--label", "test machine", cwd=elsewhere, env=env),
        "ingest": _gpucompare("ingest", "--results", str(write_records(tmp_path / "r.jsonl",
                                                                       run_records("run-a", 4))),
                              "--provider", "local", "--instance-type", "cpu", "--run-id", "run-a",
                              cwd=elsewhere, env=env),
    }
    for command, out in outputs.items():
        assert said in out, (command, out)
    assert not (elsewhere / "lake").exists() and not (REPO_ROOT / "tests" / "lake").exists()

    info = _gpucompare("lake-info", cwd=elsewhere, env=env)
    assert said in info
    assert "results: version" in info and "prices: version" in info, info
    assert said in _gpucompare("compact", cwd=elsewhere, env=env)

    # report without --out: the reports setting's folder (its default under AIRFLOW_HOME)
    report = _gpucompare("report", cwd=elsewhere, env=env)
    assert said in report
    latest = home / "gpucompare" / "reports" / "latest"
    assert (latest / "index.html").is_file(), report
    best = (latest / "best_value.csv").read_text()
    assert "declared" in best and "test machine" in best  # the declared price ranks the ingested run

    plan = _run("plan", "--json", cwd=elsewhere, env=env)
    assert said in plan.stderr  # stdout stays the JSON document
    estimates = json.loads(plan.stdout)
    assert estimates and estimates[0]["target"] == "local"

    import gpucompare

    prices = gpucompare.read("prices", lake=str(lake))
    assert "declared: test machine (0.5 EUR per hour)" in set(prices["source"])
