"""The shell an ``ssh`` target runs on its host: every value quoted, each builder unit-tested
(pure functions of their inputs).
"""

from __future__ import annotations

import posixpath

from gpucompare.targets import container, runs
from gpucompare.targets.base import shell_quote
from gpucompare.targets.runs import SweepPaths  # the layout shared with the ec2 target


def docker_gpus_value(gpus: str) -> str:
    """The value of ``--gpus``: docker reads it as CSV, so a device list needs its own quotes
    (``--gpus '"device=0,1"'`` in docker's documentation)."""
    return f'"{gpus}"' if "," in gpus else gpus


def docker_command(*, image: str, gpus: str, sweep_dir: str, container_name: str, uid: int, gid: int,
                   ) -> list[str]:
    """``docker run`` of the worker image on one sweep directory (mounted at /sweep)."""
    return [
        "docker", "run", "--rm", "--init",
        "--gpus", docker_gpus_value(gpus),
        "--user", f"{uid}:{gid}",
        # name, label, NVIDIA's ulimits, no network, --ipc host (NCCL and MXNet's loaders want
        # more than 64 MB of shm): the same as the container runtimes'
        *container.bound_flags(container_name),
        "--volume", f"{sweep_dir}:/sweep",
        "--workdir", "/sweep",
        image,
        "sweep", "--config", f"/sweep/{runs.CONFIG_FILE}",
        "--output", f"/sweep/{runs.PARTIAL_RESULTS_FILE}",
    ]


def venv_worker_command(*, python: str, paths: SweepPaths, env_dir: str | None = None) -> list[str]:
    """The worker's command line; in an environment deploy made, under a shared lock on its
    directory, so pruning (``venv_command``) never removes an environment a sweep runs in."""
    lock = ["flock", "--shared", env_dir] if env_dir else []
    return [*lock, python, "-m", "bench_tasks", "sweep", "--config", paths.config, "--output", paths.partial]


def run_script(*, paths: SweepPaths, cwd: str, worker_argv: list[str], env: dict[str, str],
               timeout_s: int, kill_grace_s: int, container_name: str | None = None) -> str:
    """The shell script that runs one sweep on the host, detached from the SSH session.

    ``mkdir claim`` makes it run once even if a launch is retried; ``timeout`` enforces the
    time limit on the host (and, not in --foreground mode, signals the whole process group
    it leads, whose id goes to the pid file); the exit status is written last, atomically.
    A stop request (see ``stop_script``) found after the pid file is written ends the worker,
    so a teardown racing with the launch cannot miss it.
    """
    argv = " ".join(shell_quote(arg) for arg in worker_argv)
    lines = [
        "#!/bin/sh",
        "# Written by gpucompare (plugins/gpucompare/targets/ssh.py): one sweep, detached.",
        f"cd {shell_quote(cwd)} || exit 97",
        f"mkdir {shell_quote(paths.claim)} 2>/dev/null || exit 0",
        *(f"export {name}={shell_quote(value)}" for name, value in sorted(env.items())),
    ]
    if container_name:
        lines.append(f"printf '%s\\n' {shell_quote(container_name)} > {shell_quote(paths.container)}")
    lines += [
        f"timeout --kill-after={int(kill_grace_s)} {int(timeout_s)} {argv} "
        f"> {shell_quote(paths.stdout)} 2> {shell_quote(paths.progress)} < /dev/null &",
        "worker=$!",
        f'echo "$worker" > {shell_quote(paths.pid + ".tmp")} '
        f'&& mv {shell_quote(paths.pid + ".tmp")} {shell_quote(paths.pid)}',
        # A teardown that looked before the pid file existed has left a stop request.
        f'if [ -f {shell_quote(paths.stop)} ]; '
        'then kill -TERM -- "-$worker" 2>/dev/null || kill -TERM "$worker"; fi',
        'wait "$worker"',
        "rc=$?",
    ]
    if container_name:
        # SIGKILL of the docker client does not reach the container: make sure it is gone,
        # and fail the sweep naming it if it is not
        lines += container.reap_lines(container_name, log_file=paths.progress)
    lines += [
        f'if [ "$rc" -eq 0 ]; then mv {shell_quote(paths.partial)} {shell_quote(paths.results)} || rc=98; fi',
        f'echo "$rc" > {shell_quote(paths.exit_code + ".tmp")} && '
        f'mv {shell_quote(paths.exit_code + ".tmp")} {shell_quote(paths.exit_code)}',
        "",
    ]
    return "\n".join(lines)


def launch_command(paths: SweepPaths) -> str:
    """Start run.sh in a new session, immune to the SSH session ending; returns at once."""
    return (f"setsid nohup sh {shell_quote(paths.script)} > {shell_quote(paths.launcher)} 2>&1 < /dev/null &")


def stop_script(run_dir: str, *, grace_s: int, only: str | None = None) -> str:
    """Stop the unfinished sweeps of a run directory (or one of them); prints their directories.

    For each: leave a stop request (run.sh honours it if it has not written its pid yet),
    TERM the worker's process group, kill its container, and KILL what is left after
    ``grace_s``. A pid is only signalled while its command line still names its sweep
    directory, so a pid recycled after a reboot is left alone. Safe to run twice.
    """
    pattern = shell_quote(only) if only else f"{shell_quote(run_dir)}/sweep-*"
    return "\n".join([
        "alive() { kill -0 \"$1\" 2>/dev/null && tr '\\000' ' ' < /proc/$1/cmdline 2>/dev/null "
        "| grep -qF -- \"$2\"; }",
        "signal_all() {",
        f"  for d in {pattern}; do",
        '    [ -d "$d" ] && [ ! -f "$d/exit_code" ] || continue',
        '    [ "$1" = TERM ] && touch "$d/stop" && echo "$d"',
        '    [ -f "$d/pid" ] || continue',
        '    p=$(cat "$d/pid")',
        '    case "$p" in ""|*[!0-9]*) continue;; esac',
        '    if alive "$p" "$d"; then kill "-$1" -- "-$p" 2>/dev/null || kill "-$1" "$p" 2>/dev/null;'
        ' [ "$1" = 0 ] && echo "$d"; fi',
        '    if [ "$1" != 0 ] && [ -f "$d/container" ]; then '
        'docker kill "$(cat "$d/container")" >/dev/null 2>&1; fi',
        "  done",
        "}",
        "signal_all TERM",
        f"i=0; while [ $i -lt {int(grace_s) * 5} ]; do "
        '[ -z "$(signal_all 0)" ] && exit 0; sleep 0.2; i=$((i+1)); done',
        "signal_all KILL >/dev/null",
        "exit 0",
    ])


def probe_script(paths: SweepPaths) -> str:
    """Prints the state of a sweep: ``exit N``, ``running``, ``claimed`` or ``new``."""
    return "\n".join([
        f"d={shell_quote(paths.sweep_dir)}",
        'if [ -f "$d/exit_code" ]; then echo "exit $(cat "$d/exit_code")";',
        'elif [ -f "$d/pid" ] && kill -0 "$(cat "$d/pid")" 2>/dev/null; then echo running;',
        'elif [ -d "$d/claim" ]; then echo claimed;',
        "else echo new; fi",
    ])


def unpack_command(*, upload: str, code_dir: str, base: str) -> str:
    """Unpack an uploaded bundle into ``code_dir`` atomically (a rename), or keep a copy
    another deploy finished first."""
    return "\n".join([
        "set -e",
        f"tmp=$(mktemp -d {shell_quote(posixpath.join(base, '.unpack-XXXXXXXX'))})",
        f'tar -xzf {shell_quote(upload)} -C "$tmp"',
        f"rm -f {shell_quote(upload)}",
        'chmod 755 "$tmp"',
        f'if ! mv -T "$tmp" {shell_quote(code_dir)} 2>/dev/null; then rm -rf "$tmp"; '
        f"test -d {shell_quote(posixpath.join(code_dir, 'bench_tasks'))}; fi",
    ])


def venv_command(*, base_python: str, env_dir: str, requirements_file: str, lock_file: str,
                 timeout_s: int, keep: int) -> str:
    """Create the worker environment once and keep at most ``keep`` others on the host.

    ``env_dir`` is named by the hash of its requirements file, so an environment is reused
    night after night until that file changes. Everything runs under one exclusive lock per
    host base directory (concurrent deploys wait; a build is never seen half done). ``.ready``
    is written last: a directory without it (a build killed or failed half way) is removed
    and built again, never used. Each use touches ``.ready``, so its time is the last use;
    beyond the ``keep`` most recently used others, environments are removed, except one a
    sweep holds its shared lock on (``venv_worker_command``) and the one in use now.
    """
    ready = posixpath.join(env_dir, ".ready")
    base = posixpath.dirname(env_dir)
    inner = "\n".join([
        "set -e",
        f"if [ -f {shell_quote(ready)} ]; then echo 'environment ready'; touch {shell_quote(ready)}; else",
        f"  rm -rf {shell_quote(env_dir)}",
        f"  {shell_quote(base_python)} -m venv {shell_quote(env_dir)}",
        f"  {shell_quote(posixpath.join(env_dir, 'bin', 'python'))} -m pip install "
        "--disable-pip-version-check "
        f"--no-input --progress-bar off -r {shell_quote(requirements_file)}",
        f"  touch {shell_quote(ready)}",
        "  echo 'environment created'",
        "fi",
        # newest first by last use; the names are env-<kind>-<hex> (no spaces, nothing to quote)
        "kept=0",
        f"for marker in $(ls -1dt {shell_quote(base)}/env-*/.ready 2>/dev/null); do",
        '  d=${marker%/.ready}',
        f'  [ "$d" = {shell_quote(env_dir)} ] && continue',
        "  kept=$((kept + 1))",
        f'  [ "$kept" -le {int(keep)} ] && continue',
        '  if flock -n -x "$d" rm -rf "$d"; then echo "removed old environment $d"; '
        'else echo "kept $d: a sweep is running in it"; fi',
        "done",
        f"for d in {shell_quote(base)}/env-*; do",
        f'  [ -d "$d" ] && [ "$d" != {shell_quote(env_dir)} ] && [ ! -f "$d/.ready" ] || continue',
        '  flock -n -x "$d" rm -rf "$d" && echo "removed half-built environment $d"',
        "done",
        "exit 0",
    ])
    return f"flock -w {int(timeout_s)} {shell_quote(lock_file)} sh -c {shell_quote(inner)}"


def check_python_command(*, python: str, code_dir: str) -> str:
    check = "import bench_tasks, mxnet; print(mxnet.__version__)"
    return (f"cd {shell_quote(code_dir)} && PYTHONPATH={shell_quote(code_dir)} "
            f"{shell_quote(python)} -c {shell_quote(check)}")


def docker_image_command(image: str, gpus: str) -> str:
    """Pull the worker image if the host lacks it, then run its ``sysinfo`` with the GPUs:
    a host without a driver or the NVIDIA Container Toolkit fails here, not mid-sweep."""
    return (f"(docker image inspect {shell_quote(image)} >/dev/null 2>&1 "
            f"|| docker pull {shell_quote(image)}) && "
            f"docker run --rm --gpus {shell_quote(docker_gpus_value(gpus))} {shell_quote(image)} sysinfo")


