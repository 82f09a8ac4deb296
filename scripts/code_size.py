"""Sizes of the code, for closing notes and reviews: the largest modules and every function
longer than a limit (default 60 lines), outside tests.

    python3 scripts/code_size.py [ROOT] [--limit 60] [--top 10]

ROOT defaults to the checkout this script is in; point it at another tree (e.g. a ``git
archive`` of an older commit) to compare before and after.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

FOLDERS = ("plugins", "bench_tasks", "dags", "scripts")


def python_files(root: Path) -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (root / folder).rglob("*.py"))


def long_functions(path: Path, limit: int) -> list[tuple[int, str]]:
    """``(lines, "path:line name")`` of each function or method longer than ``limit`` lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - first + 1
            if length > limit:
                found.append((length, f"{path}:{node.lineno} {node.name}"))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--limit", type=int, default=60, help="longest allowed function, in lines")
    parser.add_argument("--top", type=int, default=10, help="how many of the largest modules to list")
    args = parser.parse_args()
    files = python_files(args.root)
    sizes = sorted(((len(p.read_text(encoding="utf-8").splitlines()), p) for p in files), reverse=True)
    print(f"{len(files)} Python files, {sum(n for n, _ in sizes)} lines")
    print(f"largest {args.top} modules:")
    for lines, path in sizes[: args.top]:
        print(f"  {lines:5d}  {path.relative_to(args.root)}")
    functions = sorted((f for p in files for f in long_functions(p, args.limit)), reverse=True)
    print(f"{len(functions)} functions over {args.limit} lines:")
    for lines, where in functions:
        print(f"  {lines:5d}  {where.replace(str(args.root) + '/', '')}")


if __name__ == "__main__":
    main()
