"""The installable package's parts, checked in the checkout (fast; tests/system/test_install_guide.py
installs it).

Settings and the provider's ``[gpucompare]`` section come from one table; shipped files are
found through ``gpucompare.resources``; ``gpucompare dags install`` never clobbers a user's
file; the local worker's unpacking cleans up what a killed unpack left. The same in real
processes (DagBag parsing, concurrent installs and unpacks): tests/integration/test_packaging_processes.py.
"""

from __future__ import annotations

import json
import os
from importlib.resources import files
from pathlib import Path

import pytest

from gpucompare import cli, resources, settings
from gpucompare.airflow import dag_files, provider_info
from gpucompare.errors import UsageError
from gpucompare.targets import bundle as _worker_bundle
from tests.conftest import REPO_ROOT


def test_every_setting_has_a_description_and_becomes_a_provider_option() -> None:
    descriptions = [settings.description(name) for name in settings.NAMES]
    assert all(text.strip() and "\n" not in text for text in descriptions)
    assert all(settings.allowed(n) for n in settings.NAMES)
    section = provider_info.get_provider_info()["config"]["gpucompare"]
    assert list(section["options"]) == list(settings.NAMES)
    for name, option in section["options"].items():
        assert option["default"] == settings.default_text(name)
        assert option["description"].startswith(settings.description(name))
        assert settings.env_name(name) in option["description"]
        # `airflow config list --include-descriptions` hides values: the default is in the text
        shown = settings.default_text(name) or "empty"
        assert f"Default: {shown}." in option["description"], name


def test_provider_info_is_valid_for_airflow() -> None:
    """Airflow's own runtime schema (what ProvidersManager validates entry points against)."""
    import jsonschema

    schema = json.loads(files("airflow").joinpath("provider_info.schema.json").read_text())
    jsonschema.validate(provider_info.get_provider_info(), schema)


def test_provider_options_carry_the_model_types() -> None:
    """``airflow config list`` shows the type of each option as the model declares it."""
    options = provider_info.get_provider_info()["config"]["gpucompare"]["options"]
    assert options["retry_delay_s"]["type"] == "float" and options["retry_delay_s"]["default"] == "60"
    assert options["compact_after_days"]["type"] == "integer"
    assert options["rank_flagged"]["type"] == "boolean" and options["rank_flagged"]["default"] == "false"
    assert options["lake"]["type"] == "string"


def test_defaults_live_under_airflow_home_not_in_the_package(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    for name in ("LAKE", "REPORTS", "FLEET"):
        monkeypatch.delenv(f"GPUCOMPARE_{name}", raising=False)
        monkeypatch.delenv(f"AIRFLOW__GPUCOMPARE__{name}", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    assert settings.lake_uri() == f"{tmp_path}/gpucompare/lake"
    assert settings.reports_uri() == f"{tmp_path}/gpucompare/reports"
    package = Path(resources.__file__).parent
    assert not Path(settings.lake_uri()).is_relative_to(package)
    assert settings.fleet_path() == resources.fleet_file()
    monkeypatch.setenv("GPUCOMPARE_LAKE", "{AIRFLOW_HOME}/elsewhere")
    assert settings.lake_uri() == f"{tmp_path}/elsewhere"


def test_shipped_files_resolve_to_the_project_folders() -> None:
    """Editable install: the package's resources are the checkout's folders, no copies."""
    assert resources.sql_dir() == REPO_ROOT / "sql"
    assert resources.dags_dir() == REPO_ROOT / "dags"
    assert resources.worker_dir() == REPO_ROOT / "bench_tasks"
    assert resources.fleet_file() == REPO_ROOT / "dags" / "config" / "fleet.yaml"
    from gpucompare.reports.report_set import REPORTS

    for name in (*REPORTS, "newest_by_series", "newest_by_config", "newest_by_key", "latest_results"):
        assert resources.sql_file(f"{name}.sql").is_file(), name
    with pytest.raises(resources.ResourceError, match="'no_such.sql' not found"):
        resources.sql_file("no_such.sql")


def test_dags_install_never_overwrites_a_file_it_did_not_write(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "gpucompare_nightly.py"
    mine.write_text("# my own nightly DAG\n")
    with pytest.raises(UsageError, match="gpucompare_nightly.py exist and were not written by gpucompare"):
        dag_files.install(tmp_path)
    assert mine.read_text() == "# my own nightly DAG\n"
    assert not [p for p in tmp_path.iterdir() if p != mine]  # nothing half-installed
    assert cli.main(["dags", "install", str(tmp_path)]) == 2
    assert "--force" in capsys.readouterr().err
    dag_files.install(tmp_path, force=True)
    assert mine.read_text().startswith(dag_files.MARKER)
    dag_files.install(tmp_path)  # ours are rewritten without --force
    with pytest.raises(UsageError, match="is not a directory"):
        dag_files.install(mine)


def test_load_refuses_a_dag_that_is_not_shipped() -> None:
    with pytest.raises(UsageError, match="'gpucompare_nope' is not shipped"):
        dag_files.load("gpucompare_nope")
    with pytest.raises(UsageError, match="is not shipped"):
        dag_files.load("../../etc/passwd")


def test_unpacking_removes_what_a_killed_unpack_left_long_ago(tmp_path: Path) -> None:
    old, recent = tmp_path / ".unpack-old", tmp_path / ".unpack-recent"
    for staging in (old, recent):
        (staging / "bench_tasks").mkdir(parents=True)
    two_hours_ago = old.stat().st_mtime - 2 * _worker_bundle.STALE_UNPACK_S
    os.utime(old, (two_hours_ago, two_hours_ago))
    root = _worker_bundle.unpacked_bundle(tmp_path)
    assert (root / "bench_tasks" / "__main__.py").is_file()
    assert not old.exists()
    assert recent.exists()  # may belong to a process unpacking right now


def test_every_package_folder_is_in_the_build_configuration() -> None:
    """pyproject.toml lists the packages explicitly (package-dir maps folders into gpucompare):
    a new subpackage missing there would silently be left out of the wheel."""
    import tomllib

    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapped = {name: REPO_ROOT / folder for name, folder in config["package-dir"].items()}
    on_disk = set()
    for name, folder in mapped.items():
        for init in folder.rglob("__init__.py"):
            relative = init.parent.relative_to(folder)
            if "__pycache__" not in relative.parts:
                on_disk.add(".".join((name, *relative.parts)))
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - on_disk == set()
