"""The retry policies (tenacity): which failures each retries, classified by exception type, and
how long it waits. Fake sleeps record the waits instead of sleeping."""

from __future__ import annotations

import pytest
from deltalake.exceptions import CommitFailedError, DeltaError

from gpucompare.lake.commits import COMMIT_ATTEMPTS, commit_conflict_retries
from gpucompare.targets.ssh import connection


def test_lake_commits_retry_conflicts_only() -> None:
    calls = []

    def conflicting() -> None:
        calls.append(1)
        raise CommitFailedError("Transaction failed: version already exists")

    policy = commit_conflict_retries()
    policy.sleep = lambda _s: None
    with pytest.raises(CommitFailedError):
        policy(conflicting)
    assert len(calls) == COMMIT_ATTEMPTS

    calls.clear()

    def broken() -> None:  # the same words in another error type: not a conflict, no retry
        calls.append(1)
        raise DeltaError("conflict: already exists")

    with pytest.raises(DeltaError):
        commit_conflict_retries()(broken)
    assert len(calls) == 1


def test_ssh_reconnects_only_dropped_connections_with_growing_waits() -> None:
    waits: list[float] = []
    calls = []

    def dropped() -> None:
        calls.append(1)
        raise connection.ConnectionDropped("connection lost")

    with pytest.raises(connection.ConnectionDropped):
        connection.reconnect_retries(4, 1.0, sleep=waits.append)(dropped)
    assert len(calls) == 4 and len(waits) == 3
    assert [int(w) for w in waits] == [1, 2, 4]  # doubling, jitter below a quarter of the base
    assert all(w - int(w) <= 0.25 for w in waits)

    def refused() -> None:
        raise connection.HostKeyError("the host key is UNKNOWN")

    waits.clear()
    with pytest.raises(connection.HostKeyError):
        connection.reconnect_retries(4, 1.0, sleep=waits.append)(refused)
    assert waits == []
