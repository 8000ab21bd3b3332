"""Seed 004's key layout and key checks (blobgc.media), without S3."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from blobgc.media import (
    PROFILE_STAGING,
    STAGING,
    MediaError,
    MediaSettings,
    check_user,
    delete_image,
    delete_profile_image,
    extension_of,
    finalize,
    finalize_profile,
    get_image_bytes,
    get_profile_image,
    list_images,
    master_key,
    master_prefix_of_thumb,
    monthly_quota,
    presign_profile_upload,
    presign_upload,
    rev_month,
    sniff,
    staging_layout,
    thumb_key,
    thumb_prefix,
    time8,
    user_key,
)

USER = "0001000000000002"


def test_rev_month_and_time8():
    assert rev_month(202510) == "797489" and rev_month(202601) == "797398"
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    assert time8(start) == "ffffffff"
    assert time8(datetime(2026, 11, 1, 0, 0, 1, tzinfo=timezone.utc)) == f"{0xFFFFFFFF - 1000:08x}"
    with pytest.raises(MediaError):
        rev_month(202613)


def test_master_thumb_and_prefix_keys():
    when = datetime(2026, 11, 21, 12, tzinfo=timezone.utc)
    master = master_key(USER, when, "jpg", "0badc0de")
    assert master == f"{USER}/masters/797388/{time8(when)}0badc0de.jpg"
    thumb = thumb_key(master, 640, 640)
    assert thumb == f"{USER}/thumbs/797388/{time8(when)}0badc0de_640x640.webp"
    assert thumb.startswith(thumb_prefix(master))
    assert master_prefix_of_thumb(thumb) == master[:-3]
    assert thumb_key(f"{USER}/masters/avatar.png", 64, 64) == f"{USER}/thumbs/avatar_64x64.webp"
    assert master_prefix_of_thumb(f"{USER}/thumbs/avatar_64x64.webp") == f"{USER}/masters/avatar."


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


RESERVED_OR_MALFORMED = ["staging", "profiles-staging", "Staging", "PROFILES-STAGING", "", "a/b", "../x", "x" * 65,
                         "user.name", "user\n", None, 42]


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


def test_staging_layout_is_exact():
    assert staging_layout("staging/0") is STAGING and staging_layout("profiles-staging/a") is PROFILE_STAGING
    assert STAGING.fullmatch(f"staging/{USER}/0f8fad5b-d9cb-469f-a165-70867728950e.jpg")
    assert not STAGING.fullmatch("staging/masters/797388/0123456789abcdef.jpg")  # a master of a user `staging`
    assert not PROFILE_STAGING.fullmatch("profiles-staging/masters/avatar.jpg")
    with pytest.raises(MediaError):
        staging_layout("masters/")
