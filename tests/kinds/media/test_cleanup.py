"""blobgc.kinds.media.cleanup: seed 004's staging cleaner, thumbnail check and thumbnail queue worker."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone

import pytest
from PIL import Image

from blobgc.kinds.media.cleanup import (
    MediaShard, check_thumbnails, plan_stale_staging, drain_thumbnail_queue, staging_shards, thumbnail_shards,
)
from blobgc.core.clients import s3_client_from_env
from blobgc.kinds.media.layouts import master_key, rev_month, thumb_key
from blobgc.core.runs import cutoff
from blobgc.kinds.media.thumbnail_jobs import DEAD_LETTERS, DEAD_LETTER_CAP, PROCESSING, QUEUE, QUEUED
from demo_app.media import MediaError, finalize, presign_profile_upload, presign_upload, render_thumbnails
from tests.helpers import ROOT, backdate_object, backdate_objects
from tests.support.media import (
    DAY, OTHER, USER, age_queued_entry, delete_planned, heic, jpeg, keys, png, run_ref, uploaded,
)


def test_poison_jobs_go_to_the_dead_letter_list(s3, redis, media):
    s3.put_object(Bucket=media.images_bucket, Key=master_key(USER, datetime.now(timezone.utc), "jpg"),
                  Body=b"\xff\xd8\xff" + b"not really a jpeg" * 10)
    bad_master = keys(s3, media.images_bucket)[0]
    redis.lpush(QUEUE, "not json", json.dumps({"type": "image", "bucket": "elsewhere", "originalKey": bad_master}),
                json.dumps({"type": "image", "bucket": media.images_bucket, "originalKey": bad_master}),
                json.dumps({"type": "image", "bucket": media.images_bucket,
                            "originalKey": master_key(USER, datetime.now(timezone.utc), "jpg")}))  # gone
    result = drain_thumbnail_queue(redis, s3, media, render_thumbnails)
    assert (result.jobs, result.dead_lettered, result.skipped) == (4, 3, 1)
    assert redis.llen(DEAD_LETTERS) == 3 and redis.llen(PROCESSING) == 0
    assert all(json.loads(d)["error"] for d in redis.lrange(DEAD_LETTERS, 0, -1))


def test_the_queue_survives_a_worker_killed_mid_batch(s3, redis, media, stack):
    masters = [finalize(s3, redis, media, USER, uploaded(s3, media, jpeg(2400, 1800, (i, 90, 160))))
               for i in range(24)]
    worker = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys; sys.path.insert(0, 'plugins')\n"
            "from blobgc.core.clients import redis_from_env, s3_client_from_env\n"
            "from blobgc.core.settings import MediaSettings\n"
            "from blobgc.kinds.media.cleanup import drain_thumbnail_queue\n"
            "from demo_app.media import render_thumbnails\n"
            f"s = MediaSettings(bucket_prefix={media.bucket_prefix!r})\n"
            "drain_thumbnail_queue(redis_from_env(), s3_client_from_env(), s, render_thumbnails, batch=12, workers=1)\n")],
        cwd=ROOT, env=dict(os.environ))
    deadline = time.monotonic() + 60
    while redis.llen(PROCESSING) == 0 and worker.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    assert redis.llen(PROCESSING) > 0, "the worker finished before it could be killed mid-batch"
    assert redis.llen(PROCESSING) + redis.llen(QUEUE) <= 24

    result = drain_thumbnail_queue(redis, s3_client_from_env(), media, render_thumbnails)  # the task's retry
    assert result.recovered > 0
    assert redis.llen(QUEUE) == 0 and redis.llen(PROCESSING) == 0 and redis.llen(DEAD_LETTERS) == 0
    thumbs = set(keys(s3, media.images_bucket, f"{USER}/thumbs/"))
    for master in masters:
        stem = master.split("/")[-1][:16]
        assert sum(stem in t for t in thumbs) == 2, master  # every job done, none lost


def test_stale_staging_is_removed_and_fresh_staging_stays(conn, s3, media):
    stale = [uploaded(s3, media, jpeg(), user=u) for u in (USER, OTHER, "a9")]
    s3.put_object(Bucket=media.profiles_bucket, Key=f"profiles-staging/{USER}/avatar/{uuid.uuid4()}.png",
                  Body=png())
    backdate_objects(s3, media.images_bucket, 2 * 3600, "staging/")  # abandoned two hours ago
    backdate_objects(s3, media.profiles_bucket, 2 * 3600, "profiles-staging/")
    fresh = uploaded(s3, media, jpeg())
    shards = staging_shards(s3, media)
    assert {(s.bucket, s.prefix) for s in shards} == {
        (media.images_bucket, "staging/0"), (media.images_bucket, "staging/a"),
        (media.profiles_bucket, "profiles-staging/0")}
    run = run_ref(conn, "blobgc_media_staging")
    found = [plan_stale_staging(conn, s3, run, shard, cutoff=cutoff(run, minutes=60)) for shard in shards]
    plan_stale_staging(conn, s3, run, shards[0], cutoff=cutoff(run, minutes=60))  # a retry plans its keys once
    assert sum(f.stale for f in found) == 4 and sum(f.fresh for f in found) == 1
    assert sum(f.unexpected for f in found) == 0
    drained = delete_planned(conn, s3, run)
    assert drained.objects_deleted == 4
    assert keys(s3, media.images_bucket, "staging/") == [fresh]
    assert keys(s3, media.profiles_bucket, "profiles-staging/") == []
    assert all(k not in keys(s3, media.images_bucket) for k in stale)


def test_staging_younger_than_a_presign_lifetime_is_never_deleted(conn, s3, media):
    staged = uploaded(s3, media, jpeg())
    backdate_object(media.images_bucket, staged, 4 * 60)  # 4 minutes: its presigned POST may still be in use
    run = run_ref(conn, "blobgc_media_staging")
    for shard in staging_shards(s3, media):
        # even a max age of 0 (the run's own reference time as the cutoff), the floor keeps a live upload
        assert plan_stale_staging(conn, s3, run, shard, cutoff=cutoff(run, minutes=0)).stale == 0
    assert keys(s3, media.images_bucket, "staging/") == [staged]


def test_reserved_user_ids_staging_cleaner_deletes_only_the_staging_layout(conn, s3, media):
    """A user called `staging` (or `profiles-staging`) from before those ids were refused keeps masters
    under a staging prefix: the cleaner reports them and deletes only keys of the staging layout."""
    rev = rev_month(202611)
    theirs_images = [f"staging/masters/{rev}/0123456789abcdef.jpg",
                     f"staging/thumbs/{rev}/0123456789abcdef_240x240.webp"]
    theirs_profiles = ["profiles-staging/masters/avatar.jpg", "profiles-staging/thumbs/avatar_64x64.webp"]
    odd_images = [f"staging/{USER}/not-a-uuid.jpg", f"staging/{USER}/{uuid.uuid4()}.gif",
                  f"staging/{USER}/{uuid.uuid4()}.jpg/more", f"staging/{USER}/avatar/{uuid.uuid4()}.jpg"]
    odd_profiles = [f"profiles-staging/{USER}/{uuid.uuid4()}.png", f"profiles-staging/{USER}/Avatar/{uuid.uuid4()}.png"]
    for key in theirs_images + odd_images:
        s3.put_object(Bucket=media.images_bucket, Key=key, Body=jpeg())
    for key in theirs_profiles + odd_profiles:
        s3.put_object(Bucket=media.profiles_bucket, Key=key, Body=png())
    abandoned = uploaded(s3, media, jpeg())
    abandoned_profile = f"profiles-staging/{USER}/avatar/{uuid.uuid4()}.png"
    s3.put_object(Bucket=media.profiles_bucket, Key=abandoned_profile, Body=png())
    backdate_objects(s3, media.images_bucket, 2 * DAY)
    backdate_objects(s3, media.profiles_bucket, 2 * DAY)

    run = run_ref(conn, "blobgc_media_staging")
    found = [plan_stale_staging(conn, s3, run, shard, cutoff=cutoff(run, minutes=60))
             for shard in staging_shards(s3, media)]
    assert sum(f.stale for f in found) == 2
    assert sum(f.unexpected for f in found) == len(theirs_images + odd_images + theirs_profiles + odd_profiles)
    assert delete_planned(conn, s3, run).objects_deleted == 2
    assert sorted(keys(s3, media.images_bucket)) == sorted(theirs_images + odd_images)
    assert sorted(keys(s3, media.profiles_bucket)) == sorted(theirs_profiles + odd_profiles)
    assert abandoned not in keys(s3, media.images_bucket)
    # and no such user can be created any more
    for reserved in ("staging", "profiles-staging"):
        with pytest.raises(MediaError, match="reserved") as refused:
            presign_upload(s3, media, reserved, "me.jpg", 1000)
        assert refused.value.kind == "reserved_user"
        with pytest.raises(MediaError, match="reserved"):
            presign_profile_upload(s3, media, reserved, "avatar", "me.png", 1000)


def test_orphan_thumbnails_are_removed_and_missing_ones_queued(conn, s3, redis, media):
    with_thumbs = finalize(s3, redis, media, USER, uploaded(s3, media, jpeg()))
    drain_thumbnail_queue(redis, s3, media, render_thumbnails)
    deleted = finalize(s3, redis, media, USER, uploaded(s3, media, jpeg()))
    drain_thumbnail_queue(redis, s3, media, render_thumbnails)
    s3.delete_object(Bucket=media.images_bucket, Key=deleted)  # a master deleted without its thumbnails
    lacking = finalize(s3, redis, media, OTHER, uploaded(s3, media, jpeg(), user=OTHER))
    redis.delete(QUEUE)  # its job was lost, two days ago
    age_queued_entry(redis, media.images_bucket, lacking, 2 * DAY)
    s3.put_object(Bucket=media.profiles_bucket, Key=f"{USER}/thumbs/avatar_64x64.webp", Body=b"RIFF")  # no master
    backdate_objects(s3, media.images_bucket, 2 * DAY)
    backdate_objects(s3, media.profiles_bucket, 2 * DAY)

    shards = thumbnail_shards(s3, media)
    assert {(s.bucket, s.prefix, s.kind) for s in shards} == {(media.images_bucket, "0", "image"),
                                                               (media.profiles_bucket, "0", "icon")}
    dry = run_ref(conn, "blobgc_media_thumbnails", dry_run=True)
    report = [check_thumbnails(conn, s3, redis, dry, s, media, cutoff=cutoff(dry, hours=24)) for s in shards]
    assert sum(r.orphans for r in report) == 3 and sum(r.missing_queued for r in report) == 1
    assert redis.llen(QUEUE) == 0 and len(keys(s3, media.profiles_bucket)) == 1  # a dry run changes nothing

    run = run_ref(conn, "blobgc_media_thumbnails")
    for shard in shards:
        check_thumbnails(conn, s3, redis, run, shard, media, cutoff=cutoff(run, hours=24))
    assert [json.loads(j)["originalKey"] for j in redis.lrange(QUEUE, 0, -1)] == [lacking]
    assert delete_planned(conn, s3, run).objects_deleted == 3
    assert keys(s3, media.profiles_bucket) == []
    stem = deleted.split("/")[-1][:16]
    assert all(stem not in k for k in keys(s3, media.images_bucket))
    assert sum(with_thumbs.split("/")[-1][:16] in k for k in keys(s3, media.images_bucket)) == 3


def test_an_orphan_icon_whose_master_returns_is_kept(conn, s3, redis, media):
    icon = f"{USER}/thumbs/avatar_64x64.webp"
    s3.put_object(Bucket=media.profiles_bucket, Key=icon, Body=b"RIFF")
    backdate_object(media.profiles_bucket, icon, 2 * DAY)
    run = run_ref(conn, "blobgc_media_thumbnails")
    shard = MediaShard(media.profiles_bucket, "0", "icon")
    assert check_thumbnails(conn, s3, redis, run, shard, media, cutoff=cutoff(run, hours=24)).orphans == 1
    # the user uploads a new avatar before the deletion runs
    s3.put_object(Bucket=media.profiles_bucket, Key=f"{USER}/masters/avatar.jpg", Body=jpeg())
    assert delete_planned(conn, s3, run).objects_deleted == 0
    assert icon in keys(s3, media.profiles_bucket)


def test_heic_masters_get_thumbnails_not_a_dead_letter(s3, redis, media):
    photo = heic(900, 600)
    master = finalize(s3, redis, media, USER, uploaded(s3, media, photo, "IMG_0001.HEIC"))
    assert master.endswith(".heic")
    assert s3.head_object(Bucket=media.images_bucket, Key=master)["ContentType"] == "image/heic"
    result = drain_thumbnail_queue(redis, s3, media, render_thumbnails)
    assert (result.jobs, result.thumbnails, result.dead_lettered) == (1, 2, 0)
    assert redis.llen(DEAD_LETTERS) == 0
    body = s3.get_object(Bucket=media.images_bucket, Key=thumb_key(master, 640, 640))["Body"].read()
    big = Image.open(io.BytesIO(body))
    assert big.format == "WEBP" and big.size == (640, 427)


def test_thumbnail_requeue_dedup_queues_a_missing_master_once_per_min_age(conn, s3, redis, media):
    master = finalize(s3, redis, media, USER, uploaded(s3, media, jpeg()))  # its job waits in the queue
    backdate_objects(s3, media.images_bucket, 2 * DAY)  # ... for two days: no worker ran
    shard = MediaShard(media.images_bucket, "0", "image")
    for _ in range(3):  # runs every few minutes while the job waits: none queues it again
        run = run_ref(conn, "blobgc_media_thumbnails")
        report = check_thumbnails(conn, s3, redis, run, shard, media, cutoff=cutoff(run, hours=1))
        assert redis.llen(QUEUE) == 1
        assert (report.missing, report.missing_queued, report.missing_already_queued) == (1, 0, 1)
    dry = run_ref(conn, "blobgc_media_thumbnails", dry_run=True)
    report = check_thumbnails(conn, s3, redis, dry, shard, media, cutoff=cutoff(dry, hours=1))
    assert (report.missing, report.missing_queued) == (1, 0)  # a dry run reports what a real run would do

    redis.delete(QUEUE)  # the job is lost; its entry is older than the min age: the next run queues it, once
    age_queued_entry(redis, media.images_bucket, master, 3600 + 60)
    for expected in (1, 0):
        run = run_ref(conn, "blobgc_media_thumbnails")
        assert check_thumbnails(conn, s3, redis, run, shard, media, cutoff=cutoff(run, hours=1)).missing_queued \
            == expected
    assert [json.loads(j)["originalKey"] for j in redis.lrange(QUEUE, 0, -1)] == [master]
    assert drain_thumbnail_queue(redis, s3, media, render_thumbnails).thumbnails == 2
    assert redis.hlen(QUEUED) == 0  # the worker forgot the entry when it finished the job
    run = run_ref(conn, "blobgc_media_thumbnails")
    assert check_thumbnails(conn, s3, redis, run, shard, media, cutoff=cutoff(run, hours=1)).missing == 0


def test_dead_letter_cap_keeps_the_newest_and_counts_what_is_dropped(s3, redis, media):
    redis.rpush(DEAD_LETTERS, *[json.dumps({"job": f"old-{n}", "error": "poison", "at": "2026-01-01T00:00:00+00:00"})
                                for n in range(DEAD_LETTER_CAP)])  # full: the head is the newest, old-0
    redis.lpush(QUEUE, "not json 1", "not json 2")
    result = drain_thumbnail_queue(redis, s3, media, render_thumbnails)
    assert redis.llen(DEAD_LETTERS) == DEAD_LETTER_CAP == 10_000
    assert (result.dead_lettered, result.dead_letters_dropped) == (2, 2)
    assert result.to_xcom()["dead_letters_dropped"] == 2  # what the DAG's report records
    kept = [json.loads(d)["job"] for d in redis.lrange(DEAD_LETTERS, 0, 3)]
    assert sorted(kept[:2]) == ["not json 1", "not json 2"] and kept[2:] == ["old-0", "old-1"]
    assert json.loads(redis.lindex(DEAD_LETTERS, -1))["job"] == f"old-{DEAD_LETTER_CAP - 3}"  # the oldest went

    redis.lpush(QUEUE, "not json 3")
    capped = drain_thumbnail_queue(redis, s3, media, render_thumbnails, dead_letter_cap=5)  # a lower cap, as an argument
    assert (capped.dead_lettered, capped.dead_letters_dropped, redis.llen(DEAD_LETTERS)) == (1, DEAD_LETTER_CAP - 4, 5)
    assert json.loads(redis.lindex(DEAD_LETTERS, 0))["job"] == "not json 3"
    with pytest.raises(ValueError, match="dead-letter cap"):
        drain_thumbnail_queue(redis, s3, media, render_thumbnails, dead_letter_cap=0)


def test_a_staging_plan_executed_deletes_exactly_its_uploads_and_keeps_one_written_again(conn, s3, media):
    planned = [uploaded(s3, media, jpeg(), user=u) for u in (USER, OTHER, USER)]
    backdate_objects(s3, media.images_bucket, 2 * 3600, "staging/")
    run = run_ref(conn, "blobgc_media_staging")
    for shard in staging_shards(s3, media):
        plan_stale_staging(conn, s3, run, shard, cutoff=cutoff(run, minutes=60))
    in_plan = {k for (k,) in conn.execute("SELECT unnest(keys) FROM blobgc.plan_item WHERE run_id = %s",
                                          (run.run_id,))}
    assert in_plan == set(planned)
    assert keys(s3, media.images_bucket, "staging/") == sorted(planned)  # planning deletes nothing
    # after the plan: one planned upload is written again, and a new abandoned upload appears
    s3.put_object(Bucket=media.images_bucket, Key=planned[0], Body=jpeg(color=(1, 2, 3)))
    late = uploaded(s3, media, jpeg(), user=OTHER)
    backdate_object(media.images_bucket, late, 2 * 3600)

    assert delete_planned(conn, s3, run).objects_deleted == 2
    assert sorted(keys(s3, media.images_bucket, "staging/")) == sorted([planned[0], late])
    kept = conn.execute("SELECT sum(cardinality(s.keys)) FROM blobgc.deletion_settlement s JOIN blobgc.deletion_log l "
                        "ON l.id = s.log_id WHERE l.run_id = %s AND s.outcome = 'kept'", (run.run_id,)).fetchone()[0]
    assert kept == 1


def test_a_dry_runs_thumbnail_plan_is_logged_and_replanned_once_on_retry(conn, s3, redis, media):
    icon = f"{USER}/thumbs/avatar_64x64.webp"
    s3.put_object(Bucket=media.profiles_bucket, Key=icon, Body=b"RIFF")
    backdate_object(media.profiles_bucket, icon, 2 * DAY)
    dry = run_ref(conn, "blobgc_media_thumbnails", dry_run=True)
    shard = MediaShard(media.profiles_bucket, "0", "icon")
    for _ in range(2):  # the task and its retry
        assert check_thumbnails(conn, s3, redis, dry, shard, media, cutoff=cutoff(dry, hours=24)).orphans == 1
    assert conn.execute("SELECT keys, bytes, modified_before IS NOT NULL FROM blobgc.plan_item WHERE run_id = %s",
                        (dry.run_id,)).fetchall() == [([icon], 4, True)]
    assert conn.execute("SELECT key FROM blobgc.deleted_object WHERE run_id = %s AND dry_run",
                        (dry.run_id,)).fetchall() == [(icon,)]  # the report is the plan, shown once
    assert conn.execute("SELECT count(*) FROM blobgc.deletion_log WHERE run_id = %s",
                        (dry.run_id,)).fetchone()[0] == 0
    assert keys(s3, media.profiles_bucket) == [icon]
