"""blobgc_sweep and blobgc_mark with connection blobgc_postgres_replica set, pointed at a deliberately stale replica
(tests/support/replica.py): the candidate scans read it, the deletions re-check on the primary, and the run says
which connection each step read and the replica's lag."""
from __future__ import annotations

from blobgc.kinds.blobs.layouts import blob_keys
from blobgc.reclaim.receipt_page import render_receipt
from blobgc.reclaim.receipts import collect_receipt
from tests.collectors.test_sweep import attach
from tests.helpers import make_blobs, object_keys, run_dag, set_unused_since
from tests.support.gate import env
from tests.support.replica import replica_connection_env, snapshot


def reads_of(conn, dag_id: str, run_id: str) -> tuple[dict, float | None]:
    return conn.execute("SELECT reads, replica_lag_seconds FROM blobgc.run WHERE dag_id = %s AND run_id = %s",
                        (dag_id, run_id)).fetchone()


def test_a_sweep_reading_a_stale_replica_keeps_the_blob_the_primary_references(conn, replica, replica_dsn, s3,
                                                                                bucket):
    orphan, referenced = make_blobs(conn, s3, bucket, 2)
    set_unused_since(conn, [orphan, referenced], "3 days")
    snapshot(conn, replica)
    attach(conn, "p-new", referenced)  # the replica has not replayed it
    result = run_dag("blobgc_sweep", env_extra=env(bucket, **replica_connection_env(replica_dsn)))
    assert result.returncode == 0, result.output[-3000:]
    assert {r[0] for r in conn.execute("SELECT id FROM app.blob")} == {referenced}
    assert object_keys(s3, bucket) == set(blob_keys(referenced))
    assert ("plan_deletions: candidate scans read connection blobgc_postgres_replica (not a standby: "
            "pg_is_in_recovery() is false, its lag is unknown); every deletion re-checks on blobgc_postgres"
            in result.output), result.output[-3000:]
    assert "1 rows skipped: referenced again" in result.output
    reads, lag = reads_of(conn, "blobgc_sweep", result.run_id)
    assert reads == {"plan_deletions": {"connection": "blobgc_postgres_replica", "standby": False,
                                        "lag_seconds": None}}
    assert lag is None  # not a standby: no lag to measure
    receipt = collect_receipt(conn, "blobgc_sweep", result.run_id)
    assert receipt["run"]["reads"] == reads  # the run's JSON
    page = render_receipt(receipt, root="/blobgc", may_undo=False, paused=None)
    assert ('blobgc_postgres_replica (plan_deletions) <span class="hint">(the replica&#x27;s lag is unknown: not a '
            "standby; every deletion re-checked on blobgc_postgres)</span>") in page


def test_a_sweep_without_a_replica_reads_the_primary_and_says_so(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 2)
    set_unused_since(conn, ids, "3 days")
    result = run_dag("blobgc_sweep", env_extra=env(bucket))
    assert result.returncode == 0, result.output[-3000:]
    assert "plan_deletions: candidate scans read connection blobgc_postgres (the primary" in result.output
    reads, _ = reads_of(conn, "blobgc_sweep", result.run_id)
    assert reads["plan_deletions"]["connection"] == "blobgc_postgres"


def test_the_mark_reading_a_stale_replica_leaves_used_what_the_primary_references(conn, replica, replica_dsn, s3,
                                                                                 bucket):
    free, referenced, replica_only = make_blobs(conn, s3, bucket, 3, thumbnails=False)
    attach(conn, "p-old", replica_only)
    snapshot(conn, replica)
    attach(conn, "p-new", referenced)  # not replayed yet
    conn.execute("DELETE FROM app.blob_attachment WHERE post_id = 'p-old'")  # nor this
    result = run_dag("blobgc_mark", env_extra=env(bucket, **replica_connection_env(replica_dsn)))
    assert result.returncode == 0, result.output[-3000:]
    flags = dict(conn.execute("SELECT id, unused FROM app.blob").fetchall())
    # the replica was read (it still shows replica_only's reference: kept used one mark longer), and the primary
    # re-checked what the replica saw unreferenced (referenced: never marked unused)
    assert flags == {free: True, referenced: False, replica_only: False}
    reads, _ = reads_of(conn, "blobgc_mark", result.run_id)
    assert reads["mark_blobs"]["connection"] == "blobgc_postgres_replica"
