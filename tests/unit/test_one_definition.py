"""One definition of each rule: a regular expression, a closed list of values (markets,
currencies, target kinds, phases…) or the run-id alphabet written twice in the library or the
worker fails here, so the next change cannot update one copy and miss the other.

Reads the source with ``ast`` (string literals in code, not comments or docstrings).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.conftest import REPO_ROOT

SOURCES = ("plugins/gpucompare", "bench_tasks")
#: ``re`` functions whose first argument is a pattern
RE_FUNCTIONS = {"compile", "fullmatch", "match", "search", "sub", "subn", "findall", "finditer", "split"}
#: Repeats left on purpose or outside this branch's files, and why.
ALLOWED_REPEATS: dict[str, str] = {
    r"stopped (\d+)": "the stop line of a sweep, parsed by targets/ec2/channel.py and "
                      "targets/ssh/channel.py; the ec2 channel is being rewritten on the deferrable "
                      "branch this session",
    "[^a-z0-9]+": "config/gpus.py normalises GPU names; reports/formatting.py makes HTML anchors (the page "
                  "branch replaces it with a template filter)",
}
#: Named lists whose values equal another list's by coincidence, not by rule.
ALLOWED_LISTS: dict[tuple[str, frozenset[str]], str] = {
    ("plugins/gpucompare/config/models/values.py", frozenset({"cpu", "gpu"})):
        "REQUIREMENTS names the worker's requirement files (requirements-cpu/-gpu.txt), not device kinds",
}


def _files() -> list[Path]:
    return sorted(p for folder in SOURCES for p in (REPO_ROOT / folder).rglob("*.py"))


def _where(path: Path, node: ast.AST) -> str:
    shown = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
    return f"{shown}:{getattr(node, 'lineno', 0)}"


def _regex_literals(path: Path) -> list[tuple[str, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                and node.func.attr in RE_FUNCTIONS and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.args[0].value, _where(path, node)))
    return found


def _string_collections(path: Path) -> list[tuple[frozenset[str], str]]:
    """Every tuple, list or set literal of two or more strings (e.g. ``("on_demand", "spot")``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2 and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            found.append((frozenset(e.value for e in node.elts), _where(path, node)))
    return found


def _named_value_sets(path: Path) -> list[frozenset[str]]:
    """The closed value sets a module defines by name: ``NAME = ("a", "b", …)`` at module level."""
    sets = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id.isupper() and isinstance(value, (ast.Tuple, ast.List)) \
                and len(value.elts) >= 2 and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                                 for e in value.elts):
            sets.append(frozenset(e.value for e in value.elts))
    return sets


def test_no_regular_expression_is_written_twice() -> None:
    places: dict[str, list[str]] = defaultdict(list)
    for path in _files():
        for pattern, where in _regex_literals(path):
            if len(pattern) >= 4:  # ",", ":", "\s+" splits are not rules
                places[pattern].append(where)
    repeated = {p: w for p, w in places.items() if len(w) > 1 and p not in ALLOWED_REPEATS}
    assert repeated == {}, "define the pattern once (config/patterns.py) and import it"


def test_no_named_value_list_is_written_twice() -> None:
    """A named list (MARKETS, CURRENCIES, TARGET_KINDS, phases…) has one literal in the code:
    every other place imports it."""
    named = {s for path in _files() for s in _named_value_sets(path)}
    places: dict[frozenset[str], list[str]] = defaultdict(list)
    for path in _files():
        for values, where in _string_collections(path):
            if values in named and (where.split(":")[0], values) not in ALLOWED_LISTS:
                places[values].append(where)
    repeated = {", ".join(sorted(v)): w for v, w in places.items() if len(w) > 1}
    assert repeated == {}, "import the one definition instead of writing the list again"


def test_the_run_id_rule_and_the_markets_have_one_home() -> None:
    alphabet = "A-Za-z0-9._:+-"
    homes = sorted({_where(path, node).split(":")[0] for path in _files()
                    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                    if isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and alphabet in node.value})
    assert homes == ["bench_tasks/constants.py"]
    markets = [w for path in _files() for v, w in _string_collections(path) if v == {"on_demand", "spot"}]
    assert [m.split(":")[0] for m in markets] == ["plugins/gpucompare/config/patterns.py"]


#: Defaults of the market written as a literal outside their home, and why.
ALLOWED_MARKET_DEFAULTS: dict[str, str] = {}


def _literal_defaults(path: Path, value: str) -> list[str]:
    """Where ``value`` is written as a default: a parameter's or field's default, argparse's
    ``default=``, or the fallback of ``mapping.get(key, value)``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.arguments):
            candidates = [*node.defaults, *node.kw_defaults]
        elif isinstance(node, ast.AnnAssign):
            candidates = [node.value]
        elif isinstance(node, ast.Call):
            candidates = [k.value for k in node.keywords if k.arg == "default"]
            if isinstance(node.func, ast.Attribute) and node.func.attr == "get" and len(node.args) == 2:
                candidates.append(node.args[1])
        else:
            continue
        found += [_where(path, c) for c in candidates if isinstance(c, ast.Constant) and c.value == value]
    return found


def test_the_default_market_has_one_home() -> None:
    places = [w for path in _files() for w in _literal_defaults(path, "on_demand")
              if w.split(":")[0] not in ALLOWED_MARKET_DEFAULTS]
    assert places == [], "use patterns.DEFAULT_MARKET"


def test_the_checks_see_a_repeat(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('import re\nA = re.compile(r"[a-z]+x")\nMARKETS = ("on_demand", "spot")\n'
                     'def f(m):\n    return m in ("spot", "on_demand") and re.fullmatch(r"[a-z]+x", m)\n')
    assert [p for p, _ in _regex_literals(probe)] == ["[a-z]+x", "[a-z]+x"]
    assert _named_value_sets(probe) == [frozenset({"on_demand", "spot"})]
    assert len([v for v, _ in _string_collections(probe) if v == {"on_demand", "spot"}]) == 2
    defaults = tmp_path / "defaults.py"
    defaults.write_text('def f(m="on_demand", *, n="on_demand"):\n    return d.get("market", "on_demand")\n'
                        'class C:\n    market: str = "on_demand"\n'
                        'p.add_argument("--market", default="on_demand")\nx = "on_demand"\n')
    lines = sorted(w.split(":")[1] for w in _literal_defaults(defaults, "on_demand"))
    assert lines == ["1", "1", "2", "4", "5"]
