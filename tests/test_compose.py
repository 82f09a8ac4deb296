"""docker/compose.yaml agrees with the deployment the distributed test proves.

Docker cannot run here, so tests/test_distributed_airflow.py runs the compose file's
configuration as plain processes. These fast checks keep the two from drifting: the compose
file must define every component, build the project's Airflow image, hand every Airflow
service exactly the ``AIRFLOW__*`` settings of ``gpucompare.deployment`` (rendered with
compose's host names and secret placeholders), probe the same health endpoints, and keep
every secret out of the repository.
"""

from __future__ import annotations

import json
import re
import shlex
import stat
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from gpucompare import deployment
from gpucompare.deployment import (
    API_SERVER_HEALTH_PATH,
    COMPONENT_COMMANDS,
    COMPOSE_ENDPOINTS,
    COMPOSE_LAYOUT,
    COMPOSE_SECRETS,
    SCHEDULER_HEALTH_PATH,
    SHARED_STORAGE_SETTINGS,
    celery_deployment_env,
    write_passwords_file,
)
from tests.conftest import REPO_ROOT

COMPOSE_FILE = REPO_ROOT / "docker" / "compose.yaml"
AIRFLOW_SERVICES = [*COMPONENT_COMMANDS, "airflow-init"]
SECRET_SETTINGS = (
    "AIRFLOW__CORE__FERNET_KEY",
    "AIRFLOW__API_AUTH__JWT_SECRET",
    "AIRFLOW__API__SECRET_KEY",
)
_INTERPOLATION = re.compile(r"\$\{(?P<name>\w+)(?::(?P<op>[?-])(?P<arg>[^}]*))?\}")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}``, as ``docker compose`` does."""

    def replace(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        if variables.get(name):
            return variables[name]
        if op == "-":
            return arg
        raise KeyError(f"{name}: {arg or 'required'}")

    return _INTERPOLATION.sub(replace, value)


def test_compose_defines_every_component(compose: dict) -> None:
    assert set(compose["services"]) >= {"postgres", "redis", *AIRFLOW_SERVICES}


@pytest.mark.parametrize("service", AIRFLOW_SERVICES)
def test_airflow_services_share_the_deployment_settings(compose: dict, service: str) -> None:
    environment = compose["services"][service]["environment"]
    airflow_settings = {key: str(value) for key, value in environment.items() if key.startswith("AIRFLOW__")}
    assert airflow_settings == celery_deployment_env(COMPOSE_ENDPOINTS, COMPOSE_SECRETS, COMPOSE_LAYOUT)


@pytest.mark.parametrize("service", list(COMPONENT_COMMANDS))
def test_each_component_runs_its_airflow_command(compose: dict, service: str) -> None:
    assert compose["services"][service]["command"] == ["airflow", *COMPONENT_COMMANDS[service]]


@pytest.mark.parametrize("service", AIRFLOW_SERVICES)
def test_airflow_services_build_the_project_image(compose: dict, service: str) -> None:
    build = compose["services"][service]["build"]
    assert build == {"context": "..", "dockerfile": "docker/airflow.Dockerfile"}
    # The context is relative to the compose file, the dockerfile to the context.
    assert (COMPOSE_FILE.parent / build["context"] / build["dockerfile"]).resolve().is_file()


def test_every_long_running_service_has_a_healthcheck(compose: dict) -> None:
    for name, service in compose["services"].items():
        if name == "airflow-init":
            continue
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_health_probes_hit_the_endpoints_the_test_waits_for(compose: dict) -> None:
    api_probe = " ".join(compose["services"]["airflow-apiserver"]["healthcheck"]["test"])
    scheduler_probe = " ".join(compose["services"]["airflow-scheduler"]["healthcheck"]["test"])
    api_port = urlsplit(COMPOSE_ENDPOINTS.api_server_url).port
    assert f"localhost:{api_port}{API_SERVER_HEALTH_PATH}" in api_probe
    assert f"localhost:{COMPOSE_ENDPOINTS.scheduler_health_port}{SCHEDULER_HEALTH_PATH}" in scheduler_probe
    assert compose["services"]["airflow-apiserver"]["ports"] == [f"${{AIRFLOW_API_PORT:-8080}}:{api_port}"]


def test_airflow_services_wait_for_init_and_healthy_backends(compose: dict) -> None:
    for service in COMPONENT_COMMANDS:
        depends_on = compose["services"][service]["depends_on"]
        assert depends_on["postgres"]["condition"] == "service_healthy", service
        assert depends_on["redis"]["condition"] == "service_healthy", service
        assert depends_on["airflow-init"]["condition"] == "service_completed_successfully", service


def test_init_runs_the_same_init_as_the_test(compose: dict) -> None:
    init = compose["services"]["airflow-init"]
    script_commands = [shlex.split(line) for line in init["command"][0].splitlines() if line.strip()]
    assert ["python", "-m", "gpucompare.deployment", "init", COMPOSE_LAYOUT.passwords_file] in script_commands
    assert init["environment"]["AIRFLOW_ADMIN_PASSWORD"].startswith("${AIRFLOW_ADMIN_PASSWORD:?")


def test_secrets_are_required_interpolations_not_values(compose: dict) -> None:
    environment = compose["services"]["airflow-scheduler"]["environment"]
    for key in SECRET_SETTINGS:
        assert re.fullmatch(r"\$\{\w+:\?[^}]*\}", environment[key]), f"{key} must be a ${{VAR:?}} placeholder"
    assert compose["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith(
        "${POSTGRES_PASSWORD:?"
    )
    # Without the secrets, compose refuses to render the configuration at all.
    with pytest.raises(KeyError, match="AIRFLOW_FERNET_KEY"):
        interpolate(environment["AIRFLOW__CORE__FERNET_KEY"], {})


def test_rendered_urls_are_what_airflow_and_celery_parse(compose: dict) -> None:
    from sqlalchemy.engine import make_url

    variables = {"POSTGRES_PASSWORD": "0f3a9c", "AIRFLOW_FERNET_KEY": "k"}
    environment = compose["services"]["airflow-worker"]["environment"]
    database = make_url(interpolate(environment["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], variables))
    assert (database.drivername, database.host, database.port, database.database) == (
        "postgresql+psycopg2",
        "postgres",
        5432,
        "airflow",
    )
    backend = interpolate(environment["AIRFLOW__CELERY__RESULT_BACKEND"], variables)
    assert backend.startswith("db+") and make_url(backend.removeprefix("db+")).host == "postgres"
    assert urlsplit(environment["AIRFLOW__CELERY__BROKER_URL"]).hostname in compose["services"]
    execution = urlsplit(environment["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert execution.hostname == "airflow-apiserver" and execution.path == "/execution/"


@pytest.mark.parametrize("service", AIRFLOW_SERVICES)
def test_state_that_tasks_share_lives_on_shared_volumes(compose: dict, service: str) -> None:
    definition = compose["services"][service]
    mount_targets = [interpolate(volume, {}).split(":")[1] for volume in definition["volumes"]]
    for key in SHARED_STORAGE_SETTINGS:
        path = interpolate(definition["environment"][key], {})
        assert any(path == target or path.startswith(target + "/") for target in mount_targets), key


def test_passwords_file_is_private_json(tmp_path: Path) -> None:
    target = tmp_path / "auth" / "passwords.json"
    write_passwords_file(target, "s3cret")
    assert json.loads(target.read_text()) == {"admin": "s3cret"}
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_init_refuses_an_empty_password_before_touching_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("AIRFLOW_ADMIN_PASSWORD", raising=False)
    # A database URL that would fail loudly if init tried to migrate before checking the password.
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql+psycopg2://nobody@127.0.0.1:1/none")
    assert deployment.main(["init", str(tmp_path / "p.json")]) == 2
    assert "AIRFLOW_ADMIN_PASSWORD" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()
