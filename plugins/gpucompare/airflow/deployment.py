"""The distributed Airflow deployment's settings, in one place.

gpucompare runs on one Airflow machine by default. A fleet that outgrows it runs on the
CeleryExecutor: PostgreSQL for metadata, Redis as the Celery broker, and the scheduler, the
API server, the DAG processor, the triggerer and Celery workers as separate processes
(`docker/compose.yaml`, or the official Helm chart). Every Airflow process of such a
deployment must share one configuration: the executor, the database and broker, the
execution API URL the workers report to, and the keys that sign and encrypt (JWT secret,
Fernet key, API secret key).

This module is that configuration. :func:`celery_deployment_env` renders it as the
``AIRFLOW__*`` environment variables for given endpoints and secrets; the compose file
spells out the same variables (with compose's host names and ``${VAR:?}`` placeholders for
secrets), a test checks that the two agree, and the deployment test starts real processes
with the very same dictionary.

Run as a module, it prepares a new deployment once (compose's airflow-init service and the
deployment test run the same command): it migrates the metadata database, creates the pool
that caps working instances (``GPUCOMPARE_POOL``, slots = the fleet file's ``max_instances``)
and writes the simple auth manager's passwords file from the environment, so no password is
generated into a log or kept in the repository::

    AIRFLOW_ADMIN_PASSWORD=... python -m gpucompare.airflow.deployment init PASSWORDS_FILE
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
ADMIN_USER = "admin"
ADMIN_PASSWORD_ENV = "AIRFLOW_ADMIN_PASSWORD"  # noqa: S105 (the variable's name, not a password)

# The Airflow components of the deployment: compose service name -> `airflow` subcommand.
COMPONENT_COMMANDS: dict[str, tuple[str, ...]] = {
    "airflow-apiserver": ("api-server",),
    "airflow-scheduler": ("scheduler",),
    "airflow-dag-processor": ("dag-processor",),
    "airflow-triggerer": ("triggerer",),
    "airflow-worker": ("celery", "worker"),
}

# gpucompare settings (gpucompare.settings) that must name storage every worker shares:
# consecutive tasks of one run (deploy, run, collect, ingest) may land on different workers.
SHARED_STORAGE_SETTINGS = (
    "GPUCOMPARE_LAKE",
    "GPUCOMPARE_REPORTS",
    "GPUCOMPARE_STAGING",
    "GPUCOMPARE_LOCAL_WORK_DIR",
)

# Paths of the health endpoints that compose's healthchecks and the deployment test poll.
API_SERVER_HEALTH_PATH = "/api/v2/monitor/health"
SCHEDULER_HEALTH_PATH = "/health"

# Settings that are the same wherever the deployment runs. Why each one:
STATIC_SETTINGS: dict[str, str] = {
    "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    # A DAG that lands in a shared deployment waits for someone to unpause it.
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
    # Simple auth manager: one admin, password from a file written at init (no FAB provider).
    "AIRFLOW__CORE__AUTH_MANAGER": SIMPLE_AUTH_MANAGER,
    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN_USER}:admin",
    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
    # Every component signs or checks tokens with the same secret under the same issuer.
    "AIRFLOW__API_AUTH__JWT_ISSUER": "gpucompare",
    # A benchmark orchestrator has few human users: one API worker process is plenty.
    "AIRFLOW__API__WORKERS": "1",
    # Lets compose (and the test) probe the scheduler over HTTP.
    "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "True",
}


@dataclass(frozen=True)
class Endpoints:
    """Where the deployment's services listen, as the Airflow processes see them."""

    postgres_host: str
    postgres_port: int | str
    postgres_user: str
    postgres_password: str
    postgres_db: str
    redis_host: str
    redis_port: int | str
    api_server_url: str  # e.g. http://airflow-apiserver:8080, no trailing slash
    worker_log_server_port: int | str = 8793
    trigger_log_server_port: int | str = 8794
    scheduler_health_port: int | str = 8974


@dataclass(frozen=True)
class Secrets:
    """Keys every Airflow process of the deployment must share (never stored in the repo)."""

    fernet_key: str
    jwt_secret: str
    api_secret_key: str


@dataclass(frozen=True)
class Layout:
    """Where code and state live inside each Airflow process's file system."""

    dags_folder: str
    plugins_folder: str
    passwords_file: str
    worker_concurrency: int | str = 2


# (The placeholders below are compose interpolations, not passwords: hence the noqa.)
# How docker/compose.yaml fills the parameters: service names on compose's network, and
# ${VAR:?message} placeholders so compose refuses to start without the secrets (none is in
# the repository). tests/integration/airflow/test_compose.py renders the settings with these and compares.
COMPOSE_ENDPOINTS = Endpoints(
    postgres_host="postgres",
    postgres_port=5432,
    postgres_user="airflow",
    postgres_password="${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}",  # noqa: S106
    postgres_db="airflow",
    redis_host="redis",
    redis_port=6379,
    api_server_url="http://airflow-apiserver:8080",
)
COMPOSE_SECRETS = Secrets(
    fernet_key="${AIRFLOW_FERNET_KEY:?set AIRFLOW_FERNET_KEY}",
    jwt_secret="${AIRFLOW_JWT_SECRET:?set AIRFLOW_JWT_SECRET}",  # noqa: S106
    api_secret_key="${AIRFLOW_API_SECRET_KEY:?set AIRFLOW_API_SECRET_KEY}",  # noqa: S106
)
COMPOSE_LAYOUT = Layout(
    dags_folder="/opt/airflow/dags",
    plugins_folder="/opt/airflow/plugins",
    passwords_file="/opt/airflow/auth/passwords.json",
    worker_concurrency="${AIRFLOW_WORKER_CONCURRENCY:-4}",
)


def init_commands(pool_name: str, pool_slots: int) -> list[list[str]]:
    """The ``airflow`` commands that prepare a new deployment, in order.

    :param pool_name: the pool that caps concurrently working instances (``GPUCOMPARE_POOL``).
    :param pool_slots: how many instances may work at once.
    """
    return [
        ["airflow", "db", "migrate"],
        # deferred sweeps count: a machine whose sweep waits in the triggerer still costs money
        ["airflow", "pools", "set", pool_name, str(pool_slots), "gpucompare: instances working at once",
         "--include-deferred"],
    ]


def init_deployment(passwords_file: Path, admin_password: str) -> None:
    """Migrate, create the pool from the fleet file, write the passwords file (idempotent).

    :param passwords_file: the file named by ``[core] simple_auth_manager_passwords_file``.
    :param admin_password: the admin's password; checked before anything else runs.
    """
    if not admin_password:
        raise ValueError(f"{ADMIN_PASSWORD_ENV} must be set to a non-empty password")
    from gpucompare import settings
    from gpucompare.config import fleet

    pool_slots = fleet.load_fleet().max_instances
    for command in init_commands(settings.pool(), pool_slots):
        # The same interpreter as this module: the image's (or the virtualenv's) Airflow.
        subprocess.run([sys.executable, "-m", *command], check=True)
    write_passwords_file(passwords_file, admin_password)


def _postgres_url(scheme: str, endpoints: Endpoints) -> str:
    # quote() keeps a password with '@' or ':' from breaking the URL; ${VAR} placeholders
    # are left as they are so compose can interpolate them.
    password = endpoints.postgres_password
    if not password.startswith("${"):
        password = quote(password, safe="")
    return (
        f"{scheme}://{endpoints.postgres_user}:{password}@{endpoints.postgres_host}:"
        f"{endpoints.postgres_port}/{endpoints.postgres_db}"
    )


def celery_deployment_env(endpoints: Endpoints, secrets: Secrets, layout: Layout) -> dict[str, str]:
    """Return every ``AIRFLOW__*`` variable an Airflow process of the deployment needs.

    :param endpoints: the PostgreSQL, Redis and API server addresses.
    :param secrets: the Fernet key, JWT secret and API secret key shared by all processes.
    :param layout: DAG/plugin folders, the passwords file and the Celery worker concurrency.
    """
    env = dict(STATIC_SETTINGS)
    env.update(
        {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": _postgres_url("postgresql+psycopg2", endpoints),
            "AIRFLOW__CELERY__RESULT_BACKEND": _postgres_url("db+postgresql", endpoints),
            "AIRFLOW__CELERY__BROKER_URL": f"redis://{endpoints.redis_host}:{endpoints.redis_port}/0",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{endpoints.api_server_url}/execution/",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(endpoints.worker_log_server_port),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(endpoints.trigger_log_server_port),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT": str(endpoints.scheduler_health_port),
            "AIRFLOW__CORE__FERNET_KEY": secrets.fernet_key,
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.jwt_secret,
            "AIRFLOW__API__SECRET_KEY": secrets.api_secret_key,
            "AIRFLOW__CORE__DAGS_FOLDER": layout.dags_folder,
            "AIRFLOW__CORE__PLUGINS_FOLDER": layout.plugins_folder,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": layout.passwords_file,
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(layout.worker_concurrency),
        }
    )
    return dict(sorted(env.items()))


def write_passwords_file(path: Path, password: str) -> None:
    """Write the simple auth manager's passwords file for the admin user (owner-only, 0600).

    :param path: the file named by ``[core] simple_auth_manager_passwords_file``.
    :param password: the admin's password; must not be empty.
    """
    if not password:
        raise ValueError(f"{ADMIN_PASSWORD_ENV} must be set to a non-empty password")
    path.parent.mkdir(parents=True, exist_ok=True)
    # Create with 0600 from the start so the password is never world-readable, even briefly.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
        stream.write(json.dumps({ADMIN_USER: password}) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Command line of the compose init service: ``init PASSWORDS_FILE``."""
    parser = argparse.ArgumentParser(prog="python -m gpucompare.airflow.deployment", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    init = commands.add_parser("init", help="migrate, create the pool, write the passwords file")
    init.add_argument("passwords_file", type=Path)
    args = parser.parse_args(argv)
    try:
        init_deployment(args.passwords_file, os.environ.get(ADMIN_PASSWORD_ENV, ""))
    except ValueError as error:  # bad input: the password, the fleet file
        print(f"error: {error}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as error:
        print(f"error: {' '.join(error.cmd)} exited {error.returncode}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
