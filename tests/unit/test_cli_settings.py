"""The command line's locations and manners, in-process: every subcommand that touches a lake
takes it from the lake setting unless ``--lake`` says otherwise, the reports from the reports
setting unless ``--out`` does, add-price's flags are checked by the model with the flag named,
and a closed pipe ends the command quietly.

(The same as processes from another folder: tests/integration/test_cli_lake_setting.py.)
"""

from __future__ import annotations

import argparse
import io

import pytest

from gpucompare import cli
from gpucompare.cli import common, prices, reports
from gpucompare.errors import UsageError


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_no_subcommand_has_a_lake_default_of_its_own() -> None:
    """A default of ./lake (or any path) would be a second lake the DAGs never read."""
    with_lake = []
    for name, sub in _subparsers(cli.build_parser()).items():
        for action in sub._actions:
            if "--lake" in action.option_strings:
                assert action.default is None, f"{name} --lake defaults to {action.default!r}"
                with_lake.append(name)
    assert {"ingest", "import-published", "load-prices", "add-price", "refresh-prices", "import-catalog",
            "compact", "lake-info", "report", "plan", "scaling-run", "migrate-lake",
            "athena-ddl"} <= set(with_lake)
    report = _subparsers(cli.build_parser())["report"]
    assert next(a for a in report._actions if "--out" in a.option_strings).default is None


def test_the_lake_comes_from_the_setting_and_is_said(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                     capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("GPUCOMPARE_LAKE", str(tmp_path / "configured"))
    args = argparse.Namespace(lake=None, command="ingest")
    assert common.lake_location(args) == str(tmp_path / "configured") == args.lake
    assert f"lake {tmp_path / 'configured'} (from GPUCOMPARE_LAKE)" in capsys.readouterr().err
    args = argparse.Namespace(lake=str(tmp_path / "given"), command="ingest")
    assert common.lake_location(args) == str(tmp_path / "given")
    assert "(from --lake)" in capsys.readouterr().err


def test_a_reading_command_without_a_lake_says_where_and_how(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path) -> None:
    monkeypatch.setenv("GPUCOMPARE_LAKE", str(tmp_path / "absent"))
    (tmp_path / "here" / "lake").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "here")
    with pytest.raises(UsageError) as caught:
        common.lake_location(argparse.Namespace(lake=None, command="lake-info"), must_exist=True)
    text = str(caught.value)
    assert f"no lake at {tmp_path / 'absent'} (from GPUCOMPARE_LAKE)" in text
    assert "gpucompare load-prices" in text and "--lake or GPUCOMPARE_LAKE" in text
    # a lake in the current folder (make demo's) is pointed out, never used silently
    assert f"export GPUCOMPARE_LAKE={tmp_path / 'here' / 'lake'}" in text


def test_report_without_out_writes_as_the_reports_dag(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("GPUCOMPARE_REPORTS", str(tmp_path / "reports"))
    args = argparse.Namespace(out=None, history=None)
    out, history, dated = reports._report_destination(args)
    assert dated is not None and out == f"{tmp_path / 'reports'}/{dated}"
    assert history == str(tmp_path / "reports")


@pytest.mark.parametrize(("flags", "message"), [
    (["--per-hour", "0.5", "--per-month", "20"], "--per-hour: 2 of the bases given"),
    (["--purchase-price", "1200"], "--life-months: give the machine's life once"),
    (["--per-hour", "-1"], "--per-hour: '-1' is not allowed"),
    (["--per-hour", "1", "--currency", "GBP"], "--currency: 'GBP' is not allowed; allowed: EUR, USD"),
    (["--per-hour", "1", "--from", "2026-13-01"], "--from: '2026-13-01' is not allowed; allowed: a date"),
    (["--per-hour", "1", "--label", "two\nlines"], "--label:"),
    (["--per-hour", "1", "--instance-type", "a b"], "--instance-type:"),
    (["--per-hour", "1", "--market", "reserved"], "--market: 'reserved' is not allowed"),
])
def test_add_price_refuses_bad_flags_naming_them(flags: list[str], message: str) -> None:
    base = {"--provider": "local", "--instance-type": "local-cpu", "--currency": "EUR", "--label": "x"}
    given = dict(zip(flags[::2], flags[1::2], strict=True))
    argv = ["add-price", *[x for k, v in {**base, **given}.items() for x in (k, v)]]
    args = cli.build_parser().parse_args(argv)
    with pytest.raises(Exception) as caught:
        prices.declared_price_from_args(args)
    assert message in str(caught.value)


def test_a_closed_pipe_ends_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            return self._fd

    import os

    read_end, write_end = os.pipe()
    pipe = ClosedPipe()
    pipe._fd = os.dup(write_end)
    monkeypatch.setattr("sys.stdout", pipe)
    try:
        assert cli.main(["schema", "fleet"]) == cli.EXIT_BROKEN_PIPE
    finally:
        for fd in (read_end, write_end, pipe._fd):
            os.close(fd)
