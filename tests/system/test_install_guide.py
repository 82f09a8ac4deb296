"""The distribution as a new operator gets it: docs/install.md followed to the letter, then the
wheel it built and the venv it installed, used outside the checkout.

The guide (the ``install_guide`` fixture, once per module: installing Airflow into a fresh venv
takes minutes): every ``sh`` block of the page, in order and verbatim, in one bash session, from
a fresh ``HOME`` (so ``~`` is empty) inside a copy of the checkout (the guide builds its wheel
there and pins with its ``constraints.txt``), with no gpucompare or Airflow setting inherited. It
must end with a report that ranks a measured machine.

Stands in for a new operator with nothing but the checkout and Python 3.11: the fresh venv, the
wheel build and install, pip installs from the package index (pip's cache is kept), a real
``airflow dags test`` of the nightly DAG on the local target with the worker environment the
guide creates, the reports DAG, and the unpause/trigger commands against the SQLite metadata
database. Slow: pip installs Airflow and MXNet.

The wheel (``test_the_wheel_installs_and_works_outside_the_checkout``, in order, each step needing
the one before): the wheel the guide built from a copy of the sources the build configuration
names, installed with its declared dependencies (and nothing else) into the guide's fresh venv,
pinned by the same ``constraints.txt`` as ``make envs``. It checks what the wheel holds against
the checkout's folders; that the optional extras resolve against those pins; then, from a folder
outside the checkout and with no ``GPUCOMPARE_*`` or ``AIRFLOW__*`` setting inherited, runs the
console scripts (``gpucompare import-published``, ``gpucompare report``, ``gpucompare dags
install``, ``bench-tasks``), parses the installed DAGs with a ``DagBag``, runs
``gpucompare_reports`` through its thin file with ``airflow dags test``, and asks Airflow's own
commands for the plugin and the ``[gpucompare]`` configuration.
"""

from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.wheel_support import (
    EXTRAS,
    GUIDE,
    GuideRun,
    clean_env,
    guide_blocks,
    run,
    run_install_guide,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def install_guide(tmp_path_factory: pytest.TempPathFactory) -> GuideRun:
    """docs/install.md followed once (tests/support/wheel_support.run_install_guide)."""
    return run_install_guide(tmp_path_factory.mktemp("install-guide"))


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


def test_the_install_guide_reaches_a_ranked_table(install_guide: GuideRun) -> None:
    guide = install_guide
    stdout, stderr, checkout, home = guide.stdout, guide.stderr, guide.checkout, guide.home
    print(f"{guide.blocks} blocks of {GUIDE.name} in {guide.seconds:.0f} s")
    print(stdout[-6000:])
    assert guide.code == 0, f"exit {guide.code}:\n{stdout[-8000:]}\n{stderr[-8000:]}"
    assert f">>> block {guide.blocks} " in stdout

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


def _expected_members() -> set[str]:
    """The files of the checkout that an installed package needs, as wheel paths: every module of
    the library and the worker (a subpackage missing from pyproject's package list is caught here,
    not by the first command that imports it), and the non-Python files."""
    expected = {f"gpucompare/sql/{p.relative_to(REPO_ROOT / 'sql').as_posix()}"
                for p in (REPO_ROOT / "sql").rglob("*.sql")}
    expected |= {f"gpucompare/dags/{p.relative_to(REPO_ROOT / 'dags').as_posix()}"
                 for p in (REPO_ROOT / "dags").rglob("*") if p.suffix in {".py", ".yaml"}}
    expected |= {f"gpucompare/{p.relative_to(REPO_ROOT / 'plugins' / 'gpucompare').as_posix()}"
                 for p in (REPO_ROOT / "plugins" / "gpucompare" / "data").rglob("*.csv")}
    templates = REPO_ROOT / "plugins" / "gpucompare" / "reports" / "templates"
    expected |= {f"gpucompare/reports/templates/{p.relative_to(templates).as_posix()}"
                 for p in templates.rglob("*.j2")}
    expected |= {f"bench_tasks/{p.name}" for p in (REPO_ROOT / "bench_tasks").glob("requirements-*.txt")}
    for package in (REPO_ROOT / "plugins" / "gpucompare", REPO_ROOT / "bench_tasks"):
        expected |= {f"{package.name}/{p.relative_to(package).as_posix()}" for p in package.rglob("*.py")
                     if "__pycache__" not in p.parts}
    return expected


def test_the_wheel_installs_and_works_outside_the_checkout(tmp_path: Path, install_guide: GuideRun) -> None:
    assert (install_guide.venv / "bin" / "gpucompare").exists(), install_guide.stderr[-4000:]
    wheel = install_guide.wheel
    with zipfile.ZipFile(wheel) as archive:
        members = set(archive.namelist())
        entry_points = archive.read(next(m for m in members if m.endswith(".dist-info/entry_points.txt")))
    print(f"\n{wheel.name}: {len(members)} files")
    missing = _expected_members() - members
    assert not missing, f"the wheel lacks {sorted(missing)}"
    assert not [m for m in members if m.startswith(("tests/", "scripts/", "docker/"))]
    for line in ("[airflow.plugins]", "[apache_airflow_provider]", "gpucompare = gpucompare.cli:main",
                 "bench-tasks = bench_tasks.cli:main"):
        assert line in entry_points.decode(), line

    venv, airflow_home, work = install_guide.venv, tmp_path / "airflow", tmp_path / "work"
    work.mkdir()
    env = clean_env(venv, airflow_home)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "--quiet"]
    constraints = str(REPO_ROOT / "constraints.txt")
    # The optional parts resolve against the same pins (resolution only: they are big).
    run([*pip, "install", "--dry-run", f"{wheel}[{EXTRAS}]", "-c", constraints], cwd=work, env=env)

    python = str(venv / "bin" / "python")
    where = json.loads(run([python, "-c", (
        "import json, gpucompare, gpucompare.sql, bench_tasks\n"
        "from gpucompare import settings\n"
        "from gpucompare.targets.bundle import build_bundle, unpacked_bundle\n"
        "bundle = build_bundle()\n"
        "print(json.dumps({'package': gpucompare.__file__, 'lake': settings.lake_uri(),\n"
        "    'reports': settings.reports_uri(), 'fleet': str(settings.fleet_path()),\n"
        "    'bundle': sorted(bundle.requirements_hashes),\n"
        "    'unpacked': sorted(p.name for p in unpacked_bundle().iterdir())}))\n")],
        cwd=work, env=env))
    site = str(venv / "lib")
    assert where["package"].startswith(site), where  # the wheel's copy, not the checkout's
    assert where["lake"] == str(airflow_home / "gpucompare" / "lake")  # not inside the venv
    assert where["reports"] == str(airflow_home / "gpucompare" / "reports")
    assert where["fleet"].startswith(site) and Path(where["fleet"]).is_file()
    assert where["bundle"] == ["cpu", "gpu"]  # the worker's requirement files travel in the bundle
    assert where["unpacked"] == ["bench_tasks"]  # the local worker's PYTHONPATH holds nothing else

    gpucompare = str(venv / "bin" / "gpucompare")
    imported = run([gpucompare, "import-published"], cwd=work, env=env)
    assert "published result(s)" in imported
    run([gpucompare, "report", "--out", "reports"], cwd=work, env=env)
    with (work / "reports" / "cost_per_million.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    # the published machines' cost per million, priced from the shipped tables
    assert [row for row in rows if row["provider"] == "leadergpu" and float(row["cost_per_million"] or 0) > 0]
    assert (work / "reports" / "index.html").stat().st_size > 0
    assert "sweep" in run([str(venv / "bin" / "bench-tasks"), "--help"], cwd=work, env=env)

    dags = airflow_home / "dags"
    run([gpucompare, "dags", "install", str(dags)], cwd=work, env=env)
    parsed = json.loads(run([python, "-c", (
        "import json, sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        "bag = DagBag(sys.argv[1])\n"
        "print(json.dumps({'dags': {d: bag.dags[d].fileloc for d in bag.dags},\n"
        "                  'errors': {k: str(v) for k, v in bag.import_errors.items()}}))\n"),
        str(dags)], cwd=work, env=env).splitlines()[-1])
    assert parsed["errors"] == {}
    shipped = sorted(p.stem for p in (REPO_ROOT / "dags").glob("gpucompare_*.py"))
    assert sorted(parsed["dags"]) == shipped
    assert all(Path(fileloc).parent == dags for fileloc in parsed["dags"].values())

    airflow = str(venv / "bin" / "airflow")
    # One installed DAG end to end through its thin file, on the default lake and reports
    # folders ($AIRFLOW_HOME/gpucompare/...): outside the venv and the working folder.
    run([gpucompare, "import-published", "--lake", where["lake"]], cwd=work, env=env)
    run([airflow, "db", "migrate"], cwd=work, env=env)
    run([airflow, "dags", "test", "gpucompare_reports"], cwd=work, env=env)
    assert (Path(where["reports"]) / "latest" / "index.html").is_file()
    plugins = json.loads(run([airflow, "plugins", "--output", "json"], cwd=work, env=env))
    ours = [p for p in plugins if p["name"] == "gpucompare"]
    assert len(ours) == 1 and "EntryPoint" in ours[0]["source"], plugins
    providers = json.loads(run([airflow, "providers", "list", "--output", "json"], cwd=work, env=env))
    assert "gpucompare" in {p["package_name"] for p in providers}
    listed = run([airflow, "config", "list", "--section", "gpucompare", "--include-descriptions",
                   "--show-values"], cwd=work, env=env)
    settings_names = json.loads(run([python, "-c", (
        "import json; from gpucompare import settings; print(json.dumps(list(settings.DEFAULTS)))")],
        cwd=work, env=env))
    for name in settings_names:
        assert f"\n{name} = " in listed, f"{name} missing from airflow config list:\n{listed}"
    assert f"lake = {airflow_home / 'gpucompare' / 'lake'}" in listed
    assert "# The results lake" in listed
