"""The tier rule of tests/README.md: a test module imports no other tier's test modules (shared
helpers live in tests/support), so moving or deleting a test of one tier never breaks another."""

from __future__ import annotations

import ast

from tests.conftest import REPO_ROOT

TIERS = ("unit", "integration", "system")


def _imported_test_modules(path: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(path):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.split(".")[:2] in [["tests", t] for t in TIERS]}


def test_no_test_module_imports_another_tier() -> None:
    crossing = []
    for tier in TIERS:
        for path in sorted((REPO_ROOT / "tests" / tier).rglob("*.py")):
            for module in _imported_test_modules(ast.parse(path.read_text(encoding="utf-8"))):
                if module.split(".")[1] != tier:
                    crossing.append(f"{path.relative_to(REPO_ROOT)} imports {module}")
    assert crossing == [], "move what is shared into tests/support:\n" + "\n".join(crossing)


def test_support_imports_no_tier() -> None:
    wrong = [f"{p.relative_to(REPO_ROOT)} imports {m}"
             for p in sorted((REPO_ROOT / "tests" / "support").rglob("*.py"))
             for m in _imported_test_modules(ast.parse(p.read_text(encoding="utf-8")))]
    assert wrong == []


def test_the_check_sees_a_crossing() -> None:
    tree = ast.parse("from tests.unit.targets.test_cost_guard import NIGHTLY\nimport tests.system.x\n")
    assert _imported_test_modules(tree) == {"tests.unit.targets.test_cost_guard", "tests.system.x"}
