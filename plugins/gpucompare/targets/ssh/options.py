"""The options of an ``ssh`` target (connection, remote paths, isolation), parsed and checked
before anything connects.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, TypeVar

from gpucompare.config import patterns
from gpucompare.targets.base import TargetError
from gpucompare.targets.bundle import REQUIREMENTS

T = TypeVar("T")

DEFAULT_IMAGE = "gpucompare-worker:latest"
DEFAULT_CONN_TIMEOUT_S = 15
COMMAND_TIMEOUT_S = 120
#: Seconds the orchestrator waits past the remote time limit before killing the sweep itself.
BACKSTOP_SLACK_S = 30
#: How often (in polls) the orchestrator checks that the remote sweep is still alive.
LIVENESS_EVERY_POLLS = 10
#: A claimed sweep with no live process for this long is considered lost (host rebooted...).
LOST_AFTER_S = 60
_TAIL_BYTES = 16384

_CONN_ID = patterns.CONN_ID
_PATH_SEGMENT = r"[A-Za-z0-9._+@%=,-]+"
_ABSOLUTE_PATH = re.compile(rf"^(?:/{_PATH_SEGMENT})+/?$")
_BASE_PYTHON = re.compile(r"^python3(?:\.[0-9]{1,2})?$")
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,254}(?:@sha256:[0-9a-f]{64})?$")
_DOCKER_GPUS = re.compile(r"^(?:all|[1-9][0-9]?|device=[0-9]{1,2}(?:,[0-9]{1,2})*)$")


# -- options ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class SSHOptions:
    """The validated options of an ssh target."""

    ssh_conn_id: str
    remote_dir: str | None
    python: str | None
    base_python: str
    requirements: str
    use_docker: bool
    image: str
    docker_gpus: str
    known_hosts_file: str | None
    connect_retries: int
    retry_backoff_s: float
    poll_interval_s: float
    kill_grace_s: int
    env_timeout_s: int
    remove_run_dir: bool

    ALLOWED = ("ssh_conn_id", "remote_dir", "python", "base_python", "requirements", "use_docker",
               "image", "docker_gpus", "known_hosts_file", "connect_retries", "retry_backoff_s",
               "poll_interval_s", "kill_grace_s", "env_timeout_s", "remove_run_dir")

    @classmethod
    def parse(cls, options: dict[str, Any], *, gpu_count: int = 0) -> SSHOptions:
        """Check every option; an error names the option and what it may be."""
        unknown = sorted(set(options) - set(cls.ALLOWED))
        if unknown:
            raise TargetError(f"ssh target: unknown option {unknown[0]!r} "
                              f"(allowed: {', '.join(cls.ALLOWED)})")
        conn_id = options.get("ssh_conn_id")
        if not isinstance(conn_id, str) or not _CONN_ID.fullmatch(conn_id):
            raise TargetError(f"ssh target: option 'ssh_conn_id' must name an Airflow connection "
                              f"(letters, digits, _ . -), got {conn_id!r}")
        requirements = options.get("requirements", "gpu" if gpu_count > 0 else "cpu")
        if requirements not in REQUIREMENTS:
            raise TargetError(f"ssh target: option 'requirements' must be one of "
                              f"{', '.join(REQUIREMENTS)}, got {requirements!r}")
        base_python = options.get("base_python", "python3")
        if not isinstance(base_python, str) or not (_BASE_PYTHON.fullmatch(base_python)
                                                   or _is_absolute_path(base_python)):
            raise TargetError(f"ssh target: option 'base_python' must be python3, python3.N or an "
                              f"absolute path, got {base_python!r}")
        image = options.get("image", DEFAULT_IMAGE)
        if not isinstance(image, str) or not _IMAGE.fullmatch(image):
            raise TargetError(f"ssh target: option 'image' must be a docker image reference "
                              f"(name[:tag][@sha256:digest]), got {image!r}")
        docker_gpus = options.get("docker_gpus", "all")
        if not isinstance(docker_gpus, str) or not _DOCKER_GPUS.fullmatch(docker_gpus):
            raise TargetError(f"ssh target: option 'docker_gpus' must be 'all', a count or "
                              f"'device=0,1', got {docker_gpus!r}")
        known_hosts = options.get("known_hosts_file")
        if known_hosts is not None and (not isinstance(known_hosts, str) or not os.path.isabs(known_hosts)):
            raise TargetError(f"ssh target: option 'known_hosts_file' must be an absolute path on the "
                              f"orchestrator, got {known_hosts!r}")
        return cls(
            ssh_conn_id=conn_id,
            remote_dir=_remote_path(options, "remote_dir"),
            python=_remote_path(options, "python"),
            base_python=base_python,
            requirements=requirements,
            use_docker=_flag(options, "use_docker", False),
            image=image,
            docker_gpus=docker_gpus,
            known_hosts_file=known_hosts,
            connect_retries=int(_number(options, "connect_retries", 6, low=1, high=30, integer=True)),
            retry_backoff_s=_number(options, "retry_backoff_s", 2.0, low=0.05, high=120),
            poll_interval_s=_number(options, "poll_interval_s", 2.0, low=0.05, high=120),
            kill_grace_s=int(_number(options, "kill_grace_s", 20, low=1, high=600, integer=True)),
            env_timeout_s=int(_number(options, "env_timeout_s", 3600, low=10, high=86400, integer=True)),
            remove_run_dir=_flag(options, "remove_run_dir", False),
        )


def _is_absolute_path(value: str) -> bool:
    if not _ABSOLUTE_PATH.fullmatch(value):
        return False
    return not any(part in {".", ".."} for part in value.split("/"))


def _remote_path(options: dict[str, Any], name: str) -> str | None:
    value = options.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not _is_absolute_path(value):
        raise TargetError(f"ssh target: option {name!r} must be an absolute path of letters, digits "
                          f"and . _ - + @ % = , (no '..', no spaces), got {value!r}")
    return value.rstrip("/") or "/"


def _flag(options: dict[str, Any], name: str, default: bool) -> bool:
    value = options.get(name, default)
    if not isinstance(value, bool):
        raise TargetError(f"ssh target: option {name!r} must be true or false, got {value!r}")
    return value


def _number(options: dict[str, Any], name: str, default: float, *, low: float, high: float,
            integer: bool = False) -> float:
    value = options.get(name, default)
    wrong_type = isinstance(value, bool) or not isinstance(value, (int, float))
    if wrong_type or (integer and value != int(value)) or not low <= value <= high:
        kind = "an integer" if integer else "a number"
        raise TargetError(f"ssh target: option {name!r} must be {kind} from {low:g} to {high:g}, "
                          f"got {value!r}")
    return float(value)


