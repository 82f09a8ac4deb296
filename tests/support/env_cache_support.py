"""A copy of the worker whose environment builds fast, for the ssh environment-cache tests.

The real ``requirements-cpu.txt`` downloads MXNet (50 MB) and numpy from PyPI on every
build. The copy made here names instead one local wheel (``--no-index --find-links``): a
``.pth`` file that puts the repository's ``.venv-bench`` site-packages on the new
environment's path. It stands in for the download only: the environment is a real venv made
by the target's real command over real SSH, pip really installs into it, and the deploy's
check really imports MXNet with the environment's interpreter.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import zipfile
from pathlib import Path

from gpucompare.targets.bundle import package_dir

WHEEL_NAME = "gpucompare_bench_link-1.0-py3-none-any.whl"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def link_wheel(wheelhouse: Path, bench_python: Path) -> Path:
    """A wheel whose only content is a .pth file naming ``bench_python``'s site-packages."""
    query = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(bench_python), "-c", query], capture_output=True, text=True,
                          check=True).stdout.strip()
    files = {
        "gpucompare_bench_link.pth": f"{site}\n".encode(),
        "gpucompare_bench_link-1.0.dist-info/METADATA":
            b"Metadata-Version: 2.1\nName: gpucompare-bench-link\nVersion: 1.0\n",
        "gpucompare_bench_link-1.0.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: gpucompare-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "\n".join([*(_record_line(n, d) for n, d in files.items()),
                        "gpucompare_bench_link-1.0.dist-info/RECORD,,", ""])
    wheelhouse.mkdir(parents=True, exist_ok=True)
    wheel = wheelhouse / WHEEL_NAME
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("gpucompare_bench_link-1.0.dist-info/RECORD", record)
    return wheel


def linked_worker(directory: Path, bench_python: Path, note: str = "") -> Path:
    """``directory/bench_tasks``: the worker's code with the fast requirements file (``note``
    is added as a comment line: a different note is a different requirements hash)."""
    wheelhouse = directory.parent / "wheelhouse"
    if not (wheelhouse / WHEEL_NAME).exists():
        link_wheel(wheelhouse, bench_python)
    root = directory / "bench_tasks"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(package_dir(), root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (root / "requirements-cpu.txt").write_text(
        f"# {note or 'linked'}: the environment's MXNet is .venv-bench's "
        "(tests/support/env_cache_support.py)\n"
        f"--no-index\n--find-links {wheelhouse}\ngpucompare-bench-link==1.0\n")
    return root


def base_python(bench_python: Path) -> str:
    """The interpreter ``.venv-bench`` was made from (same version, so its MXNet loads)."""
    return subprocess.run([str(bench_python), "-c", "import sys, os; print(os.path.join(sys.base_prefix, "
                           "'bin', 'python3'))"], capture_output=True, text=True, check=True).stdout.strip()
