"""A host channel: how the orchestrator runs processes on one prepared host of a target.

Each target kind that can join a scaling group returns its own channel from
``Target.channel(state)`` (SSH for ``ssh`` targets, SSM Run Command for ``ec2``): the scaling
launcher (``gpucompare.scaling.launcher``) only sees this protocol. Here: the protocol, the
roles it runs (one process of a parameter-server job), and the shell scripts every channel
sends, with every value quoted (pure functions, tested).
"""

from __future__ import annotations

import logging
import posixpath
import re
from collections.abc import Sequence
from typing import Any

from gpucompare.config import patterns
from gpucompare.targets.base import HostChannel, Role, RoleStatus, shell_quote  # noqa: F401  (part of the channel API)

log = logging.getLogger(__name__)

MARKER_VARIABLE = "GPUCOMPARE_DIST"
PORT_PROBE_COUNT = 200
COMMAND_TIMEOUT_S = 120.0
LOG_TAIL_LINES = 30


class DistributedRunError(RuntimeError):
    """A point of a scaling run failed; the message names the role, the host and why."""


# -- shell scripts (every value quoted; pure functions, tested) -------------------------------

def kill_marked_script(tag: str, *, grace_s: float, exact: bool = False) -> str:
    """TERM every process of this user whose environment has ``GPUCOMPARE_DIST=<tag>`` (exactly,
    or starting with ``tag`` unless ``exact``), KILL what is left after ``grace_s``; prints
    ``stopped N``. Tags hold only letters, digits, ``-`` and ``/`` (no regex specials)."""
    if not patterns.MARKER_TAG.fullmatch(tag):
        raise DistributedRunError(f"marker: {tag!r} holds characters a marker never has")
    wanted = f"{MARKER_VARIABLE}={tag}"
    match = f"grep -qx {shell_quote(wanted)}" if exact else f"grep -q {shell_quote('^' + wanted)}"
    return "\n".join([
        "marked() {",
        "  for e in /proc/[0-9]*/environ; do",
        '    p=${e#/proc/}; p=${p%/environ}',
        '    [ "$p" = "$$" ] && continue',
        f"    tr '\\000' '\\n' < \"$e\" 2>/dev/null | {match} && echo \"$p\"",
        "  done",
        "}",
        'pids=$(marked); n=0',
        'for p in $pids; do kill -TERM "$p" 2>/dev/null && n=$((n+1)); done',
        f"i=0; while [ $i -lt {max(1, int(grace_s * 5))} ] && [ -n \"$(marked)\" ]; do",
        "  sleep 0.2; i=$((i+1))",
        "done",
        'for p in $(marked); do kill -KILL "$p" 2>/dev/null; done',
        'echo "stopped $n"',
    ])


def stopped_count(output: str) -> int:
    """How many processes :func:`kill_marked_script` said it stopped (0 if it said nothing)."""
    match = re.search(r"stopped (\d+)", output)
    return int(match.group(1)) if match else 0


def role_script(role: Role, *, point_dir: str, code_dir: str, kill_grace_s: float) -> str:
    """The shell script that runs one role on its host and records how it ended.

    It runs the role under ``timeout`` (the host's own limit), writes the exit status last
    (atomically), and stops anything of this role that outlived it.
    """
    base = posixpath.join(point_dir, role.name)
    assignments = " ".join(f"{k}={shell_quote(v)}" for k, v in sorted(role.env.items()))
    argv = " ".join(shell_quote(a) for a in role.argv)
    return "\n".join([
        "#!/bin/sh",
        f"# Written by gpucompare (plugins/gpucompare/targets/channel.py): {role.name}, marker in its env.",
        f"cd {shell_quote(code_dir)} || exit 97",
        f"echo $$ > {shell_quote(base + '.pid')}",
        f"env {assignments} timeout --kill-after={int(kill_grace_s)} {role.timeout_s} {argv} "
        f"> {shell_quote(base + '.out')} 2> {shell_quote(base + '.log')} < /dev/null",
        "rc=$?",
        "(",
        kill_marked_script(role.env[MARKER_VARIABLE], grace_s=kill_grace_s, exact=True),
        ") > /dev/null 2>&1",
        f"echo $rc > {shell_quote(base + '.exit.tmp')} "
        f"&& mv {shell_quote(base + '.exit.tmp')} {shell_quote(base + '.exit')}",
        "",
    ])


def status_script(point_dir: str, names: Sequence[str]) -> str:
    """One line per role: ``<name> exit N``, ``<name> running`` or ``<name> missing``."""
    return "\n".join([
        f"d={shell_quote(point_dir)}",
        f"for n in {' '.join(shell_quote(n) for n in names)}; do",
        '  if [ -f "$d/$n.exit" ]; then echo "$n exit $(cat "$d/$n.exit")";',
        '  elif [ -f "$d/$n.pid" ] && kill -0 "$(cat "$d/$n.pid")" 2>/dev/null; then echo "$n running";',
        '  else echo "$n missing"; fi',
        "done",
    ])


PORT_PROBE = (
    "import socket, sys\n"
    "host, start, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
    "for port in range(start, start + count):\n"
    "    with socket.socket() as s:\n"
    "        try:\n"
    "            s.bind((host, port))\n"
    "        except OSError:\n"
    "            continue\n"
    "    print(port)\n"
    "    break\n"
)


def port_probe_command(python: str, bind_host: str, start: int, count: int = PORT_PROBE_COUNT) -> str:
    return (f"{shell_quote(python)} -c {shell_quote(PORT_PROBE)} {shell_quote(bind_host)} "
            f"{int(start)} {int(count)}")


# -- channels: how the orchestrator reaches a host ----------------------------------------------

def check_address(value: Any, what: str) -> str:
    if not isinstance(value, str) or not patterns.HOST_ADDRESS.fullmatch(value):
        raise DistributedRunError(f"{what}: {value!r} is not a host name or IP address")
    return value


