"""scripts/python-env.sh, the Makefile's interpreter discovery and venv (re)builder, run as make runs it.

Stand-ins: a PATH of our own holding links to this machine's interpreters (or nothing), and HOME
pointed at an empty folder so pyenv's versions are not found; real bash, real ``python -m venv``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # each venv is a real `python -m venv` with pip: about a minute under load

SCRIPT = REPO_ROOT / "scripts" / "python-env.sh"


def _run(*args: str, path: Path, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "WORKER_PYTHON")}
    environment.update(PATH=str(path), HOME=str(home), **env)
    return subprocess.run(["/bin/bash", str(SCRIPT), *args], env=environment, capture_output=True, text=True,
                          timeout=300, check=False)


def test_no_suitable_python_stops_in_one_line_naming_what_to_install(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    done = _run("find", "orchestrator", path=empty, home=tmp_path)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "python3.13" in lines[0] and "PYTHON=" in lines[0], done.stderr


def test_a_named_python_outside_the_range_is_refused_by_name(tmp_path: Path) -> None:
    """PYTHON=… naming a Python 3.9 (a stand-in script answering as one would: not in 3.10-3.13)."""
    old = tmp_path / "python3.9"
    old.write_text("#!/bin/sh\nexit 1\n")
    old.chmod(0o755)
    done = _run("find", "orchestrator", path=tmp_path, home=tmp_path, PYTHON=str(old))
    assert done.returncode == 1 and f"PYTHON={old}" in done.stderr and "3.10 to 3.13" in done.stderr


def test_the_first_suitable_python_on_path_is_chosen(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    minor = sys.version_info[1]
    (bin_dir / f"python3.{minor}").symlink_to(sys._base_executable)
    broken = bin_dir / "python3.13"  # a pyenv shim whose version is not selected: it exits 127
    if minor != 13:
        broken.write_text("#!/bin/sh\necho 'pyenv: python3.13: command not found' >&2\nexit 127\n")
        broken.chmod(0o755)
    done = _run("find", "orchestrator", path=bin_dir, home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(bin_dir / f"python3.{minor}")


def test_a_half_built_venv_is_rebuilt(tmp_path: Path) -> None:
    """An install cut short leaves .installing: the next run starts from a new venv; a finished one
    (no .installing, a working Python) is kept."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / f"python3.{sys.version_info[1]}").symlink_to(sys._base_executable)
    # the shell's own tools (touch, rm) besides our interpreter
    bin_dir = Path(f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    venv = tmp_path / "venv"
    assert _run("venv", "orchestrator", str(venv), path=bin_dir, home=tmp_path).returncode == 0
    assert (venv / ".installing").exists() and (venv / "bin" / "python").exists()
    marker = venv / "half-installed-package"
    marker.write_text("left by an interrupted pip")
    done = _run("venv", "orchestrator", str(venv), path=bin_dir, home=tmp_path)
    assert done.returncode == 0 and "did not finish" in done.stderr, done.stderr
    assert not marker.exists() and (venv / "bin" / "python").exists()

    (venv / ".installing").unlink()  # as make does once pip has finished
    kept = venv / "kept"
    kept.write_text("a finished venv")
    assert _run("venv", "orchestrator", str(venv), path=bin_dir, home=tmp_path).returncode == 0
    assert kept.exists()

    (venv / ".installing").unlink()
    (venv / "bin" / "python").unlink()
    (venv / "bin" / "python").symlink_to("/nonexistent/python")  # its interpreter was removed
    done = _run("venv", "orchestrator", str(venv), path=bin_dir, home=tmp_path)
    assert done.returncode == 0 and "does not run" in done.stderr, done.stderr
    assert not kept.exists()
