"""Seed 004's application side: Fakebook's S3-only media store (no database).

**Layout** (docs/reference.md §3), in buckets `{prefix}images` and `{prefix}profiles`:

- `{userId}/masters/{revYYYYMM}/{time8}{hash8}.{ext}` and `{userId}/thumbs/{revYYYYMM}/{time8}{hash8}_{W}x{H}.webp`
- `{userId}/masters/{slot}.{ext}` and `{userId}/thumbs/{slot}_{W}x{H}.webp` (profiles)
- staging: `staging/{userId}/{uuid}.{ext}` and `profiles-staging/{userId}/{slot}/{uuid}.{ext}`

`revYYYYMM` is 999999 - YYYYMM and `time8` is 0xffffffff minus the milliseconds since the start of
the month, as 8 hex digits, so S3's ascending listing of `{userId}/masters/` is newest first, and
one month is one prefix (the monthly quota is two listings). `hash8` is 8 random hex digits.

**Uploads** go straight from the client to staging with a presigned POST (5 minutes, size range,
key prefix, MIME type from the extension: JPEG, PNG, WEBP, HEIC; quota checked before signing).
`finalize` re-checks the key, the size and the quota, sniffs the real format from the first
bytes (the sniffed format wins over the extension), copies the object to `masters` and deletes
the staging object, then pushes a thumbnail job to the Redis list `media-thumb-queue`. Any
refusal deletes the user's staging object before raising, so no intermediate garbage is left.

**Reads** are confined to the user's own masters and thumbs: keys must match the layout exactly,
so `..`, encoded characters, other users' keys and staging are refused.

**User ids** are `[0-9A-Za-z_-]{1,64}`, and never `staging` or `profiles-staging` (in any case):
those name the staging areas, so a user called that would have masters under a staging prefix,
where blobgc_media_staging cleans. Every function that takes a user id refuses such an id.

**Profile slots** hold one master each. `finalize_profile` moves the upload into place and removes
the slot's other masters under a Redis lock per (bucket, user, slot), so two uploads racing with
different formats leave exactly one master (see `profile_slot_lock`).

Thumbnail jobs go through `blobgc.kinds.media.thumbnail_jobs` (deduplicated); key layouts are
`blobgc.kinds.media.layouts`. HEIC masters are decoded with pillow-heif, behind the same sniffing and pixel
budget as the other formats.
"""

from __future__ import annotations

import io
import logging
import random
import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from blobgc.core.keys import KeyLayoutError
from blobgc.core.objects import delete_objects_in_batches, listing
from blobgc.core.settings import MEDIA_PRESIGN_SECONDS, MediaSettings
from blobgc.kinds.media.layouts import (
    MASTER,
    PROFILE_MASTER,
    PROFILE_STAGING,
    PROFILE_THUMB,
    RESERVED_USER_IDS,
    SLOT_NAME,
    STAGING,
    THUMB,
    USER_ID,
    master_key,
    month_of,
    rev_month,
    thumb_prefix,
)
from blobgc.kinds.media.thumbnail_jobs import queue_thumbnail_jobs, text
from demo_app.image_processing import DEFAULT_MAX_PIXELS, ImageRejected, open_as, open_untrusted, sniff_format

if TYPE_CHECKING:
    from PIL.Image import Image

log = logging.getLogger(__name__)

PROFILE_LOCK = "media-profile-lock"  # "{PROFILE_LOCK}:{bucket}/{user}/{slot}": one finalize_profile at a time
PROFILE_LOCK_SECONDS = 60.0  # the lock's expiry: far above a finalize's copy, listing and delete
PROFILE_LOCK_WAIT_SECONDS = 10.0  # how long a finalize waits for another one of the same slot
PRESIGN_SECONDS = MEDIA_PRESIGN_SECONDS
EXTENSIONS = {"jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "webp": "image/webp", "heic": "image/heic"}
FORMAT_EXTENSION = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp", "HEIC": "heic"}
HEIC_BRANDS = {b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"hevm", b"hevs", b"mif1", b"msf1"}


class MediaError(ValueError):
    """A refused media operation; `kind` says why (bad_key, reserved_user, too_large, quota_exceeded,
    unsupported_type, not_an_image, not_found, busy)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def check_user(user: str) -> str:
    """Refuse a malformed user id, and the reserved ids that name the staging areas."""
    if not isinstance(user, str) or not USER_ID.fullmatch(user):
        raise MediaError(
            "bad_key", f"not a user id: {user!r} (a user id is 1 to 64 characters of 0-9, A-Z, a-z, '_' and '-')"
        )
    if user.lower() in RESERVED_USER_IDS:
        raise MediaError(
            "reserved_user",
            f"user id {user!r} is reserved: {', '.join(sorted(RESERVED_USER_IDS))} "
            "name the staging areas, where a user's masters would be cleaned away",
        )
    return user


def user_key(user: str, key: str, *, profiles: bool = False) -> str:
    """The full key of one of `user`'s masters or thumbnails (`isKeyUnder`), given with or without the
    user's prefix. Anything else is refused: other users' keys, staging, `..`, encoded characters."""
    check_user(user)
    if not isinstance(key, str):
        raise MediaError("bad_key", "a key must be a string")
    full = key if key.startswith(f"{user}/") else f"{user}/{key}"
    patterns = (PROFILE_MASTER, PROFILE_THUMB) if profiles else (MASTER, THUMB)
    match = next((m for p in patterns if (m := p.fullmatch(full))), None)
    if match is None or match["user"] != user:
        raise MediaError("bad_key", f"{key!r} is not one of user {user}'s masters or thumbnails")
    return full


# --------------------------------------------------------------------------------------------- formats
def sniff(data: bytes) -> str | None:
    """JPEG, PNG, WEBP or HEIC from the first bytes, or None."""
    if data[4:8] == b"ftyp" and data[8:12] in HEIC_BRANDS:
        return "HEIC"
    fmt = sniff_format(data)
    return fmt if fmt in FORMAT_EXTENSION else None


def extension_of(filename: str) -> str:
    ext = filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
    if ext not in EXTENSIONS:
        raise MediaError("unsupported_type", f"{filename!r}: only JPEG, PNG, WEBP and HEIC images are accepted")
    return "jpg" if ext == "jpeg" else ext


# ------------------------------------------------------------------------------------------------ quota
def list_keys(s3, bucket: str, prefix: str) -> list[str]:
    return [o["Key"] for o in listing(s3, bucket, prefix)]


def prefix_bytes(s3, bucket: str, prefix: str) -> tuple[int, int]:
    """(objects, bytes) under a prefix."""
    sizes = [o["Size"] for o in listing(s3, bucket, prefix)]
    return len(sizes), sum(sizes)


def monthly_quota(s3, settings: MediaSettings, user: str, yyyymm: int | None = None) -> dict:
    """Masters plus thumbnails of `user` in a month (default: this one), with the limits, for the UI."""
    check_user(user)
    yyyymm = yyyymm or month_of(datetime.now(UTC))
    try:
        rev = rev_month(yyyymm)
    except KeyLayoutError as error:
        raise MediaError("bad_key", str(error)) from error
    masters = prefix_bytes(s3, settings.images_bucket, f"{user}/masters/{rev}/")
    thumbs = prefix_bytes(s3, settings.images_bucket, f"{user}/thumbs/{rev}/")
    used = masters[1] + thumbs[1]
    return {
        "user": user,
        "yyyymm": yyyymm,
        "masters": masters[0],
        "masters_bytes": masters[1],
        "thumbs": thumbs[0],
        "thumbs_bytes": thumbs[1],
        "used_bytes": used,
        "monthly_limit_bytes": settings.monthly_limit_bytes,
        "file_limit_bytes": settings.file_limit_bytes,
        "remaining_bytes": max(0, settings.monthly_limit_bytes - used),
    }


def check_quota(s3, settings: MediaSettings, user: str, size: int, when: datetime) -> None:
    quota = monthly_quota(s3, settings, user, month_of(when))
    if quota["used_bytes"] + size > settings.monthly_limit_bytes:
        raise MediaError(
            "quota_exceeded",
            f"user {user} has used {quota['used_bytes']:,} of "
            f"{settings.monthly_limit_bytes:,} bytes this month; {size:,} more "
            "would exceed the monthly quota",
        )


def check_size(size: int, limit: int) -> None:
    if not isinstance(size, int) or size < 1:
        raise MediaError("too_large", f"a file size must be a positive number of bytes, not {size!r}")
    if size > limit:
        raise MediaError("too_large", f"{size:,} bytes is over the single-file limit of {limit:,} bytes")


# ------------------------------------------------------------------------------------------ presigning
def presigned_post(s3, bucket: str, key: str, prefix: str, mime: str, limit: int) -> dict:
    post = s3.generate_presigned_post(
        Bucket=bucket,
        Key=key,
        Fields={"Content-Type": mime},
        Conditions=[["content-length-range", 1, limit], ["starts-with", "$key", prefix], {"Content-Type": mime}],
        ExpiresIn=PRESIGN_SECONDS,
    )
    return {"url": post["url"], "fields": post["fields"], "key": key, "expires_in": PRESIGN_SECONDS}


def presign_upload(
    s3, settings: MediaSettings, user: str, filename: str, size_bytes: int, *, now: datetime | None = None
) -> dict:
    """A presigned POST for one image into the user's staging area, after the size, type and quota checks."""
    check_user(user)
    ext = extension_of(filename)
    check_size(size_bytes, settings.file_limit_bytes)
    check_quota(s3, settings, user, size_bytes, now or datetime.now(UTC))
    key = f"staging/{user}/{uuid.uuid4()}.{ext}"
    return presigned_post(
        s3, settings.images_bucket, key, f"staging/{user}/", EXTENSIONS[ext], settings.file_limit_bytes
    )


def presign_profile_upload(
    s3,
    settings: MediaSettings,
    user: str,
    slot: str,
    filename: str,
    size_bytes: int,
    size_limit_bytes: int | None = None,
) -> dict:
    """A presigned POST for a profile image (no monthly quota, only the single-file limit)."""
    check_user(user)
    check_slot(settings, slot)
    ext = extension_of(filename)
    limit = min(size_limit_bytes or settings.file_limit_bytes, settings.file_limit_bytes)
    check_size(size_bytes, limit)
    key = f"profiles-staging/{user}/{slot}/{uuid.uuid4()}.{ext}"
    return presigned_post(s3, settings.profiles_bucket, key, f"profiles-staging/{user}/{slot}/", EXTENSIONS[ext], limit)


def check_slot(settings: MediaSettings, slot: str) -> None:
    if slot not in settings.slots or not SLOT_NAME.fullmatch(slot):
        raise MediaError("bad_key", f"unknown profile slot {slot!r} (known: {', '.join(settings.slots)})")


# -------------------------------------------------------------------------------------------- finalize
def is_missing(error: ClientError) -> bool:
    """S3's answer for a key that does not exist (GET: NoSuchKey; HEAD: 404 with no body)."""
    return error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound")


def read_head(s3, bucket: str, key: str) -> tuple[int, bytes]:
    """(size, first 64 bytes) of a staged object."""
    try:
        head = s3.head_object(Bucket=bucket, Key=key)
        first = s3.get_object(Bucket=bucket, Key=key, Range="bytes=0-63")["Body"].read()
    except ClientError as error:
        if is_missing(error):
            raise MediaError("not_found", f"nothing was uploaded to {key}") from error
        raise
    return head["ContentLength"], first


def staged_format(
    s3, bucket: str, staging_key: str, limit: int, check: Callable[[int], None] = lambda size: None
) -> str:
    """The sniffed format of an uploaded staging object, after its size (and `check`, such as the quota).
    Any refusal deletes the staging object before raising, so no intermediate garbage is left."""
    try:
        size, first = read_head(s3, bucket, staging_key)
        check_size(size, limit)
        check(size)
        fmt = sniff(first)
        if fmt is None:
            raise MediaError(
                "not_an_image", f"{staging_key} is not a JPEG, PNG, WEBP or HEIC image, whatever its extension says"
            )
    except MediaError as error:
        if error.kind != "not_found":
            s3.delete_object(Bucket=bucket, Key=staging_key)
        raise
    return fmt


def move(s3, bucket: str, source: str, target: str, mime: str) -> None:
    s3.copy_object(
        Bucket=bucket,
        Key=target,
        CopySource={"Bucket": bucket, "Key": source},
        ContentType=mime,
        MetadataDirective="REPLACE",
    )
    s3.delete_object(Bucket=bucket, Key=source)


def push_job(redis, kind: str, bucket: str, key: str) -> None:
    """Queue the thumbnails of a new master. A failure only delays them: blobgc_media_thumbnails
    enqueues masters that lack thumbnails."""
    try:
        queue_thumbnail_jobs(redis, kind, bucket, [key])
    except Exception as error:  # noqa: BLE001 - the master is stored; its job is recreated later
        log.warning("could not queue the thumbnails of %s (%s); blobgc_media_thumbnails will", key, error)


# Delete the lock only if it still holds our token: an expired lock taken by another caller is theirs.
RELEASE_LOCK_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@contextmanager
def profile_slot_lock(
    redis,
    bucket: str,
    user: str,
    slot: str,
    *,
    expires: float = PROFILE_LOCK_SECONDS,
    wait: float = PROFILE_LOCK_WAIT_SECONDS,
) -> Iterator[Callable[[], bool]]:
    """Hold the Redis lock of one profile slot; yields a check that the lock is still ours.

    SET NX with a random token and an expiry: a caller that dies never blocks the slot for more than
    `expires` seconds, and only the holder's token releases it. Waits up to `wait` seconds for
    another holder, then refuses with MediaError("busy"), touching nothing.
    """
    name = f"{PROFILE_LOCK}:{bucket}/{user}/{slot}"
    token = secrets.token_hex(16)
    deadline = time.monotonic() + wait
    while not redis.set(name, token, nx=True, px=int(expires * 1000)):
        if time.monotonic() >= deadline:
            raise MediaError("busy", f"another upload to user {user}'s {slot} is being finalized: try again")
        time.sleep(random.uniform(0.01, 0.05))
    try:
        yield lambda: text(redis.get(name) or b"") == token
    finally:
        redis.eval(RELEASE_LOCK_SCRIPT, 1, name, token)


def finalize(s3, redis, settings: MediaSettings, user: str, staging_key: str, *, now: datetime | None = None) -> str:
    """Move an uploaded image from staging to masters and queue its thumbnails; returns the master key.

    Refused (MediaError) when the key is not the user's staging key (nothing is touched then), when
    the file is too large or over the month's quota, or when its bytes are not JPEG, PNG, WEBP or
    HEIC; in those cases the staging object is deleted first.
    """
    check_user(user)
    staged = STAGING.fullmatch(staging_key) if isinstance(staging_key, str) else None
    if staged is None or staged["user"] != user:
        raise MediaError("bad_key", f"{staging_key!r} is not in user {user}'s staging area")
    bucket = settings.images_bucket
    now = now or datetime.now(UTC)
    fmt = staged_format(
        s3, bucket, staging_key, settings.file_limit_bytes, lambda size: check_quota(s3, settings, user, size, now)
    )
    ext = FORMAT_EXTENSION[fmt]  # the bytes decide, not the name
    target = master_key(user, now, ext)
    move(s3, bucket, staging_key, target, EXTENSIONS[ext])
    push_job(redis, "image", bucket, target)
    return target


def finalize_profile(
    s3, redis, settings: MediaSettings, user: str, slot: str, staging_key: str, size_limit_bytes: int | None = None
) -> str:
    """Move an uploaded profile image to `{user}/masters/{slot}.{ext}` (replacing the slot's previous
    master, whatever its extension) and queue its icons; returns the master key.

    A slot holds exactly one master, even when two uploads of different formats are finalized at
    once. Without care each would move its own file into place and delete the other's, leaving
    none. So the move and the removal of the slot's other masters happen under the slot's Redis
    lock (`profile_slot_lock`): callers take turns, and the last one in keeps its master. The store
    has no database, and S3 has no conditional delete, so the lock is what orders them. Should the
    lock have expired meanwhile (a caller stalled for over a minute), the other masters are left in
    place rather than deleted on a stale listing: an extra master is removed by the slot's next
    finalize, a deleted one could not be brought back. With Redis unreachable the finalize fails
    before anything moves, and the upload waits in staging for the client's retry.
    """
    check_user(user)
    check_slot(settings, slot)
    staged = PROFILE_STAGING.fullmatch(staging_key) if isinstance(staging_key, str) else None
    if staged is None or staged["user"] != user or staged["slot"] != slot:
        raise MediaError("bad_key", f"{staging_key!r} is not in user {user}'s staging area for {slot}")
    bucket = settings.profiles_bucket
    fmt = staged_format(
        s3, bucket, staging_key, min(size_limit_bytes or settings.file_limit_bytes, settings.file_limit_bytes)
    )
    target = f"{user}/masters/{slot}.{FORMAT_EXTENSION[fmt]}"
    with profile_slot_lock(redis, bucket, user, slot) as still_ours:
        move(s3, bucket, staging_key, target, EXTENSIONS[FORMAT_EXTENSION[fmt]])
        stale = [
            k for k in list_keys(s3, bucket, f"{user}/masters/{slot}.") if k != target and PROFILE_MASTER.fullmatch(k)
        ]
        if stale and still_ours():
            outcome = delete_objects_in_batches(s3, bucket, stale)
            if outcome.failed:
                log.warning(
                    "could not delete %s's previous %s masters %s: the next upload will",
                    user,
                    slot,
                    sorted(outcome.failed),
                )
        elif stale:
            log.warning(
                "the %s lock of user %s expired during finalize: previous masters %s are kept for the "
                "next upload to remove",
                slot,
                user,
                stale,
            )
    push_job(redis, "icon", bucket, target)
    return target


# ---------------------------------------------------------------------------- listing, reading, deleting
def list_images(s3, settings: MediaSettings, user: str, offset: int = 0, limit: int = 50) -> list[dict]:
    """The user's images, newest first: `limit` masters after skipping `offset`."""
    check_user(user)
    if offset < 0 or not 1 <= limit <= 1000:
        raise MediaError("bad_key", "offset must be >= 0 and limit between 1 and 1000")
    found: list[dict] = []
    seen = 0
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(
        Bucket=settings.images_bucket,
        Prefix=f"{user}/masters/",
        PaginationConfig={"PageSize": min(1000, offset + limit)},
    ):
        for o in page.get("Contents", []):
            if not MASTER.fullmatch(o["Key"]):
                continue
            seen += 1
            if seen > offset:
                found.append({"key": o["Key"][len(user) + 1 :], "size": o["Size"], "last_modified": o["LastModified"]})
                if len(found) == limit:
                    return found
    return found


def get_image_bytes(s3, settings: MediaSettings, user: str, key: str) -> bytes:
    """One of the user's masters or thumbnails; staging and other users' keys are refused."""
    full = user_key(user, key)
    try:
        return s3.get_object(Bucket=settings.images_bucket, Key=full)["Body"].read()
    except ClientError as error:
        if is_missing(error):
            raise MediaError("not_found", f"user {user} has no {key}") from error
        raise


def delete_image(s3, settings: MediaSettings, user: str, key: str) -> list[str]:
    """Delete one of the user's masters and every thumbnail size of it; returns the keys deleted."""
    full = user_key(user, key)
    if not MASTER.fullmatch(full):
        raise MediaError("bad_key", f"{key!r} is not a master image")
    keys = [full, *list_keys(s3, settings.images_bucket, thumb_prefix(full))]
    outcome = delete_objects_in_batches(s3, settings.images_bucket, keys)
    if outcome.failed:
        raise RuntimeError(f"S3 refused to delete {sorted(outcome.failed)}: retry the deletion")
    return keys


def get_profile_image(s3, settings: MediaSettings, user: str, slot: str) -> tuple[str, bytes]:
    """(key, bytes) of the user's current master for a profile slot."""
    check_user(user)
    check_slot(settings, slot)
    masters = [
        (o["LastModified"], o["Key"])
        for o in listing(s3, settings.profiles_bucket, f"{user}/masters/{slot}.")
        if PROFILE_MASTER.fullmatch(o["Key"])
    ]
    if not masters:
        raise MediaError("not_found", f"user {user} has no {slot}")
    key = max(masters)[1]  # the newest, should an interrupted finalize have left two
    return key, s3.get_object(Bucket=settings.profiles_bucket, Key=key)["Body"].read()


def delete_profile_image(s3, settings: MediaSettings, user: str, slot: str) -> list[str]:
    """Delete the user's master for a slot and every icon size of it."""
    check_user(user)
    check_slot(settings, slot)
    bucket = settings.profiles_bucket
    keys = list_keys(s3, bucket, f"{user}/masters/{slot}.") + list_keys(s3, bucket, f"{user}/thumbs/{slot}_")
    if keys:
        delete_objects_in_batches(s3, bucket, keys)
    return keys


# ---------------------------------------------------------------------------------------- thumbnails
def open_heic(data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Image:
    """Open HEIC bytes with pillow-heif, as `open_untrusted` opens the other formats: only the HEIF
    decoder is tried, a decompression bomb is refused from the header (Pillow's bomb check and the
    pixel budget) before any pixel is decoded, and unreadable bytes are a clean rejection."""
    try:
        import pillow_heif
    except ImportError as error:
        raise ImageRejected("unsupported", "HEIC needs pillow-heif, which is not installed") from error
    pillow_heif.register_heif_opener()  # idempotent: adds Pillow's "HEIF" format
    return open_as(data, "HEIF", "HEIC", max_pixels=max_pixels)


def open_master(data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Image:
    """Open a master's untrusted bytes: JPEG, PNG and WEBP as blobgc.image_processing does, HEIC with
    pillow-heif; the sniffed format decides, never the key's extension."""
    fmt = sniff(data[:64])
    if fmt is None:
        raise ImageRejected("not_an_image", "the bytes are not a JPEG, PNG, WEBP or HEIC image")
    if fmt == "HEIC":
        return open_heic(data, max_pixels=max_pixels)
    return open_untrusted(data, max_pixels=max_pixels)


def render_thumbnails(data: bytes, sizes: tuple[tuple[int, int], ...]) -> dict[tuple[int, int], bytes]:
    """WebP thumbnails fitting each `(W, H)` box, from untrusted bytes opened by `open_master`."""
    from PIL import Image, ImageOps

    image = open_master(data)
    if image.format == "JPEG":
        # decode at the smallest DCT scale (1/2, 1/4, 1/8) that still covers the largest thumbnail
        width, height = image.size
        scale = max(min(w / width, h / height) for w, h in sizes)
        image.draft("RGB", (max(1, round(width * scale)), max(1, round(height * scale))))
    try:
        image.load()
    except (OSError, SyntaxError, ValueError, RuntimeError) as error:
        raise ImageRejected("corrupt", f"unreadable image data: {error}") from error
    image = ImageOps.exif_transpose(image)
    if image.mode not in ("RGB", "RGBA"):
        image = image.convert("RGBA" if "A" in image.mode or image.mode == "P" else "RGB")
    out: dict[tuple[int, int], bytes] = {}
    for w, h in sorted(sizes, key=lambda s: -(s[0] * s[1])):  # largest first, each from the previous, in place
        image.thumbnail((w, h), Image.Resampling.LANCZOS, reducing_gap=2.0)
        buffer = io.BytesIO()
        image.save(buffer, "WEBP", quality=80, method=4)
        out[(w, h)] = buffer.getvalue()
    return out
