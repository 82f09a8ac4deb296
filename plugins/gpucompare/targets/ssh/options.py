"""The options of an ``ssh`` target (connection, remote paths, isolation), parsed and checked
before anything connects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from gpucompare.config import models, patterns
from gpucompare.config.validation import ValidationError, validate
from gpucompare.targets.base import TargetConfigError

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
TAIL_BYTES = 16384



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


    @classmethod
    def parse(cls, options: dict[str, Any], *, gpu_count: int = 0) -> SSHOptions:
        """Check every option (``config.models.SshOptions``); an error names the option, the
        value and what is allowed."""
        try:
            checked = validate(models.SshOptions, options, prefix="options")
        except ValidationError as exc:
            raise TargetConfigError(f"ssh target: {exc}") from None
        values = checked.model_dump()
        values["requirements"] = checked.requirements or ("gpu" if gpu_count > 0 else "cpu")
        if checked.remote_dir is not None:
            values["remote_dir"] = checked.remote_dir.rstrip("/") or "/"
        return cls(**values)


def is_absolute_path(value: str) -> bool:
    """A remote absolute path with no '.' or '..' segment (the remote home, a run directory)."""
    return bool(patterns.ABSOLUTE_PATH.fullmatch(value)) and not patterns.has_dot_segment(value)
