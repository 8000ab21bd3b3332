"""The mark and sweep DAGs under Airflow itself."""
from __future__ import annotations

from datetime import datetime, timezone

from blobgc.collectors.mark import mark_collection
from blobgc.kinds.blobs.layouts import blob_keys
from blobgc.core.references import discover_references
from tests.helpers import FAR_FUTURE, airflow, assert_param_refused, make_blobs, object_keys, run_dag, set_unused_since
from tests.support.collections import (
    add_upload,
    backdate_marks,
    backdate_uploads,
    bound_shop,
    create_shop,
    new_schema,
    shop_yaml,
    write_collections,
)


def test_airflow_dags_test_mark_then_sweep_reclaims_garbage(conn, s3, bucket):
    kept, garbage = make_blobs(conn, s3, bucket, 2)
    with conn.transaction():
        conn.execute("INSERT INTO app.post (id) VALUES ('p1')")
        conn.execute("INSERT INTO app.blob_attachment (post_id, blob_id) VALUES ('p1', %s)", (kept,))
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket}

    # exactly the command of docs/reference.md §4 (the whole dags folder parsed); other tests pass -f to start faster
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
    assert conn.execute("SELECT details -> 'not_planned' -> 'app_blob' FROM blobgc.run").fetchone()[0] == {
        "considered": 3, "planned": 3, "referenced": 0, "not_marked": 0, "within_grace": 0, "young_created_at": 0,
        "first_eligible_at": None, "grace_hours": 24}  # the report task's gathering of the plan tasks' counts
    assert ids


def test_a_dry_run_sweep_logs_no_error_and_its_report_still_gathers_every_upstream(conn, s3, bucket):
    """Issue 30: a successful dry run that planned nothing (a fresh install's first) logged `[error] XCom not
    found ... delete_owed_objects`: its delete tasks are skipped, and the report fetched the skipped drain's
    missing result as an XCom argument. The report reads what its upstreams returned itself: the dry run's log
    has no error line, and a real run's report still has the planned rows (a mapped upstream) and the drained
    objects (an unmapped one)."""
    make_blobs(conn, s3, bucket, 3)  # used: nothing to plan
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket}
    dry = airflow("dags", "test", "blobgc_sweep", "-c", '{"dry_run": true}', env_extra=env)
    output = dry.stdout + dry.stderr
    assert dry.returncode == 0, output[-3000:]
    assert [line for line in output.splitlines() if "[error" in line] == []
    set_unused_since(conn, [r[0] for r in conn.execute("SELECT id FROM app.blob")], "3 days")
    real = run_dag("blobgc_sweep", env_extra=env)  # in this process: the CLI's start-up is paid once above
    assert real.returncode == 0, real.output[-3000:]
    details = dict(conn.execute("SELECT dry_run, details FROM blobgc.run WHERE dag_id = 'blobgc_sweep'").fetchall())
    assert details[True]["planned"]["rows_deleted"] == details[True]["objects"]["objects_deleted"] == 0
    assert details[False]["planned"]["rows_deleted"] == 3
    assert details[False]["objects"]["objects_deleted"] == 6


def test_malformed_conf_is_refused_before_anything_runs(conn):
    result = run_dag("blobgc_sweep", conf={"batch_size": 5000})
    assert_param_refused(result, "Invalid input for param batch_size: 5000 is greater than the maximum of 1000")
    assert conn.execute("SELECT count(*) FROM blobgc.run").fetchone()[0] == 0


def test_future_logical_date_sweep_keeps_blobs_within_their_grace(conn, s3, bucket):
    """Finding 2: `airflow dags test blobgc_sweep 2030-01-01` deletes only what a run now would."""
    recent, old = make_blobs(conn, s3, bucket, 2)
    set_unused_since(conn, [recent], "2 hours")
    set_unused_since(conn, [old], "3 days")
    result = run_dag("blobgc_sweep", logical_date=FAR_FUTURE, env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket})
    assert result.returncode == 0, result.output[-3000:]
    assert "clamped" in result.output
    assert {r[0] for r in conn.execute("SELECT id FROM app.blob")} == {recent}
    assert object_keys(s3, bucket) == set(blob_keys(recent))
    reference = conn.execute("SELECT reference_time FROM blobgc.run WHERE dag_id = 'blobgc_sweep'").fetchone()[0]
    assert reference < datetime.now(timezone.utc)


def test_collection_grace_ignored_a_collection_of_12_hours_is_swept_once_its_own_grace_passed(conn, s3, bucket,
                                                                                            tmp_path):
    """Issue 29, finding 7: with no grace Param given, the collection's own grace_hours (12) decides, not the
    Param's old default of 24; a run given `grace_hours: 24` still lengthens it and keeps the row."""
    schema = new_schema()
    create_shop(conn, schema)
    upload = add_upload(conn, s3, schema, bucket, 1, b"unused for 13 hours")
    env = {"BLOBGC_COLLECTIONS": str(write_collections(tmp_path, shop_yaml(schema, bucket, name=schema,
                                                                           grace_hours=12))),
           "AIRFLOW_VAR_BLOBGC_BUCKET": bucket}
    bound = bound_shop(conn, schema, bucket, name=schema, grace_hours=12)
    mark_collection(conn, bound, discover_references(conn, bound.collection.table,
                                                     extra_sql=bound.collection.references, id_column="id"))
    backdate_marks(conn, schema, "13 hours")  # unused for 13 h, and created as long ago
    backdate_uploads(conn, schema, [1], "13 hours")

    longer = run_dag("blobgc_sweep", conf={"grace_hours": 24}, env_extra=env)
    assert longer.returncode == 0, longer.output[-3000:]
    assert conn.execute(f"SELECT count(*) FROM {schema}.upload").fetchone()[0] == 1
    assert {upload["key"], upload["thumb"]} <= object_keys(s3, bucket)

    own = run_dag("blobgc_sweep", env_extra=env)  # no Param given: the collection's 12 h
    assert own.returncode == 0, own.output[-3000:]
    assert conn.execute(f"SELECT count(*) FROM {schema}.upload").fetchone()[0] == 0
    assert not {upload["key"], upload["thumb"]} & object_keys(s3, bucket)
