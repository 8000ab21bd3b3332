"""The crawler's retry of a transaction PostgreSQL failed as a deadlock victim (issue 15 #15): bounded and jittered."""
from __future__ import annotations

from types import SimpleNamespace

import psycopg
import pytest

from blobgc.images import CONFLICT_ATTEMPTS, CONFLICT_BACKOFF, retry_on_conflict


def idle_connection(status=psycopg.pq.TransactionStatus.IDLE):
    return SimpleNamespace(info=SimpleNamespace(transaction_status=status))


def failing(times: int, error: type[Exception]):
    calls = {"n": 0}

    def work():
        calls["n"] += 1
        if calls["n"] <= times:
            raise error("deadlock detected")
        return "done"

    return work, calls


@pytest.mark.parametrize("error", [psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure])
def test_crawler_deadlock_is_retried_and_the_retries_counted(error):
    work, calls = failing(2, error)
    slept: list[float] = []
    assert retry_on_conflict(idle_connection(), work, what="test", sleep=slept.append) == ("done", 2)
    assert calls["n"] == 3 and len(slept) == 2
    for n, delay in enumerate(slept):  # full jitter: anywhere from 0 up to backoff * 2**n
        assert 0 <= delay <= CONFLICT_BACKOFF * 2 ** n


def test_crawler_deadlock_retries_are_bounded():
    work, calls = failing(100, psycopg.errors.DeadlockDetected)
    slept: list[float] = []
    with pytest.raises(psycopg.errors.DeadlockDetected):
        retry_on_conflict(idle_connection(), work, what="test", sleep=slept.append)
    assert CONFLICT_ATTEMPTS == 5 and calls["n"] == CONFLICT_ATTEMPTS and len(slept) == CONFLICT_ATTEMPTS - 1


def test_crawler_deadlock_jitter_differs_between_retries():
    delays = set()
    for _ in range(20):
        work, _calls = failing(1, psycopg.errors.DeadlockDetected)
        slept: list[float] = []
        retry_on_conflict(idle_connection(), work, what="test", backoff=1.0, sleep=slept.append)
        delays.add(slept[0])
    assert len(delays) > 1


def test_crawler_deadlock_other_errors_and_open_transactions_are_not_retried():
    work, calls = failing(1, psycopg.errors.UniqueViolation)
    with pytest.raises(psycopg.errors.UniqueViolation):
        retry_on_conflict(idle_connection(), work, what="test", sleep=lambda _: None)
    assert calls["n"] == 1
    work, calls = failing(1, psycopg.errors.DeadlockDetected)  # inside a caller's transaction: that one is lost
    with pytest.raises(psycopg.errors.DeadlockDetected):
        retry_on_conflict(idle_connection(psycopg.pq.TransactionStatus.INTRANS), work, what="test",
                          sleep=lambda _: None)
    assert calls["n"] == 1
