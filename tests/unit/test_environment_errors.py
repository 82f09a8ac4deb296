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
