"""One definition of each rule, checked by meaning, not spelling.

* A regular expression is written in its owning module only (config/patterns.py, and the
  worker's bench_tasks/constants.py, which cannot import gpucompare): anywhere else a pattern
  literal fails, unless :data:`ALLOWED_PATTERNS` names it, where it is and why (a parser of a
  tool's output is not an input rule). Every entry must still be true: the pattern still in
  that file, the file still there.
* No ``^…$`` pattern: used with ``match`` or ``search`` it accepts a trailing newline;
  ``fullmatch`` on an unanchored pattern is the one way.
* No module-level alias of another module's value (``MARKETS = patterns.MARKETS``,
  ``LAKE_TABLES = TABLE_KINDS``): one name, imported where it is used.
* Two named membership sets of different modules (``frozenset({...})``) share no value: a
  status that is "final" in one and "running" in another is one vocabulary defined twice.
* A closed list of values (markets, currencies, target kinds, phases…) is written once; the
  run id's alphabet and wording live in bench_tasks/constants.py; messages about a run id
  state the rule from there (``RUN_ID_ALLOWED``), not a hand-written range.
* The compute capability is read by ``patterns.capability`` only.

Reads the source with ``ast`` (string literals in code, not comments or docstrings). Run
against an older tree with ``ONE_DEFINITION_ROOT=/path/to/checkout`` to see what it finds there.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from collections import defaultdict
from pathlib import Path

from tests.conftest import REPO_ROOT

ROOT = Path(os.environ.get("ONE_DEFINITION_ROOT", REPO_ROOT))
SOURCES = ("plugins/gpucompare", "bench_tasks")
#: ``re`` functions whose first argument is a pattern
RE_FUNCTIONS = {"compile", "fullmatch", "match", "search", "sub", "subn", "findall", "finditer", "split"}
#: The modules that own rules: their pattern literals are the definitions.
OWNERS: dict[str, str] = {
    "plugins/gpucompare/config/patterns.py": "every value rule of the library",
    "bench_tasks/constants.py": "the worker's rules (run id, device), imported by config/patterns.py",
}
#: Pattern literals outside the owners, by file: what each is for and why it stays there.
ALLOWED_PATTERNS: dict[str, tuple[frozenset[str], str]] = {
    "bench_tasks/errors.py": (frozenset({
        r"cudaMalloc (retry )?failed: out of memory", r"Memory allocation failed\s+out of memory",
        r"CUDA: out of memory", r"CUDNN_STATUS_ALLOC_FAILED", r"Failed to allocate CPU Memory",
        r"Memory allocation failed\s+Cannot allocate memory", r"std::bad_alloc", r"Too many slices",
        r"not implemented", r"Compile with USE_CUDA=1", r"compiled without (CUDA|NCCL|distributed)",
        r"Unknown KVStore type", r"^\s*(\[bt\]|Stack trace|\d+: |File \"/usr|\s*at )"}),
        "MXNet's error messages, recognised in a failed configuration's output (not input rules)"),
    "bench_tasks/energy.py": (frozenset({r"intel-rapl:\d+$"}),
                              "the RAPL package domains of /sys/class/powercap (a folder name)"),
    "bench_tasks/record.py": (frozenset({
        r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})",
        r"[0-9]+,[0-9]+,[0-9]+"}),
        "the record's own field shapes (timestamp, image shape); the worker cannot import "
        "gpucompare and nothing else checks them"),
    "bench_tasks/record_text.py": (frozenset({r"[\x00-\x1f\x7f]"}),
                                   "control characters refused in a record's names; the worker cannot "
                                   "import gpucompare and nothing else checks them"),
    "plugins/gpucompare/config/gpus.py": (frozenset({
        r"sxm[0-9]?|pcie|hbm[0-9]?e?|nvlink", r"([0-9]{1,4})gb", r"[^a-z0-9]", r"[^a-z0-9]+"}),
        "reading GPU names of catalogs and nvidia-smi (form factor, memory, words), not a rule"),
    "plugins/gpucompare/config/fields.py": (frozenset({r"[+-]?[0-9]{1,9}"}),
                                            "a whole number typed into a form field, before int()"),
    "plugins/gpucompare/lake/storage.py": (frozenset({r"<Code>([^<]{1,80})</Code>"}),
                                           "the error code of an S3 XML error body"),
    "plugins/gpucompare/airflow/ssm_trigger.py": (
        frozenset({r"<Code>([^<]+)</Code>", r"<instanceState>.*?<name>([a-z-]+)</name>"}),
        "the triggerer's async AWS client reads EC2's XML answers (error code, instance state); the "
        "error code is read like lake/storage.py's and should share one reader (left: the SSM and "
        "instance waits, this trigger's included, are being made one state machine on the ec2 branch)"),
    "plugins/gpucompare/lake/migrate.py": (
        frozenset({r"(?:^|/)mode=([a-z_]+)/date=(\d{4}-\d{2}-\d{2})/([^/]+)$"}),
        "the partition folders of an old lake's file paths"),
    "plugins/gpucompare/targets/container.py": (frozenset({r"(pulled|present) (\S+)"}),
                                                "the answer line of the pull script"),
    "plugins/gpucompare/targets/channel.py": (frozenset({r"stopped (\d+)"}),
                                              "the last line of kill_marked_script, parsed beside it"),
    "plugins/gpucompare/prices/published.py": (frozenset({r"[0-9]+,[0-9]+", r"[0-9]+(\.[0-9]+)?"}),
                                               "numbers in published tables' cells (a decimal comma)"),
    "plugins/gpucompare/reports/compare.py": (frozenset({r"\d{4}-\d{2}-\d{2}"}),
                                              "a night named by its date in compare's --by night "
                                              "sides; it should be a config/patterns.py rule with "
                                              "[0-9] (left: reports/ is the page branch's)"),
    "plugins/gpucompare/reports/formatting.py": (
        frozenset({r"[^a-z0-9]+"}), "the HTML anchor (slug) of a page section, made from its title; "
                                    "not an input rule"),
}
_CAPACITY_NOTE = ("targets/ec2/options.py's SPOT_CAPACITY_ERRORS repeats codes of placement.py's "
                  "CAPACITY_ERRORS, SPOT_ONLY_REFUSALS and QUOTA_ERRORS; one should be derived from the "
                  "other (left: targets/ec2/ is the ec2 branch's)")
#: Values two named membership sets of different modules share by coincidence (or left), and why.
ALLOWED_SHARED: dict[tuple[str, str, str], str] = {
    ("_REQUEST_REFUSED_CODES", "SSM_FINAL", "AccessDenied"):
        "an AWS API error code (targets/ec2/aws_errors.py) and an SSM invocation status of the same "
        "spelling (targets/ec2/states.py)",
    ("SPOT_CAPACITY_ERRORS", "CAPACITY_ERRORS", "InsufficientCapacity"): _CAPACITY_NOTE,
    ("SPOT_CAPACITY_ERRORS", "CAPACITY_ERRORS", "InsufficientInstanceCapacity"): _CAPACITY_NOTE,
    ("SPOT_CAPACITY_ERRORS", "CAPACITY_ERRORS", "UnfulfillableCapacity"): _CAPACITY_NOTE,
    ("SPOT_CAPACITY_ERRORS", "SPOT_ONLY_REFUSALS", "MaxSpotInstanceCountExceeded"): _CAPACITY_NOTE,
    ("SPOT_CAPACITY_ERRORS", "SPOT_ONLY_REFUSALS", "SpotMaxPriceTooLow"): _CAPACITY_NOTE,
    ("SPOT_CAPACITY_ERRORS", "QUOTA_ERRORS", "MaxSpotInstanceCountExceeded"): _CAPACITY_NOTE,
}
#: Named lists whose values equal another list's by coincidence, not by rule.
ALLOWED_LISTS: dict[tuple[str, frozenset[str]], str] = {
    ("plugins/gpucompare/config/models/values.py", frozenset({"cpu", "gpu"})):
        "REQUIREMENTS names the worker's requirement files (requirements-cpu/-gpu.txt), not device kinds",
}


def _files() -> list[Path]:
    return sorted(p for folder in SOURCES for p in (ROOT / folder).rglob("*.py"))


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _where(path: Path, node: ast.AST) -> str:
    return f"{_rel(path)}:{getattr(node, 'lineno', 0)}"


def _tree(path: Path) -> ast.Module:
    return _parsed(path, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=1024)
def _parsed(path: Path, _mtime_ns: int) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _regex_literals(path: Path) -> list[tuple[str, str]]:
    """Each pattern written in ``re.<function>(…)``: a string (its text) or an f-string (its
    source), with where."""
    found = []
    for node in ast.walk(_tree(path)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                and node.func.attr in RE_FUNCTIONS and node.args):
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.append((first.value, _where(path, node)))
            elif isinstance(first, ast.JoinedStr):
                found.append((ast.unparse(first), _where(path, node)))
    return found


def _string_collections(path: Path) -> list[tuple[frozenset[str], str]]:
    """Every tuple, list or set literal of two or more strings (e.g. ``("on_demand", "spot")``)."""
    found = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2 and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            found.append((frozenset(e.value for e in node.elts), _where(path, node)))
    return found


def _module_assignments(path: Path) -> list[tuple[str, ast.expr, int]]:
    found = []
    for node in _tree(path).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and value is not None:
            found.append((target.id, value, node.lineno))
    return found


def _named_value_sets(path: Path) -> list[frozenset[str]]:
    """The closed value sets a module defines by name: ``NAME = ("a", "b", …)`` at module level."""
    return [frozenset(e.value for e in value.elts) for name, value, _ in _module_assignments(path)
            if name.isupper() and isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) >= 2
            and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts)]


def _membership_sets(path: Path) -> list[tuple[str, frozenset[str], str]]:
    """Named sets a value is looked up in: ``NAME = {…}``, ``frozenset({…})``, ``set((…))``."""
    found = []
    for name, value, line in _module_assignments(path):
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
                and value.func.id in {"frozenset", "set"} and len(value.args) == 1:
            value = value.args[0]
        elif not isinstance(value, ast.Set):
            continue
        if isinstance(value, (ast.Set, ast.Tuple, ast.List)) and value.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts):
            found.append((name, frozenset(e.value for e in value.elts), f"{_rel(path)}:{line}"))
    return found


def _imported_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
    return names


def _aliases(path: Path) -> list[str]:
    """Module-level ``NAME = imported`` or ``NAME = imported.attr…``: another module's value
    under this module's name."""
    imported = _imported_names(_tree(path))
    found = []
    for name, value, line in _module_assignments(path):
        base = value
        while isinstance(base, ast.Attribute):
            base = base.value
        if isinstance(base, ast.Name) and base.id in imported \
                and isinstance(value, (ast.Name, ast.Attribute)):
            found.append(f"{_rel(path)}:{line} {name} = {ast.unparse(value)}")
    return found


def pattern_findings() -> list[str]:
    """Pattern literals outside the owners and not allowed, and allow-list entries no longer true."""
    findings = []
    seen: dict[str, set[str]] = defaultdict(set)
    for path in _files():
        rel = _rel(path)
        for pattern, where in _regex_literals(path):
            seen[rel].add(pattern)
            if rel not in OWNERS and pattern not in ALLOWED_PATTERNS.get(rel, (frozenset(), ""))[0]:
                findings.append(f"{where} pattern {pattern!r} outside config/patterns.py")
    for rel, (patterns, _note) in ALLOWED_PATTERNS.items():
        findings += [f"{rel}: allowed pattern {p!r} is no longer there (update ALLOWED_PATTERNS)"
                     for p in sorted(patterns - seen.get(rel, set()))]
    return findings


def anchored_findings() -> list[str]:
    return [f"{where} pattern {p!r} is anchored ^…$: use fullmatch on it unanchored"
            for path in _files() for p, where in _regex_literals(path)
            if p.startswith("^") and p.endswith("$") and not p.endswith("\\$")]


def alias_findings() -> list[str]:
    return [f"{a}: import the one name instead" for path in _files() for a in _aliases(path)]


def membership_findings() -> list[str]:
    named = [s for path in _files() for s in _membership_sets(path)]
    findings = []
    for i, (name, values, where) in enumerate(named):
        for other, other_values, other_where in named[i + 1:]:
            shared = {v for v in values & other_values if (name, other, v) not in ALLOWED_SHARED}
            if shared and where.split(":")[0] != other_where.split(":")[0]:
                findings.append(f"{where} {name} and {other_where} {other} share {sorted(shared)}")
    return findings


def run_id_message_findings() -> list[str]:
    """Messages about a run id that state its rule by hand (a range such as ``(1-200)``, or its
    alphabet), instead of ``RUN_ID_ALLOWED``."""
    findings = []
    for path in _files():
        if _rel(path) == "bench_tasks/constants.py":
            continue
        tree = _tree(path)
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr)
                      and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if id(node) in docstrings:
                continue
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            else:
                continue
            if re.search(r"run[_ ]id\b", text) and re.search(r"\b1-[0-9]+\b|_\.:\+-|\. _ : \+ -", text):
                findings.append(f"{_where(path, node)} states the run-id rule by hand: {text!r}")
    return findings


def capability_findings() -> list[str]:
    """Places other than ``patterns.capability`` that read a compute capability themselves."""
    return [f"{_where(path, node)} uses COMPUTE_CAPABILITY: call patterns.capability"
            for path in _files() if _rel(path) != "plugins/gpucompare/config/patterns.py"
            for node in ast.walk(_tree(path))
            if isinstance(node, ast.Attribute) and node.attr == "COMPUTE_CAPABILITY"]


def test_patterns_are_written_in_their_owners_only() -> None:
    assert pattern_findings() == [], "define the pattern in config/patterns.py and import it"


def test_no_pattern_is_anchored() -> None:
    assert anchored_findings() == []


def test_the_allowed_shared_values_are_still_shared() -> None:
    sets = {name: values for path in _files() for name, values, _ in _membership_sets(path)}
    for name, other, value in ALLOWED_SHARED:
        assert value in sets.get(name, set()) and value in sets.get(other, set()), (name, other, value)


def test_no_module_renames_another_modules_value() -> None:
    assert alias_findings() == []


def test_membership_sets_of_different_modules_share_no_value() -> None:
    assert membership_findings() == [], "one vocabulary (e.g. SSM statuses) has one home"


def test_run_id_messages_come_from_the_rule() -> None:
    assert run_id_message_findings() == [], "use patterns.RUN_ID_ALLOWED"


def test_the_compute_capability_is_read_in_one_place() -> None:
    assert capability_findings() == []


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


def test_the_allowed_lists_are_still_there() -> None:
    """Every ALLOWED_LISTS note is still true: the list is still written in that file."""
    for (rel, values), _note in ALLOWED_LISTS.items():
        assert values in {v for v, _ in _string_collections(ROOT / rel)}, rel


def test_the_run_id_rule_and_the_markets_have_one_home() -> None:
    alphabet = "A-Za-z0-9._:+-"
    homes = sorted({_where(path, node).split(":")[0] for path in _files()
                    for node in ast.walk(_tree(path))
                    if isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and alphabet in node.value})
    assert homes == ["bench_tasks/constants.py"]
    markets = [w for path in _files() for v, w in _string_collections(path) if v == {"on_demand", "spot"}]
    assert [m.split(":")[0] for m in markets] == ["plugins/gpucompare/config/patterns.py"]


def _literal_defaults(path: Path, value: str) -> list[str]:
    """Where ``value`` is written as a default: a parameter's or field's default, argparse's
    ``default=``, or the fallback of ``mapping.get(key, value)``."""
    found = []
    for node in ast.walk(_tree(path)):
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
    places = [w for path in _files() for w in _literal_defaults(path, "on_demand")]
    assert places == [], "use patterns.DEFAULT_MARKET"


def test_the_checks_see_a_repeat(tmp_path: Path) -> None:
    """Each check finds what it is for in a probe module written here."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        'import re\nfrom x import patterns, TABLES\nA = re.compile(r"[a-z]+x")\n'
        'MARKETS = ("on_demand", "spot")\n'
        'B = re.compile(r"^(cpu|gpu):\\d+$")\nC = re.compile(f"[^{patterns.X}]")\n'
        'KINDS = patterns.KINDS\nNAMES = TABLES\nD = patterns.X.pattern\nlog = re.compile(TABLES)\n'
        'FINAL = frozenset({"Success", "Cancelling"})\nRUNNING = {"Cancelling", "Pending"}\n'
        'def f(m, run_id):\n    if m in ("spot", "on_demand") and re.fullmatch(r"[a-z]+x", m):\n'
        '        raise ValueError(f"run_id {run_id!r} may hold only _.:+- (1-200)")\n'
        '    return patterns.COMPUTE_CAPABILITY.fullmatch(m)\n')
    assert [p for p, _ in _regex_literals(probe)] == [
        "[a-z]+x", "^(cpu|gpu):\\d+$", "f'[^{patterns.X}]'", "[a-z]+x"]
    assert _named_value_sets(probe) == [frozenset({"on_demand", "spot"})]
    assert len([v for v, _ in _string_collections(probe) if v == {"on_demand", "spot"}]) == 2
    assert [a.split(" ", 1)[1] for a in _aliases(probe)] == [
        "KINDS = patterns.KINDS", "NAMES = TABLES", "D = patterns.X.pattern"]
    assert [(n, sorted(v)) for n, v, _ in _membership_sets(probe)] == [
        ("FINAL", ["Cancelling", "Success"]), ("RUNNING", ["Cancelling", "Pending"])]
    global ROOT
    saved = ROOT
    try:
        (tmp_path / "bench_tasks").mkdir()
        (tmp_path / "bench_tasks" / "probe.py").write_text(probe.read_text())
        (tmp_path / "plugins" / "gpucompare").mkdir(parents=True)
        (tmp_path / "plugins" / "gpucompare" / "other.py").write_text('RUNNING = frozenset({"Cancelling"})\n')
        ROOT = tmp_path
        gone = sum(len(allowed) for allowed, _ in ALLOWED_PATTERNS.values())
        assert len(pattern_findings()) == 4 + gone  # 4 literals, and every allowed one is gone
        assert len(anchored_findings()) == 1
        assert len(alias_findings()) == 3
        assert len(membership_findings()) == 2  # FINAL and RUNNING each share Cancelling with other.py
        assert len(run_id_message_findings()) == 1
        assert len(capability_findings()) == 1
    finally:
        ROOT = saved
    defaults = tmp_path / "defaults.py"
    defaults.write_text('def f(m="on_demand", *, n="on_demand"):\n    return d.get("market", "on_demand")\n'
                        'class C:\n    market: str = "on_demand"\n'
                        'p.add_argument("--market", default="on_demand")\nx = "on_demand"\n')
    lines = sorted(w.split(":")[1] for w in _literal_defaults(defaults, "on_demand"))
    assert lines == ["1", "1", "2", "4", "5"]
