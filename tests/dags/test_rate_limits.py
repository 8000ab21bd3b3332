"""Variable blobgc_rate_limits in real DAG runs: the drain deletes through the cap shared in the stack's Redis."""
from __future__ import annotations

import json

from blobgc.core.rate import REDIS_PREFIX
from blobgc.kinds.blobs.layouts import blob_keys
from tests.helpers import make_blobs, object_keys, run_dag, set_unused_since


def test_a_sweep_under_blobgc_rate_limits_deletes_through_the_cap_shared_in_redis(conn, s3, bucket, redis):
    kept, garbage = make_blobs(conn, s3, bucket, 2)
    with conn.transaction():
        conn.execute("INSERT INTO app.post (id) VALUES ('p1')")
        conn.execute("INSERT INTO app.blob_attachment (post_id, blob_id) VALUES ('p1', %s)", (kept,))
    set_unused_since(conn, [garbage], "2 days")
    limits = {"default": 1000, bucket: 40}
    sweep = run_dag("blobgc_sweep", env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket,
                                               "AIRFLOW_VAR_BLOBGC_RATE_LIMITS": json.dumps(limits)})
    output = sweep.stdout + sweep.stderr
    assert sweep.returncode == 0, output[-3000:]
    assert f"capped across all workers by Variable blobgc_rate_limits: {bucket}: 40/s, any other bucket: 1000/s" \
        in output, output[-3000:]
    assert object_keys(s3, bucket) == set(blob_keys(kept))
    state = redis.hgetall(REDIS_PREFIX + bucket)  # the drain's tokens were taken from the shared bucket
    assert state and float(state[b"factor"]) == 1.0
    redis.delete(REDIS_PREFIX + bucket)


def test_a_malformed_blobgc_rate_limits_fails_the_first_drain_without_retries_before_anything_is_deleted(
        conn, s3, bucket):
    kept, garbage = make_blobs(conn, s3, bucket, 2)
    with conn.transaction():
        conn.execute("INSERT INTO app.post (id) VALUES ('p1')")
        conn.execute("INSERT INTO app.blob_attachment (post_id, blob_id) VALUES ('p1', %s)", (kept,))
    set_unused_since(conn, [garbage], "2 days")
    sweep = run_dag("blobgc_sweep", env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket,
                                               "AIRFLOW_VAR_BLOBGC_RATE_LIMITS": json.dumps({bucket: 0})})
    output = sweep.stdout + sweep.stderr
    assert sweep.returncode != 0
    failed = [task for task, state in sweep.task_states.items() if state == "failed"]
    assert failed == ["retry_owed_objects"], sweep.task_states  # the run's first drain, before any row is deleted
    assert "AirflowFailException" in output  # no retry can fix a setting
    assert f"Variable blobgc_rate_limits: '{bucket}' -> 0 is not a number of deletes per second above 0" in output
    assert object_keys(s3, bucket) == set(blob_keys(kept)) | set(blob_keys(garbage))
    assert {r[0] for r in conn.execute("SELECT id FROM app.blob")} == {kept, garbage}
