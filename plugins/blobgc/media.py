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

**User ids** are `[0-9A-Za-z_-]{1,64}`, and never `staging` or `profiles-staging` (in any case):
those name the staging areas, so a user called that would have masters under a staging prefix,
where blobgc_media_staging cleans. Every function that takes a user id refuses such an id.

**Profile slots** hold one master each. `finalize_profile` moves the upload into place and removes
the slot's other masters under a Redis lock per (bucket, user, slot), so two uploads racing with
different formats leave exactly one master (see `profile_slot_lock`).

**Thumbnail jobs** are deduplicated: the hash `media-thumb-queue:queued` maps `{bucket}/{originalKey}`
to the Redis time the job was queued, written with the LPUSH by one Lua script and removed when a
worker finishes or dead-letters the job. blobgc_media_thumbnails queues a master again only when
its entry is older than the DAG's min age, so a lost job is requeued later and never blocks it forever;
a new upload always queues (its bytes are new). The dead-letter list keeps the newest
`DEAD_LETTER_CAP` entries; what is trimmed is counted. HEIC masters are decoded with pillow-heif,
behind the same sniffing and pixel budget as the other formats.
"""
from __future__ import annotations

import io
import json
import logging
import random
import re
import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from blobgc.image_processing import DEFAULT_MAX_PIXELS, ImageRejected, open_as, open_untrusted, sniff_format
from blobgc.objects import delete_objects_in_batches

if TYPE_CHECKING:
    from PIL.Image import Image

log = logging.getLogger(__name__)

QUEUE = "media-thumb-queue"  # CONTRACT §3: JSON {"type": "image"|"icon", "bucket": ..., "originalKey": ...}
PROCESSING = f"{QUEUE}:processing"  # jobs a worker has taken and not finished: a dead worker's are retried
DEAD_LETTERS = f"{QUEUE}:dead"  # jobs that can never succeed (not an image, a bomb), with the reason
QUEUED = f"{QUEUE}:queued"  # hash: "{bucket}/{originalKey}" -> Redis time (epoch seconds) its job was queued
DEAD_LETTER_CAP = 10_000  # the dead-letter list keeps this many, newest first; older ones are dropped and counted
QUEUED_ENTRY_MAX_AGE = 7 * 24 * 3600  # a queued-entry this old belongs to a job lost long ago: forgotten
PROFILE_LOCK = "media-profile-lock"  # "{PROFILE_LOCK}:{bucket}/{user}/{slot}": one finalize_profile at a time
PROFILE_LOCK_SECONDS = 60.0  # the lock's expiry: far above a finalize's copy, listing and delete
PROFILE_LOCK_WAIT_SECONDS = 10.0  # how long a finalize waits for another one of the same slot
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
STAGING_LAYOUTS = {"staging/": STAGING, "profiles-staging/": PROFILE_STAGING}  # staging prefix -> its only layout
# A user with one of these ids would keep masters under a staging prefix: refused (in any case, since an
# S3-compatible store on a case-insensitive file system would not tell them apart).
RESERVED_USER_IDS = frozenset(prefix.rstrip("/") for prefix in STAGING_PREFIXES.values())


class MediaError(ValueError):
    """A refused media operation; `kind` says why (bad_key, reserved_user, too_large, quota_exceeded,
    unsupported_type, not_an_image, not_found, busy)."""

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
    """Refuse a malformed user id, and the reserved ids that name the staging areas."""
    if not isinstance(user, str) or not USER_ID.fullmatch(user):
        raise MediaError("bad_key", f"not a user id: {user!r} (a user id is 1 to 64 characters of 0-9, A-Z, a-z, "
                                    "'_' and '-')")
    if user.lower() in RESERVED_USER_IDS:
        raise MediaError("reserved_user", f"user id {user!r} is reserved: {', '.join(sorted(RESERVED_USER_IDS))} "
                                          "name the staging areas, where a user's masters would be cleaned away")
    return user


def staging_layout(prefix: str) -> re.Pattern[str]:
    """The one key layout allowed under a staging prefix (or a shard of it, such as `staging/0`)."""
    for staging_prefix, layout in STAGING_LAYOUTS.items():
        if prefix.startswith(staging_prefix):
            return layout
    raise MediaError("bad_key", f"{prefix!r} is not under a staging prefix ({', '.join(STAGING_LAYOUTS)})")


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


# ------------------------------------------------------------------------------------ thumbnail jobs
# Push jobs whose master has no recent entry in the queued hash, recording when, in one atomic step.
# KEYS: queue, queued hash. ARGV: requeue_after seconds (negative: always push), then field, job pairs.
QUEUE_JOBS_SCRIPT = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local requeue_after = tonumber(ARGV[1])
local pushed = 0
for i = 2, #ARGV, 2 do
  local queued = tonumber(redis.call('HGET', KEYS[2], ARGV[i]))
  if requeue_after < 0 or queued == nil or now - queued >= requeue_after then
    redis.call('HSET', KEYS[2], ARGV[i], string.format('%.3f', now))
    redis.call('LPUSH', KEYS[1], ARGV[i + 1])
    pushed = pushed + 1
  end
end
return pushed
"""


def text(raw: str | bytes) -> str:
    """A Redis value as text, whether the Redis client decodes responses or not."""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def queued_field(bucket: str, key: str) -> str:
    """A master's field in the queued hash: bucket-qualified, so two stores sharing a Redis never collide."""
    return f"{bucket}/{key}"


def job_json(kind: str, bucket: str, key: str) -> str:
    """A thumbnail job as CONTRACT §3 shapes it."""
    return json.dumps({"type": kind, "bucket": bucket, "originalKey": key})


def queue_thumbnail_jobs(redis, kind: str, bucket: str, keys: list[str], *,
                         requeue_after_seconds: float | None = None) -> int:
    """Queue the thumbnails of `keys` (masters of one bucket); returns how many jobs were pushed.

    With `requeue_after_seconds`, a master whose job was queued less than that long ago (by the
    Redis clock) is skipped: it is queued or being worked on already. Without it every key is
    pushed (a new upload: its bytes are new even when a profile slot's key is not). Either way the
    time is recorded, with the push, by one script, so a check and a push never interleave.
    """
    pushed = 0
    after = -1.0 if requeue_after_seconds is None else float(requeue_after_seconds)
    for start in range(0, len(keys), 500):
        args: list[str | float] = [after]
        for key in keys[start:start + 500]:
            args += [queued_field(bucket, key), job_json(kind, bucket, key)]
        pushed += int(redis.eval(QUEUE_JOBS_SCRIPT, 2, QUEUE, QUEUED, *args))
    return pushed


def recently_queued(redis, bucket: str, keys: list[str], requeue_after_seconds: float) -> set[str]:
    """The keys that `queue_thumbnail_jobs` would skip now (read only: what a dry run reports)."""
    if not keys:
        return set()
    seconds, micros = redis.time()
    now = seconds + micros / 1_000_000
    recent: set[str] = set()
    for start in range(0, len(keys), 1000):
        chunk = keys[start:start + 1000]
        times = redis.hmget(QUEUED, [queued_field(bucket, k) for k in chunk])
        recent.update(k for k, t in zip(chunk, times) if t is not None and now - float(text(t)) < requeue_after_seconds)
    return recent


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
def profile_slot_lock(redis, bucket: str, user: str, slot: str, *, expires: float = PROFILE_LOCK_SECONDS,
                      wait: float = PROFILE_LOCK_WAIT_SECONDS) -> Iterator[Callable[[], bool]]:
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
    fmt = staged_format(s3, bucket, staging_key,
                        min(size_limit_bytes or settings.file_limit_bytes, settings.file_limit_bytes))
    target = f"{user}/masters/{slot}.{FORMAT_EXTENSION[fmt]}"
    with profile_slot_lock(redis, bucket, user, slot) as still_ours:
        move(s3, bucket, staging_key, target, EXTENSIONS[FORMAT_EXTENSION[fmt]])
        stale = [k for k in list_keys(s3, bucket, f"{user}/masters/{slot}.")
                 if k != target and PROFILE_MASTER.fullmatch(k)]
        if stale and still_ours():
            outcome = delete_objects_in_batches(s3, bucket, stale)
            if outcome.failed:
                log.warning("could not delete %s's previous %s masters %s: the next upload will",
                            user, slot, sorted(outcome.failed))
        elif stale:
            log.warning("the %s lock of user %s expired during finalize: previous masters %s are kept for the "
                        "next upload to remove", slot, user, stale)
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
    masters = [(o["LastModified"], o["Key"]) for o in listing(s3, settings.profiles_bucket, f"{user}/masters/{slot}.")
               if PROFILE_MASTER.fullmatch(o["Key"])]
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


@dataclass
class ThumbnailResult:
    jobs: int = 0
    thumbnails: int = 0
    recovered: int = 0  # jobs a dead worker had taken, done again
    skipped: int = 0  # master gone: nothing to do
    dead_lettered: int = 0
    dead_letters_dropped: int = 0  # the oldest dead letters trimmed to keep the list within its cap
    queued_entries_forgotten: int = 0  # queued-hash entries of jobs lost long ago
    errors: list[str] = field(default_factory=list)

    def counts(self) -> dict:
        return {k: v for k, v in vars(self).items() if isinstance(v, int)}


class PoisonJob(ValueError):
    """A job that can never succeed; it goes to the dead-letter list with the reason."""


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


# Settle one taken job in one atomic step: dead-letter it (trimming the list to its cap), drop it from
# the processing list, forget its queued entry. Returns how many old dead letters were trimmed.
# KEYS: processing, dead letters, queued hash. ARGV: raw job, dead letter or '', cap, queued field or ''.
FINISH_JOB_SCRIPT = """
local dropped = 0
if ARGV[2] ~= '' then
  redis.call('LPUSH', KEYS[2], ARGV[2])
  local cap = tonumber(ARGV[3])
  local length = redis.call('LLEN', KEYS[2])
  if length > cap then
    redis.call('LTRIM', KEYS[2], 0, cap - 1)
    dropped = length - cap
  end
end
redis.call('LREM', KEYS[1], 1, ARGV[1])
if ARGV[4] ~= '' then redis.call('HDEL', KEYS[3], ARGV[4]) end
return dropped
"""


def queued_field_of(raw: str | bytes) -> str:
    """The queued-hash field of a job, or '' for a job too malformed to name its master."""
    try:
        job = json.loads(text(raw))
        bucket, key = job["bucket"], job["originalKey"]
    except (ValueError, KeyError, TypeError):
        return ""
    return queued_field(bucket, key) if isinstance(bucket, str) and isinstance(key, str) else ""


def check_dead_letter_cap(cap: int) -> None:
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
        raise ValueError(f"the dead-letter cap must be a whole number of at least 1, not {cap!r}")


def finish(redis, raw: str | bytes, dead_reason: str | None = None, *, dead_letter_cap: int = DEAD_LETTER_CAP) -> int:
    """Settle a taken job (done, or dead-lettered with `dead_reason`); returns the dead letters trimmed."""
    dead = "" if dead_reason is None else json.dumps({"job": text(raw), "error": dead_reason,
                                                      "at": datetime.now(timezone.utc).isoformat()})
    return int(redis.eval(FINISH_JOB_SCRIPT, 3, PROCESSING, DEAD_LETTERS, QUEUED, raw, dead, dead_letter_cap,
                          queued_field_of(raw)))


# Trim the dead-letter list to its cap (a lowered cap applies at once). KEYS: dead letters. ARGV: cap.
TRIM_DEAD_LETTERS_SCRIPT = """
local cap = tonumber(ARGV[1])
local length = redis.call('LLEN', KEYS[1])
if length <= cap then return 0 end
redis.call('LTRIM', KEYS[1], 0, cap - 1)
return length - cap
"""

# Forget queued entries recorded before a time, unless refreshed since. KEYS: queued hash. ARGV: before, fields.
FORGET_ENTRIES_SCRIPT = """
local forgotten = 0
for i = 2, #ARGV do
  local queued = tonumber(redis.call('HGET', KEYS[1], ARGV[i]))
  if queued ~= nil and queued < tonumber(ARGV[1]) then
    redis.call('HDEL', KEYS[1], ARGV[i])
    forgotten = forgotten + 1
  end
end
return forgotten
"""


def forget_lost_jobs(redis, older_than_seconds: float = QUEUED_ENTRY_MAX_AGE) -> int:
    """Remove queued-hash entries older than `older_than_seconds`: their jobs were lost (a worker
    settles every job it takes), and the hash must not grow with masters deleted since."""
    seconds, micros = redis.time()
    before = seconds + micros / 1_000_000 - older_than_seconds
    forgotten, old = 0, []
    for field_name, queued in redis.hscan_iter(QUEUED, count=1000):
        if float(text(queued)) < before:
            old.append(text(field_name))
        if len(old) == 500:
            forgotten += int(redis.eval(FORGET_ENTRIES_SCRIPT, 1, QUEUED, before, *old))
            old = []
    if old:
        forgotten += int(redis.eval(FORGET_ENTRIES_SCRIPT, 1, QUEUED, before, *old))
    return forgotten


def thumbnail_queue_counts(redis) -> dict[str, int]:
    """How many jobs are queued, taken by a worker (processing), dead-lettered, and tracked in the
    queued hash: what a dry run of blobgc_media_thumbnails reports instead of draining."""
    pipe = redis.pipeline(transaction=True)
    pipe.llen(QUEUE)
    pipe.llen(PROCESSING)
    pipe.llen(DEAD_LETTERS)
    pipe.hlen(QUEUED)
    queued, processing, dead, tracked = pipe.execute()
    log.info("thumbnail queue: %d jobs queued, %d in processing, %d dead-lettered, %d masters tracked as queued "
             "(dry run: nothing taken)", queued, processing, dead, tracked)
    return {"queued": queued, "processing": processing, "dead_letters": dead, "tracked": tracked}


def drain_thumbnail_queue(redis, s3, settings: MediaSettings, *, max_jobs: int = 10_000, batch: int = 50,
                          workers: int = 2, dead_letter_cap: int = DEAD_LETTER_CAP) -> ThumbnailResult:
    """Make the thumbnails the queue asks for, `batch` jobs at a time on `workers` threads.

    A job is moved atomically (LMOVE) to `media-thumb-queue:processing` when taken, and removed
    from there only once its thumbnails are written. Jobs a dead worker left there are done first
    (thumbnails are overwritten, so doing a job twice is harmless). Jobs that can never succeed go
    to `media-thumb-queue:dead` with the reason, which keeps the newest `dead_letter_cap` (the
    oldest beyond it are dropped and counted); an S3 failure raises with the batch's unfinished
    jobs still in the processing list, for the task's retry. Settling a job forgets its entry in
    `media-thumb-queue:queued`, so the master may be queued again.
    """
    check_dead_letter_cap(dead_letter_cap)
    result = ThumbnailResult()
    result.dead_letters_dropped = int(redis.eval(TRIM_DEAD_LETTERS_SCRIPT, 1, DEAD_LETTERS, dead_letter_cap))
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
                    result.dead_letters_dropped += finish(redis, raw, poison, dead_letter_cap=dead_letter_cap)
                    continue
                result.thumbnails += written or 0
                result.skipped += written == 0
                finish(redis, raw)
    result.queued_entries_forgotten = forget_lost_jobs(redis)
    log.info("thumbnail jobs: %d done (%d recovered from a dead worker), %d thumbnails, %d masters gone, "
             "%d dead-lettered (%d old dead letters dropped to keep %d), %d entries of long-lost jobs forgotten",
             result.jobs, result.recovered, result.thumbnails, result.skipped, result.dead_lettered,
             result.dead_letters_dropped, dead_letter_cap, result.queued_entries_forgotten)
    return result
