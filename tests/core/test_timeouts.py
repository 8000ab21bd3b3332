"""Guard rails on the primary (blobgc.core.timeouts): statement_timeout and lock_timeout on every task connection,
and a cancelled statement named in the task's failure, which a retry completes."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest

from blobgc.core.clients import pg_connect
from blobgc.core.settings import ConfigurationError
from blobgc.core.timeouts import StatementTimedOut, Timeouts, timed_out
from tests.core.test_outbox import new_run, owe
from tests.helpers import bulk_put, object_keys


def test_a_lock_timeout_fails_the_step_naming_the_statement_and_the_setting_and_the_retry_completes(
        conn, s3, bucket, test_dsn):
    from blobgc.core.outbox import delete_owed_objects
    from blobgc.dag_kit.steps import failing_fast

    bulk_put(bucket, [("a", 3), ("b", 3)])
    run = new_run(conn, "timeouts")
    owe(conn, run, bucket, ["a", "b"], [3, 3])
    worker = pg_connect(test_dsn)
    Timeouts.parse({"lock_timeout": "200ms"}).apply(worker)
    assert worker.execute("SHOW lock_timeout").fetchone()[0] == "200ms"
    with pg_connect(test_dsn) as application, application.transaction():
        application.execute("LOCK TABLE blobgc.outbox IN ACCESS EXCLUSIVE MODE")  # a long transaction holds it
        with pytest.raises(StatementTimedOut) as failed, failing_fast():
            delete_owed_objects(worker, s3, run)
    message = str(failed.value)
    assert message.startswith("outbox/select_owed_batches (blobgc/sql/outbox/select_owed_batches.sql) was "
                              "cancelled by lock_timeout (canceling statement due to lock timeout)."), message
    assert "Variable blobgc_db_timeouts" in message and "retry goes on from its last checkpoint" in message
    assert object_keys(s3, bucket) == {"a", "b"}  # nothing deleted, both still owed
    retried = delete_owed_objects(worker, s3, run)  # the lock is gone: the retry completes
    assert retried.objects_deleted == 2 and object_keys(s3, bucket) == set()
    worker.close()


def test_a_statement_timeout_is_named_with_its_setting_and_a_cancel_by_hand_is_not_a_timeout(test_dsn):
    with pg_connect(test_dsn) as worker:
        Timeouts.parse({"statement_timeout": 100}).apply(worker)  # a bare number: milliseconds
        with pytest.raises(psycopg.errors.QueryCanceled) as cancelled:
            worker.execute("SELECT pg_sleep(2)")
        failure = timed_out(cancelled.value)
        assert failure is not None and str(failure).startswith("'SELECT pg_sleep(2)' was cancelled by "
                                                               "statement_timeout (canceling statement due to "
                                                               "statement timeout)")
        Timeouts().apply(worker)
        assert worker.execute("SHOW statement_timeout").fetchone()[0] == "30min"
        pid = worker.info.backend_pid
        with pg_connect(test_dsn) as operator:
            threading.Timer(0.3, lambda: operator.execute("SELECT pg_cancel_backend(%s)", (pid,))).start()
            started = time.monotonic()
            with pytest.raises(psycopg.errors.QueryCanceled) as by_hand:
                worker.execute("SELECT pg_sleep(5)")
            assert time.monotonic() - started < 4
        assert timed_out(by_hand.value) is None  # an operator's cancel stays what it is


@pytest.mark.parametrize("value", [[1], {"statement_timeout": [1]}, {"statement": "1s"}, {"lock_timeout": True}])
def test_a_malformed_db_timeouts_variable_is_refused_naming_it(value):
    with pytest.raises(ConfigurationError, match="Variable blobgc_db_timeouts"):
        Timeouts.parse(value)


def test_a_duration_postgresql_refuses_is_refused_naming_the_variable(test_dsn):
    with pg_connect(test_dsn) as worker, pytest.raises(ConfigurationError,
                                                       match="Variable blobgc_db_timeouts: PostgreSQL refuses"):
        Timeouts.parse({"lock_timeout": "ten seconds"}).apply(worker)
