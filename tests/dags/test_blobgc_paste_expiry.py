"""blobgc_paste_expiry under Airflow."""
from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

from blobgc.kinds.pastes.layouts import content_key
from demo_app.pastes import create_paste
from tests.helpers import FAR_FUTURE, cached_keys, object_keys, run_dag
from tests.support.pastes import FUTURE, PAST


def report_of(conn, run_id: str) -> dict:
    return conn.execute("SELECT details FROM blobgc.run WHERE dag_id = 'blobgc_paste_expiry' AND run_id = %s",
                        (run_id,)).fetchone()[0]


def test_airflow_dag_with_s3_down_then_a_rerun_cleans_everything(conn, s3, bucket, redis, redis_prefix):
    codes = [create_paste(conn, s3, redis, bucket=bucket, content=f"dag {i}".encode(), expires_at=PAST,
                          redis_prefix=redis_prefix).short_code for i in range(12)]
    alive = create_paste(conn, s3, redis, bucket=bucket, content=b"dag alive", expires_at=FUTURE,
                         redis_prefix=redis_prefix)
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket, "AIRFLOW_VAR_BLOBGC_PASTE_REDIS_PREFIX": redis_prefix}
    s3_conn = json.loads(os.environ["AIRFLOW_CONN_BLOBGC_S3"])
    s3_conn["extra"]["endpoint_url"] = "http://127.0.0.1:1"  # nothing listens there
    # retries 1 s apart instead of 30 s, so the failing run gives up within the test
    down = run_dag("blobgc_paste_expiry", conf={"batch_size": 5}, env_extra={
        **env, "AIRFLOW_CONN_BLOBGC_S3": json.dumps(s3_conn), "BLOBGC_RETRY_DELAY_SECONDS": "1"})
    output = down.stdout + down.stderr
    assert down.returncode != 0 and down.state == "failed", output[-3000:]
    assert down.task_states["delete_owed_objects"] == "failed"  # on S3, after its retries
    errors = {e for (e,) in conn.execute("SELECT DISTINCT value FROM blobgc.outbox, jsonb_each_text(last_errors)")}
    assert errors and all("Could not connect to the endpoint URL" in e for e in errors), errors
    assert down.task_states["purge_cache_keys"] == "success" and down.task_states["report"] == "upstream_failed"
    assert conn.execute("SELECT count(*) FROM app.paste").fetchone()[0] == 1  # the database batches committed
    assert conn.execute("SELECT count(*) FROM blobgc.deleted_object WHERE owed").fetchone()[0] == 12
    assert len(object_keys(s3, bucket)) == 13

    rerun = run_dag("blobgc_paste_expiry", env_extra=env)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert object_keys(s3, bucket) == {content_key(alive.content_hash)}
    assert cached_keys(redis, redis_prefix) == {f"{redis_prefix}{alive.short_code}"}
    assert conn.execute("SELECT count(*) FROM blobgc.deleted_object WHERE owed").fetchone()[0] == 0
    totals = conn.execute("SELECT sum(rows_deleted), sum(objects_deleted) FROM blobgc.reclaim_daily "
                          "WHERE dag_id = 'blobgc_paste_expiry' AND NOT dry_run").fetchone()
    assert totals == (24, 12)  # 12 pastes + 12 contents, 12 objects
    assert codes


def test_future_logical_date_paste_expiry_expires_only_what_is_due_now(conn, s3, bucket, redis, redis_prefix):
    """Finding 2: a paste expiring tomorrow survives a paste-expiry run dated 2030."""
    now = datetime.now(timezone.utc)
    due = create_paste(conn, s3, redis, bucket=bucket, content=b"due", expires_at=now - timedelta(hours=1),
                       redis_prefix=redis_prefix)
    tomorrow = create_paste(conn, s3, redis, bucket=bucket, content=b"tomorrow", expires_at=now + timedelta(days=1),
                            redis_prefix=redis_prefix)
    result = run_dag("blobgc_paste_expiry", logical_date=FAR_FUTURE, conf={"expiry_workers": 1}, env_extra={
        "AIRFLOW_VAR_BLOBGC_BUCKET": bucket, "AIRFLOW_VAR_BLOBGC_PASTE_REDIS_PREFIX": redis_prefix})
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    left = {r[0] for r in conn.execute("SELECT short_code FROM app.paste")}
    assert left == {tomorrow.short_code} and due.short_code not in left
    # a real run without from_plan plans itself, passes the gate, and executes its plan
    assert result.task_states["gate"] == "success" and result.task_states["plan_expiry[0]"] == "success"
    assert object_keys(s3, bucket) == {content_key(tomorrow.content_hash)}
    assert cached_keys(redis, redis_prefix) == {f"{redis_prefix}{tomorrow.short_code}"}
    report = report_of(conn, result.run_id)["plan"]
    assert (report["plan"], report["planned_rows"], report["planned_objects"]) == (result.run_id, 1, 1)
    assert report["gate"]["decision"] == "passed" and report["skipped_rereferenced_rows"] == 0


def test_a_dry_runs_plan_executed_from_plan_skips_a_paste_extended_since(conn, s3, bucket, redis, redis_prefix):
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket, "AIRFLOW_VAR_BLOBGC_PASTE_REDIS_PREFIX": redis_prefix}
    gone, extended = (create_paste(conn, s3, redis, bucket=bucket, content=c, expires_at=PAST,
                                   redis_prefix=redis_prefix) for c in (b"planned, gone", b"planned, extended"))
    dry = run_dag("blobgc_paste_expiry", conf={"dry_run": True}, env_extra=env)
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-3000:]
    assert conn.execute("SELECT count(*) FROM app.paste").fetchone()[0] == 2 and len(object_keys(s3, bucket)) == 2
    with conn.transaction():  # needed again after the plan was made
        conn.execute("UPDATE app.paste SET expires_at = %s WHERE short_code = %s", (FUTURE, extended.short_code))

    real = run_dag("blobgc_paste_expiry", conf={"from_plan": dry.run_id}, env_extra=env)
    assert real.returncode == 0, (real.stdout + real.stderr)[-3000:]
    assert real.task_states["plan_expiry"] == "skipped"  # nothing planned anew
    assert {r[0] for r in conn.execute("SELECT short_code FROM app.paste")} == {extended.short_code}
    assert object_keys(s3, bucket) == {content_key(extended.content_hash)}
    assert cached_keys(redis, redis_prefix) == {f"{redis_prefix}{extended.short_code}"}
    report = report_of(conn, real.run_id)["plan"]
    assert (report["plan"], report["planned_rows"], report["planned_objects"]) == (dry.run_id, 2, 2)
    assert (report["skipped_rereferenced_rows"], report["skipped_rereferenced_objects"]) == (1, 1)
    assert report["gate"]["decision"] == "passed" and report["failed_objects"] == 0
    assert gone.short_code
