"""Seed 004: Fakebook's S3-only media store (no database), and what its two cleanup DAGs need.

**Layout** (CONTRACT §3), in buckets `{prefix}images` and `{prefix}profiles`:

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
"""
from __future__ import annotations

import io
import json
import logging
import re
import secrets
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone

from botocore.exceptions import ClientError

from blobgc.image_processing import ImageRejected, open_untrusted, sniff_format
from blobgc.objects import delete_objects_in_batches

log = logging.getLogger(__name__)

QUEUE = "media-thumb-queue"  # CONTRACT §3: JSON {"type": "image"|"icon", "bucket": ..., "originalKey": ...}
PROCESSING = f"{QUEUE}:processing"  # jobs a worker has taken and not finished: a dead worker's are retried
DEAD_LETTERS = f"{QUEUE}:dead"  # jobs that can never succeed (not an image, a bomb), with the reason
PRESIGN_SECONDS = 300
MIB = 1024 * 1024
EXTENSIONS = {"jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "webp": "image/webp",
              "heic": "image/heic"}
FORMAT_EXTENSION = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp", "HEIC": "heic"}
HEIC_BRANDS = {b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"hevm", b"hevs", b"mif1", b"msf1"}
USER = r"[0-9A-Za-z_-]{1,64}"
USER_ID = re.compile(USER)
SLOT = re.compile(r"[a-z][a-z0-9_]{0,31}")
EXT = r"jpg|jpeg|png|webp|heic"
MASTER = re.compile(rf"(?P<user>{USER})/masters/(?P<rev>\d{{6}})/(?P<stem>[0-9a-f]{{16}})\.(?P<ext>{EXT})")
THUMB = re.compile(rf"(?P<user>{USER})/thumbs/(?P<rev>\d{{6}})/(?P<stem>[0-9a-f]{{16}})_(?P<w>\d{{1,5}})x(?P<h>\d{{1,5}})\.webp")
PROFILE_MASTER = re.compile(rf"(?P<user>{USER})/masters/(?P<slot>[a-z][a-z0-9_]{{0,31}})\.(?P<ext>{EXT})")
PROFILE_THUMB = re.compile(rf"(?P<user>{USER})/thumbs/(?P<slot>[a-z][a-z0-9_]{{0,31}})_(?P<w>\d{{1,5}})x(?P<h>\d{{1,5}})\.webp")
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
STAGING = re.compile(rf"staging/(?P<user>{USER})/(?P<uuid>{UUID})\.(?P<ext>{EXT})")
PROFILE_STAGING = re.compile(rf"profiles-staging/(?P<user>{USER})/(?P<slot>[a-z][a-z0-9_]{{0,31}})/(?P<uuid>{UUID})\.(?P<ext>{EXT})")
STAGING_PREFIXES = {"images": "staging/", "profiles": "profiles-staging/"}


class MediaError(ValueError):
    """A refused media operation; `kind` says why (bad_key, too_large, quota_exceeded, unsupported_type,
    not_an_image, not_found)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class MediaSettings:
    """Buckets, limits and thumbnail sizes (Variables blobgc_media_bucket_prefix and blobgc_media_settings)."""

    bucket_prefix: str = "fakebook-"
    file_limit_bytes: int = 10 * MIB  # the seed's single-file limit
    monthly_limit_bytes: int = 200 * MIB
    image_thumbs: tuple[tuple[int, int], ...] = ((640, 640), (240, 240))
    icon_thumbs: tuple[tuple[int, int], ...] = ((256, 256), (64, 64))
    slots: tuple[str, ...] = ("avatar",)

    @property
    def images_bucket(self) -> str:
        return f"{self.bucket_prefix}images"

    @property
    def profiles_bucket(self) -> str:
        return f"{self.bucket_prefix}profiles"

    def thumb_sizes(self, kind: str) -> tuple[tuple[int, int], ...]:
        return self.image_thumbs if kind == "image" else self.icon_thumbs


# ------------------------------------------------------------------------------------------------ keys
def rev_month(yyyymm: int) -> str:
    """`revYYYYMM`: 999999 - YYYYMM, six digits, so later months sort first."""
    if not 100001 <= yyyymm <= 999912 or not 1 <= yyyymm % 100 <= 12:
        raise MediaError("bad_key", f"not a YYYYMM month: {yyyymm}")
    return f"{999999 - yyyymm:06d}"


def month_of(when: datetime) -> int:
    when = when.astimezone(timezone.utc)
    return when.year * 100 + when.month


def time8(when: datetime) -> str:
    """0xffffffff minus the milliseconds since the start of `when`'s month (UTC), as 8 hex digits."""
    when = when.astimezone(timezone.utc)
    start = when.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    millis = int((when - start).total_seconds() * 1000)
    return f"{0xFFFFFFFF - millis:08x}"


def master_key(user: str, when: datetime, ext: str, hash8: str | None = None) -> str:
    return f"{user}/masters/{rev_month(month_of(when))}/{time8(when)}{hash8 or secrets.token_hex(4)}.{ext}"


def thumb_key(master: str, width: int, height: int) -> str:
    """The thumbnail of a master (image or profile) at one size."""
    return f"{thumb_prefix(master)}{width}x{height}.webp"


def thumb_prefix(master: str) -> str:
    """The prefix of every thumbnail size of a master."""
    m = MASTER.fullmatch(master)
    if m:
        return f"{m['user']}/thumbs/{m['rev']}/{m['stem']}_"
    p = PROFILE_MASTER.fullmatch(master)
    if p:
        return f"{p['user']}/thumbs/{p['slot']}_"
    raise MediaError("bad_key", f"not a master key: {master!r}")


def master_prefix_of_thumb(key: str) -> str | None:
    """The prefix of the master a thumbnail belongs to (any extension), or None for another key."""
    t = THUMB.fullmatch(key)
    if t:
        return f"{t['user']}/masters/{t['rev']}/{t['stem']}."
    p = PROFILE_THUMB.fullmatch(key)
    if p:
        return f"{p['user']}/masters/{p['slot']}."
    return None


def check_user(user: str) -> str:
    if not isinstance(user, str) or not USER_ID.fullmatch(user):
        raise MediaError("bad_key", f"not a user id: {user!r}")
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
def listing(s3, bucket: str, prefix: str) -> Iterator[dict]:
    """Every object under a prefix, in key order."""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        yield from page.get("Contents", [])


def list_keys(s3, bucket: str, prefix: str) -> list[str]:
    return [o["Key"] for o in listing(s3, bucket, prefix)]


def prefix_bytes(s3, bucket: str, prefix: str) -> tuple[int, int]:
    """(objects, bytes) under a prefix."""
    sizes = [o["Size"] for o in listing(s3, bucket, prefix)]
    return len(sizes), sum(sizes)


def monthly_quota(s3, settings: MediaSettings, user: str, yyyymm: int | None = None) -> dict:
    """Masters plus thumbnails of `user` in a month (default: this one), with the limits, for the UI."""
    check_user(user)
    yyyymm = yyyymm or month_of(datetime.now(timezone.utc))
    rev = rev_month(yyyymm)
    masters = prefix_bytes(s3, settings.images_bucket, f"{user}/masters/{rev}/")
    thumbs = prefix_bytes(s3, settings.images_bucket, f"{user}/thumbs/{rev}/")
    used = masters[1] + thumbs[1]
    return {"user": user, "yyyymm": yyyymm, "masters": masters[0], "masters_bytes": masters[1],
            "thumbs": thumbs[0], "thumbs_bytes": thumbs[1], "used_bytes": used,
            "monthly_limit_bytes": settings.monthly_limit_bytes, "file_limit_bytes": settings.file_limit_bytes,
            "remaining_bytes": max(0, settings.monthly_limit_bytes - used)}


def check_quota(s3, settings: MediaSettings, user: str, size: int, when: datetime) -> None:
    quota = monthly_quota(s3, settings, user, month_of(when))
    if quota["used_bytes"] + size > settings.monthly_limit_bytes:
        raise MediaError("quota_exceeded", f"user {user} has used {quota['used_bytes']:,} of "
                                           f"{settings.monthly_limit_bytes:,} bytes this month; {size:,} more "
                                           "would exceed the monthly quota")


def check_size(size: int, limit: int) -> None:
    if not isinstance(size, int) or size < 1:
        raise MediaError("too_large", f"a file size must be a positive number of bytes, not {size!r}")
    if size > limit:
        raise MediaError("too_large", f"{size:,} bytes is over the single-file limit of {limit:,} bytes")


# ------------------------------------------------------------------------------------------ presigning
def presigned_post(s3, bucket: str, key: str, prefix: str, mime: str, limit: int) -> dict:
    post = s3.generate_presigned_post(
        Bucket=bucket, Key=key, Fields={"Content-Type": mime},
        Conditions=[["content-length-range", 1, limit], ["starts-with", "$key", prefix], {"Content-Type": mime}],
        ExpiresIn=PRESIGN_SECONDS)
    return {"url": post["url"], "fields": post["fields"], "key": key, "expires_in": PRESIGN_SECONDS}


def presign_upload(s3, settings: MediaSettings, user: str, filename: str, size_bytes: int, *,
                   now: datetime | None = None) -> dict:
    """A presigned POST for one image into the user's staging area, after the size, type and quota checks."""
    check_user(user)
    ext = extension_of(filename)
    check_size(size_bytes, settings.file_limit_bytes)
    check_quota(s3, settings, user, size_bytes, now or datetime.now(timezone.utc))
    key = f"staging/{user}/{uuid.uuid4()}.{ext}"
    return presigned_post(s3, settings.images_bucket, key, f"staging/{user}/", EXTENSIONS[ext],
                          settings.file_limit_bytes)


def presign_profile_upload(s3, settings: MediaSettings, user: str, slot: str, filename: str, size_bytes: int,
                           size_limit_bytes: int | None = None) -> dict:
    """A presigned POST for a profile image (no monthly quota, only the single-file limit)."""
    check_user(user)
    check_slot(settings, slot)
    ext = extension_of(filename)
    limit = min(size_limit_bytes or settings.file_limit_bytes, settings.file_limit_bytes)
    check_size(size_bytes, limit)
    key = f"profiles-staging/{user}/{slot}/{uuid.uuid4()}.{ext}"
    return presigned_post(s3, settings.profiles_bucket, key, f"profiles-staging/{user}/{slot}/", EXTENSIONS[ext],
                          limit)


def check_slot(settings: MediaSettings, slot: str) -> None:
    if slot not in settings.slots or not SLOT.fullmatch(slot):
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


def staged_format(s3, bucket: str, staging_key: str, limit: int,
                  check: Callable[[int], None] = lambda size: None) -> str:
    """The sniffed format of an uploaded staging object, after its size (and `check`, such as the quota).
    Any refusal deletes the staging object before raising, so no intermediate garbage is left."""
    try:
        size, first = read_head(s3, bucket, staging_key)
        check_size(size, limit)
        check(size)
        fmt = sniff(first)
        if fmt is None:
            raise MediaError("not_an_image", f"{staging_key} is not a JPEG, PNG, WEBP or HEIC image, whatever its "
                                             "extension says")
    except MediaError as error:
        if error.kind != "not_found":
            s3.delete_object(Bucket=bucket, Key=staging_key)
        raise
    return fmt


def move(s3, bucket: str, source: str, target: str, mime: str) -> None:
    s3.copy_object(Bucket=bucket, Key=target, CopySource={"Bucket": bucket, "Key": source},
                   ContentType=mime, MetadataDirective="REPLACE")
    s3.delete_object(Bucket=bucket, Key=source)


def push_job(redis, kind: str, bucket: str, key: str) -> None:
    """Queue the thumbnails of a new master. A failure only delays them: blobgc_media_thumbnails
    enqueues masters that lack thumbnails."""
    try:
        redis.lpush(QUEUE, json.dumps({"type": kind, "bucket": bucket, "originalKey": key}))
    except Exception as error:  # noqa: BLE001 - the master is stored; its job is recreated later
        log.warning("could not queue the thumbnails of %s (%s); blobgc_media_thumbnails will", key, error)


def finalize(s3, redis, settings: MediaSettings, user: str, staging_key: str, *,
             now: datetime | None = None) -> str:
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
    now = now or datetime.now(timezone.utc)
    fmt = staged_format(s3, bucket, staging_key, settings.file_limit_bytes,
                        lambda size: check_quota(s3, settings, user, size, now))
    ext = FORMAT_EXTENSION[fmt]  # the bytes decide, not the name
    target = master_key(user, now, ext)
    move(s3, bucket, staging_key, target, EXTENSIONS[ext])
    push_job(redis, "image", bucket, target)
    return target


def finalize_profile(s3, redis, settings: MediaSettings, user: str, slot: str, staging_key: str,
                     size_limit_bytes: int | None = None) -> str:
    """Move an uploaded profile image to `{user}/masters/{slot}.{ext}` (replacing the slot's previous
    master, whatever its extension) and queue its icons; returns the master key."""
    check_user(user)
    check_slot(settings, slot)
    staged = PROFILE_STAGING.fullmatch(staging_key) if isinstance(staging_key, str) else None
    if staged is None or staged["user"] != user or staged["slot"] != slot:
        raise MediaError("bad_key", f"{staging_key!r} is not in user {user}'s staging area for {slot}")
    bucket = settings.profiles_bucket
    fmt = staged_format(s3, bucket, staging_key,
                        min(size_limit_bytes or settings.file_limit_bytes, settings.file_limit_bytes))
    target = f"{user}/masters/{slot}.{FORMAT_EXTENSION[fmt]}"
    move(s3, bucket, staging_key, target, EXTENSIONS[FORMAT_EXTENSION[fmt]])
    stale = [k for k in list_keys(s3, bucket, f"{user}/masters/{slot}.") if k != target]
    if stale:
        delete_objects_in_batches(s3, bucket, stale)
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
    for page in paginator.paginate(Bucket=settings.images_bucket, Prefix=f"{user}/masters/",
                                   PaginationConfig={"PageSize": min(1000, offset + limit)}):
        for o in page.get("Contents", []):
            if not MASTER.fullmatch(o["Key"]):
                continue
            seen += 1
            if seen > offset:
                found.append({"key": o["Key"][len(user) + 1:], "size": o["Size"], "last_modified": o["LastModified"]})
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
    masters = [k for k in list_keys(s3, settings.profiles_bucket, f"{user}/masters/{slot}.")
               if PROFILE_MASTER.fullmatch(k)]
    if not masters:
        raise MediaError("not_found", f"user {user} has no {slot}")
    return masters[0], s3.get_object(Bucket=settings.profiles_bucket, Key=masters[0])["Body"].read()


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
def render_thumbnails(data: bytes, sizes: tuple[tuple[int, int], ...]) -> dict[tuple[int, int], bytes]:
    """WebP thumbnails fitting each `(W, H)` box; untrusted bytes are opened as in blobgc.image_processing."""
    from PIL import Image, ImageOps

    image = open_untrusted(data)
    if image.format == "JPEG":
        # decode at the smallest DCT scale (1/2, 1/4, 1/8) that still covers the largest thumbnail
        width, height = image.size
        scale = max(min(w / width, h / height) for w, h in sizes)
        image.draft("RGB", (max(1, round(width * scale)), max(1, round(height * scale))))
    try:
        image.load()
    except (OSError, SyntaxError, ValueError) as error:
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


@dataclass
class ThumbnailResult:
    jobs: int = 0
    thumbnails: int = 0
    recovered: int = 0  # jobs a dead worker had taken, done again
    skipped: int = 0  # master gone: nothing to do
    dead_lettered: int = 0
    errors: list[str] = field(default_factory=list)

    def counts(self) -> dict:
        return {k: v for k, v in vars(self).items() if isinstance(v, int)}


class PoisonJob(ValueError):
    """A job that can never succeed; it goes to the dead-letter list with the reason."""


def text(raw: str | bytes) -> str:
    """A job as text, whether the Redis client decodes responses or not."""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def parse_job(raw: str | bytes, settings: MediaSettings) -> tuple[str, str, str]:
    try:
        job = json.loads(text(raw))
        kind, bucket, key = job["type"], job["bucket"], job["originalKey"]
    except (ValueError, KeyError, TypeError) as error:
        raise PoisonJob(f"malformed job: {error}") from error
    expected = {"image": (settings.images_bucket, MASTER), "icon": (settings.profiles_bucket, PROFILE_MASTER)}
    if kind not in expected or bucket != expected[kind][0] or not isinstance(key, str) \
            or not expected[kind][1].fullmatch(key):
        raise PoisonJob(f"not a {kind!r} master of this store: {bucket}/{key}")
    return kind, bucket, key


def make_thumbnails(s3, settings: MediaSettings, raw: str) -> int:
    """Do one job: the master's thumbnails at every configured size. Returns how many were written
    (0 when the master is gone). Raises PoisonJob for jobs that can never succeed; anything else
    (S3 unreachable) propagates and the job stays taken, for the retry."""
    kind, bucket, key = parse_job(raw, settings)
    if key.endswith(".heic"):
        raise PoisonJob("HEIC masters cannot be decoded here (no HEIF codec installed); stored without thumbnails")
    try:
        data = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as error:
        if is_missing(error):
            return 0
        raise
    try:
        rendered = render_thumbnails(data, settings.thumb_sizes(kind))
    except ImageRejected as error:
        raise PoisonJob(f"{key}: {error}") from error
    for (w, h), body in rendered.items():
        s3.put_object(Bucket=bucket, Key=thumb_key(key, w, h), Body=body, ContentType="image/webp")
    return len(rendered)


def taken_jobs(redis, batch: int) -> list[str]:
    """Move up to `batch` jobs from the queue to the processing list (oldest first), in one round trip."""
    pipe = redis.pipeline(transaction=False)
    for _ in range(batch):
        pipe.lmove(QUEUE, PROCESSING, "RIGHT", "LEFT")
    return [j for j in pipe.execute() if j is not None]


def finish(redis, raw: str, dead_reason: str | None = None) -> None:
    pipe = redis.pipeline(transaction=True)
    if dead_reason is not None:
        pipe.lpush(DEAD_LETTERS, json.dumps({"job": text(raw), "error": dead_reason,
                                              "at": datetime.now(timezone.utc).isoformat()}))
    pipe.lrem(PROCESSING, 1, raw)
    pipe.execute()


def drain_thumbnail_queue(redis, s3, settings: MediaSettings, *, max_jobs: int = 10_000, batch: int = 50,
                          workers: int = 2) -> ThumbnailResult:
    """Make the thumbnails the queue asks for, `batch` jobs at a time on `workers` threads.

    A job is moved atomically (LMOVE) to `media-thumb-queue:processing` when taken, and removed
    from there only once its thumbnails are written. Jobs a dead worker left there are done first
    (thumbnails are overwritten, so doing a job twice is harmless). Jobs that can never succeed go
    to `media-thumb-queue:dead` with the reason; an S3 failure raises with the batch's unfinished
    jobs still in the processing list, for the task's retry.
    """
    result = ThumbnailResult()
    leftover = [j for j in redis.lrange(PROCESSING, 0, -1)]
    if leftover:
        log.info("%d jobs were taken by a worker that died: doing them again", len(leftover))
    pending: Iterator[list[str]] = iter([list(reversed(leftover))] if leftover else [])

    def do(raw: str) -> tuple[str, int | None, str | None]:
        try:
            return raw, make_thumbnails(s3, settings, raw), None
        except PoisonJob as error:
            return raw, None, str(error)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        while result.jobs < max_jobs:
            jobs = next(pending, None)
            recovered = jobs is not None
            if jobs is None:
                jobs = taken_jobs(redis, min(batch, max_jobs - result.jobs))
                if not jobs:
                    break
            for raw, written, poison in pool.map(do, jobs):
                result.jobs += 1
                result.recovered += recovered
                if poison is not None:
                    log.warning("dead-lettered thumbnail job %s: %s", text(raw), poison)
                    result.dead_lettered += 1
                    finish(redis, raw, poison)
                    continue
                result.thumbnails += written or 0
                result.skipped += written == 0
                finish(redis, raw)
    log.info("thumbnail jobs: %d done (%d recovered from a dead worker), %d thumbnails, %d masters gone, "
             "%d dead-lettered", result.jobs, result.recovered, result.thumbnails, result.skipped,
             result.dead_lettered)
    return result
