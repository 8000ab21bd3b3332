"""blobgc_image_cleanup under Airflow: it plans, passes the gate, and deletes exactly its plan (or a dry run's)."""
from __future__ import annotations

import json


from blobgc.kinds.images.layouts import image_keys
from demo_app.images import attach_images, pre_upload
from tests.helpers import object_keys, run_dag
from tests.photo_server import jpeg
from tests.support.images import SIZES, age_rows, image_rows

DAG = "blobgc_image_cleanup"
ODD_SIZES = {"orig": 0, "größe": 640}  # a non-ASCII size name: its files would never parse, so never be deleted


def report_of(conn, run_id: str) -> dict:
    return conn.execute("SELECT details FROM blobgc.run WHERE dag_id = %s AND run_id = %s", (DAG, run_id)).fetchone()[0]


def test_airflow_image_cleanup_dag_removes_stale_unbound_photos(conn, s3, bucket, settings):
    """A real run without from_plan plans itself, passes the gate (no history, under the floors) and deletes."""
    kept = pre_upload(conn, s3, settings, jpeg(80))
    age_rows(conn, 20)
    with conn.transaction():
        conn.execute("UPDATE app.image SET last_update = now() WHERE image_id = %s", (kept,))
    gone = pre_upload(conn, s3, settings, jpeg(81))
    age_rows_sql = "UPDATE app.image SET last_update = now() - interval '20 days' WHERE image_id = %s"
    with conn.transaction():
        conn.execute(age_rows_sql, (gone,))
    result = run_dag(DAG, env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert {t: result.task_states[t] for t in ("plan_unbound_images", "gate", "delete_unbound_images")} == {
        "plan_unbound_images": "success", "gate": "success", "delete_unbound_images": "success"}
    assert image_rows(conn) == [(kept, None, 0)]
    assert object_keys(s3, bucket) == set(image_keys(kept, SIZES))
    row = conn.execute("SELECT rows_deleted, objects_deleted, bytes_reclaimed > 0 FROM blobgc.reclaim_daily "
                       "WHERE dag_id = 'blobgc_image_cleanup' AND NOT dry_run").fetchone()
    assert row == (1, len(SIZES), True)
    plan = report_of(conn, result.run_id)["plan"]
    assert plan["plan"] == result.run_id and plan["gate"]["decision"] == "passed"
    assert (plan["planned_rows"], plan["planned_objects"], plan["skipped_rereferenced_rows"]) == (1, len(SIZES), 0)


def test_a_dry_runs_plan_executed_by_the_dag_skips_a_photo_bound_since_and_reports_it(conn, s3, bucket, settings,
                                                                                      offers):
    planned = [pre_upload(conn, s3, settings, jpeg(83 + i)) for i in range(2)]
    age_rows(conn, 20)
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket}
    dry = run_dag(DAG, conf={"dry_run": True}, env_extra=env)
    assert dry.returncode == 0, dry.output[-3000:]
    assert dry.task_states["delete_unbound_images"] == "success"  # it does nothing on a dry run
    assert len(image_rows(conn)) == 2 and len(object_keys(s3, bucket)) == 2 * len(SIZES)
    assert conn.execute("SELECT count(*) FROM blobgc.deleted_object WHERE run_id = %s AND dry_run",
                        (dry.run_id,)).fetchone()[0] == 2 * len(SIZES)
    gone, bound = planned
    attach_images(conn, 1, [bound])  # bound to an offer after the plan
    newcomer = pre_upload(conn, s3, settings, jpeg(85))  # stale and unbound after the plan: not in it
    with conn.transaction():
        conn.execute("UPDATE app.image SET last_update = now() - interval '20 days' WHERE image_id = %s", (newcomer,))

    real = run_dag(DAG, conf={"from_plan": dry.run_id}, env_extra=env)
    assert real.returncode == 0, real.output[-3000:]
    assert {r[0] for r in image_rows(conn)} == {bound, newcomer}
    assert object_keys(s3, bucket) == set(image_keys(bound, SIZES)) | set(image_keys(newcomer, SIZES))
    report = report_of(conn, real.run_id)
    assert report["plan"]["plan"] == dry.run_id and report["plan"]["gate"]["decision"] == "passed"
    assert (report["plan"]["planned_rows"], report["plan"]["planned_objects"]) == (2, 2 * len(SIZES))
    assert (report["plan"]["skipped_rereferenced_rows"], report["plan"]["skipped_rereferenced_objects"]) == (
        1, len(SIZES))
    assert report["plan"]["failed_objects"] == 0
    assert (report["images"]["rows_deleted"], report["images"]["skipped_rows"]) == (1, 1)
    assert report["planned"]["rows_deleted"] == 0  # it planned nothing itself
    assert conn.execute("SELECT rows_deleted, objects_deleted FROM blobgc.run WHERE run_id = %s",
                        (real.run_id,)).fetchone() == (1, len(SIZES))


def test_image_size_names_that_are_not_ascii_fail_the_cleanup_first_task_and_delete_nothing(
        conn, s3, bucket, settings):
    image_id = pre_upload(conn, s3, settings, jpeg(82))
    age_rows(conn, 20)
    result = run_dag(DAG, env_extra={
        "AIRFLOW_VAR_BLOBGC_BUCKET": bucket, "AIRFLOW_VAR_BLOBGC_IMAGE_SIZES": json.dumps(ODD_SIZES),
        "BLOBGC_TASK_RETRIES": "0"})
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "Variable blobgc_image_sizes: size name 'größe' is not allowed" in output, output[-3000:]
    assert result.task_states["plan_unbound_images"] == "failed"
    assert result.task_states["delete_unbound_images"] == "upstream_failed"
    assert result.task_states["delete_owed_objects"] == "upstream_failed"
    assert image_rows(conn) == [(image_id, None, 0)]
    assert object_keys(s3, bucket) == set(image_keys(image_id, SIZES))
    assert conn.execute("SELECT count(*) FROM blobgc.deletion_log").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM blobgc.plan_item").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM blobgc.run WHERE dag_id = 'blobgc_image_cleanup'").fetchone()[0] == 0
