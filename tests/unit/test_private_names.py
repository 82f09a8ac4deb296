"""Public names for what other modules use (issue 21): no module of the library, the worker or
the DAG files imports another module's ``_private`` name (``from x import _name``) or reaches
into it (``module._name``).

Reads the source with ``ast``. Methods called on instances (``lake._replace_run(...)``) are not
seen: the type of an object is not known without running the code.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT

#: (folder, the package root its modules are named from)
SOURCES = (("plugins/gpucompare", "plugins"), ("bench_tasks", "."), ("dags", "."))
#: Private names used across modules on purpose or outside this branch's files, and why.
ALLOWED: dict[str, str] = {
    "os._exit": "the standard library's documented way to end a forked child without cleanup",
}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(path: Path, package_root: Path) -> str:
    parts = list(path.relative_to(package_root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_from(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def private_uses(path: Path, module: str, known_modules: set[str]) -> list[tuple[str, str]]:
    """``(used name, where)`` of each other module's private name this file imports or reaches into."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    where = f"{path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path}"
    bound: dict[str, str] = {}  # local name -> the module it names
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else (
                    alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            source = _imported_from(node, module, path.name == "__init__.py")
            for alias in node.names:
                if _is_private(alias.name) and source != module:
                    found.append((f"{source}.{alias.name}", f"{where}:{node.lineno}"))
                if f"{source}.{alias.name}" in known_modules:
                    bound[alias.asname or alias.name] = f"{source}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in bound:
                target = ".".join([bound[value.id], *chain])
                if target != module:
                    found.append((f"{target}.{node.attr}", f"{where}:{node.lineno}"))
    return found


def _all_private_uses() -> list[tuple[str, str]]:
    files = [(p, _module_name(p, REPO_ROOT / root))
             for folder, root in SOURCES for p in sorted((REPO_ROOT / folder).rglob("*.py"))]
    known = {name for _, name in files}
    return [use for path, name in files for use in private_uses(path, name, known)]


def test_no_module_uses_another_modules_private_name() -> None:
    uses = _all_private_uses()
    unexpected = [f"{where}: {name}" for name, where in uses if name not in ALLOWED]
    assert not unexpected, "make these public (and say what they are) or keep them in their module:\n" + (
        "\n".join(unexpected))


def test_every_allowed_private_use_still_exists() -> None:
    """An entry of ALLOWED whose use is gone is removed, so the list stays the list of exceptions."""
    used = {name for name, _ in _all_private_uses()}
    assert sorted(set(ALLOWED) - used) == []


def test_the_check_sees_an_import_and_an_attribute_but_not_a_modules_own_name(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "a.py").write_text("_HIDDEN = 1\nPUBLIC = _HIDDEN\n", encoding="utf-8")
    (package / "b.py").write_text(
        "from pkg.a import _HIDDEN\nfrom pkg import a\nimport pkg.a as also\nfrom . import a as _alias\n"
        "x = a._HIDDEN + also._HIDDEN + _alias.PUBLIC + a.__name__.upper()\n", encoding="utf-8")
    known = {"pkg", "pkg.a", "pkg.b"}
    assert private_uses(package / "a.py", "pkg.a", known) == []
    found = private_uses(package / "b.py", "pkg.b", known)
    assert sorted(name for name, _ in found) == ["pkg.a._HIDDEN"] * 3
    assert all(where.endswith(("b.py:1", "b.py:5")) for _, where in found)
