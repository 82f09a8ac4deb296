"""The worker's Python 3.8 check: vermin over a folder, plus the constructs vermin cannot see.

``vermin_problems`` runs vermin (pinned in requirements.txt) as CI does; its output's minimum
version must be 3.8 and no file may be unparseable (vermin exits 0 on a syntax error, printing
``~2, ~3`` for that file, so that is parsed out here). ``runtime_typing_problems`` walks the
syntax tree for what vermin does not flag: a PEP 604 union (``int | None``) or a PEP 585 generic
(``tuple[int, int]``, ``collections.abc.Callable[...]``) evaluated at run time (a module-level
alias, ``isinstance``) rather than in an annotation, and ``str.removeprefix``/``removesuffix``
called on a value vermin cannot type.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

VERMIN_ARGS = ("-t=3.8-", "--no-tips", "--violations")
_BUILTIN_GENERICS = frozenset({"tuple", "list", "dict", "set", "frozenset", "type"})
_ABC_GENERICS = frozenset({"Callable", "Iterable", "Iterator", "Mapping", "Sequence", "Generator",
                           "MutableMapping", "Awaitable", "Coroutine"})
_NEW_STR_METHODS = frozenset({"removeprefix", "removesuffix"})
_TYPE_NAMES = _BUILTIN_GENERICS | {"int", "float", "str", "bytes", "bool", "None"}


def run_vermin(path: Path) -> subprocess.CompletedProcess[str]:
    """vermin over ``path`` (a folder or file), as CI runs it."""
    vermin = Path(sys.executable).with_name("vermin")
    return subprocess.run([str(vermin), *VERMIN_ARGS, str(path)], capture_output=True, text=True,
                          check=False, timeout=600)


def vermin_problems(result: subprocess.CompletedProcess[str]) -> list[str]:
    """What vermin's run says is wrong for a 3.8 target (empty: every file runs on 3.8)."""
    problems = []
    if result.returncode != 0:
        problems.append(f"vermin exited {result.returncode}")
    match = re.search(r"^Minimum required versions: (.+)$", result.stdout, re.M)
    if match is None:
        problems.append("vermin printed no minimum version")
    elif "3.8" not in [v.strip() for v in match.group(1).split(",")]:
        problems.append(f"minimum required version {match.group(1)}, not 3.8")
    problems += [line for line in result.stdout.splitlines() if line.startswith("~2, ~3")]
    problems += [line.strip() for line in result.stdout.splitlines() if "requires !2, 3.9" in line
                 or re.search(r"requires !2, 3\.(1[0-9])", line)]
    return problems


def _annotation_ids(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation (not evaluated at run time under
    ``from __future__ import annotations``)."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            roots.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            roots.append(node.returns)
    return {id(n) for root in roots for n in ast.walk(root)}


def _is_type_expr(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and node.value is None:
        return True
    if isinstance(node, ast.Name):
        return node.id in _TYPE_NAMES or node.id[:1].isupper()
    if isinstance(node, ast.Subscript):
        return _is_type_expr(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _is_type_expr(node.left) and _is_type_expr(node.right)
    return isinstance(node, ast.Attribute) and node.attr[:1].isupper()


def runtime_typing_problems(source: str, name: str = "<source>") -> list[str]:
    """3.9+ typing and str methods used at run time in one module's source."""
    tree = ast.parse(source, name)
    skip = _annotation_ids(tree)
    problems = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Subscript):
            base = node.value
            base_name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
            if isinstance(base, ast.Name) and base_name in _BUILTIN_GENERICS:
                problems.append(f"{where}: {base_name}[...] at run time needs 3.9 (use typing)")
            elif base_name in _ABC_GENERICS and _imported_from_abc(tree, base_name):
                problems.append(f"{where}: collections.abc.{base_name}[...] at run time needs 3.9")
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr)
              and _is_type_expr(node.left) and _is_type_expr(node.right)
              and any(isinstance(s, (ast.Name, ast.Subscript)) and _is_type_expr(s) and
                      (not isinstance(s, ast.Name) or s.id in _TYPE_NAMES) for s in (node.left, node.right))):
            problems.append(f"{where}: X | Y of types at run time needs 3.10 (use typing.Union)")
        elif isinstance(node, ast.Attribute) and node.attr in _NEW_STR_METHODS:
            problems.append(f"{where}: .{node.attr} needs 3.9")
    return problems


def _imported_from_abc(tree: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.ImportFrom) and n.module == "collections.abc"
               and any(a.name == name for a in n.names) for n in ast.walk(tree))


def folder_problems(folder: Path) -> list[str]:
    """``runtime_typing_problems`` of every Python file under ``folder``."""
    problems: list[str] = []
    for path in sorted(folder.rglob("*.py")):
        problems += runtime_typing_problems(path.read_text(encoding="utf-8"), str(path.relative_to(folder)))
    return problems
