"""The machine key has one definition (``lake.schema.MACHINE_KEY``): the reports' SQL names it
``{{machine_key}}`` and ``reports.inputs.load_sql`` writes it out. Reads the shipped SQL files
only (the reports run on them in tests/integration/reports)."""

from __future__ import annotations

import re

import pytest

from gpucompare.lake import schema
from gpucompare.reports import inputs
from gpucompare.reports.inputs import fill_fragments, load_sql
from gpucompare.reports.report_set import ReportError

SQL_FILES = sorted(inputs.SQL_DIR.glob("*.sql"))


def _code(text: str) -> str:
    """The SQL without its ``--`` comments (a comment may name the key in prose)."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def _written_out(text: str) -> list[str]:
    """The machine key's columns written one after the other (``provider, instance_type, …``,
    ``p.provider, p.instance_type, …``, one alias throughout), across line breaks."""
    first, *rest = schema.MACHINE_KEY
    key = r"(?:([a-z_]+)\.)?" + re.escape(first) + "".join(r",\s*(?(1)\1\.)" + re.escape(c) for c in rest)
    return [m.group(0) for m in re.finditer(key, _code(text))]


def test_no_sql_file_writes_the_machine_key_out() -> None:
    assert len(SQL_FILES) >= 10
    written = {path.name: _written_out(path.read_text(encoding="utf-8")) for path in SQL_FILES}
    assert {name: found for name, found in written.items() if found} == {}, "use {{machine_key}}"
    uses = sum(_code(path.read_text(encoding="utf-8")).count("{{machine_key") for path in SQL_FILES)
    assert uses >= 25


def test_every_sql_file_loads_with_its_fragments_filled() -> None:
    for path in SQL_FILES:
        text = load_sql(path.stem)
        assert "{{" not in text and "}}" not in text, path.name
    assert "ORDER BY provider, instance_type, region, market, mode" in load_sql("throughput")
    assert "p.provider, p.instance_type, p.region, p.market, g.canonical" in load_sql("projections")


def test_the_fragment_follows_its_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(inputs.SQL_FRAGMENTS, "machine_key", ("provider", "instance_type", "zone"))
    assert fill_fragments("GROUP BY {{machine_key}}, x JOIN {{machine_key r.}}", "t.sql") == (
        "GROUP BY provider, instance_type, zone, x JOIN r.provider, r.instance_type, r.zone")
    assert "hash(provider, instance_type, zone, num_nodes" in load_sql("newest_by_config")


@pytest.mark.parametrize("text", ["SELECT {{machine_keys}}", "SELECT {{Machine_key}}",
                                  "SELECT {{machine_key p}}"])
def test_a_name_that_is_not_a_fragment_is_an_error(text: str) -> None:
    with pytest.raises(ReportError, match=r"t\.sql: .*(unknown SQL fragment|not a fragment)"):
        fill_fragments(text, "t.sql")
