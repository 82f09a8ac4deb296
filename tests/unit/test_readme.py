"""README.md, docs/architecture.md and the Makefile match the tree: every path the README and the
architecture page name exists, the module layout (docs/architecture.md) names every module of the
worker and no file that is gone, and every target the Makefile declares phony has a rule.

Stands in for a reader following the README: a path it names that moved (a module turned into a
package, a page renamed) or a ``make`` target without a rule fails here, not in their shell.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
#: the contributors' page: the module layout, import directions, data flow (moved out of the README)
ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"
#: folders made at run time (make demo, make envs), never in the tree
RUNTIME = (".airflow", ".venv", ".venv-bench", "lake", "reports", "dist")
#: MXNet's own scripts, named to say what the worker matches (not files of this tree)
MXNET_SCRIPTS = {"benchmark_score.py", "train_imagenet.py"}
_PATHLIKE = re.compile(r"^\.?[\w-]+(?:\.\w+)?(?:/[\w.-]+)*/?$")


def _layout_block(text: str) -> list[str]:
    """The lines of the module layout's code block (``bench_tasks/`` … ``scripts/``)."""
    section = text[text.index("### Module layout"):]
    block = section[section.index("```") + 3:]
    return block[block.index("\n") + 1:block.index("```")].splitlines()


def _named_paths(text: str) -> set[str]:
    """Paths the README names in backticks or links (not commands, URLs or placeholders)."""
    found = set(re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text))
    for token in re.findall(r"`([^`\n]+)`", text):
        token = token.strip()
        if "/" in token and _PATHLIKE.match(token) and not token.startswith(("s3:", "/")):
            found.add(token)
    return {p for p in found if p.split("/")[0] not in RUNTIME and "*" not in p}


def test_every_path_the_readme_names_exists() -> None:
    # a path is the checkout's, or a subpackage's of the library (`airflow/`, `prices/catalogs/`)
    roots = (REPO_ROOT, REPO_ROOT / "plugins" / "gpucompare")
    missing = sorted(p for p in _named_paths(README.read_text()) if not any((r / p).exists() for r in roots))
    assert not missing, f"README names paths that do not exist: {missing}"
    # the architecture page's links are relative to docs/, its backticked paths to the checkout
    roots = (*roots, REPO_ROOT / "docs")
    missing = sorted(p for p in _named_paths(ARCHITECTURE.read_text())
                     if not any((r / p).resolve().exists() for r in roots))
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def _layout_entries() -> list[tuple[Path, str]]:
    """(folder, name) of each file or folder the layout's first column names."""
    entries: list[tuple[Path, str]] = []
    top: Path | None = None
    for line in _layout_block(ARCHITECTURE.read_text()):
        match = re.match(r"^(\s*)(\S.*?)(?:\s{2,}|$)", line)
        if not match or not match.group(2).strip():
            continue
        indent, first = len(match.group(1)), match.group(2)
        if indent == 0:
            top = REPO_ROOT / first.split()[0].rstrip("/")
            entries.append((REPO_ROOT, first.split()[0]))
        elif indent == 2 and top is not None:
            entries.extend((top, name.strip()) for name in first.split(",") if name.strip())
    return entries


def test_the_module_layout_names_only_what_exists() -> None:
    entries = _layout_entries()
    assert len(entries) > 20
    missing = [str((folder / name).relative_to(REPO_ROOT)) for folder, name in entries
               if not (folder / name.rstrip("/")).exists()]
    assert not missing, f"the module layout names what is not there: {missing}"


def test_modules_named_in_the_layout_descriptions_exist() -> None:
    """``tables.py (…)`` in a subpackage's line is a module of that subpackage (or of one below)."""
    lines = _layout_block(ARCHITECTURE.read_text())
    folder: Path | None = None
    top: Path | None = None
    wrong = []
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if not line.startswith(" "):
            top = REPO_ROOT / stripped.split()[0].rstrip("/")
            folder = top
        elif line.startswith("  ") and not line.startswith("   ") and top is not None:
            first = stripped.split("  ")[0].strip()
            folder = top / first.rstrip("/") if first.endswith("/") else top
        if folder is None:
            continue
        for name in re.findall(r"\b([a-z_]+(?:/[a-z_]+)*\.py)\b", line):
            if name in MXNET_SCRIPTS:
                continue
            if not any(folder.rglob(Path(name).name)) and not (folder / name).exists():
                wrong.append(f"{folder.relative_to(REPO_ROOT)}: {name}")
    assert not wrong, f"modules named in the layout that are not there: {wrong}"


def test_the_layout_names_every_module_of_the_worker() -> None:
    named = {name for folder, name in _layout_entries() if folder == REPO_ROOT / "bench_tasks"}
    named = {part.strip() for name in named for part in name.split(",")}
    modules = {p.name for p in (REPO_ROOT / "bench_tasks").glob("*.py")} - {"__init__.py"}
    assert not modules - named, f"bench_tasks modules missing from README's layout: {sorted(modules - named)}"


def test_every_phony_make_target_has_a_rule() -> None:
    text = (REPO_ROOT / "Makefile").read_text()
    phony = {name for line in re.findall(r"^\.PHONY:(.*)$", text, re.MULTILINE) for name in line.split()}
    rules = set(re.findall(r"^([A-Za-z][\w-]*):(?!=)", text, re.MULTILINE))
    assert phony, "no .PHONY line"
    assert not phony - rules, f"phony targets without a rule: {sorted(phony - rules)}"
