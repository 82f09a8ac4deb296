"""The unit tier's rule, enforced (tests/README.md): a unit test starts no process, opens no
network connection and opens no DuckDB database. A test that does fails here with a message that
says which tier it belongs in, so a misplaced test is found at once instead of slowing
``make test-fast`` down."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest


class NotAUnitTest(AssertionError):
    """A test in tests/unit/ used a real part: move it to tests/integration/ (or system/)."""


def _refuse(what: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise NotAUnitTest(f"{what} in a unit test: the test belongs in tests/integration/ "
                           "(see tests/README.md, 'Where a new test goes')")
    return refused


@pytest.fixture(autouse=True)
def _unit_tier_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("a subprocess"))
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            _refuse(f"a network connection to {address!r}")()
        real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    try:
        import duckdb
    except ImportError:  # pragma: no cover - duckdb is in requirements.txt
        pass
    else:
        monkeypatch.setattr(duckdb, "connect", _refuse("a DuckDB database"))
    yield
