"""The worker package stays on its side of the boundary: it imports nothing of the
orchestrator's (checked statically with ast, and by importing every module in .venv-bench,
where those packages do not exist), and the modules the orchestrator imports do not pull
in mxnet."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.support.bench_helpers import run_bench_python

PACKAGE = REPO_ROOT / "bench_tasks"
ORCHESTRATOR_SIDE = {"airflow", "pandas", "pyarrow", "boto3", "botocore", "duckdb", "matplotlib",
                     "gpucompare", "moto", "s3fs", "fsspec", "playwright"}
WORKER_THIRD_PARTY = {"mxnet", "numpy", "yaml"}
#: Optional: imported inside a try, the worker runs without it (bench_tasks/energy.py: NVML).
WORKER_OPTIONAL = {"bench_tasks/energy.py": {"pynvml"}, "bench_tasks/exclusive.py": {"pynvml"}}
#: Imported by the orchestrator (standard library only, no mxnet).
SHARED_MODULES = ("bench_tasks", "bench_tasks.constants", "bench_tasks.record", "bench_tasks.configs",
                  "bench_tasks.errors", "bench_tasks.aggregate", "bench_tasks.sysinfo",
                  "bench_tasks.networks")


def imported_top_level_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_worker_sources_import_only_stdlib_mxnet_numpy_yaml_and_itself() -> None:
    sources = sorted(PACKAGE.rglob("*.py"))
    assert len(sources) > 10
    for path in sources:
        names = imported_top_level_names(path)
        assert not names & ORCHESTRATOR_SIDE, f"{path}: {names & ORCHESTRATOR_SIDE}"
        optional = WORKER_OPTIONAL.get(path.relative_to(REPO_ROOT).as_posix(), set())
        foreign = names - set(sys.stdlib_module_names) - WORKER_THIRD_PARTY - optional - {"bench_tasks"}
        assert not foreign, f"{path} imports {foreign}"


def test_every_worker_module_imports_in_the_worker_environment() -> None:
    code = f"""
import importlib, importlib.util, json, pkgutil, sys
import bench_tasks
names = sorted(m.name for m in pkgutil.walk_packages(bench_tasks.__path__, 'bench_tasks.'))
for name in names:
    importlib.import_module(name)
absent = sorted(p for p in {sorted(ORCHESTRATOR_SIDE)!r} if importlib.util.find_spec(p) is None)
loaded = sorted({{m.split('.')[0] for m in sys.modules}})
print(json.dumps({{'modules': names, 'absent': absent, 'loaded': loaded}}))
"""
    result = run_bench_python(code, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"bench_tasks.cli", "bench_tasks.measure", "bench_tasks.sweep", "bench_tasks.runner"} <= set(
        report["modules"])
    # the orchestrator's packages really are missing there, so the imports above prove something
    assert {"airflow", "pandas", "pyarrow", "boto3"} <= set(report["absent"])
    assert not set(report["loaded"]) & ORCHESTRATOR_SIDE


def test_modules_shared_with_the_orchestrator_do_not_import_mxnet() -> None:
    code = ("import json, sys\n" + "".join(f"import {m}\n" for m in SHARED_MODULES)
            + "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
              "('mxnet', 'numpy'))))")
    result = run_bench_python(code, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
