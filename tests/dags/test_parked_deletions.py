"""A key the store refuses for good is parked after the outbox's PARK_AFTER failures, and while it is parked the
DAG's last drain task fails (OwedDeletionsParked) after draining everything else, so that on-call looks.

The store's refusal is real: a bucket policy under which the local S3 server answers AccessDenied to DeleteObject
for one blob's keys. Runs go through Airflow's own task runner (`run_dag`); between them, the row's backoff is ended
in SQL, never by moving the clock.
"""
from __future__ import annotations

from blobgc.kinds.blobs.layouts import blob_keys
from blobgc.core.outbox import PARK_AFTER, delete_owed_objects
from blobgc.core.runs import RunRef, ensure_run
from tests.helpers import NOW, deny_deletes, make_blobs, object_keys, run_dag, set_unused_since

SWEEP = "blobgc_sweep"


def env(bucket: str) -> dict[str, str]:
    return {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket, "BLOBGC_TASK_RETRIES": "0"}  # the failure shows at once


def owed_row(conn) -> tuple:
    """(keys, failures, parked, last error of the first key) of the one owed log row."""
    (row,) = conn.execute("SELECT o.keys, o.failures, o.parked_at IS NOT NULL, o.last_errors ->> o.keys[1] "
                          "FROM blobgc.outbox o WHERE o.dag_id = %s", (SWEEP,)).fetchall()
    return row


def end_backoff(conn) -> None:
    """The row's next attempt is due now (its backoff over), as if the wait had passed."""
    with conn.transaction():
        conn.execute("UPDATE blobgc.outbox SET next_attempt_at = now() - interval '1 second' WHERE dag_id = %s",
                     (SWEEP,))


def test_a_key_refused_for_good_is_parked_after_five_failures_and_fails_the_last_drain_task(conn, s3, bucket):
    refused, garbage = make_blobs(conn, s3, bucket, 2)
    set_unused_since(conn, [refused, garbage], "3 days")
    deny_deletes(s3, bucket, f"blobs/{refused}/")
    try:
        # Run 1 sweeps both blobs; its last drain deletes the garbage's objects, and the refused keys fail once.
        first = run_dag(SWEEP, env_extra=env(bucket))
        assert first.returncode == 0, first.output[-3000:]
        assert first.task_states["delete_owed_objects"] == "success"  # failing, not parked: the task succeeds
        assert object_keys(s3, bucket) == set(blob_keys(refused))
        keys, failures, parked, error = owed_row(conn)
        assert (sorted(keys), failures, parked) == (sorted(blob_keys(refused)), 1, False)
        assert error == "AccessDenied: Access Denied"

        # Failures 2 to PARK_AFTER - 1: the drain the DAG's tasks run, each once the row's backoff is over.
        for failure in range(2, PARK_AFTER):
            end_backoff(conn)
            delete_owed_objects(conn, s3, ensure_run(conn, RunRef(SWEEP, f"drain-{failure}"), NOW))
            assert owed_row(conn)[1:3] == (failure, False)

        # Run 2: its first drain (retry_owed_objects) fails the key the fifth time and parks it; the run goes on,
        # sweeps a new garbage blob, and its last drain deletes that blob's objects, then fails on the parked key.
        (newcomer,) = make_blobs(conn, s3, bucket, 1, prefix="new")
        set_unused_since(conn, [newcomer], "3 days")
        end_backoff(conn)
        second = run_dag(SWEEP, env_extra=env(bucket))
        assert second.returncode != 0
        assert second.task_states["retry_owed_objects"] == "success"
        assert second.task_states["delete_unused_blobs[0]"] == "success"
        assert second.task_states["delete_owed_objects"] == "failed"
        assert "OwedDeletionsParked: 2 owed deletions of blobgc_sweep are parked" in second.output, \
            second.output[-3000:]  # the refused blob's two keys
        assert owed_row(conn)[1:3] == (PARK_AFTER, True)
        assert conn.execute("SELECT count(*) FROM app.blob").fetchone()[0] == 0
        assert object_keys(s3, bucket) == set(blob_keys(refused))  # the rest was drained; the refused keys stay
        owed = conn.execute("SELECT key FROM blobgc.deleted_object WHERE owed ORDER BY key").fetchall()
        assert owed == [(k,) for k in sorted(blob_keys(refused))]  # still owed: parked, never forgotten
    finally:
        s3.delete_bucket_policy(Bucket=bucket)
