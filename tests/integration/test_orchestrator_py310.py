"""The orchestrator runs on Python 3.10 (Airflow 3.3's oldest): vermin over the library, the DAG files and
the scripts make runs finds nothing that needs 3.11, but for two names it is told about:

* ``datetime.UTC`` (3.11): gpucompare/__init__.py gives 3.10 the same object (``timezone.utc``) under
  that name before any gpucompare module runs;
* ``typing.Self`` (3.11): imported only under ``TYPE_CHECKING`` for annotations, never at run time.

A mutant (``import tomllib`` in a copy) must be caught, so the check cannot pass by checking nothing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

ARGS = ("-t=3.10-", "--no-tips", "--violations", "--eval-annotations", "--exclude", "datetime.UTC",
        "--exclude", "typing.Self")


def _vermin(*paths: Path) -> subprocess.CompletedProcess[str]:
    vermin = Path(sys.executable).with_name("vermin")
    return subprocess.run([str(vermin), *ARGS, *map(str, paths)], capture_output=True, text=True, check=False,
                          timeout=600)


def test_the_orchestrator_needs_nothing_newer_than_python_3_10() -> None:
    done = _vermin(REPO_ROOT / "plugins" / "gpucompare", REPO_ROOT / "dags",
                   REPO_ROOT / "scripts" / "demo.py", REPO_ROOT / "scripts" / "check_constraints.py")
    assert "Target versions not met" not in done.stdout, done.stdout[-3000:]
    assert "Minimum required versions: 3." in done.stdout, done.stdout[-3000:]


def test_a_3_11_module_is_caught(tmp_path: Path) -> None:
    mutant = tmp_path / "mutant.py"
    mutant.write_text("import tomllib\n")
    assert "Target versions not met" in _vermin(mutant).stdout
