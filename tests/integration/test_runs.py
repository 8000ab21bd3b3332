"""Run recording and the one clock of every cut-off (issue 15, finding 2: a future logical date bypasses no grace)."""
from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone

from blobgc.pastes import create_paste
from blobgc.runs import RunRef, cutoff, ensure_run
from blobgc.sweep import blob_object_keys

from .conftest import airflow, make_blobs, object_keys, set_unused_since

FUTURE = datetime(2030, 1, 1, tzinfo=timezone.utc)


def test_future_logical_date_is_clamped_to_the_database_now_once_per_run(conn, caplog):
    """Finding 2 (future logical date): the reference time is min(data-interval end, now()), fixed by the first task;
    a retry later reads the same value, and the clamp is logged."""
    db_now = conn.execute("SELECT now()").fetchone()[0]
    with caplog.at_level(logging.WARNING, logger="blobgc.runs"):
        first = ensure_run(conn, RunRef("blobgc_sweep", "future"), FUTURE)
    assert db_now <= first.reference_time < db_now + timedelta(minutes=1)
    assert "in the future" in caplog.text and "clamped" in caplog.text
    again = ensure_run(conn, RunRef("blobgc_sweep", "future"), FUTURE)
    assert again.reference_time == first.reference_time
    assert cutoff(again, hours=24) == first.reference_time - timedelta(hours=24)
    past = datetime(2026, 3, 1, tzinfo=timezone.utc)
    assert ensure_run(conn, RunRef("blobgc_sweep", "backfill"), past).reference_time == past  # a past run keeps its date


def test_future_logical_date_sweep_keeps_blobs_within_their_grace(conn, s3, bucket):
    """Finding 2: `airflow dags test blobgc_sweep 2030-01-01` deletes only what a run now would."""
    recent, old = make_blobs(conn, s3, bucket, 2)
    set_unused_since(conn, [recent], "2 hours")
    set_unused_since(conn, [old], "3 days")
    result = airflow("dags", "test", "blobgc_sweep", FUTURE.date().isoformat(),
                     env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "clamped" in output
    assert {r[0] for r in conn.execute("SELECT id FROM app.blob")} == {recent}
    assert object_keys(s3, bucket) == set(blob_object_keys(recent))
    reference = conn.execute("SELECT reference_time FROM blobgc.run WHERE dag_id = 'blobgc_sweep'").fetchone()[0]
    assert reference < datetime.now(timezone.utc)


def test_future_logical_date_paste_expiry_expires_only_what_is_due_now(conn, s3, bucket, redis, redis_prefix):
    """Finding 2: a paste expiring tomorrow survives a paste-expiry run dated 2030."""
    now = datetime.now(timezone.utc)
    due = create_paste(conn, s3, redis, bucket=bucket, content=b"due", expires_at=now - timedelta(hours=1),
                       redis_prefix=redis_prefix)
    tomorrow = create_paste(conn, s3, redis, bucket=bucket, content=b"tomorrow", expires_at=now + timedelta(days=1),
                            redis_prefix=redis_prefix)
    result = airflow("dags", "test", "blobgc_paste_expiry", FUTURE.date().isoformat(), "-c",
                     json.dumps({"expiry_workers": 1}),
                     env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket, "AIRFLOW_VAR_BLOBGC_PASTE_REDIS_PREFIX": redis_prefix})
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    left = {r[0] for r in conn.execute("SELECT short_code FROM app.paste")}
    assert left == {tomorrow.short_code} and due.short_code not in left
