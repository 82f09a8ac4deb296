"""The library's imports point one way: from the Airflow side and the command line down to the
settings, never back, and never in a circle.

The graph is built from the source with ``ast`` (every ``import`` and ``from … import``, at
module level or inside a function: a lazy import is still an arrow), so a module that is never
imported by a test is checked too. Layers, highest first (a module may import its own layer and
any layer below it)::

    cli                      every subcommand (it installs DAG files, so it may use airflow/)
    airflow                  task groups and assets, plugin, provider info, deployment, DAG files
    scaling                  multi-host scaling runs
    reports                  DuckDB -> report set, page, notebook API
    targets                  where the worker runs (local, ssh, ec2), cost guard, sweeper
    prices                   price and exchange-rate history, published figures
    lake                     Delta tables, schema, ingest, migration
    config                   value patterns, fleet file, scaling profiles
    settings, errors, resources, config.patterns (a leaf), and the worker's contract: bench_tasks.record
    (with record_fields and record_text), bench_tasks.constants and bench_tasks.configs (the sweep
    grammar the fleet file is checked against, so that there is one definition of a sweep)

Any other bench_tasks module (the worker's internals) may only be imported from targets/ up.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT

LIBRARY = REPO_ROOT / "plugins" / "gpucompare"

#: first name under gpucompare -> layer (higher imports lower)
LAYERS: dict[str, int] = {
    "settings": 0, "errors": 0, "resources": 0,
    "config": 1, "lake": 2, "prices": 3, "targets": 4, "reports": 5, "scaling": 6,
    "airflow": 7, "cli": 8, "__main__": 9,
    "": 8,  # the package itself: its lazy ``read``/``read_history`` come from reports/
}
#: the worker's modules every layer may import
WORKER_CONTRACT = {"bench_tasks", "bench_tasks.record", "bench_tasks.record_fields",
                   "bench_tasks.record_text", "bench_tasks.constants", "bench_tasks.configs"}
WORKER_INTERNALS_FROM = LAYERS["targets"]


def _module_name(path: Path) -> str:
    parts = ["gpucompare", *path.relative_to(LIBRARY).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(LIBRARY.rglob("*.py"))}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Every gpucompare or bench_tasks module ``path`` imports (an ancestor package is no arrow:
    importing a module of one's own package is how Python works, and gpucompare/__init__ is lazy)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*parent, base] if base else parent)
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        for target in names:
            if target.startswith("bench_tasks"):
                found.add(target if target in WORKER_CONTRACT or target.count(".") == 1
                          else target.rpartition(".")[0])
                continue
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    # `from bench_tasks.configs import parse_sweep` also yields bench_tasks.configs.parse_sweep's parent
    return {t for t in found if not (t.startswith("bench_tasks.") and t.count(".") > 1)}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, name, known) for name, path in modules.items()}


#: modules below their subpackage's layer: leaves every layer may import (checked below)
LEAF_MODULES: dict[str, int] = {
    # the value patterns and closed value sets: re + the worker's constants only, so the
    # settings model validates with the same patterns as the fleet file and ingest
    "gpucompare.config.patterns": 0,
}


def _layer(module: str) -> int:
    if module in LEAF_MODULES:
        return LEAF_MODULES[module]
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else ""]


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_belongs_to_a_layer() -> None:
    unknown = {m for m in import_graph() if (m.split(".") + [""])[1] not in LAYERS}
    assert not unknown, f"modules outside the layout (add them to a subpackage): {sorted(unknown)}"


def test_the_library_has_no_import_circle() -> None:
    assert _circles(import_graph()) == []


def test_imports_point_down_the_layers_only() -> None:
    wrong = []
    for module, targets in sorted(import_graph().items()):
        for target in sorted(targets):
            if target.startswith("bench_tasks"):
                if target not in WORKER_CONTRACT and _layer(module) < WORKER_INTERNALS_FROM:
                    wrong.append(f"{module} -> {target} (worker internals, allowed from targets/ up)")
            elif _layer(target) > _layer(module):
                wrong.append(f"{module} -> {target}")
    assert wrong == [], "imports against the allowed direction:\n" + "\n".join(wrong)


def test_the_checker_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The rule would be empty if function-level imports were missed: a lazy import of a higher
    layer, written the way the library writes them, is an arrow."""
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from gpucompare.reports import build\n    from . import fleet\n")
    known = {"gpucompare.reports.build", "gpucompare.config.fleet", "gpucompare.config.probe"}
    assert _imports(source, "gpucompare.config.probe", known) == {"gpucompare.reports.build",
                                                                   "gpucompare.config.fleet"}
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_import_of_the_library_names_something_that_exists() -> None:
    """A lazy ``from gpucompare.x import name`` inside a function only fails when the function
    runs; after a move, this finds such an import in any branch of the library, the DAG files,
    the tests (their helpers in tests/support/ too) and the scripts (the module is imported and the
    name looked up, as Python would)."""
    import importlib

    files = dict(_modules())
    for folder in ("dags", "tests", "scripts"):
        files.update({str(p.relative_to(REPO_ROOT)): p for p in sorted((REPO_ROOT / folder).rglob("*.py"))})
    missing = []
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and not node.level
                    and (node.module or "").split(".")[0] in ("gpucompare", "bench_tasks", "tests")):
                continue
            target = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(target, alias.name):
                    try:
                        importlib.import_module(f"{node.module}.{alias.name}")
                    except ModuleNotFoundError as exc:  # not one that the module itself imports (mxnet)
                        if exc.name == f"{node.module}.{alias.name}":
                            missing.append(f"{module}: from {node.module} import {alias.name}")
    assert missing == []
