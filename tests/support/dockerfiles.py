"""The Dockerfiles of docker/ read as instructions (the unit checks and the integration test
that runs the image's sed share them)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO_ROOT

DOCKER_DIR = REPO_ROOT / "docker"
WORKER = DOCKER_DIR / "worker.Dockerfile"
AIRFLOW = DOCKER_DIR / "airflow.Dockerfile"


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    logical, current = [], ""
    for raw in dockerfile.read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    pairs = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        pairs.append((keyword.upper(), rest.strip()))
    return pairs


def final_stage(dockerfile: Path) -> list[tuple[str, str]]:
    steps = instructions(dockerfile)
    last_from = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    return steps[last_from:]
