"""The settings model: one declaration per setting, read env → Airflow config → default, typed and
checked, and no other module reading a setting on its own.

Real parts: Airflow's own configuration object (``airflow.sdk.conf``) reads the
``AIRFLOW__GPUCOMPARE__*`` variables, as it does in a deployment.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gpucompare import settings
from gpucompare.airflow import assets, pipeline, policy
from tests.conftest import REPO_ROOT


@pytest.fixture(autouse=True)
def _no_configured_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in settings.NAMES:
        monkeypatch.delenv(settings.env_name(name), raising=False)
        monkeypatch.delenv(f"AIRFLOW__GPUCOMPARE__{name.upper()}", raising=False)


def test_environment_then_airflow_config_then_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings.pool() == "gpucompare_instances"
    monkeypatch.setenv("AIRFLOW__GPUCOMPARE__POOL", "from_airflow_cfg")
    assert settings.pool() == "from_airflow_cfg"
    monkeypatch.setenv("GPUCOMPARE_POOL", "from_env")
    assert settings.pool() == "from_env"
    monkeypatch.setenv("GPUCOMPARE_POOL", "")  # empty: not set
    assert settings.pool() == "from_airflow_cfg"


def test_values_are_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCOMPARE_RETRY_DELAY_S", "30")
    monkeypatch.setenv("AIRFLOW__GPUCOMPARE__RANK_FLAGGED", "True")
    monkeypatch.setenv("GPUCOMPARE_COMPACT_AFTER_DAYS", "0")
    monkeypatch.setenv("GPUCOMPARE_CURRENCY", "usd")
    monkeypatch.setenv("GPUCOMPARE_SWEEPER_REGIONS", "us-east-1, eu-west-1,")
    assert settings.retry_delay_s() == 30.0 and policy.retry_delay().total_seconds() == 30
    assert settings.rank_flagged() is True and settings.rank_old_published() is False
    assert settings.compact_after_days() == 0
    assert settings.currency() == "USD"
    assert settings.sweeper_regions() == ["us-east-1", "eu-west-1"]
    loaded = settings.load()
    assert loaded.retry_delay_s == 30.0 and loaded.rank_flagged is True


@pytest.mark.parametrize(("name", "value", "allowed"), [
    ("retry_delay_s", "-1", "0 to 3600"),
    ("retry_delay_s", "soon", "0 to 3600"),
    ("compact_after_days", "2.5", "whole number of days"),
    ("compact_after_days", "-1", "whole number of days"),
    ("published_max_age_years", "three", "whole number of years"),
    ("best_value_with_projections", "perhaps", "true, false"),
    ("lake_s3_commit", "dynamodb", "conditional_put, unsafe"),
    ("worker_envs_kept", "1; rm -rf /", "0 to 100"),
    ("worker_envs_kept", "101", "0 to 100"),
    ("currency", "GBP", "EUR, USD"),
    ("nightly_schedule", "rm -rf /", "cron"),
    ("sweeper_regions", "us-east-1,moon", "AWS regions"),
    ("deployment", "Prod; rm -rf /", "lower-case"),
])
def test_a_bad_value_names_the_variable_the_value_and_what_is_allowed(
        monkeypatch: pytest.MonkeyPatch, name: str, value: str, allowed: str) -> None:
    variable = settings.env_name(name)
    monkeypatch.setenv(variable, value)
    with pytest.raises(settings.SettingError) as refused:
        settings.get(name)
    assert refused.value.field == variable
    assert f"{variable} {value!r} is not allowed" in str(refused.value) and allowed in str(refused.value)
    with pytest.raises(settings.SettingError):
        settings.load()


def test_a_bad_setting_does_not_break_reading_another(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    monkeypatch.setenv("GPUCOMPARE_RETRY_DELAY_S", "-1")
    monkeypatch.setenv("GPUCOMPARE_LAKE", str(tmp_path))
    assert settings.lake_uri() == str(tmp_path)


def test_paths_expand_airflow_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("GPUCOMPARE_CACHE_DIR", "{AIRFLOW_HOME}/cache")
    monkeypatch.setenv("GPUCOMPARE_LOCAL_WORK_DIR", str(tmp_path / "work"))
    assert settings.cache_dir() == tmp_path / "cache"
    assert settings.local_work_dir() == tmp_path / "work"
    assert settings.lake() == f"{tmp_path}/gpucompare/lake" == settings.lake_uri()


def test_the_library_module_reads_no_setting_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing the task-group module with a broken retry, pool or lake setting works; the DAG
    build reads them. The two assets are fixed names, not built from the lake or reports setting:
    reloading the module under another lake names the same assets (built from the settings, a
    reload in one test left the DAG files scheduling on another asset than the one the nightly
    announced, and the reports DAG was never queued: tests/system/test_dags_e2e.py)."""
    import importlib

    before = (assets.RESULTS, assets.REPORTS)
    monkeypatch.setenv("GPUCOMPARE_RETRY_DELAY_S", "-1")
    monkeypatch.setenv("GPUCOMPARE_POOL", "")
    monkeypatch.setenv("GPUCOMPARE_LAKE", "s3://")
    monkeypatch.setenv("GPUCOMPARE_REPORTS", "/nonexistent/elsewhere")
    importlib.reload(pipeline)
    reloaded = importlib.reload(assets)
    assert (reloaded.RESULTS, reloaded.REPORTS) == before
    with pytest.raises(settings.SettingError, match="GPUCOMPARE_RETRY_DELAY_S"):
        importlib.reload(policy).default_args()


def test_unknown_setting_is_refused() -> None:
    with pytest.raises(KeyError, match="unknown gpucompare setting 'lakes'"):
        settings.get("lakes")


# -- nobody else reads settings -------------------------------------------------------------------
#: Files that may read the environment or Airflow's config, and why.
READERS_ALLOWED: dict[str, str] = {
    "plugins/gpucompare/settings.py": "the settings model itself",
    "plugins/gpucompare/lake/storage.py": "AWS_* credential variables: whether the environment gives "
                                          "any, to explain a failed S3 call; not gpucompare settings",
    "plugins/gpucompare/lake/identity.py": "AWS_ENDPOINT_URL*/AWS_REGION: the AWS SDK's own variables, "
                                           "the S3 identity's fallback outside Airflow, not settings",
    "plugins/gpucompare/airflow/deployment.py": "the admin password of a new deployment (a secret, "
                                                "given once to `deployment init`, never a setting)",
    "plugins/gpucompare/targets/local.py": "copies the environment into the worker's subprocess",
    "plugins/gpucompare/lake/panics.py": "sets RUST_BACKTRACE=0 around a delta-rs call and restores it: "
                                         "the Rust runtime's own variable, not a gpucompare setting",
}
#: The worker cannot import gpucompare (another interpreter, mxnet+numpy only): it reads
#: CUDA_VISIBLE_DEVICES, DMLC_* and its own test hooks directly.
WORKER = "bench_tasks/"
ENV_OR_CONF = re.compile(r"os\.environ|os\.getenv|getenv\(|\bconf\.get|airflow\.configuration|"
                         r"from airflow\.sdk import [^\n]*\bconf\b")


def _sources() -> list[Path]:
    return sorted([*(REPO_ROOT / "plugins").rglob("*.py"), *(REPO_ROOT / "dags").rglob("*.py")])


def test_no_module_but_settings_reads_the_environment_or_airflow_config() -> None:
    offenders = []
    for path in _sources():
        relative = path.relative_to(REPO_ROOT).as_posix()
        if relative in READERS_ALLOWED:
            continue
        code = "\n".join(line for line in path.read_text(encoding="utf-8").splitlines()
                         if not line.lstrip().startswith("#"))
        offenders += [f"{relative}: {m.group(0)}" for m in ENV_OR_CONF.finditer(_without_docstrings(code))]
    assert offenders == [], "read settings through gpucompare.settings:\n" + "\n".join(offenders)


def _reads_a_setting(node: ast.AST) -> str | None:
    """``x.get("GPUCOMPARE_…")``, ``getenv("GPUCOMPARE_…")`` or ``x["GPUCOMPARE_…"]`` read."""
    key = None
    if isinstance(node, ast.Call) and node.args and isinstance(node.func, (ast.Attribute, ast.Name)) \
            and getattr(node.func, "attr", getattr(node.func, "id", "")) in {"get", "getenv", "pop"}:
        key = node.args[0]
    elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        key = node.slice
    if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("GPUCOMPARE_"):
        return key.value
    return None


def test_no_gpucompare_variable_is_read_outside_settings() -> None:
    """A ``GPUCOMPARE_*`` variable read by hand anywhere (library, DAGs, scripts, worker) bypasses
    the model; only the scaling launcher's process marker is not a setting."""
    found = []
    for path in [*_sources(), *(REPO_ROOT / "scripts").rglob("*.py"), *(REPO_ROOT / WORKER).rglob("*.py")]:
        if path.name == "settings.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (name := _reads_a_setting(node)) and name != "GPUCOMPARE_DIST":
                found.append(f"{path.relative_to(REPO_ROOT)}: {name}")
    assert found == []
    assert _reads_a_setting(ast.parse('os.environ.get("GPUCOMPARE_CACHE_DIR", "/tmp")').body[0].value)


def _without_docstrings(code: str) -> str:
    tree = ast.parse(code)
    lines = code.splitlines()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            for number in range(body[0].lineno - 1, body[0].end_lineno or body[0].lineno):
                lines[number] = ""
    return "\n".join(lines)


def test_the_grep_would_catch_a_reader() -> None:
    code = 'import os\n\ndef f():\n    """os.environ in a docstring is fine"""\n    return os.environ["X"]\n'
    assert [m.group(0) for m in ENV_OR_CONF.finditer(_without_docstrings(code))] == ["os.environ"]


def test_report_options_and_rules_check_themselves_on_construction() -> None:
    """No caller has to remember a ``validate()``: a bad object cannot exist."""
    from gpucompare.reports.report_set import RegressionRule, ReportError, ReportOptions

    with pytest.raises(ReportError, match="published_max_age_years must be between 0 and 100"):
        ReportOptions(published_max_age_years=101)
    with pytest.raises(ReportError, match="whole number"):
        ReportOptions(published_max_age_years=True)  # type: ignore[arg-type]
    with pytest.raises(ReportError, match="min_history"):
        RegressionRule(history_runs=3, min_history=4)
    with pytest.raises(ReportError, match="lookback_days"):
        RegressionRule(lookback_days=0)
    assert RegressionRule().history_runs == 7 and ReportOptions().published_max_age_years == 3


def test_the_settings_table_of_the_docs_lists_every_setting() -> None:
    table = (REPO_ROOT / "docs" / "dags.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `(GPUCOMPARE_[A-Z0-9_]+)` \|", table, flags=re.MULTILINE))
    assert listed == {settings.env_name(name) for name in settings.NAMES}
