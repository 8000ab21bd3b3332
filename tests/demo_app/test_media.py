"""demo_app.media: seed 004's S3-only media store API (staging uploads, finalize, thumbnails, quota)."""
from __future__ import annotations

import io
import json
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import pytest
from PIL import Image

from blobgc.kinds.media.cleanup import drain_thumbnail_queue
from blobgc.core.clients import redis_from_env, s3_client_from_env
from blobgc.kinds.media.layouts import master_key, rev_month, time8
from blobgc.core.settings import MediaSettings
from blobgc.kinds.media.thumbnail_jobs import PROCESSING, QUEUE
from demo_app.image_processing import ImageRejected
from demo_app.media import (
    MediaError, check_user, delete_image, delete_profile_image, extension_of, finalize, finalize_profile,
    get_image_bytes, get_profile_image, list_images, monthly_quota, open_master, presign_profile_upload,
    presign_upload, render_thumbnails, sniff, user_key,
)
from tests.support.media import OTHER, USER, heic, jpeg, keys, png, upload, uploaded


UPLOADED = datetime(2026, 5, 14, 9, 30, tzinfo=timezone.utc)  # a fixed past upload time: no test depends on the month
UPLOADED_MONTH = 202605

RESERVED_OR_MALFORMED = ["staging", "profiles-staging", "Staging", "PROFILES-STAGING", "", "a/b", "../x", "x" * 65,
                         "user.name", "user\n", None, 42]


@pytest.mark.parametrize("bad", ["../x", f"{USER}/../other/masters/797388/0123456789abcdef.jpg", "masters/..",
                                 "masters/797388/0123456789abcdef.jpg/../../x", "%2e%2e/masters",
                                 "masters/797388/0123456789ABCDEF.jpg", "staging/x.jpg", f"/{USER}/masters/x.jpg",
                                 "0001000000000003/masters/797388/0123456789abcdef.jpg", "masters/797388/a.jpg",
                                 "masters/797388/0123456789abcdef.jpg\n", "thumbs/797388/0123456789abcdef.webp"])
def test_user_key_refuses_everything_outside_the_users_masters_and_thumbs(bad):
    with pytest.raises(MediaError):
        user_key(USER, bad)


def test_user_key_accepts_the_users_keys_with_or_without_prefix():
    key = "masters/797388/0123456789abcdef.jpg"
    assert user_key(USER, key) == user_key(USER, f"{USER}/{key}") == f"{USER}/{key}"
    assert user_key(USER, "thumbs/797388/0123456789abcdef_640x640.webp")


def test_sniffing_and_extensions():
    assert sniff(b"\xff\xd8\xff\xe0") == "JPEG"
    assert sniff(b"\x89PNG\r\n\x1a\n....") == "PNG"
    assert sniff(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "WEBP"
    assert sniff(b"\x00\x00\x00\x18ftypheic\x00\x00") == "HEIC"
    assert sniff(b"GIF89a") is None and sniff(b"<html>") is None
    assert extension_of("A.JPEG") == "jpg" and extension_of("x.heic") == "heic"
    for name in ("a.gif", "a", "a.jpg.exe", "svg.svg"):
        with pytest.raises(MediaError):
            extension_of(name)


@pytest.mark.parametrize("user", RESERVED_OR_MALFORMED)
def test_reserved_user_ids_and_malformed_ones_are_refused_by_every_function_taking_a_user_id(user):
    """Refused before any S3 or Redis call (both are None here): `staging` and `profiles-staging` name the
    staging areas, so such a user's masters would sit where blobgc_media_staging cleans."""
    settings = MediaSettings()
    staged = f"staging/{user}/0f8fad5b-d9cb-469f-a165-70867728950e.jpg"
    profile_staged = f"profiles-staging/{user}/avatar/0f8fad5b-d9cb-469f-a165-70867728950e.jpg"
    calls = {
        "check_user": lambda: check_user(user),
        "presign_upload": lambda: presign_upload(None, settings, user, "me.jpg", 1000),
        "presign_profile_upload": lambda: presign_profile_upload(None, settings, user, "avatar", "me.jpg", 1000),
        "finalize": lambda: finalize(None, None, settings, user, staged),
        "finalize_profile": lambda: finalize_profile(None, None, settings, user, "avatar", profile_staged),
        "monthly_quota": lambda: monthly_quota(None, settings, user),
        "list_images": lambda: list_images(None, settings, user),
        "get_image_bytes": lambda: get_image_bytes(None, settings, user, "masters/797388/0123456789abcdef.jpg"),
        "delete_image": lambda: delete_image(None, settings, user, "masters/797388/0123456789abcdef.jpg"),
        "get_profile_image": lambda: get_profile_image(None, settings, user, "avatar"),
        "delete_profile_image": lambda: delete_profile_image(None, settings, user, "avatar"),
        "user_key": lambda: user_key(user, "masters/797388/0123456789abcdef.jpg"),
    }
    for name, call in calls.items():
        with pytest.raises(MediaError) as refused:
            call()
        assert refused.value.kind in ("bad_key", "reserved_user"), name
        if isinstance(user, str) and user.lower() in ("staging", "profiles-staging"):
            assert refused.value.kind == "reserved_user" and "reserved" in str(refused.value), name


def test_ordinary_user_ids_are_accepted():
    for user in (USER, "a9", "A-b_c", "stagingx", "x-staging", "profiles", "s" * 64):
        assert check_user(user) == user


def test_heic_masters_are_decoded_into_webp_thumbnails():
    data = heic(800, 400, color=(200, 60, 90))
    assert sniff(data[:64]) == "HEIC"
    rendered = render_thumbnails(data, ((640, 640), (240, 240)))
    sizes = {box: Image.open(io.BytesIO(body)) for box, body in rendered.items()}
    assert {box: (im.format, im.size) for box, im in sizes.items()} == {
        (640, 640): ("WEBP", (640, 320)), (240, 240): ("WEBP", (240, 120))}
    assert sizes[(240, 240)].convert("RGB").getpixel((120, 60)) == pytest.approx((200, 60, 90), abs=12)


def test_heic_over_the_pixel_budget_is_refused_before_decoding():
    with pytest.raises(ImageRejected) as refused:
        open_master(heic(64, 64), max_pixels=64 * 64 - 1)
    assert refused.value.kind == "bomb"


def test_heic_that_is_truncated_or_only_a_header_is_a_clean_rejection():
    data = heic(64, 64)
    for broken in (data[:40], data[: len(data) // 2]):
        with pytest.raises(ImageRejected):
            open_master(broken)
    with pytest.raises(ImageRejected):
        render_thumbnails(data[: len(data) // 2], ((64, 64),))


def test_heic_sniffing_decides_not_the_extension():
    with pytest.raises(ImageRejected) as refused:
        open_master(b"GIF89a" + b"\x00" * 100)  # GIF is not a master format
    assert refused.value.kind == "not_an_image"


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

    master = finalize(s3, redis, media, USER, post["key"], now=UPLOADED)
    assert keys(s3, media.images_bucket) == [master]  # staging is gone
    assert master.startswith(f"{USER}/masters/{rev_month(UPLOADED_MONTH)}/")
    assert master.endswith(".jpg")
    head = s3.head_object(Bucket=media.images_bucket, Key=master)
    assert head["ContentType"] == "image/jpeg" and head["ContentLength"] == len(photo)
    assert [json.loads(j) for j in redis.lrange(QUEUE, 0, -1)] == [
        {"type": "image", "bucket": media.images_bucket, "originalKey": master}]
    assert get_image_bytes(s3, media, USER, master[len(USER) + 1:]) == photo
    quota = monthly_quota(s3, media, USER, UPLOADED_MONTH)
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
        s3.put_object(Bucket=media.images_bucket, Key=master_key(USER, UPLOADED, "jpg"),
                      Body=os.urandom(media.monthly_limit_bytes - 100))
        with pytest.raises(MediaError, match="monthly quota") as refused:
            presign_upload(s3, media, USER, "one-more.jpg", 1000, now=UPLOADED)
    else:
        photo = jpeg()
        first, second = uploaded(s3, media, photo), uploaded(s3, media, photo)  # both signed within quota
        s3.put_object(Bucket=media.images_bucket, Key=master_key(USER, UPLOADED, "jpg"),
                      Body=os.urandom(media.monthly_limit_bytes - 2 * len(photo) + 10))
        finalize(s3, redis, media, USER, first, now=UPLOADED)
        with pytest.raises(MediaError, match="monthly quota") as refused:
            finalize(s3, redis, media, USER, second, now=UPLOADED)
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
    kept = finalize(s3, redis, media, USER, uploaded(s3, media, jpeg(1600, 900)), now=UPLOADED)
    doomed = finalize(s3, redis, media, USER, uploaded(s3, media, png()), now=UPLOADED)
    result = drain_thumbnail_queue(redis, s3, media, render_thumbnails)
    assert (result.jobs, result.thumbnails, result.dead_lettered) == (2, 4, 0)
    assert redis.llen(QUEUE) == 0 and redis.llen(PROCESSING) == 0
    thumbs = keys(s3, media.images_bucket, f"{USER}/thumbs/")
    assert len(thumbs) == 4
    big = Image.open(io.BytesIO(get_image_bytes(s3, media, USER, next(t for t in thumbs if t.endswith("_640x640.webp")
                                                                         and kept.split("/")[-1][:16] in t))))
    assert big.format == "WEBP" and big.size == (640, 360)
    assert monthly_quota(s3, media, USER, UPLOADED_MONTH)["thumbs"] == 4

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
    made = drain_thumbnail_queue(redis, s3, media, render_thumbnails)
    assert (made.jobs, made.skipped, made.thumbnails) == (2, 1, 2)  # the first avatar's master is gone already
    assert sorted(keys(s3, media.profiles_bucket)) == sorted(
        [second, f"{USER}/thumbs/avatar_256x256.webp", f"{USER}/thumbs/avatar_64x64.webp"])
    assert get_profile_image(s3, media, USER, "avatar")[0] == second
    with pytest.raises(MediaError, match="slot"):
        presign_profile_upload(s3, media, USER, "../banner", "x.png", 10)
    assert len(delete_profile_image(s3, media, USER, "avatar")) == 3
    assert keys(s3, media.profiles_bucket) == []


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


def test_concurrent_profile_finalize_lock_is_exclusive_expires_and_is_released_only_by_its_holder(s3, redis, media):
    from demo_app.media import PROFILE_LOCK, profile_slot_lock

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
