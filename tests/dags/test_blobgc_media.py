"""blobgc_media_staging and blobgc_media_thumbnails under Airflow."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest

from blobgc.kinds.media.cleanup import MediaShard, check_min_age, check_thumbnails
from blobgc.kinds.media.layouts import rev_month
from blobgc.core.runs import cutoff
from blobgc.kinds.media.thumbnail_jobs import DEAD_LETTERS, PROCESSING, QUEUE, QUEUED
from demo_app.media import finalize
from tests.helpers import assert_param_refused, backdate_object, backdate_objects, run_dag
from tests.support.media import DAY, OTHER, USER, age_queued_entry, delete_planned, jpeg, keys, run_ref, uploaded


def queue_state(redis) -> dict:
    return {"queue": redis.lrange(QUEUE, 0, -1), "processing": redis.lrange(PROCESSING, 0, -1),
            "dead": redis.lrange(DEAD_LETTERS, 0, -1), "queued": redis.hgetall(QUEUED)}


def bucket_state(s3, bucket: str) -> list[tuple]:
    return [(o["Key"], o["ETag"], o["Size"], o["LastModified"])
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket) for o in page.get("Contents", [])]


def test_airflow_runs_both_media_dags(conn, s3, redis, media):
    finalize(s3, redis, media, USER, uploaded(s3, media, jpeg()))
    s3.put_object(Bucket=media.images_bucket, Key=f"{USER}/thumbs/{rev_month(202611)}/{'ab' * 8}_240x240.webp",
                  Body=b"RIFF")  # an orphan thumbnail
    env = {"AIRFLOW_VAR_BLOBGC_MEDIA_BUCKET_PREFIX": media.bucket_prefix,
           "AIRFLOW_VAR_BLOBGC_MEDIA_SETTINGS": json.dumps({"file_limit_mb": 1, "monthly_limit_mb": 2})}
    backdate_objects(s3, media.images_bucket, 2 * DAY)  # the master and the orphan are two days old
    thumbs = run_dag("blobgc_media_thumbnails", conf={"min_age_hours": 24}, env_extra=env)
    assert thumbs.returncode == 0, thumbs.stdout[-3000:] + thumbs.stderr[-3000:]
    names = keys(s3, media.images_bucket, f"{USER}/thumbs/")
    assert len(names) == 2 and all("abab" not in k for k in names)  # thumbnails made, orphan gone

    staged = uploaded(s3, media, jpeg())
    staging = run_dag("blobgc_media_staging", conf={"max_age_minutes": 60}, env_extra=env)
    assert staging.returncode == 0, staging.stdout[-3000:] + staging.stderr[-3000:]
    assert keys(s3, media.images_bucket, "staging/") == [staged]  # fresh: kept
    bad = run_dag("blobgc_media_staging", conf={"max_age_minutes": 3}, env_extra=env)
    assert_param_refused(bad, "Invalid input for param max_age_minutes: 3 is less than the minimum of 7")
    runs = conn.execute("SELECT dag_id, objects_deleted FROM blobgc.run WHERE finished_at IS NOT NULL "
                        "ORDER BY started_at").fetchall()
    assert runs == [("blobgc_media_thumbnails", 1), ("blobgc_media_staging", 0)]
    made = conn.execute("SELECT details->'thumbnails' FROM blobgc.run WHERE dag_id = 'blobgc_media_thumbnails'"
                        ).fetchone()[0]
    assert (made["jobs"], made["thumbnails"], made["dead_letters_dropped"]) == (1, 2, 0)  # in the report


def test_thumbnails_dry_run_changes_nothing_but_its_report(conn, s3, redis, media):
    finalize(s3, redis, media, USER, uploaded(s3, media, jpeg()))  # a queued job
    lacking = finalize(s3, redis, media, OTHER, uploaded(s3, media, jpeg(), user=OTHER))
    redis.lrem(QUEUE, 1, json.dumps({"type": "image", "bucket": media.images_bucket, "originalKey": lacking}))
    age_queued_entry(redis, media.images_bucket, lacking, 2 * DAY)  # its job was lost: a real run would queue it
    redis.lpush(PROCESSING, json.dumps({"type": "image", "bucket": media.images_bucket, "originalKey": lacking}))
    redis.lpush(DEAD_LETTERS, json.dumps({"job": "not json", "error": "malformed job", "at": "2026-01-01"}))
    s3.put_object(Bucket=media.profiles_bucket, Key=f"{USER}/thumbs/avatar_64x64.webp", Body=b"RIFF")  # an orphan
    backdate_objects(s3, media.images_bucket, 2 * DAY)
    backdate_objects(s3, media.profiles_bucket, 2 * DAY)
    before = (queue_state(redis), bucket_state(s3, media.images_bucket), bucket_state(s3, media.profiles_bucket))

    env = {"AIRFLOW_VAR_BLOBGC_MEDIA_BUCKET_PREFIX": media.bucket_prefix,
           "AIRFLOW_VAR_BLOBGC_MEDIA_SETTINGS": json.dumps({"file_limit_mb": 1, "monthly_limit_mb": 2})}
    dry = run_dag("blobgc_media_thumbnails", conf={"dry_run": True}, env_extra=env)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    assert (queue_state(redis), bucket_state(s3, media.images_bucket), bucket_state(s3, media.profiles_bucket)) \
        == before
    details, objects = conn.execute("SELECT details, objects_deleted FROM blobgc.run "
                                    "WHERE dag_id = 'blobgc_media_thumbnails' AND dry_run").fetchone()
    assert {k: details["thumbnails"][k] for k in ("queued", "processing", "dead_letters")} == \
        {"queued": 1, "processing": 1, "dead_letters": 1}
    assert objects == 1  # the orphan it would delete


def test_min_age_floor_is_refused_below_one_hour(conn, s3, redis, media):
    env = {"AIRFLOW_VAR_BLOBGC_MEDIA_BUCKET_PREFIX": media.bucket_prefix}
    refused = run_dag("blobgc_media_thumbnails", conf={"min_age_hours": 0}, env_extra=env)
    assert_param_refused(refused, "Invalid input for param min_age_hours: 0 is less than the minimum of 1")
    assert conn.execute("SELECT count(*) FROM blobgc.run").fetchone()[0] == 0  # refused before any task ran

    for below in (timedelta(0), timedelta(minutes=59)):
        with pytest.raises(ValueError, match="min_age_hours must be at least 1 hour"):
            check_min_age(below)
    check_min_age(timedelta(hours=1))
    # the collector itself refuses a cutoff less than an hour before the run's reference time
    icon = f"{USER}/thumbs/avatar_64x64.webp"
    s3.put_object(Bucket=media.profiles_bucket, Key=icon, Body=b"RIFF")
    backdate_object(media.profiles_bucket, icon, 40 * 60)
    run = run_ref(conn, "blobgc_media_thumbnails")
    with pytest.raises(ValueError, match="min_age_hours must be at least 1 hour"):
        check_thumbnails(conn, s3, redis, run, MediaShard(media.profiles_bucket, "0", "icon"), media,
                         cutoff=cutoff(run, minutes=30))
    assert delete_planned(conn, s3, run).objects_deleted == 0 and keys(s3, media.profiles_bucket) == [icon]


def test_staging_from_plan_deletes_exactly_the_dry_runs_plan(conn, s3, redis, media):
    env = {"AIRFLOW_VAR_BLOBGC_MEDIA_BUCKET_PREFIX": media.bucket_prefix}
    planned = [uploaded(s3, media, jpeg(), user=u) for u in (USER, OTHER, USER)]
    backdate_objects(s3, media.images_bucket, 2 * 3600, "staging/")
    dry = run_dag("blobgc_media_staging", conf={"dry_run": True}, env_extra=env)
    assert dry.returncode == 0, dry.output[-3000:]
    assert sorted(keys(s3, media.images_bucket, "staging/")) == sorted(planned)
    # after the plan: one planned upload is uploaded again, and a new upload is abandoned
    s3.put_object(Bucket=media.images_bucket, Key=planned[1], Body=jpeg(color=(9, 9, 9)))
    late = uploaded(s3, media, jpeg())
    backdate_object(media.images_bucket, late, 2 * 3600)

    real = run_dag("blobgc_media_staging", conf={"from_plan": dry.run_id}, env_extra=env)
    assert real.returncode == 0, real.output[-3000:]
    assert sorted(keys(s3, media.images_bucket, "staging/")) == sorted([planned[1], late])
    report = conn.execute("SELECT details->'plan', objects_deleted FROM blobgc.run WHERE run_id = %s",
                          (real.run_id,)).fetchone()
    assert report[0]["planned_objects"] == 3 and report[0]["skipped_rereferenced_objects"] == 1
    assert report[0]["failed_objects"] == 0 and report[1] == 2
    assert report[0]["gate"]["decision"] == "passed"


def test_thumbnails_from_plan_keeps_an_icon_whose_master_came_back(conn, s3, redis, media):
    env = {"AIRFLOW_VAR_BLOBGC_MEDIA_BUCKET_PREFIX": media.bucket_prefix}
    icons = [f"{user}/thumbs/avatar_64x64.webp" for user in (USER, OTHER)]
    for icon in icons:
        s3.put_object(Bucket=media.profiles_bucket, Key=icon, Body=b"RIFF")
    backdate_objects(s3, media.profiles_bucket, 2 * DAY)
    dry = run_dag("blobgc_media_thumbnails", conf={"dry_run": True}, env_extra=env)
    assert dry.returncode == 0, dry.output[-3000:]
    s3.put_object(Bucket=media.profiles_bucket, Key=f"{OTHER}/masters/avatar.jpg", Body=jpeg())  # a new avatar

    real = run_dag("blobgc_media_thumbnails", conf={"from_plan": dry.run_id}, env_extra=env)
    assert real.returncode == 0, real.output[-3000:]
    assert icons[0] not in keys(s3, media.profiles_bucket) and icons[1] in keys(s3, media.profiles_bucket)
    plan = conn.execute("SELECT details->'plan' FROM blobgc.run WHERE run_id = %s", (real.run_id,)).fetchone()[0]
    assert (plan["planned_objects"], plan["skipped_rereferenced_objects"]) == (2, 1)
