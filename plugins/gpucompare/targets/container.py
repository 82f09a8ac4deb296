"""The container runtime of the worker: ``docker pull`` of a pinned image and the ``docker run``
that runs ``python -m bench_tasks`` inside it (NVIDIA's MXNet container for the ``ngc-…``
runtimes of ``data/runtimes.csv``).

The worker code is not baked into the image: the target's uploaded bundle is mounted read-only
at :data:`CODE_DIR` and the sweep's folder at its own path (read-write), so the sweep's config,
results, progress and exit files are where the venv runtime puts them. ``--gpus all`` exposes
the GPUs (the NVIDIA Container Toolkit on the host), ``--init`` reaps the worker's measuring
processes, ``--rm`` leaves nothing behind, ``--user UID:GID`` keeps the files the host user's,
``--ipc host`` gives NCCL and MXNet's loaders the shared memory they need, ``--ulimit
memlock=-1 --ulimit stack=67108864`` are NVIDIA's recommended limits for its framework
containers, and ``--network none`` because the worker needs no network.

A container is bound to its sweep: its name (:func:`container_name`) and label
(:data:`LABEL`) are derived from the run and the sweep, the sweep's script ``docker kill``-s it
when the worker has ended or was killed (SIGKILL of ``timeout`` reaches the docker client only,
never the container), and then checks that it is gone: one left running fails the sweep with
:data:`LEFT_EXIT_CODE`, naming it (:func:`reap_lines`). On ec2 a watchdog outside the script's
process group does the same when SSM cancels the command (:func:`watchdog_line`).

:func:`pull_script` pulls once per host and reuses the image afterwards; it prints the
reference with the digest the host has (``nvcr.io/nvidia/mxnet@sha256:…``), which the sweep then
runs, so a night runs one exact image even when the runtimes table could cite no digest and the
tag moved. Pure functions of their inputs (the ssh and ec2 command builders call them; the tests
run exactly these through a stand-in ``docker``).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bench_tasks.constants import WORKER_IMAGE_ENV, WORKER_RUNTIME_ENV
from gpucompare.config import patterns, runtimes
from gpucompare.targets.base import TargetConfigError, shell_quote

#: where the worker bundle is mounted in the container (read-only)
CODE_DIR = "/opt/gpucompare/code"
#: ``name@sha256:<64 hex>``: what :func:`pull_script` prints and :func:`run_argv` accepts
PINNED = re.compile(r"[a-z0-9][a-z0-9._/:-]{0,200}@sha256:[0-9a-f]{64}")
_PULL_LINE = re.compile(r"(pulled|present) (\S+)")
#: the label every container of a sweep carries (value: the container's name), what the checks list
LABEL = "gpucompare.container"
#: the sweep's exit status when its container is still running after the sweep
LEFT_EXIT_CODE = 96
#: NVIDIA's recommended limits for its framework containers, and no network: the worker needs none
LIMITS = ("--ulimit", "memlock=-1", "--ulimit", "stack=67108864", "--network", "none", "--ipc", "host")


@dataclass(frozen=True)
class Pulled:
    """What the pull found: the pinned reference and whether it was downloaded now."""

    reference: str
    downloaded: bool


def runtime_image(runtime_name: str) -> str:
    """The image reference of a docker runtime (``image@digest`` when the table has a digest)."""
    runtime = runtimes.get(runtime_name)
    if runtime.delivery != "docker" or runtime.image_reference is None:
        raise TargetConfigError(f"worker runtime {runtime_name!r} is not a container runtime")
    return runtime.image_reference


def is_container_runtime(runtime_name: str | None) -> bool:
    return bool(runtime_name) and runtime_name in runtimes.names() and \
        runtimes.get(str(runtime_name)).delivery == "docker"


def pull_script(image: str) -> str:
    """Pull ``image`` unless the host has it; print ``pulled <ref@digest>`` or ``present …``.

    The pull's own output goes to standard error (the progress the target streams)."""
    digest = f"docker image inspect --format '{{{{index .RepoDigests 0}}}}' {shell_quote(image)}"
    return "\n".join([
        "set -e",
        f"if ref=$({digest} 2>/dev/null) && [ -n \"$ref\" ]; then echo \"present $ref\"; exit 0; fi",
        f"docker pull {shell_quote(image)} >&2",
        f"ref=$({digest})",
        'echo "pulled $ref"',
    ])


def parse_pull(output: str, image: str) -> Pulled:
    """The last ``pulled|present <ref>`` line of :func:`pull_script`'s output, checked."""
    found = [m for m in (_PULL_LINE.fullmatch(line.strip()) for line in output.splitlines()) if m]
    if not found:
        raise TargetConfigError(f"pull of {image}: no image reference in the answer {output[-300:]!r}")
    state, reference = found[-1].groups()
    if not PINNED.fullmatch(reference):
        raise TargetConfigError(f"pull of {image}: {reference!r} is not <name>@sha256:<digest>")
    wanted = image.split("@", 1)[1] if "@" in image else None
    if wanted and not reference.endswith(wanted):
        raise TargetConfigError(f"pull of {image}: the host has {reference}, not the pinned digest")
    return Pulled(reference, state == "pulled")


def container_name(run_dir_name: str, sweep_dir_name: str) -> str:
    """The docker container name of one sweep of a run: ``[a-zA-Z0-9][a-zA-Z0-9_.-]*``."""
    safe = patterns.NOT_PLAIN.sub("_", run_dir_name)[:60]
    return f"gpucompare-{safe}-{patterns.NOT_PLAIN.sub('_', sweep_dir_name)}"


def bound_flags(name: str) -> list[str]:
    """The flags that bind a container to its sweep (name, label) and set its limits."""
    if not patterns.CONTAINER_NAME.fullmatch(name):
        raise TargetConfigError(f"container name {name!r}: {patterns.CONTAINER_NAME_ALLOWED}")
    return ["--name", name, "--label", f"{LABEL}={name}", *LIMITS]


def run_argv(*, image: str, runtime: str, code_dir: str, sweep_dir: str, uid: int, gid: int,
             worker_args: Sequence[str], name: str, gpus: str = "all",
             env: Mapping[str, str] | None = None) -> list[str]:
    """``docker run`` of ``python -m bench_tasks <worker_args>`` in ``image`` with the bundle in
    ``code_dir`` mounted read-only and ``sweep_dir`` mounted at its own path."""
    for label, path in (("code_dir", code_dir), ("sweep_dir", sweep_dir)):
        if not posixpath.isabs(path) or ":" in path or "," in path:
            raise TargetConfigError(f"container run: {label} {path!r} must be an absolute path "
                                    "without ':' or ','")
    variables = {"PYTHONPATH": CODE_DIR, "PYTHONUNBUFFERED": "1", "HOME": "/tmp",
                 WORKER_RUNTIME_ENV: runtime, WORKER_IMAGE_ENV: image, **(env or {})}
    argv = ["docker", "run", "--rm", "--init", "--gpus", gpus, "--user", f"{int(uid)}:{int(gid)}",
            *bound_flags(name)]
    argv += ["--volume", f"{code_dir}:{CODE_DIR}:ro", "--volume", f"{sweep_dir}:{sweep_dir}",
             "--workdir", CODE_DIR]
    for key, value in sorted(variables.items()):
        argv += ["--env", f"{key}={value}"]
    return [*argv, image, "python", "-m", "bench_tasks", *worker_args]


def shell_prefix(**run: object) -> str:
    """:func:`run_argv` (keyword arguments, without ``worker_args``) as shell text up to the
    image's ``python``: what a command builder puts before ``-m bench_tasks …``."""
    argv = run_argv(worker_args=[], **run)  # type: ignore[arg-type]
    return " ".join(shell_quote(arg) for arg in argv[:-2])


def left_command(name: str) -> str:
    """Shell text printing the ids of the running containers of ``name`` (by its label); prints
    ``docker ps failed`` when docker cannot answer (a check that cannot look does not pass)."""
    return (f"docker ps -q --filter {shell_quote(f'label={LABEL}={name}')} 2>/dev/null "
            "|| echo 'docker ps failed'")


def reap_lines(name: str, *, log_file: str, rc_var: str = "rc", wait_s: int = 10) -> list[str]:
    """Shell lines run after the worker ended (or its ``timeout`` killed the docker client):
    kill the sweep's container, wait up to ``wait_s`` for it to be gone, and if it is not, set
    ``$rc_var`` to :data:`LEFT_EXIT_CODE` with a line naming it in ``log_file`` and on stderr."""
    quoted, left, message = shell_quote(name), left_command(name), shell_quote(
        f"gpucompare: container {name} is still running after its sweep: "
        f"stop it (docker kill {name}) before the GPUs are measured again")
    return [
        f"docker kill {quoted} >/dev/null 2>&1 || true",
        f'i=0; while [ -n "$({left})" ] && [ $i -lt {int(wait_s) * 5} ]; do '
        "sleep 0.2; i=$((i+1)); done",
        f'if [ -n "$({left})" ]; then echo {message} >> {shell_quote(log_file)}; '
        f"echo {message} >&2; {rc_var}={LEFT_EXIT_CODE}; fi",
    ]


def watchdog_line(name: str, *, poll_s: int = 1) -> str:
    """A background watchdog in a session of its own (``setsid``): while the script (``$$``)
    lives it sleeps; once the script is gone, killed with its process group by an SSM cancel
    or time limit included, it kills the sweep's container. Holds none of the script's pipes
    or its lock (fd 9)."""
    inner = (f"while kill -0 \"$1\" 2>/dev/null; do sleep {int(poll_s)}; done; "
             f"docker kill {shell_quote(name)} >/dev/null 2>&1")
    return f"setsid sh -c {shell_quote(inner)} watchdog $$ </dev/null >/dev/null 2>&1 9>&- &"
