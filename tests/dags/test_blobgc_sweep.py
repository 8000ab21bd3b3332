"""The mark and sweep DAGs under Airflow itself."""
from __future__ import annotations

from datetime import datetime, timezone

from blobgc.core.keys import blob_keys
from tests.helpers import FAR_FUTURE, airflow, make_blobs, object_keys, run_dag, set_unused_since


def test_airflow_dags_test_mark_then_sweep_reclaims_garbage(conn, s3, bucket):
    kept, garbage = make_blobs(conn, s3, bucket, 2)
    with conn.transaction():
        conn.execute("INSERT INTO app.post (id) VALUES ('p1')")
        conn.execute("INSERT INTO app.blob_attachment (post_id, blob_id) VALUES ('p1', %s)", (kept,))
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket}

    # exactly the CONTRACT's command (the whole dags folder parsed); other tests pass -f to start faster
    mark = airflow("dags", "test", "blobgc_mark", env_extra=env, whole_dags_folder=True)
    assert mark.returncode == 0, mark.stdout[-3000:] + mark.stderr[-3000:]
    assert conn.execute("SELECT unused FROM app.blob WHERE id = %s", (garbage,)).fetchone()[0] is True

    # as if the mark had found it unused two days ago (a run's grace can only lengthen the collection's 24 h)
    set_unused_since(conn, [garbage], "2 days")
    sweep = run_dag("blobgc_sweep", env_extra=env)
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
    assert {r[0] for r in conn.execute("SELECT id FROM app.blob")} == {kept}
    assert object_keys(s3, bucket) == set(blob_keys(kept))
    runs = conn.execute("SELECT dag_id, dry_run, rows_deleted, objects_deleted, finished_at IS NOT NULL "
                        "FROM blobgc.run ORDER BY started_at").fetchall()
    assert runs == [("blobgc_mark", False, 0, 0, True), ("blobgc_sweep", False, 1, 2, True)]


def test_airflow_dags_test_dry_run_sweep_deletes_nothing(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 3)
    with conn.transaction():
        conn.execute("UPDATE app.blob SET unused = true, updated_at = now() - interval '3 days', "
                     "created_at = now() - interval '3 days'")
    result = run_dag("blobgc_sweep", conf={"dry_run": True}, env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket})
    assert result.returncode == 0, result.stdout[-3000:]
    assert conn.execute("SELECT count(*) FROM app.blob").fetchone()[0] == 3
    assert len(object_keys(s3, bucket)) == 6
    row = conn.execute("SELECT dry_run, rows_deleted, objects_deleted FROM blobgc.run").fetchone()
    assert row == (True, 3, 6)
    assert ids


def test_malformed_conf_is_refused_before_anything_runs(conn):
    result = run_dag("blobgc_sweep", conf={"batch_size": 5000})
    assert result.returncode != 0
    assert "batch_size" in (result.stdout + result.stderr)
    assert conn.execute("SELECT count(*) FROM blobgc.run").fetchone()[0] == 0


def test_future_logical_date_sweep_keeps_blobs_within_their_grace(conn, s3, bucket):
    """Finding 2: `airflow dags test blobgc_sweep 2030-01-01` deletes only what a run now would."""
    recent, old = make_blobs(conn, s3, bucket, 2)
    set_unused_since(conn, [recent], "2 hours")
    set_unused_since(conn, [old], "3 days")
    result = airflow("dags", "test", "blobgc_sweep", FAR_FUTURE.date().isoformat(),
                     env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "clamped" in output
    assert {r[0] for r in conn.execute("SELECT id FROM app.blob")} == {recent}
    assert object_keys(s3, bucket) == set(blob_keys(recent))
    reference = conn.execute("SELECT reference_time FROM blobgc.run WHERE dag_id = 'blobgc_sweep'").fetchone()[0]
    assert reference < datetime.now(timezone.utc)
