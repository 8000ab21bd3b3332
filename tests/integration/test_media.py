"""Seed 004: the S3-only media store (blobgc.media) and its cleanups, against the real stack."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import pytest
import requests
from PIL import Image

from blobgc.clients import redis_from_env, s3_client_from_env
from blobgc.media import (
    DEAD_LETTER_CAP,
    DEAD_LETTERS,
    PROCESSING,
    QUEUE,
    QUEUED,
    MediaError,
    MediaSettings,
    delete_image,
    delete_profile_image,
    drain_thumbnail_queue,
    finalize,
    finalize_profile,
    get_image_bytes,
    get_profile_image,
    list_images,
    master_key,
    monthly_quota,
    presign_profile_upload,
    presign_upload,
    rev_month,
    thumb_key,
    time8,
)
from blobgc.media_cleanup import (
    MediaShard,
    check_min_age,
    check_thumbnails,
    delete_stale_staging,
    staging_shards,
    thumbnail_shards,
)
from blobgc.outbox import delete_owed_objects
from blobgc.runs import RunRef, cutoff, ensure_run

from .conftest import ROOT, airflow, backdate_object, backdate_objects

USER = "0001000000000002"
OTHER = "0001000000000003"


def jpeg(width: int = 800, height: int = 600, color=(200, 80, 40)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buffer, "JPEG", quality=85)
    return buffer.getvalue()


def png(width: int = 300, height: int = 300) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGBA", (width, height), (10, 200, 30, 128)).save(buffer, "PNG")
    return buffer.getvalue()


def heic(width: int = 900, height: int = 600) -> bytes:
    """A real HEIC photo, encoded by pillow-heif (libheif with x265)."""
    import pillow_heif

    buffer = io.BytesIO()
    pillow_heif.from_pillow(Image.new("RGB", (width, height), (30, 140, 220))).save(buffer, quality=70)
    return buffer.getvalue()


DAY = 24 * 3600


@pytest.fixture
def media(s3, redis):
    """A store of the test's own: buckets `{prefix}images` and `{prefix}profiles`, an empty queue."""
    settings = MediaSettings(bucket_prefix=f"test-{uuid.uuid4().hex[:10]}-", monthly_limit_bytes=2_000_000,
                             file_limit_bytes=1_000_000)
    for bucket in (settings.images_bucket, settings.profiles_bucket):
        s3.create_bucket(Bucket=bucket)
    redis.delete(QUEUE, PROCESSING, DEAD_LETTERS, QUEUED)
    yield settings
    redis.delete(QUEUE, PROCESSING, DEAD_LETTERS, QUEUED)
    for bucket in (settings.images_bucket, settings.profiles_bucket):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        s3.delete_bucket(Bucket=bucket)


def keys(s3, bucket: str, prefix: str = "") -> list[str]:
    return [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for o in page.get("Contents", [])]


def upload(post: dict, body: bytes, filename: str = "photo.jpg") -> requests.Response:
    """What the browser does with a presigned POST: a multipart form straight to S3."""
    return requests.post(post["url"], data=post["fields"], files={"file": (filename, body)}, timeout=30)


def uploaded(s3, media: MediaSettings, body: bytes, filename: str = "photo.jpg", user: str = USER,
             declared: int | None = None) -> str:
    post = presign_upload(s3, media, user, filename, declared or len(body))
    response = upload(post, body, filename)
    assert response.status_code in (200, 201, 204), response.text
    return post["key"]


def test_keys_sort_newest_first():
    assert rev_month(202510) == "797489"
    early = datetime(2026, 11, 1, 0, 0, 1, tzinfo=timezone.utc)
    late = datetime(2026, 11, 30, 23, 59, 59, tzinfo=timezone.utc)
    assert time8(late) < time8(early) and len(time8(late)) == 8
    next_month = datetime(2026, 12, 1, tzinfo=timezone.utc)
    assert master_key(USER, next_month, "jpg") < master_key(USER, late, "jpg") < master_key(USER, early, "jpg")


def test_presigned_post_upload_then_finalize(s3, redis, media):
    photo = jpeg()
    post = presign_upload(s3, media, USER, "holiday.JPG", len(photo))
    assert post["key"].startswith(f"staging/{USER}/") and post["expires_in"] == 300
    policy = json.loads(__import__("base64").b64decode(post["fields"]["policy"]))
    conditions = policy["conditions"]
    assert ["content-length-range", 1, media.file_limit_bytes] in conditions
    assert ["starts-with", "$key", f"staging/{USER}/"] in conditions
    assert {"Content-Type": "image/jpeg"} in conditions
    response = upload(post, photo, "holiday.JPG")
    assert response.status_code in (200, 201, 204), response.text
    assert keys(s3, media.images_bucket, "staging/") == [post["key"]]

    master = finalize(s3, redis, media, USER, post["key"])
    assert keys(s3, media.images_bucket) == [master]  # staging is gone
    assert master.startswith(f"{USER}/masters/{rev_month(datetime.now(timezone.utc).year * 100 + datetime.now(timezone.utc).month)}/")
    assert master.endswith(".jpg")
    head = s3.head_object(Bucket=media.images_bucket, Key=master)
    assert head["ContentType"] == "image/jpeg" and head["ContentLength"] == len(photo)
    assert [json.loads(j) for j in redis.lrange(QUEUE, 0, -1)] == [
        {"type": "image", "bucket": media.images_bucket, "originalKey": master}]
    assert get_image_bytes(s3, media, USER, master[len(USER) + 1:]) == photo
    quota = monthly_quota(s3, media, USER)
    assert (quota["masters"], quota["used_bytes"], quota["monthly_limit_bytes"]) == (1, len(photo), 2_000_000)


def test_the_sniffed_format_wins_over_the_extension(s3, redis, media):
    key = uploaded(s3, media, png(), "looks-like.jpg")
    master = finalize(s3, redis, media, USER, key)
    assert master.endswith(".png")
    assert s3.head_object(Bucket=media.images_bucket, Key=master)["ContentType"] == "image/png"


@pytest.mark.parametrize("case", ["declared_oversize", "actual_oversize", "wrong_type", "fake_extension",
                                  "quota_at_presign", "quota_at_finalize"])
def test_refused_uploads_leave_no_staging_object(s3, redis, media, case):
    if case == "declared_oversize":
        with pytest.raises(MediaError, match="single-file limit") as refused:
            presign_upload(s3, media, USER, "big.jpg", media.file_limit_bytes + 1)
    elif case == "actual_oversize":
        # the client declared a small file and sent a big one: refused at finalize if the store let it in
        post = presign_upload(s3, media, USER, "big.jpg", 1000)
        response = upload(post, jpeg(2000, 2000) + os.urandom(media.file_limit_bytes))
        if response.status_code < 300:
            with pytest.raises(MediaError) as refused:
                finalize(s3, redis, media, USER, post["key"])
            assert refused.value.kind == "too_large"
        refused = None
    elif case == "wrong_type":
        with pytest.raises(MediaError, match="only JPEG, PNG, WEBP and HEIC") as refused:
            presign_upload(s3, media, USER, "anim.gif", 1000)
    elif case == "fake_extension":
        key = uploaded(s3, media, b"<html><script>alert(1)</script></html>" * 10, "innocent.jpg")
        with pytest.raises(MediaError, match="not a JPEG, PNG, WEBP or HEIC") as refused:
            finalize(s3, redis, media, USER, key)
    elif case == "quota_at_presign":
        s3.put_object(Bucket=media.images_bucket, Key=master_key(USER, datetime.now(timezone.utc), "jpg"),
                      Body=os.urandom(media.monthly_limit_bytes - 100))
        with pytest.raises(MediaError, match="monthly quota") as refused:
            presign_upload(s3, media, USER, "one-more.jpg", 1000)
    else:
        photo = jpeg()
        first, second = uploaded(s3, media, photo), uploaded(s3, media, photo)  # both signed within quota
        s3.put_object(Bucket=media.images_bucket, Key=master_key(USER, datetime.now(timezone.utc), "jpg"),
                      Body=os.urandom(media.monthly_limit_bytes - 2 * len(photo) + 10))
        finalize(s3, redis, media, USER, first)
        with pytest.raises(MediaError, match="monthly quota") as refused:
            finalize(s3, redis, media, USER, second)
    if refused is not None:
        assert str(refused.value)
    assert keys(s3, media.images_bucket, "staging/") == []


def test_keys_outside_the_users_masters_and_thumbs_are_refused(s3, redis, media):
    master = finalize(s3, redis, media, USER, uploaded(s3, media, jpeg()))
    staged = uploaded(s3, media, jpeg())
    theirs = finalize(s3, redis, media, OTHER, uploaded(s3, media, jpeg(), user=OTHER))
    relative = master[len(USER) + 1:]
    for bad in (theirs, f"../{theirs}", f"{USER}/../{theirs}", f"masters/../../{theirs}",
                relative.replace("/", "%2F"), relative.replace("masters", "%2e%2e/masters"), f"/{master}",
                f"{USER}//{relative}", relative + "\x00", staged, staged.replace("staging/", ""),
                f"{USER}/staging/x.jpg", "masters/", ""):
        with pytest.raises(MediaError) as refused:
            get_image_bytes(s3, media, USER, bad)
        assert refused.value.kind == "bad_key", bad
    with pytest.raises(MediaError):
        delete_image(s3, media, USER, theirs)
    # finalizing someone else's staging object is refused and leaves it alone
    their_staged = uploaded(s3, media, jpeg(), user=OTHER)
    with pytest.raises(MediaError, match="staging area"):
        finalize(s3, redis, media, USER, their_staged)
    assert their_staged in keys(s3, media.images_bucket, "staging/")
    assert get_image_bytes(s3, media, USER, master) == get_image_bytes(s3, media, USER, relative)


def test_listing_is_newest_first_across_months(s3, redis, media):
    made = []
    for when in (datetime(2026, 9, 30, 12, tzinfo=timezone.utc), datetime(2026, 10, 1, 8, tzinfo=timezone.utc),
                 datetime(2026, 10, 20, 8, tzinfo=timezone.utc), datetime(2026, 11, 2, 9, tzinfo=timezone.utc)):
        made.append(finalize(s3, redis, media, USER, uploaded(s3, media, jpeg()), now=when))
    listed = [i["key"] for i in list_images(s3, media, USER)]
    assert listed == [m[len(USER) + 1:] for m in reversed(made)]
    assert [i["key"] for i in list_images(s3, media, USER, offset=1, limit=2)] == listed[1:3]
    assert monthly_quota(s3, media, USER, 202610)["masters"] == 2


def test_thumbnails_are_made_and_delete_removes_every_size(s3, redis, media):
    kept = finalize(s3, redis, media, USER, uploaded(s3, media, jpeg(1600, 900)))
    doomed = finalize(s3, redis, media, USER, uploaded(s3, media, png()))
    result = drain_thumbnail_queue(redis, s3, media)
    assert (result.jobs, result.thumbnails, result.dead_lettered) == (2, 4, 0)
    assert redis.llen(QUEUE) == 0 and redis.llen(PROCESSING) == 0
    thumbs = keys(s3, media.images_bucket, f"{USER}/thumbs/")
    assert len(thumbs) == 4
    big = Image.open(io.BytesIO(get_image_bytes(s3, media, USER, next(t for t in thumbs if t.endswith("_640x640.webp")
                                                                         and kept.split("/")[-1][:16] in t))))
    assert big.format == "WEBP" and big.size == (640, 360)
    assert monthly_quota(s3, media, USER)["thumbs"] == 4

    deleted = delete_image(s3, media, USER, doomed[len(USER) + 1:])
    assert len(deleted) == 3  # the master and both sizes
    remaining = keys(s3, media.images_bucket, f"{USER}/")
    assert remaining and all(doomed.split("/")[-1][:16] not in k for k in remaining)
    assert kept in remaining


def test_profile_slot_upload_replace_and_delete(s3, redis, media):
    post = presign_profile_upload(s3, media, USER, "avatar", "me.png", len(png()))
    assert post["key"].startswith(f"profiles-staging/{USER}/avatar/")
    assert upload(post, png(), "me.png").status_code < 300
    first = finalize_profile(s3, redis, media, USER, "avatar", post["key"])
    assert first == f"{USER}/masters/avatar.png"
    post = presign_profile_upload(s3, media, USER, "avatar", "me.jpg", len(jpeg()))
    assert upload(post, jpeg(), "me.jpg").status_code < 300
    second = finalize_profile(s3, redis, media, USER, "avatar", post["key"])
    assert second == f"{USER}/masters/avatar.jpg"
    made = drain_thumbnail_queue(redis, s3, media)
    assert (made.jobs, made.skipped, made.thumbnails) == (2, 1, 2)  # the first avatar's master is gone already
    assert sorted(keys(s3, media.profiles_bucket)) == sorted(
        [second, f"{USER}/thumbs/avatar_256x256.webp", f"{USER}/thumbs/avatar_64x64.webp"])
    assert get_profile_image(s3, media, USER, "avatar")[0] == second
    with pytest.raises(MediaError, match="slot"):
        presign_profile_upload(s3, media, USER, "../banner", "x.png", 10)
    assert len(delete_profile_image(s3, media, USER, "avatar")) == 3
    assert keys(s3, media.profiles_bucket) == []


def test_poison_jobs_go_to_the_dead_letter_list(s3, redis, media):
    s3.put_object(Bucket=media.images_bucket, Key=master_key(USER, datetime.now(timezone.utc), "jpg"),
                  Body=b"\xff\xd8\xff" + b"not really a jpeg" * 10)
    bad_master = keys(s3, media.images_bucket)[0]
    redis.lpush(QUEUE, "not json", json.dumps({"type": "image", "bucket": "elsewhere", "originalKey": bad_master}),
                json.dumps({"type": "image", "bucket": media.images_bucket, "originalKey": bad_master}),
                json.dumps({"type": "image", "bucket": media.images_bucket,
                            "originalKey": master_key(USER, datetime.now(timezone.utc), "jpg")}))  # gone
    result = drain_thumbnail_queue(redis, s3, media)
    assert (result.jobs, result.dead_lettered, result.skipped) == (4, 3, 1)
    assert redis.llen(DEAD_LETTERS) == 3 and redis.llen(PROCESSING) == 0
    assert all(json.loads(d)["error"] for d in redis.lrange(DEAD_LETTERS, 0, -1))


def test_the_queue_survives_a_worker_killed_mid_batch(s3, redis, media, stack):
    masters = [finalize(s3, redis, media, USER, uploaded(s3, media, jpeg(2400, 1800, (i, 90, 160))))
               for i in range(24)]
    worker = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys; sys.path.insert(0, 'plugins')\n"
            "from blobgc.clients import redis_from_env, s3_client_from_env\n"
            "from blobgc.media import MediaSettings, drain_thumbnail_queue\n"
            f"s = MediaSettings(bucket_prefix={media.bucket_prefix!r})\n"
            "drain_thumbnail_queue(redis_from_env(), s3_client_from_env(), s, batch=12, workers=1)\n")],
        cwd=ROOT, env=dict(os.environ))
    deadline = time.monotonic() + 60
    while redis.llen(PROCESSING) == 0 and worker.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    assert redis.llen(PROCESSING) > 0, "the worker finished before it could be killed mid-batch"
    assert redis.llen(PROCESSING) + redis.llen(QUEUE) <= 24

    result = drain_thumbnail_queue(redis, s3_client_from_env(), media)  # the task's retry
    assert result.recovered > 0
    assert redis.llen(QUEUE) == 0 and redis.llen(PROCESSING) == 0 and redis.llen(DEAD_LETTERS) == 0
    thumbs = set(keys(s3, media.images_bucket, f"{USER}/thumbs/"))
    for master in masters:
        stem = master.split("/")[-1][:16]
        assert sum(stem in t for t in thumbs) == 2, master  # every job done, none lost


def run_ref(conn, dag_id: str, dry_run: bool = False) -> RunRef:
    """A run as a DAG task gets it: recorded, with its reference time (the database's now())."""
    return ensure_run(conn, RunRef(dag_id, f"test-{uuid.uuid4().hex[:8]}", dry_run))


def age_queued_entry(redis, bucket: str, key: str, seconds: float) -> None:
    """As if the master's job had been queued `seconds` ago (and lost since)."""
    now, micros = redis.time()
    redis.hset(QUEUED, f"{bucket}/{key}", f"{now + micros / 1e6 - seconds:.3f}")


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
    found = [delete_stale_staging(conn, s3, run, shard, cutoff=cutoff(run, minutes=60)) for shard in shards]
    delete_stale_staging(conn, s3, run, shards[0], cutoff=cutoff(run, minutes=60))  # a retry owes its keys once
    assert sum(f["stale"] for f in found) == 4 and sum(f["fresh"] for f in found) == 1
    assert sum(f["unexpected"] for f in found) == 0
    drained = delete_owed_objects(conn, s3, run)
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
        assert delete_stale_staging(conn, s3, run, shard, cutoff=cutoff(run, minutes=0))["stale"] == 0
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
    found = [delete_stale_staging(conn, s3, run, shard, cutoff=cutoff(run, minutes=60))
             for shard in staging_shards(s3, media)]
    assert sum(f["stale"] for f in found) == 2
    assert sum(f["unexpected"] for f in found) == len(theirs_images + odd_images + theirs_profiles + odd_profiles)
    assert delete_owed_objects(conn, s3, run).objects_deleted == 2
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
    drain_thumbnail_queue(redis, s3, media)
    deleted = finalize(s3, redis, media, USER, uploaded(s3, media, jpeg()))
    drain_thumbnail_queue(redis, s3, media)
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
    assert sum(r["orphans"] for r in report) == 3 and sum(r["missing_queued"] for r in report) == 1
    assert redis.llen(QUEUE) == 0 and len(keys(s3, media.profiles_bucket)) == 1  # a dry run changes nothing

    run = run_ref(conn, "blobgc_media_thumbnails")
    for shard in shards:
        check_thumbnails(conn, s3, redis, run, shard, media, cutoff=cutoff(run, hours=24))
    assert [json.loads(j)["originalKey"] for j in redis.lrange(QUEUE, 0, -1)] == [lacking]
    assert delete_owed_objects(conn, s3, run).objects_deleted == 3
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
    assert check_thumbnails(conn, s3, redis, run, shard, media, cutoff=cutoff(run, hours=24))["orphans"] == 1
    # the user uploads a new avatar before the deletion runs
    s3.put_object(Bucket=media.profiles_bucket, Key=f"{USER}/masters/avatar.jpg", Body=jpeg())
    assert delete_owed_objects(conn, s3, run).objects_deleted == 0
    assert icon in keys(s3, media.profiles_bucket)


def test_airflow_runs_both_media_dags(conn, s3, redis, media):
    finalize(s3, redis, media, USER, uploaded(s3, media, jpeg()))
    s3.put_object(Bucket=media.images_bucket, Key=f"{USER}/thumbs/{rev_month(202611)}/{'ab' * 8}_240x240.webp",
                  Body=b"RIFF")  # an orphan thumbnail
    env = {"AIRFLOW_VAR_BLOBGC_MEDIA_BUCKET_PREFIX": media.bucket_prefix,
           "AIRFLOW_VAR_BLOBGC_MEDIA_SETTINGS": json.dumps({"file_limit_mb": 1, "monthly_limit_mb": 2})}
    backdate_objects(s3, media.images_bucket, 2 * DAY)  # the master and the orphan are two days old
    thumbs = airflow("dags", "test", "blobgc_media_thumbnails", "-c", json.dumps({"min_age_hours": 24}),
                     env_extra=env)
    assert thumbs.returncode == 0, thumbs.stdout[-3000:] + thumbs.stderr[-3000:]
    names = keys(s3, media.images_bucket, f"{USER}/thumbs/")
    assert len(names) == 2 and all("abab" not in k for k in names)  # thumbnails made, orphan gone

    staged = uploaded(s3, media, jpeg())
    staging = airflow("dags", "test", "blobgc_media_staging", "-c", json.dumps({"max_age_minutes": 60}),
                      env_extra=env)
    assert staging.returncode == 0, staging.stdout[-3000:] + staging.stderr[-3000:]
    assert keys(s3, media.images_bucket, "staging/") == [staged]  # fresh: kept
    bad = airflow("dags", "test", "blobgc_media_staging", "-c", json.dumps({"max_age_minutes": 3}), env_extra=env)
    assert bad.returncode != 0 and "max_age_minutes" in bad.stdout + bad.stderr
    runs = conn.execute("SELECT dag_id, objects_deleted FROM blobgc.run WHERE finished_at IS NOT NULL "
                        "ORDER BY started_at").fetchall()
    assert runs == [("blobgc_media_thumbnails", 1), ("blobgc_media_staging", 0)]
    made = conn.execute("SELECT details->'thumbnails' FROM blobgc.run WHERE dag_id = 'blobgc_media_thumbnails'"
                        ).fetchone()[0]
    assert (made["jobs"], made["thumbnails"], made["dead_letters_dropped"]) == (1, 2, 0)  # in the report


# ------------------------------------------------------------------------- issue 15: seed 004's findings
def test_concurrent_profile_finalize_with_two_formats_leaves_exactly_one_master(s3, redis, media):
    """Two uploads of one slot, a PNG and a JPEG, finalized at the same instant: each used to delete the
    other's master after moving its own into place, leaving none. Repeated, since a race shows by chance."""
    bucket = media.profiles_bucket
    clients = [(s3_client_from_env(), redis_from_env()) for _ in range(2)]  # each caller its own connections
    for attempt in range(20):
        staged = []
        for ext, body in (("png", png()), ("jpg", jpeg())):
            key = f"profiles-staging/{USER}/avatar/{uuid.uuid4()}.{ext}"
            s3.put_object(Bucket=bucket, Key=key, Body=body)
            staged.append(key)
        barrier = threading.Barrier(2)

        def finalize_at_once(caller: int) -> str:
            s3_of, redis_of = clients[caller]
            barrier.wait()
            return finalize_profile(s3_of, redis_of, media, USER, "avatar", staged[caller])

        with ThreadPoolExecutor(2) as pool:
            returned = list(pool.map(finalize_at_once, range(2)))
        masters = keys(s3, bucket, f"{USER}/masters/")
        assert len(masters) == 1, f"attempt {attempt}: {masters} remain of {returned}"
        assert masters[0] in returned and keys(s3, bucket, "profiles-staging/") == []
        assert get_profile_image(s3, media, USER, "avatar")[0] == masters[0]
        s3.delete_object(Bucket=bucket, Key=masters[0])


def test_heic_masters_get_thumbnails_not_a_dead_letter(s3, redis, media):
    photo = heic(900, 600)
    master = finalize(s3, redis, media, USER, uploaded(s3, media, photo, "IMG_0001.HEIC"))
    assert master.endswith(".heic")
    assert s3.head_object(Bucket=media.images_bucket, Key=master)["ContentType"] == "image/heic"
    result = drain_thumbnail_queue(redis, s3, media)
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
        assert (report["missing"], report["missing_queued"], report["missing_already_queued"]) == (1, 0, 1)
    dry = run_ref(conn, "blobgc_media_thumbnails", dry_run=True)
    report = check_thumbnails(conn, s3, redis, dry, shard, media, cutoff=cutoff(dry, hours=1))
    assert (report["missing"], report["missing_queued"]) == (1, 0)  # a dry run reports what a real run would do

    redis.delete(QUEUE)  # the job is lost; its entry is older than the min age: the next run queues it, once
    age_queued_entry(redis, media.images_bucket, master, 3600 + 60)
    for expected in (1, 0):
        run = run_ref(conn, "blobgc_media_thumbnails")
        assert check_thumbnails(conn, s3, redis, run, shard, media, cutoff=cutoff(run, hours=1))["missing_queued"] \
            == expected
    assert [json.loads(j)["originalKey"] for j in redis.lrange(QUEUE, 0, -1)] == [master]
    assert drain_thumbnail_queue(redis, s3, media).thumbnails == 2
    assert redis.hlen(QUEUED) == 0  # the worker forgot the entry when it finished the job
    run = run_ref(conn, "blobgc_media_thumbnails")
    assert check_thumbnails(conn, s3, redis, run, shard, media, cutoff=cutoff(run, hours=1))["missing"] == 0


def test_dead_letter_cap_keeps_the_newest_and_counts_what_is_dropped(s3, redis, media):
    redis.rpush(DEAD_LETTERS, *[json.dumps({"job": f"old-{n}", "error": "poison", "at": "2026-01-01T00:00:00+00:00"})
                                for n in range(DEAD_LETTER_CAP)])  # full: the head is the newest, old-0
    redis.lpush(QUEUE, "not json 1", "not json 2")
    result = drain_thumbnail_queue(redis, s3, media)
    assert redis.llen(DEAD_LETTERS) == DEAD_LETTER_CAP == 10_000
    assert (result.dead_lettered, result.dead_letters_dropped) == (2, 2)
    assert result.counts()["dead_letters_dropped"] == 2  # what the DAG's report records
    kept = [json.loads(d)["job"] for d in redis.lrange(DEAD_LETTERS, 0, 3)]
    assert sorted(kept[:2]) == ["not json 1", "not json 2"] and kept[2:] == ["old-0", "old-1"]
    assert json.loads(redis.lindex(DEAD_LETTERS, -1))["job"] == f"old-{DEAD_LETTER_CAP - 3}"  # the oldest went

    redis.lpush(QUEUE, "not json 3")
    capped = drain_thumbnail_queue(redis, s3, media, dead_letter_cap=5)  # a lower cap, as an argument
    assert (capped.dead_lettered, capped.dead_letters_dropped, redis.llen(DEAD_LETTERS)) == (1, DEAD_LETTER_CAP - 4, 5)
    assert json.loads(redis.lindex(DEAD_LETTERS, 0))["job"] == "not json 3"
    with pytest.raises(ValueError, match="dead-letter cap"):
        drain_thumbnail_queue(redis, s3, media, dead_letter_cap=0)


def queue_state(redis) -> dict:
    return {"queue": redis.lrange(QUEUE, 0, -1), "processing": redis.lrange(PROCESSING, 0, -1),
            "dead": redis.lrange(DEAD_LETTERS, 0, -1), "queued": redis.hgetall(QUEUED)}


def bucket_state(s3, bucket: str) -> list[tuple]:
    return [(o["Key"], o["ETag"], o["Size"], o["LastModified"])
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket) for o in page.get("Contents", [])]


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
    dry = airflow("dags", "test", "blobgc_media_thumbnails", "-c", json.dumps({"dry_run": True}), env_extra=env)
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
    refused = airflow("dags", "test", "blobgc_media_thumbnails", "-c", json.dumps({"min_age_hours": 0}),
                      env_extra=env)
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "min_age_hours" in output and "minimum of 1" in output, output[-3000:]
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
    assert delete_owed_objects(conn, s3, run).objects_deleted == 0 and keys(s3, media.profiles_bucket) == [icon]


def test_concurrent_profile_finalize_lock_is_exclusive_expires_and_is_released_only_by_its_holder(s3, redis, media):
    from blobgc.media import PROFILE_LOCK, profile_slot_lock

    name = f"{PROFILE_LOCK}:{media.profiles_bucket}/{USER}/avatar"
    with profile_slot_lock(redis, media.profiles_bucket, USER, "avatar") as still_ours:
        assert still_ours()
        with pytest.raises(MediaError) as busy:  # a second finalize of the slot waits, then gives up cleanly
            with profile_slot_lock(redis, media.profiles_bucket, USER, "avatar", wait=0.2):
                pass
        assert busy.value.kind == "busy"
    assert redis.get(name) is None  # released

    stalled = profile_slot_lock(redis, media.profiles_bucket, USER, "avatar", expires=0.2)
    stalled_still_ours = stalled.__enter__()
    time.sleep(0.4)  # this holder stalls past the expiry: another caller takes the slot
    assert not stalled_still_ours()
    other = profile_slot_lock(redis, media.profiles_bucket, USER, "avatar", wait=1)
    others_still_ours = other.__enter__()
    stalled.__exit__(None, None, None)  # the stalled holder's release must not free the other's lock
    assert others_still_ours() and redis.get(name) is not None
    other.__exit__(None, None, None)
    assert redis.get(name) is None
