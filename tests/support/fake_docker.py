"""A stand-in ``docker`` for the container runtime's tests (no Docker engine here).

:func:`install_fake_docker` writes an executable ``docker`` into a folder; put that folder first
on the PATH of the test sshd's sessions (``SetEnv PATH=…``) or of a subprocess. It answers what
the worker's targets ask of docker, checks the arguments the way the real one would need them,
and then runs the worker the way the image would:

* ``image inspect --format '{{index .RepoDigests 0}}' IMAGE``: the pinned reference once pulled;
* ``pull IMAGE``: only the expected image; remembered (a second night finds it present);
* ``run``: requires ``--rm``, ``--init``, ``--gpus all``, ``--user`` = the caller's uid:gid, the
  image pulled (by digest), the bundle mounted read-only at /opt/gpucompare/code and the sweep
  folder mounted at its own path, the runtime in the environment; then execs the worker
  interpreter (``.venv-bench``, standing in for the image's ``python``) with the bundle as
  PYTHONPATH and the ``--env`` values, so ``python -m bench_tasks …`` runs for real;
* ``kill NAME``: accepted.

Every call is appended to ``calls.jsonl`` beside the executable (what the tests assert on); a
refused call exits 125 with the reason on stderr, as docker does for a bad ``run``.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

DIGEST = "sha256:" + "0123456789abcdef" * 4

_SCRIPT = r'''#!{python}
import json, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED, DIGEST, BENCH_PYTHON = {expected!r}, {digest!r}, {bench_python!r}
REPO = EXPECTED.split("@")[0].rsplit(":", 1)[0]
PINNED = REPO + "@" + DIGEST
CODE_DIR = "/opt/gpucompare/code"
STATE = os.path.join(HERE, "pulled")
args = sys.argv[1:]
with open(os.path.join(HERE, "calls.jsonl"), "a") as log:
    log.write(json.dumps(args) + "\n")

def refuse(message):
    sys.stderr.write("fake docker: " + message + "\n")
    sys.exit(125)

def take(flag):
    values = [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]
    return values

if args[:2] == ["image", "inspect"]:
    image = args[-1]
    if os.path.exists(STATE) and image in (EXPECTED, PINNED):
        print(PINNED)
        sys.exit(0)
    sys.stderr.write("Error: No such image: " + image + "\n")
    sys.exit(1)
if args[:1] == ["pull"]:
    if args[1] != EXPECTED:
        refuse("pull of an unexpected image " + args[1])
    print("24.06-py3: Pulling from nvidia/mxnet (stand-in)")
    open(STATE, "w").close()
    print("Digest: " + DIGEST)
    sys.exit(0)
if args[:1] == ["kill"]:
    sys.exit(0)
if args[:1] != ["run"]:
    refuse("unexpected command " + " ".join(args))
for flag in ("--rm", "--init"):
    if flag not in args:
        refuse("run without " + flag)
if take("--gpus") != ["all"]:
    refuse("run without --gpus all: " + repr(take("--gpus")))
if take("--user") != ["%d:%d" % (os.getuid(), os.getgid())]:
    refuse("run --user is not the caller's uid:gid: " + repr(take("--user")))
index = args.index(PINNED) if PINNED in args else refuse("run of an image that is not the pulled digest")
if not os.path.exists(STATE):
    refuse("run before the image was pulled")
volumes = take("--volume")
code = [v[:-len(":" + CODE_DIR + ":ro")] for v in volumes if v.endswith(":" + CODE_DIR + ":ro")]
if len(code) != 1 or not os.path.isdir(os.path.join(code[0], "bench_tasks")):
    refuse("run without the worker bundle mounted read-only at " + CODE_DIR + ": " + repr(volumes))
others = [v.split(":") for v in volumes if not v.endswith(":ro")]
if len(others) != 1 or others[0][0] != others[0][1] or not os.path.isdir(others[0][0]):
    refuse("run without the sweep folder mounted at its own path: " + repr(volumes))
env = dict(v.split("=", 1) for v in take("--env"))
if (not env.get("GPUCOMPARE_WORKER_RUNTIME", "").startswith("ngc-")
        or env.get("GPUCOMPARE_WORKER_IMAGE") != PINNED):
    refuse("run without the runtime and image in the environment: " + repr(env))
command = args[index + 1:]
if command[:3] != ["python", "-m", "bench_tasks"]:
    refuse("run of something other than python -m bench_tasks: " + repr(command))
env["PYTHONPATH"] = code[0]  # what /opt/gpucompare/code is inside the container
os.chdir(code[0])
os.execve(BENCH_PYTHON, [BENCH_PYTHON, *command[1:]], {{**os.environ, **env}})
'''


def install_fake_docker(bin_dir: Path, *, expected_image: str, bench_python: Path) -> Path:
    """Write the stand-in ``docker`` into ``bin_dir`` (created) and return its path."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "docker"
    path.write_text(_SCRIPT.format(python=sys.executable, expected=expected_image, digest=DIGEST,
                                   bench_python=str(bench_python)), encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def calls(bin_dir: Path) -> list[list[str]]:
    """Every call the stand-in received, in order."""
    log = bin_dir / "calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line]
