"""Seed 004: the S3-only media store (blobgc.media) and its cleanups, against the real stack."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
import requests
from PIL import Image

from blobgc.clients import s3_client_from_env
from blobgc.media import (
    DEAD_LETTERS,
    PROCESSING,
    QUEUE,
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
    time8,
)
from blobgc.media_cleanup import (
    MediaShard,
    check_thumbnails,
    delete_stale_staging,
    staging_shards,
    thumbnail_shards,
)
from blobgc.outbox import delete_owed_objects
from blobgc.runs import RunRef, ensure_run

from .conftest import ROOT, airflow

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


@pytest.fixture
def media(s3, redis):
    """A store of the test's own: buckets `{prefix}images` and `{prefix}profiles`, an empty queue."""
    settings = MediaSettings(bucket_prefix=f"test-{uuid.uuid4().hex[:10]}-", monthly_limit_bytes=2_000_000,
                             file_limit_bytes=1_000_000)
    for bucket in (settings.images_bucket, settings.profiles_bucket):
        s3.create_bucket(Bucket=bucket)
    redis.delete(QUEUE, PROCESSING, DEAD_LETTERS)
    yield settings
    redis.delete(QUEUE, PROCESSING, DEAD_LETTERS)
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
    run = RunRef(dag_id, f"test-{uuid.uuid4().hex[:8]}", dry_run)
    ensure_run(conn, run)
    return run


def test_stale_staging_is_removed_and_fresh_staging_stays(conn, s3, media):
    stale = [uploaded(s3, media, jpeg(), user=u) for u in (USER, OTHER, "a9")]
    s3.put_object(Bucket=media.profiles_bucket, Key=f"profiles-staging/{USER}/avatar/{uuid.uuid4()}.png",
                  Body=png())
    time.sleep(1.5)  # S3 keeps LastModified to the second
    between = datetime.now(timezone.utc)
    time.sleep(1.5)
    fresh = uploaded(s3, media, jpeg())
    shards = staging_shards(s3, media)
    assert {(s.bucket, s.prefix) for s in shards} == {
        (media.images_bucket, "staging/0"), (media.images_bucket, "staging/a"),
        (media.profiles_bucket, "profiles-staging/0")}
    run = run_ref(conn, "blobgc_media_staging")
    # the floor (a presigned upload's lifetime) would keep these seconds-old objects: lifted here
    found = [delete_stale_staging(conn, s3, run, shard, cutoff=between, floor=timedelta(0)) for shard in shards]
    delete_stale_staging(conn, s3, run, shards[0], cutoff=between, floor=timedelta(0))  # a retry owes its keys once
    assert sum(f["stale"] for f in found) == 4 and sum(f["fresh"] for f in found) == 1
    drained = delete_owed_objects(conn, s3, run)
    assert drained.objects_deleted == 4
    assert keys(s3, media.images_bucket, "staging/") == [fresh]
    assert keys(s3, media.profiles_bucket, "profiles-staging/") == []
    assert all(k not in keys(s3, media.images_bucket) for k in stale)


def test_staging_younger_than_a_presign_lifetime_is_never_deleted(conn, s3, media):
    staged = uploaded(s3, media, jpeg())
    run = run_ref(conn, "blobgc_media_staging")
    for shard in staging_shards(s3, media):
        # even with a cutoff in the future (a misconfigured max age), the floor keeps a live upload
        assert delete_stale_staging(conn, s3, run, shard, cutoff=datetime.now(timezone.utc) + timedelta(hours=1)
                                    )["stale"] == 0
    assert keys(s3, media.images_bucket, "staging/") == [staged]


def test_orphan_thumbnails_are_removed_and_missing_ones_queued(conn, s3, redis, media):
    with_thumbs = finalize(s3, redis, media, USER, uploaded(s3, media, jpeg()))
    drain_thumbnail_queue(redis, s3, media)
    deleted = finalize(s3, redis, media, USER, uploaded(s3, media, jpeg()))
    drain_thumbnail_queue(redis, s3, media)
    s3.delete_object(Bucket=media.images_bucket, Key=deleted)  # a master deleted without its thumbnails
    lacking = finalize(s3, redis, media, OTHER, uploaded(s3, media, jpeg(), user=OTHER))
    redis.delete(QUEUE)  # its job was lost
    s3.put_object(Bucket=media.profiles_bucket, Key=f"{USER}/thumbs/avatar_64x64.webp", Body=b"RIFF")  # no master
    cutoff = datetime.now(timezone.utc) + timedelta(seconds=5)

    shards = thumbnail_shards(s3, media)
    assert {(s.bucket, s.prefix, s.kind) for s in shards} == {(media.images_bucket, "0", "image"),
                                                               (media.profiles_bucket, "0", "icon")}
    dry = run_ref(conn, "blobgc_media_thumbnails", dry_run=True)
    report = [check_thumbnails(conn, s3, redis, dry, s, media, cutoff=cutoff) for s in shards]
    assert sum(r["orphans"] for r in report) == 3 and sum(r["missing_queued"] for r in report) == 1
    assert redis.llen(QUEUE) == 0 and len(keys(s3, media.profiles_bucket)) == 1  # a dry run changes nothing

    run = run_ref(conn, "blobgc_media_thumbnails")
    for shard in shards:
        check_thumbnails(conn, s3, redis, run, shard, media, cutoff=cutoff)
    assert [json.loads(j)["originalKey"] for j in redis.lrange(QUEUE, 0, -1)] == [lacking]
    assert delete_owed_objects(conn, s3, run).objects_deleted == 3
    assert keys(s3, media.profiles_bucket) == []
    stem = deleted.split("/")[-1][:16]
    assert all(stem not in k for k in keys(s3, media.images_bucket))
    assert sum(with_thumbs.split("/")[-1][:16] in k for k in keys(s3, media.images_bucket)) == 3


def test_an_orphan_icon_whose_master_returns_is_kept(conn, s3, redis, media):
    icon = f"{USER}/thumbs/avatar_64x64.webp"
    s3.put_object(Bucket=media.profiles_bucket, Key=icon, Body=b"RIFF")
    run = run_ref(conn, "blobgc_media_thumbnails")
    shard = MediaShard(media.profiles_bucket, "0", "icon")
    assert check_thumbnails(conn, s3, redis, run, shard, media,
                            cutoff=datetime.now(timezone.utc) + timedelta(seconds=5))["orphans"] == 1
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
    thumbs = airflow("dags", "test", "blobgc_media_thumbnails", "-c", json.dumps({"min_age_hours": 0}),
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
