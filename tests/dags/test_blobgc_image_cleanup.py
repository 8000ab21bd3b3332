"""blobgc_image_cleanup under Airflow."""
from __future__ import annotations

import json


from blobgc.core.keys import image_keys
from demo_app.images import pre_upload
from tests.helpers import object_keys, run_dag
from tests.photo_server import jpeg
from tests.support.images import SIZES, age_rows, image_rows


ODD_SIZES = {"orig": 0, "größe": 640}  # a non-ASCII size name: its files would never parse, so never be deleted


def test_airflow_image_cleanup_dag_removes_stale_unbound_photos(conn, s3, bucket, settings):
    kept = pre_upload(conn, s3, settings, jpeg(80))
    age_rows(conn, 20)
    with conn.transaction():
        conn.execute("UPDATE app.image SET last_update = now() WHERE image_id = %s", (kept,))
    gone = pre_upload(conn, s3, settings, jpeg(81))
    age_rows_sql = "UPDATE app.image SET last_update = now() - interval '20 days' WHERE image_id = %s"
    with conn.transaction():
        conn.execute(age_rows_sql, (gone,))
    result = run_dag("blobgc_image_cleanup", env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert image_rows(conn) == [(kept, None, 0)]
    assert object_keys(s3, bucket) == set(image_keys(kept, SIZES))
    row = conn.execute("SELECT rows_deleted, objects_deleted, bytes_reclaimed > 0 FROM blobgc.reclaim_daily "
                       "WHERE dag_id = 'blobgc_image_cleanup' AND NOT dry_run").fetchone()
    assert row == (1, len(SIZES), True)


def test_image_size_names_that_are_not_ascii_fail_the_cleanup_first_task_and_delete_nothing(
        conn, s3, bucket, settings):
    image_id = pre_upload(conn, s3, settings, jpeg(82))
    age_rows(conn, 20)
    result = run_dag("blobgc_image_cleanup", env_extra={
        "AIRFLOW_VAR_BLOBGC_BUCKET": bucket, "AIRFLOW_VAR_BLOBGC_IMAGE_SIZES": json.dumps(ODD_SIZES),
        "BLOBGC_TASK_RETRIES": "0"})
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "Variable blobgc_image_sizes: size name 'größe' is not allowed" in output, output[-3000:]
    assert result.task_states["delete_unbound_images"] == "failed"
    assert result.task_states["delete_owed_objects"] == "upstream_failed"
    assert image_rows(conn) == [(image_id, None, 0)]
    assert object_keys(s3, bucket) == set(image_keys(image_id, SIZES))
    assert conn.execute("SELECT count(*) FROM blobgc.deletion_log").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM blobgc.run WHERE dag_id = 'blobgc_image_cleanup'").fetchone()[0] == 0
