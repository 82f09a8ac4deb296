"""gpucompare.errors.explain_environment_error: the one line a user gets instead of a traceback when the
environment, not gpucompare, is at fault (the CLI's last resort, cli/registry.main)."""

from __future__ import annotations

import pytest

from gpucompare.errors import explain_environment_error

MISSING = [("boto3", "aws"), ("botocore.session", "aws"),
           ("airflow.providers.amazon.aws.hooks.base_aws", "aws"),
           ("paramiko", "ssh"), ("airflow.providers.ssh.hooks.ssh", "ssh")]


@pytest.mark.parametrize(("module", "extra"), MISSING)
def test_a_missing_module_names_its_extra(module: str, extra: str) -> None:
    text = explain_environment_error(ModuleNotFoundError(f"No module named {module!r}", name=module))
    assert text is not None and f"gpucompare[{extra}]" in text and module in text


def test_missing_aws_credentials_name_the_variables_and_the_connection_flag() -> None:
    from botocore.exceptions import NoCredentialsError

    text = explain_environment_error(NoCredentialsError())
    assert text is not None and "AWS_ACCESS_KEY_ID" in text and "--aws-conn-id" in text


def test_a_local_path_gets_a_local_error_not_aws_advice() -> None:
    text = explain_environment_error(FileNotFoundError(2, "No such file or directory", "/proc/forbidden"))
    assert text is not None and text.startswith("/proc/forbidden:") and "AWS" not in text


def test_a_bug_is_not_explained_away() -> None:
    assert explain_environment_error(KeyError("price")) is None
    assert explain_environment_error(ValueError("bad")) is None


def test_a_bug_ends_in_one_line_and_shows_its_traceback_only_when_asked(monkeypatch, capsys) -> None:
    """An unexpected exception in a command: exit 1, one line naming it and ``--traceback``."""
    from gpucompare.cli import registry
    from gpucompare.cli.common import Command

    def boom(args) -> int:
        raise KeyError("price_per_hour")

    monkeypatch.setitem(registry.COMMANDS, "schema", Command("schema", "test", lambda parser: None, boom))
    assert registry.main(["schema"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unexpected KeyError" in err and "--traceback" in err
    assert "Traceback (most recent call last)" not in err
    assert registry.main(["--traceback", "schema"]) == 1
    assert "Traceback (most recent call last)" in capsys.readouterr().err
