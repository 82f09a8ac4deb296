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
  PYTHONPATH and the ``--env`` values, so ``python -m bench_tasks …`` runs for real (``sh -c …``
  runs this machine's shell, which has none of the image's files: as an image without them);
* ``run`` also requires ``--name`` and the label ``gpucompare.container=<name>``, NVIDIA's
  ulimits (``memlock=-1``, ``stack=67108864``), ``--network none`` and ``--ipc host``; the
  worker then runs as the daemon would run the container: in a session of its own, recorded in
  ``containers/<name>.json``, so it keeps "running" when the client is killed (SIGKILL of
  ``timeout`` reaches the client only). The client passes SIGTERM/SIGINT on (``--sig-proxy``);
  with a file ``hang`` beside the executable (:func:`hang_workers`) the worker ignores SIGTERM,
  as one hung in a driver call does; a second run of a running name is a conflict;
* ``kill NAME``: SIGKILL to the container's processes (its process and their descendants);
  ``No such container`` (exit 1) when none of that name runs;
* ``ps [-q] [--filter label=K=V|name=N]``: the running containers' names (ids with ``-q``).

Every call is appended to ``calls.jsonl`` beside the executable (what the tests assert on); a
refused call exits 125 with the reason on stderr, as docker does for a bad ``run``.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

DIGEST = "sha256:" + "0123456789abcdef" * 4

_SCRIPT = r"""#!{python}
import json, os, signal, subprocess, sys, time
HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED, DIGEST, BENCH_PYTHON, USER = {expected!r}, {digest!r}, {bench_python!r}, {user!r}
RUNTIME_CHECK = {runtime_check!r}
REPO = EXPECTED.split("@")[0].rsplit(":", 1)[0]
PINNED = REPO + "@" + DIGEST
CODE_DIR = "/opt/gpucompare/code"
STATE = os.path.join(HERE, "pulled")
CONTAINERS = os.path.join(HERE, "containers")
REQUIRED = [["--ulimit", "memlock=-1"], ["--ulimit", "stack=67108864"], ["--network", "none"],
            ["--ipc", "host"]]
args = sys.argv[1:]
with open(os.path.join(HERE, "calls.jsonl"), "a") as log:
    log.write(json.dumps(args) + "\n")

def refuse(message):
    sys.stderr.write("fake docker: " + message + "\n")
    sys.exit(125)

def take(flag):
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]

def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as stat:
            return stat.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False

def tree(root):
    # the container's processes: its first process and every descendant (what its pid namespace holds)
    parents = {{}}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as stat:
                    parents[int(entry)] = int(stat.read().rpartition(")")[2].split()[1])
            except OSError:
                pass
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += [child for child, parent in parents.items() if parent == pid]
    return found

def running():
    found = {{}}
    for entry in sorted(os.listdir(CONTAINERS)) if os.path.isdir(CONTAINERS) else []:
        with open(os.path.join(CONTAINERS, entry)) as f:
            record = json.load(f)
        if alive(record["pid"]):
            found[record["name"]] = record
    return found

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
    record = running().get(args[-1])
    if record is None:
        sys.stderr.write("Error response from daemon: No such container: " + args[-1] + "\n")
        sys.exit(1)
    # logged before the signal: whoever sees the container gone finds the kill that ended it
    # (logged after, a test that saw it gone could read the log in between: a flaky empty list)
    with open(os.path.join(HERE, "killed.jsonl"), "a") as log:
        log.write(json.dumps(args[-1]) + "\n")
    for pid in tree(record["pid"]):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while alive(record["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    print(args[-1])
    sys.exit(0)
if args[:1] == ["ps"]:
    found = running()
    for condition in take("--filter"):
        key, _, value = condition.partition("=")
        if key == "label":
            label, _, wanted = value.partition("=")
            found = {{n: r for n, r in found.items() if r["labels"].get(label) == wanted}}
        elif key == "name":
            found = {{n: r for n, r in found.items() if value.strip("^$/") == n}}
        else:
            refuse("ps filter not supported by the stand-in: " + condition)
    for name, record in found.items():
        print(record["id"] if "-q" in args else name)
    sys.exit(0)
if args[:1] != ["run"]:
    refuse("unexpected command " + " ".join(args))
for flag in ("--rm", "--init"):
    if flag not in args:
        refuse("run without " + flag)
for pair in REQUIRED:
    if pair[1] not in take(pair[0]):
        refuse("run without " + " ".join(pair))
if take("--gpus") != ["all"]:
    refuse("run without --gpus all: " + repr(take("--gpus")))
if take("--user") != [USER or "%d:%d" % (os.getuid(), os.getgid())]:
    refuse("run --user is not " + (USER or "the caller's uid:gid") + ": " + repr(take("--user")))
names = take("--name")
if len(names) != 1:
    refuse("run without one --name: " + repr(names))
labels = dict(v.partition("=")[::2] for v in take("--label"))
if labels.get("gpucompare.container") != names[0]:
    refuse("run without the label gpucompare.container=" + names[0] + ": " + repr(labels))
if names[0] in running():
    refuse('Conflict. The container name "/' + names[0] + '" is already in use')
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
if command[:3] == ["python", "-m", "bench_tasks"]:
    command = [BENCH_PYTHON, *command[1:]]
elif command[:2] != ["sh", "-c"]:  # the image's shell: this machine's, whose files are not the image's
    refuse("run of something other than python -m bench_tasks or sh -c: " + repr(command))
env["PYTHONPATH"] = code[0]  # what /opt/gpucompare/code is inside the container
if RUNTIME_CHECK:  # a CPU build standing in for NVIDIA's: the runtime check reports, not refuses
    env["GPUCOMPARE_WORKER_RUNTIME_CHECK"] = RUNTIME_CHECK
hung = os.path.exists(os.path.join(HERE, "hang"))

def start():
    # the daemon's side: the container's processes are not the client's (a session of their own);
    # a hung worker (stuck in a driver call) does not answer SIGTERM
    os.setsid()
    if hung:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

container = subprocess.Popen(command, cwd=code[0], env={{**os.environ, **env}},
                             preexec_fn=start)
os.makedirs(CONTAINERS, exist_ok=True)
record_path = os.path.join(CONTAINERS, names[0] + ".json")
with open(record_path + ".tmp", "w") as f:
    json.dump({{"name": names[0], "id": "%012x" % container.pid, "pid": container.pid, "labels": labels}}, f)
os.replace(record_path + ".tmp", record_path)

def proxy(signum, frame):
    # docker run's --sig-proxy (the default): the client passes SIGTERM/SIGINT to the container
    try:
        os.kill(container.pid, signum)
    except ProcessLookupError:
        pass

signal.signal(signal.SIGTERM, proxy)
signal.signal(signal.SIGINT, proxy)
code_ = container.wait()
os.remove(record_path)  # --rm
sys.exit(code_ if code_ >= 0 else 128 - code_)
"""


def install_fake_docker(bin_dir: Path, *, expected_image: str, bench_python: Path,
                        user: str | None = None, runtime_check: str | None = None) -> Path:
    """Write the stand-in ``docker`` into ``bin_dir`` (created) and return its path. ``user``:
    the ``--user`` a run must carry (default: the caller's uid:gid; ec2 runs as root, ``0:0``);
    ``runtime_check``: ``warn`` lets the CPU build inside pass for the runtime's (recorded as a
    mismatch ignored); None leaves the check to the environment the stand-in was called with."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "docker"
    path.write_text(_SCRIPT.format(python=sys.executable, expected=expected_image, digest=DIGEST,
                                   bench_python=str(bench_python), user=user, runtime_check=runtime_check),
                    encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def calls(bin_dir: Path) -> list[list[str]]:
    """Every call the stand-in received, in order."""
    log = bin_dir / "calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line]


def hang_workers(bin_dir: Path) -> None:
    """From now on the containers' workers ignore SIGTERM: a worker hung in a driver call."""
    (bin_dir / "hang").touch()


def running_containers(bin_dir: Path) -> list[str]:
    """The names of the stand-in's containers still running (``docker ps``)."""
    out = subprocess.run([str(bin_dir / "docker"), "ps"], capture_output=True, text=True, check=True)
    return out.stdout.split()


def killed(bin_dir: Path) -> list[str]:
    """The containers a ``docker kill`` found running (and then ended), in order."""
    log = bin_dir / "killed.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
